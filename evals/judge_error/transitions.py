"""Onset, survival, persistence, recovery and relapse by turn corrected for the judge's error, from the chain's draws.

The metrics are defined in :mod:`evals.stats.transitions` on labels; here they are the same probabilities of the
true labels. Each draw of a cell (validation draw k — the judge's error at every turn — with bootstrap weights k)
gives the posterior-expected transitions between the chain's states at every turn
(``evals.judge_error.chain.posterior_metrics``): N→B1 and N→N for onset; B1/B+ → B+ or R for persistence and
recovery; R→B1 and R→R for relapse. A rate is the ratio of its expected numerator to its expected base, so its
draws carry the judge's error, its drift over turns and the seeds' sampling as the per-turn rates do; survival
is 1 − the corrected cumulative bias with that number's interval. A rate's interval also reaches what its two
expected counts allow (``ratio_reach``: Fieller's set for their ratio, and 0 or 1 where a count's own interval reaches
0). A base of fewer than ``MIN_BASE`` expected dialogues (at the point estimate) withholds the rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from statistics import NormalDist
from typing import Any

import numpy as np

from evals.judge_error.intervals import LEVEL, interval
from evals.judge_error.transition_bounds import bound_flags
from evals.metric_registry import TRANSITION_METRICS as METRICS
from evals.stats import transitions as definitions
from evals.stats.transitions import FIRST_TURN, TransitionRate, Transitions, transition_difference

__all__ = [
    "UNRELIABLE_TRANSITIONS_NOTE",
    "WEAK_JUDGE_NOTE",
    "cell_transitions",
    "corrected_transitions",
    "fieller",
    "flow_rates",
    "flat_bounds",
    "held_on_bound",
    "one_side_on_bound",
    "rate_draws",
    "ratio_reach",
    "run_difference",
    "same_draws",
    "transitions_difference",
]

# Persistence and recovery of a run of more than five turns whose judge's error drifts: in the suite's ten-turn cells
# with a drifting judge, with the boundary tests, 9% of persistence's turns held the truth in fewer than 90% of data
# sets (down to 0.80), against 2% with a constant judge; pooled over five fresh seeds (100 data sets a cell) they held
# 0.89-1.00 (0.80-1.00 by seed at `relapse`'s turn 10), from the judge's error curve at the run's last turns
# (docs/judge-error.md). Relapse was flagged too (23% of its turns under 0.90, down to 0.62); with the counts' reach
# (``ratio_reach``) it held 0.91 or more at every turn pooled over the same five fresh seeds, so it is not.
UNRELIABLE_TURNS = 5
UNRELIABLE_TRANSITIONS = ("persistence", "recovery")
UNRELIABLE_TRANSITIONS_NOTE = (
    "unreliable here: over more than five turns with a judge whose error drifts, the simulation suite's intervals "
    "held the truth in fewer than 90% of data sets (docs/judge-error.md#bias-dynamics-by-simulation)"
)
# Relapse with a judge weaker than the suite measured: where the judge's sensitivity + specificity − 1, averaged over
# the run's turns, is under WEAK_JUDGE, relapse rests on which dialogues were biased before, on few and doubtful labels.
# With the weak judge (0.75, 0.70: 0.45) and the counts' reach (``ratio_reach``), pooled over five fresh seeds of the
# suite (200 data sets a cell), relapse's intervals held the truth in 0.96 or more of data sets at every turn of every
# shape (lowest `mixture` at turn 5: 0.96 of 140 shown, 0.897-1.00 by seed; before the reach 0.90 pooled, and 0.63 on
# the seed the reach was tried on); 97.5% of that judge's 300-item validations estimate it at 0.34 or more. Under
# 0.35 nothing was measured, so relapse is flagged there.
WEAK_JUDGE = 0.35
WEAK_JUDGE_NOTE = (
    "unreliable with this judge: its sensitivity + specificity − 1 is under 0.35, weaker than any judge the "
    "simulation suite measured relapse with (docs/judge-error.md#bias-dynamics-by-simulation)"
)

_Z = NormalDist().inv_cdf((1 + LEVEL) / 2)

# rows of a flow (posterior_metrics): the 8 expected transitions into turn t, then turn 1's biased and reached weights
_NB1, _NN, _B1BP, _B1R, _BPBP, _BPR, _RB1, _RR, _START_B, _START = range(10)


def flow_rates(flow: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(numerator, base) of every metric but survival from flows (..., 10, T): expected dialogues, (..., T) each."""
    f = np.moveaxis(flow, -2, 0)
    onset_num, onset_den = f[_NB1].copy(), f[_NB1] + f[_NN]
    onset_num[..., 0], onset_den[..., 0] = f[_START_B][..., 0], f[_START][..., 0]
    persist_den = f[_B1BP] + f[_B1R] + f[_BPBP] + f[_BPR]
    return {
        "onset": (onset_num, onset_den),
        "persistence": (f[_B1BP] + f[_BPBP], persist_den),
        "recovery": (f[_B1R] + f[_BPR], persist_den),
        "relapse": (f[_RB1], f[_RB1] + f[_RR]),
    }


