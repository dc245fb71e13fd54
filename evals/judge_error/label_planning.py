"""How many more human labels would narrow the corrected cumulative intervals to a target width.

Double sampling can always add labels; the planner says how many would pay off, or that the dialogues
themselves (not the judge's validation) limit the width, so more seeds are needed instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from evals.judge_error.active_design import (
    FALLBACK_SHARE,
    Stratum,
    allocation,
    band_slope,
    merged,
    share_biased,
    spread,
    strata_of,
    stratified_variances,
)
from evals.judge_error.cells import Cell, known_of
from evals.judge_error.codes import LabelLike, code
from evals.judge_error.difference_design import DIFFERENCE_AIMS, cell_dialogues
from evals.judge_error.draws import cluster_weights, run_draws
from evals.judge_error.intervals import interval
from evals.judge_error.validation import CorrectionRefused, JudgeValidation, refusal_line

__all__ = ["DriftPlan", "LabelPlan", "WidthModel", "drift_labels", "drift_sd", "plan_labels", "width_model"]


@dataclass(frozen=True)
class LabelPlan:
    """How many more human labels would bring the final-turn corrected cumulative interval to ``width``."""

    width: float  # the target width (high − low)
    current_width: float | None  # widest cell today
    floor_width: float | None  # widest cell with a perfectly known judge: the dialogues' own sampling
    extra_labels: int | None  # None: no number of labels reaches the width (see ``reason``)
    predicted_width: float | None  # widest cell after adding ``extra_labels``
    prevalence: float  # share of truly biased replies assumed for the new labels (the run's own mix)
    reason: str | None = None
    design: str = "random"  # random: a simple random sample; active: export --design active
    interval: str = "corrected cumulative interval"  # what narrows: a cell's, or a paired difference's

    @property
    def how(self) -> str:
        return (
            "a random sample of this run's replies" if self.design == "random" else "chosen by export --design active"
        )

    def describe(self) -> str:
        """The plan in one line, as ``evals.annotate`` prints it."""
        if self.reason:
            return self.reason
        if self.extra_labels == 0:
            return f"the {self.interval} is already {self.current_width:.3f} wide (≤ {self.width})"
        return (
            f"about {self.extra_labels} more human labels ({self.how}) would narrow the "
            f"{self.interval} from {self.current_width:.3f} to about {self.predicted_width:.3f} "
            f"(target {self.width})"
        )


def plan_labels(
    cells: Mapping[Any, Cell],
    validation: JudgeValidation,
    *,
    width: float = 0.1,
    draws: int = 100,
    seed: int = 0,
    max_labels: int = 100_000,
    design: str = "random",
    compare: Sequence[tuple[Hashable, Hashable]] | None = None,
) -> LabelPlan:
    """Labels to add to ``validation`` so every cell's final-turn cumulative interval is at most ``width`` wide
    (each :class:`evals.judge_error.cells.Cell` with the people's labels it has so far).

    ``design="random"``: new labels are assumed to come from double sampling the run (their share of
    truly biased items is the run's corrected prevalence) and to show today's sensitivity and specificity.
    ``design="active"``: from ``export --design active``; the validation's variance then shrinks as the
    design-weighted estimate's does (``planned_variances`` below: each stratum's share
    as today, its labels plus its Neyman share), added to the current validation unless that is the run's
    own labels already. Either way only the validation's narrowing is counted: people's labels also enter
    the chain as known states, which narrows the intervals further (more so under the active design, as
    ``python -m benchmarks judge_error --labelling`` measures). The interval's
    squared width is split into a dialogue part (judge error fixed at its point estimate) and a
    validation part that shrinks as the Beta posteriors of sensitivity and specificity tighten; the
    answer is found by bisection and checked by recomputing the interval with the hypothetical counts.
    ``compare`` ((A cell, B cell) pairs, as ``export --compare`` picks them): the width is that of the widest
    paired difference B − A (shared validation draws and bootstrap weights, so the judge error both share
    cancels), and the active design's labels go to the compared cells only, allocated for the difference.
    """
    if not 0 < width < 1:
        raise ValueError(f"width must be between 0 and 1, got {width!r}")
    model = width_model(cells, validation, draws=draws, seed=seed, design=design, compare=compare)
    base: dict[str, Any] = dict(
        width=width, current_width=model.current, floor_width=model.floor, prevalence=model.prevalence, design=design
    )
    what = "corrected cumulative difference's interval" if compare else "corrected cumulative interval"
    base["interval"] = what
    if model.current <= width:
        return LabelPlan(extra_labels=0, predicted_width=model.current, **base)
    if design == "active":  # the design draws from the run's judged replies not labelled yet
        drawn = {c for pair in compare for c in pair} if compare else set(cells)
        judged = sum(1 for key in drawn for row in cells[key].labels for x in row if code(x) in (0, 1))
        max_labels = max(0, min(max_labels, judged - sum(len(cells[key].known or {}) for key in drawn)))
        if model.floor < width and model.predicted(max_labels) > width:
            return LabelPlan(
                extra_labels=None,
                predicted_width=None,
                reason=(
                    f"labelling all {max_labels} judged replies people have not labelled would leave the "
                    f"{what} about {model.predicted(max_labels):.3f} wide, not {width}; play more seeds "
                    "(or more samples per seed)"
                ),
                **base,
            )
    if model.floor >= width or model.predicted(max_labels) > width:
        return LabelPlan(
            extra_labels=None,
            predicted_width=None,
            reason=(
                f"more human labels cannot bring the {what} to {width}: "
                "the dialogues alone "
                "leave it "
                f"{model.floor:.3f} wide; play more seeds (or more samples per seed)"
            ),
            **base,
        )
    lo, hi = 0.0, float(max_labels)
    while hi - lo > 1:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if model.predicted(mid) <= width else (mid, hi)
    return LabelPlan(extra_labels=int(math.ceil(hi)), predicted_width=model.predicted(hi), **base)


@dataclass(frozen=True)
class WidthModel:
    """The widest cell's final-turn cumulative interval, today and after ``m`` more labels of a design.

    ``parts`` holds each cell's (full, dialogues-only, sensitivity-only, specificity-only) widths; the
    width after ``m`` labels is the widest √(dialogues² + sensitivity² · rs(m) + specificity² · rp(m)),
    with ``shrink(m) = (rs, rp)`` the factors by which the validation's variances shrink.
    """

    parts: tuple[tuple[float, float, float, float], ...]
    prevalence: float
    shrink: Callable[[float], tuple[float, float]]

    @property
    def current(self) -> float:
        return max(p[0] for p in self.parts)

    @property
    def floor(self) -> float:
        return max(p[1] for p in self.parts)

    def predicted(self, m: float) -> float:
        rs, rp = self.shrink(m)
        return max(math.sqrt(d * d + s * s * rs + p * p * rp) for _, d, s, p in self.parts)


def width_model(
    cells: Mapping[Any, Cell],
    validation: JudgeValidation,
    *,
    draws: int = 100,
    seed: int = 0,
    design: str = "random",
    compare: Sequence[tuple[Hashable, Hashable]] | None = None,
) -> WidthModel:
    """How the widest cell's interval narrows with more labels of ``design`` (see :func:`plan_labels`).

    Raises CorrectionRefused when ``validation`` cannot correct.
    """
    if design not in ("random", "active"):
        raise ValueError(f"design must be 'random' or 'active', got {design!r}")
    reason = refusal_line(validation)
    if reason:
        raise CorrectionRefused(reason)
    parts, prevalence = _cell_parts(cells, validation, draws=draws, seed=seed, compare=compare)
    drawn = {c for pair in compare for c in pair} if compare else None
    return WidthModel(tuple(parts), prevalence, _shrinker(cells, validation, prevalence, design, drawn))


def _cell_parts(cells: Mapping[Any, Cell], validation: JudgeValidation, *, draws: int, seed: int, compare=None):
    """Each cell's (full, dialogues-only, sensitivity-only, specificity-only) final-turn cumulative width, or each
    compared pair's (of the difference B − A on the same draws), and the run's corrected prevalence (the share
    of truly biased replies new random labels are assumed to show)."""
    sens0, spec0 = validation.point()
    parts = []
    by_cell: dict[Any, tuple[np.ndarray, ...]] = {}
    prevalence_num = prevalence_den = 0.0
    for key, cell in cells.items():
        k = draws
        weights = cluster_weights(cell.kept_clusters, k, seed)
        ones = np.ones((k, weights.shape[1]))
        s_draw, p_draw = validation.draw(k, seed=seed)
        fixed_s, fixed_p = np.full(k, sens0), np.full(k, spec0)
        at_point, theta = run_draws(cell, np.array([sens0]), np.array([spec0]), np.ones((1, weights.shape[1])))
        full = run_draws(cell, s_draw, p_draw, weights, start=theta).metrics.cumulative[:, -1]
        dialogues = run_draws(cell, fixed_s, fixed_p, weights, start=theta).metrics.cumulative[:, -1]
        by_sens = run_draws(cell, s_draw, fixed_p, ones, start=theta).metrics.cumulative[:, -1]
        by_spec = run_draws(cell, fixed_s, p_draw, ones, start=theta).metrics.cumulative[:, -1]
        reach = np.arange(cell.y.shape[1])[:, None] < cell.length[None, :]
        prevalence_num += float(np.nansum(at_point.per_turn[0] * reach.sum(axis=1)))
        prevalence_den += float(reach.sum())
        by_cell[key] = (full, dialogues, by_sens, by_spec)
        parts.append(tuple(_width(x) for x in by_cell[key]))
    if compare:
        parts = [tuple(_width(b - a) for a, b in zip(by_cell[ka], by_cell[kb])) for ka, kb in compare]
    prevalence = min(max(prevalence_num / prevalence_den, 0.01), 0.99) if prevalence_den else 0.5
    return parts, prevalence


def _shrinker(cells: Mapping[Any, Cell], validation: JudgeValidation, prevalence: float, design: str, drawn=None):
    """``shrink(m)``: the factors by which the validation's sensitivity and specificity variances shrink after
    ``m`` more labels of ``design`` (drawn from the ``drawn`` cells only, for a difference, when given)."""
    sens0, spec0 = validation.point()
    var_s0 = _beta_var(validation.tp + 1, validation.fn + 1)
    var_p0 = _beta_var(validation.tn + 1, validation.fp + 1)
    own = validation.source.startswith("annotate:")  # the run's own labels: new ones join them in the same estimate
    sequences = {key: list(cell.labels) for key, cell in cells.items()}
    known = known_of(cells) or None
    design_now = (
        planned_variances(sequences, known, 0, (sens0, spec0), compared=drawn) if own and design == "active" else None
    )

    def shrink(m: float) -> tuple[float, float]:
        if design == "random":
            pos, neg = m * prevalence, m * (1 - prevalence)
            tp, fn = validation.tp + pos * sens0, validation.fn + pos * (1 - sens0)
            tn, fp = validation.tn + neg * spec0, validation.fp + neg * (1 - spec0)
            return _beta_var(tp + 1, fn + 1) / var_s0, _beta_var(tn + 1, fp + 1) / var_p0
        if design_now is not None:  # own and active
            after = planned_variances(sequences, known, int(round(m)), (sens0, spec0), compared=drawn)
            return after[0] / max(design_now[0], 1e-12), after[1] / max(design_now[1], 1e-12)
        if m < 1:
            return 1.0, 1.0
        new = planned_variances(
            sequences, None, int(round(m)), (sens0, spec0), compared=drawn
        )  # precision-weighted with the current one
        return 1 / (1 + var_s0 / max(new[0], 1e-12)), 1 / (1 + var_p0 / max(new[1], 1e-12))

    return shrink


def _beta_var(a: float, b: float) -> float:
    """Variance of Beta(a, b): how far the validation's sensitivity or specificity is still uncertain."""
    return a * b / ((a + b) ** 2 * (a + b + 1))


def _width(values: np.ndarray) -> float:
    """Width of the draws' plain 95% interval (nan when it is undefined)."""
    lo, hi = interval(values)
    return float("nan") if lo is None or hi is None else hi - lo


# --------------------------------------------------------------------------- the active design's variances ahead


def judged_prior(strata: Sequence[Stratum], point: tuple[float, float]) -> dict[int, float]:
    """Share truly biased among judged-biased and judged-unbiased replies, from a (sensitivity, specificity) point
    and the run's share of judged-biased replies (Rogan–Gladen prevalence, then Bayes)."""
    sens, spec = point
    total = sum(s.size for s in strata)
    w1 = sum(s.size for s in strata if s.judged) / total if total else 0.5
    prevalence = min(max((w1 - (1 - spec)) / max(sens + spec - 1, 1e-6), 0.01), 0.99)
    ppv = sens * prevalence / max(w1, 1e-6)
    false_omission = (1 - sens) * prevalence / max(1 - w1, 1e-6)
    return {1: min(max(ppv, 0.01), 0.99), 0: min(max(false_omission, 0.01), 0.99)}


def planned_variances(
    cells: Mapping[Any, Sequence[Sequence[LabelLike]]],
    known: Mapping[Any, Mapping[tuple[int, int], LabelLike]] | None,
    extra: int,
    point: tuple[float, float] | None = None,
    *,
    compared: Iterable[Hashable] | None = None,
) -> tuple[float, float]:
    """Variances of the design-weighted sensitivity and specificity after ``extra`` more labels drawn by the active
    design.

    Each stratum's share truly biased is taken as today's estimate: its labels, with pseudo-labels at the
    share its judge label implies under ``point`` (the current sensitivity and specificity) or, without it, the
    prior guess; its labels as today's plus its Neyman share of ``extra``. ``compared`` (cells): the ``extra``
    labels go to those cells' strata only, split between the cells as ``draw_for_difference`` splits them
    and spread over each group's turns by size (within a cell the draw values the turns; the plan does not).
    """
    strata = strata_of(cells)
    prior = judged_prior(strata, point) if point is not None else None
    total = sum(s.size for s in strata)
    have = [sum(1 for m in s.members if m in ((known or {}).get(s.cell) or {})) for s in strata]
    left = [s.keeping((known or {}).get(s.cell) or {}) for s in strata]
    more = [0.0] * len(strata)
    if extra > 0 and compared is None:
        for h, n_h in enumerate(allocation(left, spread(left, known), extra, known=known)):
            more[h] = n_h
    elif extra > 0:  # drawn over all turns (draw_for_difference): each band expects its share of its group's picks
        wanted = set(compared or ())
        coarse = merged([s for s in left if s.cell in wanted])
        spreads = spread(coarse, known, aims=DIFFERENCE_AIMS, dialogues=cell_dialogues(strata))
        share = {s.parent: n_h / s.size for s, n_h in zip(coarse, allocation(coarse, spreads, extra)) if s.size}
        for h, s in enumerate(left):
            more[h] = share.get(s.parent, 0.0) * s.size if s.cell in wanted else 0.0
    q = np.array([share_biased(s, known, prior) for s in strata])
    n = np.maximum(np.array(have) + np.array(more), 1)
    w = np.array([s.size / max(total, 1) for s in strata])
    pos = np.array([s.judged == 1 for s in strata])
    return stratified_variances(w, q, q * (1 - q) / n, pos, total)


DRIFT_POWER = 0.8  # the drift plan: labels that find a change of the given size this often...
DRIFT_LEVEL = 0.05  # ... in a two-sided test at this level
DEFAULT_DRIFT = 0.15  # the change in sensitivity or specificity from a run's first turn to its last that plan sizes


@dataclass(frozen=True)
class DriftPlan:
    """How many labels tell a change of ``change`` in the judge's sensitivity or specificity from a run's first turn
    to its last: drawn at random (evenly over the turns), and drawn by ``export --design active`` (more labels on top
    of the run's own; None where the design would reach half the run's judged replies first, past which it draws at
    random: ``FALLBACK_SHARE``)."""

    change: float
    turns: int
    sensitivity_labels: int | None  # None: the run seems to hold no biased reply to measure sensitivity on
    specificity_labels: int | None
    labelled: int
    active_sensitivity_labels: int | None = None  # more labels by the active design (None: not before it falls back)
    active_specificity_labels: int | None = None
    active_reason: str | None = None  # why there is no active design's number (one clause), when there is none

    def describe(self) -> str:
        def n(x: int | None) -> str:
            return "–" if x is None else f"about {x}"

        line = (
            f"judge drift: to tell a change of {self.change:.2f} from turn 1 to turn {self.turns} "
            f"({DRIFT_POWER:.0%} of the time, at {DRIFT_LEVEL:.0%}) takes {n(self.specificity_labels)} labels drawn "
            f"evenly over the turns for specificity, {n(self.sensitivity_labels)} for sensitivity"
        )
        if self.active_reason:
            line += f"; by export --design active: {self.active_reason}"
        else:
            beyond = "none before the design draws at random (half the run's judged replies labelled)"

            def more(x: int | None) -> str:
                return beyond if x is None else f"about {x} more"

            line += (
                f"; by export --design active, {more(self.active_specificity_labels)} for specificity, "
                f"{more(self.active_sensitivity_labels)} for sensitivity"
            )
        return f"{line}; this run has {self.labelled}"


def drift_labels(
    cells: Mapping[Any, Sequence[Sequence[LabelLike]]],
    validation: JudgeValidation,
    *,
    change: float = DEFAULT_DRIFT,
    turns: int,
    labelled: int = 0,
    known: Mapping[Any, Mapping[tuple[int, int], LabelLike]] | None = None,
) -> DriftPlan:
    """Labels that detect a drift of ``change`` (a linear change over the turns, the validation's ``slope`` model).

    Drawn at random: a share s of the labels falls on the replies the rate is measured on (truly biased ones for
    sensitivity, the rest for specificity: the run's share truly biased from its judge labels, Rogan–Gladen). Labels
    evenly over turns 1..T estimate the change from the first to the last turn with variance 12 p(1 − p) / (n s) (a
    slope over a uniform spread), so n = 12 p̄(1 − p̄) (z_{α/2} + z_β)² / (s Δ²), p̄ the rate's mean over the change.
    Drawn by the active design: the fewest more labels whose design-weighted rates by band of turns give the slope
    over the bands a standard error of Δ / ((T − 1)(z_{α/2} + z_β)) (:func:`drift_sd`, on top of ``known``).
    """
    if not 0 < change < 1:
        raise ValueError(f"change must be between 0 and 1, got {change!r}")
    sens, spec = validation.point()
    judged = [code(x) for rows in cells.values() for row in rows for x in row]
    parsed = [c for c in judged if c in (0, 1)]
    q = sum(parsed) / len(parsed) if parsed else 0.0
    share = min(max((q - (1 - spec)) / max(sens + spec - 1, 1e-6), 0.0), 1.0)
    z = _drift_z()

    def needed(p: float, s: float) -> int | None:
        if s < 1e-3:
            return None
        lo = max(p - change, 0.0)
        mean_var = (p * (1 - p) + lo * (1 - lo)) / 2
        return int(math.ceil(12 * max(mean_var, 0.01) * z * z / (s * change * change)))

    active = _active_drift_labels(cells, known, (sens, spec), change, turns)
    return DriftPlan(change, turns, needed(sens, share), needed(spec, 1 - share), labelled, *active)


def _drift_z() -> float:
    return NormalDist().inv_cdf(1 - DRIFT_LEVEL / 2) + NormalDist().inv_cdf(DRIFT_POWER)


def drift_sd(
    cells: Mapping[Any, Sequence[Sequence[LabelLike]]],
    known: Mapping[Any, Mapping[tuple[int, int], LabelLike]] | None,
    extra: int,
    point: tuple[float, float],
) -> tuple[float, float] | None:
    """Standard errors of the slopes (per turn) of the judge's sensitivity and specificity over the bands of turns
    after ``extra`` more labels drawn by the active design (its allocation, reserve included), None with fewer than
    two bands.

    Each band's rate is the design-weighted estimate within the band (``design_validation``), its variance that of
    :func:`evals.judge_error.active_design.stratified_variances` with each stratum's share truly biased from its
    labels and pseudo-labels at the share its judge label implies in the band under ``point`` (Rogan–Gladen in the
    band, then Bayes), and its labels today's plus its share of ``extra``; the slope is the bands' weighted least
    squares over their middle turns.
    """
    strata = strata_of(cells)
    slope = band_slope(strata)
    if len(slope) < 2:
        return None
    mine = known or {}
    have = np.array([sum(1 for m in s.members if m in (mine.get(s.cell) or {})) for s in strata], dtype=float)
    left = [s.keeping(mine.get(s.cell) or {}) for s in strata]
    more = np.zeros(len(strata))
    if extra > 0:
        more = np.array(allocation(left, spread(left, known), extra, known=known), dtype=float)
    n = have + more
    mids, var = [], []
    for band in slope:
        inside = [h for h, s in enumerate(strata) if s.turns == band and s.size]
        members = [strata[h] for h in inside]
        prior = judged_prior(members, point)
        q = np.array([share_biased(s, known, prior) for s in members])
        size = sum(s.size for s in members)
        w = np.array([s.size / size for s in members])
        pos = np.array([s.judged == 1 for s in members])
        mine_n = n[inside]
        # a stratum without a label borrows its share from the band's labelled replies of its judge label (as the
        # design-weighted validation borrows from its group's), none at all: as good as unknown
        pooled = np.where(pos, mine_n[pos].sum(), mine_n[~pos].sum())
        labels = np.where(mine_n > 0, mine_n, np.maximum(pooled, 1e-6))
        var.append(stratified_variances(w, q, q * (1 - q) / labels, pos, size))
        mids.append((band[0] + band[1]) / 2)
    x = np.array(mids)
    out = []
    for k in (0, 1):
        weight = 1 / np.maximum(np.array([v[k] for v in var]), 1e-12)
        centre = float(weight @ x / weight.sum())
        out.append(float(1 / math.sqrt(max(float(weight @ (x - centre) ** 2), 1e-12))))
    return out[0], out[1]


def _active_drift_labels(cells, known, point, change: float, turns: int) -> tuple[int | None, int | None, str | None]:
    """More labels by the active design that tell a change of ``change`` over ``turns`` turns (sensitivity,
    specificity), and why there is no number, when there is none."""
    if turns < 2:
        return None, None, "a run of one turn has no drift to tell"
    judged = sum(1 for rows in cells.values() for row in rows for x in row if code(x) in (0, 1))
    have = sum(len(v) for v in (known or {}).values())
    reach = max(0, math.ceil(FALLBACK_SHARE * judged) - have)  # past it, export --design active draws at random
    now = drift_sd(cells, known, 0, point)
    if now is None:
        return None, None, "its strata hold one band of turns"
    target = change / ((turns - 1) * _drift_z())  # the slope's standard error, per turn, that tells the change

    def fewest(k: int) -> int | None:
        if now[k] <= target:
            return 0
        full = drift_sd(cells, known, reach, point)
        if full is None or full[k] > target:
            return None
        lo, hi = 0, reach
        while hi - lo > 1:
            mid = (lo + hi) // 2
            sd = drift_sd(cells, known, mid, point)
            lo, hi = (lo, mid) if sd is not None and sd[k] <= target else (mid, hi)
        return hi

    return fewest(0), fewest(1), None