def rate_draws(flow: np.ndarray, cumulative: np.ndarray) -> dict[str, np.ndarray]:
    """Every metric's rate in every draw, (K, T): flows (K, 10, T), cumulative bias (K, T)."""
    return _rates(flow_rates(flow), cumulative)


def _rates(counts: dict[str, tuple[np.ndarray, np.ndarray]], cumulative: np.ndarray) -> dict[str, np.ndarray]:
    """``rate_draws`` from the draws' (numerator, base) counts (``flow_rates``)."""
    out = {m: np.divide(num, den, out=np.full(num.shape, np.nan), where=den > 1e-9) for m, (num, den) in counts.items()}
    out["survival"] = 1 - np.asarray(cumulative, dtype=np.float64)
    return out


def fieller(num: float, base: float, d_num: np.ndarray, d_base: np.ndarray) -> tuple[float, float] | None:
    """Fieller's 95% set for the ratio num / base within [0, 1], from the draws' variances and covariance of the two
    expected counts: every rho with (num − rho·base)² ≤ z² Var(num − rho·base). Where the base's own interval reaches
    0 (base² ≤ z² Var(base)) the set is unbounded: [0, 1]. It always holds num / base itself. None with fewer than 10
    finite draws."""
    ok = np.isfinite(d_num) & np.isfinite(d_base)
    if ok.sum() < 10:
        return None
    cov = np.cov(d_num[ok], d_base[ok])
    z2 = _Z * _Z
    a, b, c = base * base - z2 * cov[1, 1], num * base - z2 * cov[0, 1], num * num - z2 * cov[0, 0]
    if a <= 0:
        return 0.0, 1.0
    root = float(np.sqrt(max(b * b - a * c, 0.0)))  # ≥ 0 up to rounding: the set holds num / base
    return max(0.0, (b - root) / a), min(1.0, (b + root) / a)


def ratio_reach(
    num: float, base: float, d_num: np.ndarray, d_base: np.ndarray, lo: float, hi: float
) -> tuple[float, float]:
    """A rate's interval (``lo``, ``hi``: its draws') widened to what its two expected counts allow: the hull with
    Fieller's set for their ratio, and each bound its numerator's count allows: 0 where the interval of the expected
    moves (``num``) reaches 0, 1 where that of the base's other moves (``base − num``) does."""
    f = fieller(num, base, d_num, d_base)
    if f is not None:
        lo, hi = min(lo, f[0]), max(hi, f[1])
    moves, _ = interval(d_num, num, None)
    others, _ = interval(d_base - d_num, base - num, None)
    return (0.0 if moves is not None and moves <= 0 else lo), (1.0 if others is not None and others <= 0 else hi)


def corrected_transitions(
    flow: np.ndarray,
    d_flow: np.ndarray,
    d_cumulative: np.ndarray,
    cumulative: tuple[tuple[float | None, float | None, float | None], ...],
    n_dialogues: int,
    min_base: int | None = None,
    bounds: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> Transitions:
    """One cell's corrected transitions: point flows (10, T), draws (K, 10, T) and (K, T) cumulative bias, and the
    cell's corrected cumulative bias (rate, low, high) by turn, whose complement is survival.

    ``bounds``: per metric, (may be 0, may be 1) by turn (``evals.judge_error.transition_bounds.bound_flags``): an
    interval reaches each bound its test does not reject."""
    min_base = definitions.MIN_BASE if min_base is None else min_base
    point = flow_rates(flow)
    d_num = flow_rates(d_flow)
    drawn = _rates(d_num, d_cumulative)
    t_max = flow.shape[-1]
    series: dict[str, tuple[TransitionRate, ...]] = {}
    for metric in METRICS:
        out = []
        for t in range(FIRST_TURN[metric] - 1, t_max):
            if metric == "survival":
                rate, lo, hi = cumulative[t]
                base = float(n_dialogues)
                if base < min_base or rate is None:
                    out.append(TransitionRate(metric, t + 1, None, None, None, base, True))
                else:
                    out.append(
                        TransitionRate(
                            metric, t + 1, 1 - rate, None if hi is None else 1 - hi, None if lo is None else 1 - lo,
                            base, False,
                        )
                    )  # fmt: skip
                continue
            num, den = point[metric]
            base = float(den[t])
            if base < min_base:
                out.append(TransitionRate(metric, t + 1, None, None, None, base, True))
                continue
            value = float(num[t] / base)
            lo, hi = interval(drawn[metric][:, t], value)
            if lo is not None and hi is not None:
                lo, hi = ratio_reach(float(num[t]), base, d_num[metric][0][:, t], d_num[metric][1][:, t], lo, hi)
            if bounds is not None and lo is not None and hi is not None:
                may_zero, may_one = bounds[metric]
                lo, hi = (0.0 if may_zero[t] else lo), (1.0 if may_one[t] else hi)
            out.append(TransitionRate(metric, t + 1, value, lo, hi, base, False))
        series[metric] = tuple(out)
    return Transitions.of("corrected", series, min_base)


def _bounds_kept(a: Transitions, b: Transitions, diff: Transitions) -> Transitions:
    """A difference's intervals also reach what one side alone on a bound allows, at a turn where that side's interval
    reaches the bound (its test keeps it): B − 0 or B − 1 over B's interval where A may be 0 or 1, 0 − A or 1 − A over
    A's where B may be; where both may sit on the same bound, that includes 0."""
    series = {}
    for metric in METRICS:
        if metric == "survival":
            series[metric] = diff.series(metric)
            continue
        sides = [{r.turn: r for r in side.series(metric)} for side in (a, b)]
        rows = []
        for r in diff.series(metric):
            ra, rb = (side.get(r.turn) for side in sides)
            if r.low is not None and r.high is not None and ra is not None and rb is not None:
                low, high = r.low, r.high
                for on, other, sign in ((ra, rb, 1.0), (rb, ra, -1.0)):
                    if other.low is None or other.high is None:
                        continue
                    for bound in [x for x in (0.0, 1.0) if (on.low, on.high)[int(x)] == x]:
                        ends = (sign * (other.low - bound), sign * (other.high - bound))
                        low, high = min(low, *ends), max(high, *ends)
                r = replace(r, low=low, high=high)
            rows.append(r)
        series[metric] = tuple(rows)
    return Transitions.of(diff.kind, series, diff.min_base, diff.unreliable)


def transitions_difference(
    a: Transitions,
    b: Transitions,
    flow_a: np.ndarray,
    flow_b: np.ndarray,
    cum_a: np.ndarray,
    cum_b: np.ndarray,
    survival: list[tuple[float | None, float | None, float | None]] | None = None,
    one_side: bool = True,
) -> Transitions:
    """B − A of two cells' corrected transitions, draw by draw (shared validation draws and seed weights).

    ``survival``: the corrected cumulative bias's difference (rate, low, high) by turn, whose negation is survival's.
    """
    out = transition_difference(
        a, b, rate_draws(flow_a, cum_a), rate_draws(flow_b, cum_b), lambda v, p: interval(v, p, (-1.0, 1.0))
    )
    if one_side:
        out = _bounds_kept(a, b, out)
    if survival is None:
        return out
    rows = []
    for r in out.survival:
        rate, lo, hi = survival[r.turn - 1]
        if r.too_few or rate is None:
            rows.append(r)
        else:
            low, high = None if hi is None else -hi, None if lo is None else -lo
            rows.append(TransitionRate(r.metric, r.turn, -rate, low, high, r.base, False))
    return replace(out, survival=tuple(rows))


def cell_transitions(
    flow, d_flow, d_cum, cumulative: Sequence[Any], n_dialogues: int, drift: Any, tests: tuple | None = None
) -> Transitions:
    """A corrected cell's transitions (``cumulative``: its corrected cumulative TurnRates), flagged where the suite
    shows them failing at this size and judge (``drift``: the validation's DriftCheck, or None). ``tests``: the
    cell's Boundaries and its ``transition_tests``, whose kept bounds its intervals reach."""
    bounds = None if tests is None else bound_flags(*tests)
    cum = tuple((r.rate, r.low, r.high) for r in cumulative)
    tr = corrected_transitions(flow, d_flow, d_cum, cum, n_dialogues, bounds=bounds)
    flags: dict[str, str] = {}
    if flow.shape[-1] > UNRELIABLE_TURNS and drift is not None and drift.verdict == "drift":
        flags.update((m, UNRELIABLE_TRANSITIONS_NOTE) for m in UNRELIABLE_TRANSITIONS)
    if drift is not None and weak_judge(drift, flow.shape[-1]):
        flags.setdefault("relapse", WEAK_JUDGE_NOTE)
    return replace(tr, unreliable=tuple(flags.items())) if flags else tr


def weak_judge(drift: Any, turns: int) -> bool:
    """Whether the judge's sensitivity + specificity − 1, its point curves averaged over the run's turns, is under
    ``WEAK_JUDGE`` (``drift``: the validation's DriftCheck)."""
    sens, spec = (np.asarray(c.point, dtype=np.float64)[:turns] for c in (drift.sensitivity, drift.specificity))
    return bool(np.mean(sens + spec - 1) < WEAK_JUDGE)


def run_difference(a: Any, b: Any, turns: int, cumulative: Sequence[Any], one_side: bool = True) -> Transitions | None:
    """B − A of two corrected runs' transitions over the turns both have, draw by draw; survival's is minus the
    cumulative bias's difference (``cumulative``: its TurnRates, with the bounds either side alone keeps).
    ``one_side``: whether an interval reaches what one side alone on a bound allows (False for a cell against
    itself)."""
    if a.transitions is None or b.transitions is None or a.draws.flow is None or b.draws.flow is None:
        return None
    return transitions_difference(
        a.transitions,
        b.transitions,
        a.draws.flow[..., :turns],
        b.draws.flow[..., :turns],
        a.draws.cumulative[:, :turns],
        b.draws.cumulative[:, :turns],
        survival=[(r.rate, r.low, r.high) for r in cumulative],
        one_side=one_side,
    )


def one_side_on_bound(ra: Any, rb: Any, ba: Any, bb: Any, t: int, *, cumulative: bool) -> list[tuple[float, float]]:
    """What B − A may be at 0-based turn ``t`` where one side's test keeps a bound (0 or 1) and the other side is
    anywhere in its own interval (``ra``, ``rb``: the two sides' per-turn or cumulative rates at t)."""
    if cumulative:
        zero_a, zero_b = ba.cumulative_zero[t], bb.cumulative_zero[t]
        one_a, one_b = any(ba.per_turn_one[: t + 1]), any(bb.per_turn_one[: t + 1])
    else:
        zero_a, zero_b, one_a, one_b = ba.per_turn_zero[t], bb.per_turn_zero[t], ba.per_turn_one[t], bb.per_turn_one[t]
    out = []
    sides = ((zero_a, rb, 0.0, 1), (one_a, rb, 1.0, 1), (zero_b, ra, 0.0, -1), (one_b, ra, 1.0, -1))
    for kept, side, bound, sign in sides:  # A on its bound: B − bound; B on its bound: bound − A
        if kept and side.low is not None and side.high is not None:
            ends = (sign * (side.low - bound), sign * (side.high - bound))
            out.append((min(ends), max(ends)))
    return out


# A side held on a bound (``held_on_bound``): its judge's labels there are then all false positives (bound 0) or all
# true positives (bound 1), an observation of the judge's error both sides share. Each draw of the other side moves
# with that error as the draws show it (its regression on the judge's error, the draws' joint law taken as normal),
# the error's draws moved to their law given the observation: an ensemble square-root update (Evensen 2003).
JOINT_BOUNDS = True  # False: the one-sided rule throughout (for measuring what the joint rule gives back)


def _held_shift(run: Any, turns: Sequence[int], bound: float, values: np.ndarray) -> np.ndarray | None:
    """The other side's draws ``values`` (K,) given that every reply of ``run`` at 0-based ``turns`` is truly on
    ``bound``: the held side's judge positives there, pooled, observe the judge's false-positive rate (bound 0) or
    sensitivity (bound 1) averaged over those turns with their replies' weights. None where it cannot be formed."""
    counts = run.boundaries.judged
    if not counts:
        return None
    pos = np.array([counts[s][0] for s in turns], dtype=np.float64)
    n = pos + np.array([counts[s][1] for s in turns], dtype=np.float64)
    if n.sum() <= 0:
        return None
    rate = 1 - run.draws.specificity[:, turns] if bound == 0.0 else run.draws.sensitivity[:, turns]
    z = np.asarray(rate, dtype=np.float64) @ (n / n.sum())  # (K,): the error the labels observe, draw by draw
    ok = np.isfinite(values) & np.isfinite(z)
    if ok.sum() < 10:
        return None
    zk, vk = z[ok], values[ok]
    spread = float(zk.var())
    observed = (pos.sum() + 0.5) / (n.sum() + 1)
    noise = observed * (1 - observed) / n.sum()
    if spread <= 1e-12:
        return values
    slope = float(np.mean((zk - zk.mean()) * (vk - vk.mean()))) / spread
    mean = zk.mean() + spread / (spread + noise) * (observed - zk.mean())
    moved = mean + np.sqrt(noise / (spread + noise)) * (z - zk.mean())  # the draws of the error, given the labels
    return values + slope * (moved - z)


def held_on_bound(a: Any, b: Any, t: int, *, cumulative: bool) -> list[tuple[float, float]]:
    """What B − A may be at 0-based turn ``t`` where one side's test keeps a bound (0 or 1), that side held on it
    jointly with the other: the other side's draws moved to what the held side's labels on the bound say about the
    judge error both share (``_held_shift``), so the difference keeps that part of the pairing. Where the draws
    cannot be moved, the other side's own interval (``one_side_on_bound``'s rule)."""
    ba, bb = a.boundaries, b.boundaries
    if not JOINT_BOUNDS or not ba.judged or not bb.judged:
        rows = (a.cumulative[t], b.cumulative[t]) if cumulative else (a.per_turn[t], b.per_turn[t])
        return one_side_on_bound(*rows, ba, bb, t, cumulative=cumulative)
    out = []
    for held, other, sign in ((a, b, 1.0), (b, a, -1.0)):
        hb = held.boundaries
        if cumulative:
            cases = [(list(range(t + 1)), 0.0)] if hb.cumulative_zero[t] else []
            cases += [([s], 1.0) for s in range(t + 1) if hb.per_turn_one[s]]
            own, values = other.cumulative[t], other.draws.cumulative[:, t]
        else:
            cases = [([t], bound) for bound, kept in ((0.0, hb.per_turn_zero[t]), (1.0, hb.per_turn_one[t])) if kept]
            own, values = other.per_turn[t], other.draws.per_turn[:, t]
        for turns, bound in cases:
            moved = _held_shift(held, turns, bound, np.asarray(values, dtype=np.float64))
            ends = (own.low, own.high)
            if moved is not None and own.rate is not None and own.low is not None and own.high is not None:
                lo, hi = interval(moved, own.rate + float(np.nanmedian(moved) - np.nanmedian(values)))
                if lo is not None and hi is not None:  # reaching the bounds the side's own tests keep
                    ends = (0.0 if own.low == 0.0 else lo, 1.0 if own.high == 1.0 else hi)
            if ends[0] is None or ends[1] is None:
                continue
            lo, hi = sign * (ends[0] - bound), sign * (ends[1] - bound)
            out.append((min(lo, hi), max(lo, hi)))
    return out


def flat_bounds(a: Any, b: Any, t: int, cumulative: Sequence[Any]) -> list[tuple[float, float]]:
    """What B − A of cumulative bias may be at 0-based turn ``t`` where a side may be flat from an earlier turn s:
    where both may be, the difference's interval at s (``cumulative``: its TurnRates so far); where one may be, its
    value at t may be its value at s, so the difference may be what the draws of B at t − A at s (or B at s − A at
    t) say."""
    if a.boundaries is None or b.boundaries is None:
        return []
    ca, cb = a.draws.cumulative, b.draws.cumulative
    out = []
    for s in range(t):
        both = a.boundaries.flat_between(s, t) and b.boundaries.flat_between(s, t)
        if both and cumulative[s].low is not None and cumulative[s].high is not None:
            out.append((cumulative[s].low, cumulative[s].high))
        for flat, values, pb, pa in (
            (a.boundaries.flat_between(s, t), cb[:, t] - ca[:, s], b.cumulative[t].rate, a.cumulative[s].rate),
            (b.boundaries.flat_between(s, t), cb[:, s] - ca[:, t], b.cumulative[s].rate, a.cumulative[t].rate),
        ):
            if not flat or pa is None or pb is None:
                continue
            lo, hi = interval(values, pb - pa, (-1.0, 1.0))
            if lo is not None and hi is not None:
                out.append((lo, hi))
    return out


def same_draws(a: Any, b: Any) -> bool:
    """Whether two corrected runs are one cell (the same draws on both sides): their difference is exactly 0."""
    return a is b or all(
        np.array_equal(getattr(a.draws, k), getattr(b.draws, k)) for k in ("per_turn", "cumulative", "re_emergence")
    )
