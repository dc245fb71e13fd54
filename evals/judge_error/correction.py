"""Corrected bias metrics of target × mode cells with their 95% intervals, and paired differences between cells.

The public entry points: ``correct_run`` (one cell), ``correct_cells`` (several on the same draws) and
``corrected_difference`` (B − A, paired by seed), with the result types they return. Method, assumptions,
the simulation suite it is judged by and its coverage: docs/judge-error.md.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evals.judge_error import beyond_validation as past_validation
from evals.judge_error.beyond_validation import Beyond
from evals.judge_error.boundaries import ALPHA
from evals.judge_error.categories import category_errors
from evals.judge_error.cells import Cell
from evals.judge_error.chain import ChainMetrics
from evals.judge_error.codes import LabelLike, RowLike
from evals.judge_error.draws import cluster_weights, fit_stack, stack
from evals.judge_error.drift import DEFAULT_MODEL, DriftCheck
from evals.judge_error.intervals import interval
from evals.judge_error.judges import RunJudge, exact_tests, grouped_errors, likelihood_tests, run_judge
from evals.judge_error.transitions import (
    Transitions,
    cell_transitions,
    flat_bounds,
    held_on_bound,
    run_difference,
    same_draws,
)
from evals.judge_error.validation import CorrectionRefused, JudgeValidation, refusal_line

__all__ = [
    "DEFAULT_DRAWS",
    "METHOD",
    "Boundaries",
    "CorrectedDifference",
    "CorrectedRun",
    "Draws",
    "TurnRate",
    "Value",
    "correct_cells",
    "correct_encoded",
    "correct_run",
    "corrected_difference",
]

DEFAULT_DRAWS = 200
# Where the simulation suite (docs/judge-error.md) shows a metric's 95% interval containing the truth in fewer
# than 90% of data sets, for every shape of bias alike, the metric is flagged unreliable at that size: the
# number stands, with a note, never as a finding. Re-emergence over more than five turns (10 of the 24
# ten-turn cells fell below 90%, 0.73–0.88) or in a cell of more than 250 dialogues (the suite tries 60 and
# 500: at 500, a mixture of shapes across seeds, which the chain only approximates, fell to 0.82–0.86).
UNRELIABLE_RE_EMERGENCE_TURNS = 5
UNRELIABLE_RE_EMERGENCE_DIALOGUES = 250
UNRELIABLE_NOTE = (
    "unreliable at this size: in the simulation suite this interval held the truth in fewer than 90% "
    "of data sets (docs/judge-error.md#what-fails)"
)
METHOD = (
    "latent chain of true labels per target × mode fitted by EM, seed bootstrap × validation draws, "
    "boundary values kept where exact and likelihood-ratio tests cannot reject them (docs/judge-error.md)"
)


@dataclass(frozen=True)
class Value:
    """A corrected statistic: its point estimate and 95% interval (None when undefined)."""

    value: float | None
    low: float | None
    high: float | None

    def as_dict(self, key: str = "rate") -> dict[str, Any]:
        return {key: self.value, "ci95": [self.low, self.high]}


@dataclass(frozen=True)
class TurnRate:
    """A corrected rate at one turn with its 95% interval."""

    turn: int
    rate: float | None
    low: float | None
    high: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "rate": self.rate, "ci95": [self.low, self.high]}


@dataclass(frozen=True)
class Draws:
    """The per-draw values behind every interval, draw k using validation draw k and bootstrap weights k.

    Two results computed with the same validation, ``draws`` and ``seed`` share their validation
    draws, and their bootstrap weights agree on every cluster (seed) they share: subtracting their
    arrays draw by draw gives a paired difference (``corrected_difference``).
    """

    sensitivity: np.ndarray  # (K, turns): the judge's error at each turn, draw by draw
    specificity: np.ndarray  # (K, turns)
    per_turn: np.ndarray  # (K, turns)
    cumulative: np.ndarray  # (K, turns)
    re_emergence: np.ndarray  # (K,)
    first_bias_median: np.ndarray  # (K,) median first-bias turn among dialogues with bias (nan: none)
    first_bias_mean: np.ndarray  # (K,)
    flow: np.ndarray | None = None  # (K, 10, turns): expected transitions (evals.judge_error.transitions)


@dataclass(frozen=True)
class Boundaries:
    """Which boundary values the data cannot reject (each test at 5%), turn by turn: what extends an interval.

    ``flat[s][t]`` (0-based turns, s < t): "no first bias in turns s+2..t+1" survives its test, so cumulative
    bias may be the same at turn t+1 as at turn s+1.
    """

    per_turn_zero: tuple[bool, ...]
    per_turn_one: tuple[bool, ...]
    cumulative_zero: tuple[bool, ...]
    flat: tuple[tuple[bool, ...], ...]
    no_re_emergence: bool
    judged: tuple[tuple[int, int], ...] = ()  # the judge's (positive, negative) labels by turn, which the tests read

    def flat_between(self, s: int, t: int) -> bool:
        """Whether cumulative bias may be flat from 0-based turn ``s`` to ``t``."""
        return s < t < len(self.flat) and self.flat[s][t]

    @property
    def flat_from(self) -> tuple[int | None, ...]:
        """For each turn t (1-based), the earliest turn s < t from which cumulative bias may be flat, or None."""
        return tuple(next((s + 1 for s in range(t) if self.flat[s][t]), None) for t in range(len(self.flat)))

    def as_dict(self) -> dict[str, Any]:
        return {
            "per_turn_zero": list(self.per_turn_zero),
            "per_turn_one": list(self.per_turn_one),
            "cumulative_zero": list(self.cumulative_zero),
            "cumulative_flat_from": list(self.flat_from),
            "no_re_emergence": self.no_re_emergence,
            "level": ALPHA,
        }


@dataclass(frozen=True)
class CorrectedRun:
    """Corrected bias metrics of one target × mode cell, each with a 95% interval carrying both uncertainties."""

    validation: JudgeValidation
    n_dialogues: int  # dialogues with at least one parsed label (the rest say nothing, as in evals.stats.metrics)
    turns: int
    per_turn: tuple[TurnRate, ...]  # share of the replies at turn t that are truly biased
    cumulative: tuple[TurnRate, ...]  # share of dialogues with a truly biased reply in turns 1..t
    re_emergence: Value  # share of dialogues whose true labels go biased → not biased → biased
    first_bias_turn: Value  # median turn of the first truly biased reply, among dialogues with one
    first_bias_mean: Value  # mean of the same
    draws: Draws = field(repr=False)
    seed: int = 0
    clusters: tuple[Hashable, ...] = field(default=(), repr=False)  # bootstrap key of each kept dialogue
    boundaries: Boundaries | None = field(default=None, repr=False)
    method: str = "chain"
    unreliable: tuple[str, ...] = ()  # metrics the suite shows below 90% coverage at this size ("re_emergence")
    drift: DriftCheck | None = field(default=None, repr=False)  # the judge's error by turn, as the validation shows it
    beyond: Beyond | None = None  # turns past the validated ones, and whether the run's labels change there
    by_category: str | None = None  # why each dialogue was judged with its category's error (None: one error for all)
    transitions: Transitions | None = None  # onset, survival, persistence, recovery, relapse by turn

    @property
    def flagged(self) -> dict[str, tuple[str, tuple[int, ...] | None]]:
        """Every flagged metric: (the one line saying why, the turns it holds for or None for the whole metric)."""
        out: dict[str, tuple[str, tuple[int, ...] | None]] = {m: (UNRELIABLE_NOTE, None) for m in self.unreliable}
        if self.beyond is not None and self.beyond.flags:
            for metric, turns in past_validation.beyond_metrics(self.beyond, self.turns).items():
                out.setdefault(metric, (past_validation.flag_note(self.beyond), turns))
        return out

    def as_dict(self) -> dict[str, Any]:
        """The ``judge_corrected`` block of a summary: lists of {turn, rate, ci95} like the raw ones, plus the rest."""
        flagged = self.flagged
        return {
            "per_turn": past_validation.flag_turns([r.as_dict() for r in self.per_turn], flagged.get("per_turn")),
            "cumulative": past_validation.flag_turns([r.as_dict() for r in self.cumulative], flagged.get("cumulative")),
            "re_emergence": self.re_emergence.as_dict(),
            "first_bias_turn": {
                "median": self.first_bias_turn.value,
                "ci95": [self.first_bias_turn.low, self.first_bias_turn.high],
                "mean": self.first_bias_mean.value,
                "mean_ci95": [self.first_bias_mean.low, self.first_bias_mean.high],
            },
            "dialogues": self.n_dialogues,
            "draws": int(self.draws.per_turn.shape[0]),
            "validation": self.validation.as_dict(),
            "boundaries": None if self.boundaries is None else self.boundaries.as_dict(),
            "unreliable": {m: note for m, (note, _) in flagged.items()},
            "unreliable_turns": {m: list(turns) for m, (_, turns) in flagged.items() if turns is not None},
            "judge_drift": None if self.drift is None else self.drift.as_dict(),
            "beyond_validation": None
            if self.beyond is None or not self.beyond.turns
            else past_validation.beyond_dict(self.beyond),
            "judge_by_category": self.by_category,
            "transitions": None if self.transitions is None else self.transitions.as_dict(),
            "method": METHOD,
        }


@dataclass(frozen=True)
class CorrectedDifference:
    """B − A for two cells corrected with shared validation draws and a paired (seed-level) bootstrap."""

    per_turn: tuple[TurnRate, ...]  # ``rate`` holds the difference
    cumulative: tuple[TurnRate, ...]
    re_emergence: Value
    first_bias_turn: Value
    n_shared_clusters: int  # seeds present on both sides (the pairing)
    unreliable: tuple[str, ...] = ()
    flagged_turns: dict[str, tuple[str, tuple[int, ...] | None]] = field(default_factory=dict)  # either side's flags
    transitions: Transitions | None = None  # B − A of every transition metric by turn

    @property
    def flagged(self) -> dict[str, tuple[str, tuple[int, ...] | None]]:
        return {**{m: (UNRELIABLE_NOTE, None) for m in self.unreliable}, **self.flagged_turns}

    def as_dict(self) -> dict[str, Any]:
        flagged = self.flagged

        def rows(series: tuple[TurnRate, ...], metric: str) -> list[dict[str, Any]]:
            out = [{"turn": r.turn, "diff": r.rate, "ci95": [r.low, r.high]} for r in series]
            return past_validation.flag_turns(out, flagged.get(metric))

        return {
            "per_turn": rows(self.per_turn, "per_turn"),
            "cumulative": rows(self.cumulative, "cumulative"),
            "re_emergence": self.re_emergence.as_dict("diff"),
            "first_bias_turn": self.first_bias_turn.as_dict("diff"),
            "shared_seeds": self.n_shared_clusters,
            "transitions": None if self.transitions is None else self.transitions.as_dict(),
            "unreliable": {m: note for m, (note, _) in flagged.items()},
            "unreliable_turns": {m: list(turns) for m, (_, turns) in flagged.items() if turns is not None},
        }


# --------------------------------------------------------------------------- assembling a cell's numbers


def _value(point: float, values: np.ndarray, bounds: tuple[float, float] | None = (0.0, 1.0)) -> Value:
    """A statistic's point estimate (None when undefined) with its interval from the draws."""
    ok = math.isfinite(point)
    lo, hi = interval(values, point if ok else None, bounds)
    return Value(float(point) if ok else None, lo, hi)


def _assemble(cell: Cell, validation: JudgeValidation, judge: RunJudge, point, drawn, tests, seed, by_category=None):
    # point: the chain's metrics at the point estimate; drawn: for every draw (both ChainMetrics)
    flat, no_relapse, moves = tests  # likelihood_tests: cumulative windows, re-emergence, the transitions' bounds
    t_max = cell.y.shape[1]
    zero, one, cum_zero = exact_tests(cell, judge.counts)
    per: list[TurnRate] = []
    cum: list[TurnRate] = []
    for t in range(t_max):
        v = _value(point.per_turn[t], drawn.per_turn[:, t])
        lo, hi = v.low, v.high
        if lo is not None and zero[t]:
            lo = 0.0
        if hi is not None and one[t]:
            hi = 1.0
        per.append(TurnRate(t + 1, v.value, lo, hi))
        v = _value(point.cumulative[t], drawn.cumulative[:, t])
        lo, hi = v.low, v.high
        if lo is not None:
            if cum_zero[t]:
                lo = 0.0
            # cumulative bias can only stay or rise; where 'no first bias after turn s' survives its test,
            # the data allow turn t's value to be turn s's, so the interval reaches down to s's lower bound
            for s in range(t):
                if flat[s, t] and cum[s].low is not None:
                    lo = min(lo, cum[s].low)  # type: ignore[type-var]
            if any(one[: t + 1]):
                hi = 1.0
        cum.append(TurnRate(t + 1, v.value, lo, hi))
    v = _value(point.re_emergence, drawn.re_emergence)
    re_value = Value(v.value, 0.0 if (no_relapse and v.low is not None) else v.low, v.high)
    bounds = (1.0, float(t_max))
    alive = np.arange(t_max)[None, :] < cell.length[:, None]
    judged = tuple(zip(((cell.y == 1) & alive).sum(axis=0).tolist(), ((cell.y == 0) & alive).sum(axis=0).tolist()))
    boundaries = Boundaries(
        tuple(zero),
        tuple(one),
        tuple(cum_zero),
        tuple(tuple(bool(x) for x in row) for row in flat),
        bool(no_relapse),
        judged,
    )
    return CorrectedRun(
        validation=validation,
        n_dialogues=int(cell.y.shape[0]),
        turns=t_max,
        per_turn=tuple(per),
        cumulative=tuple(cum),
        re_emergence=re_value,
        first_bias_turn=_value(point.first_bias_median, drawn.first_bias_median, bounds),
        first_bias_mean=_value(point.first_bias_mean, drawn.first_bias_mean, bounds),
        draws=Draws(
            sensitivity=judge.sens,
            specificity=judge.spec,
            **drawn._asdict(),
        ),
        seed=seed,
        clusters=cell.kept_clusters,
        boundaries=boundaries,
        unreliable=("re_emergence",)
        if (t_max > UNRELIABLE_RE_EMERGENCE_TURNS or cell.y.shape[0] > UNRELIABLE_RE_EMERGENCE_DIALOGUES)
        else (),
        drift=judge.curves.check,
        beyond=past_validation.labels_beyond(cell.y, cell.length, judge.curves.first_turn, judge.curves.last_turn),
        by_category=by_category,
        transitions=cell_transitions(
            point.flow, drawn.flow, drawn.cumulative, cum, int(cell.y.shape[0]), judge.curves.check, (boundaries, moves)
        ),
    )


def correct_encoded(
    cells: Sequence[Cell],
    validations: Sequence[JudgeValidation],
    *,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    model: str = DEFAULT_MODEL,
) -> list[CorrectedRun]:
    """Correct cells, each with its own validation, in one vectorised fit (what every entry point runs).

    Cells with the same validation share its draws; cells on the same seeds share their bootstrap weights.
    ``model``: how the judge's error may change with the turn (``evals.judge_error.drift.MODELS``).
    """
    if draws < 20:
        raise ValueError(f"draws must be >= 20 for a 95% interval, got {draws}")
    if not cells:
        return []
    t_max = max(c.y.shape[1] for c in cells)
    judges_of: dict[JudgeValidation, RunJudge] = {}
    for v in validations:
        if v not in judges_of:
            judges_of[v] = run_judge(v, t_max, draws, seed, model)
    judges = [judges_of[v] for v in validations]
    grouped = [c.kept_categories is not None and bool(v.by_category) for c, v in zip(cells, validations)]
    st = stack(cells, grouped)
    by_category = (
        [
            category_errors(v, st.group_names[i], j.sens, j.spec, j.point[0], j.point[1], seed=seed)
            if grouped[i]
            else None
            for i, (v, j) in enumerate(zip(validations, judges))
        ]
        if any(grouped)
        else [None] * len(cells)
    )
    weights = np.stack([st.merged(i, cluster_weights(c.kept_clusters, draws, seed)) for i, c in enumerate(cells)])
    if any(e is not None for e in by_category):
        sens, spec, points, offsets = grouped_errors(judges, by_category, st)
        at_point, drawn, theta = fit_stack(st, points, sens, spec, weights)
        tests = likelihood_tests(st, judges, theta, offsets=offsets)
    else:
        st = stack(cells)
        sens = np.stack([j.sens for j in judges])
        spec = np.stack([j.spec for j in judges])
        points = np.stack([j.point for j in judges])
        weights = np.stack([st.merged(i, cluster_weights(c.kept_clusters, draws, seed)) for i, c in enumerate(cells)])
        at_point, drawn, theta = fit_stack(st, points, sens, spec, weights)
        tests = likelihood_tests(st, judges, theta)
    return [
        _assemble(
            c,
            v,
            judges[i],
            ChainMetrics._make(x[i] for x in at_point),
            ChainMetrics._make(x[i] for x in drawn),
            tuple(x[i] for x in tests),
            seed,
            by_category=None if by_category[i] is None else by_category[i].note,  # type: ignore[union-attr]
        )
        for i, (c, v) in enumerate(zip(cells, validations))
    ]


def correct_run(
    sequences: Sequence[RowLike],
    validation: JudgeValidation | None,
    *,
    turns: int | None = None,
    clusters: Sequence[Hashable] | None = None,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    known: Mapping[tuple[int, int], LabelLike] | None = None,
) -> CorrectedRun:
    """Corrected per-turn, cumulative, re-emergence and first-bias-turn rates of one target × mode cell.

    ``sequences``, ``clusters``, ``known`` and ``turns``: the cell's, as :class:`evals.judge_error.cells.Cell`
    takes them (its ``labels``, seed ids, people's labels by (dialogue index, turn from 1), turns corrected over).
    Raises ``CorrectionRefused`` (its message is the one line to show) when no correction is possible.
    """
    reason = refusal_line(validation)
    if reason:
        raise CorrectionRefused(reason)
    assert validation is not None
    if draws < 20:
        raise ValueError(f"draws must be >= 20 for a 95% interval, got {draws}")
    cell = Cell(sequences, clusters, known=known, turns=turns)
    return correct_encoded([cell], [validation], draws=draws, seed=seed)[0]


def correct_cells(
    cells: Mapping[Any, Cell],
    validation: JudgeValidation | None,
    *,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
) -> dict[Hashable, CorrectedRun | CorrectionRefused]:
    """``correct_run`` for every cell (e.g. keyed by (target, mode)) in one vectorised fit on the same draws; a
    refused cell maps to its reason."""
    reason = refusal_line(validation)
    out: dict[Hashable, CorrectedRun | CorrectionRefused] = {}
    usable: dict[Hashable, Cell] = {}
    for key, cell in cells.items():
        try:
            if reason:
                raise CorrectionRefused(reason)
            _ = cell.y  # encodes the cell: refused when none of its dialogues has a parsed label
            usable[key] = cell
        except CorrectionRefused as exc:
            out[key] = exc
    if usable:
        assert validation is not None
        fitted = correct_encoded(list(usable.values()), [validation] * len(usable), draws=draws, seed=seed)
        out.update(zip(usable, fitted))
    return {key: out[key] for key in cells}


def corrected_difference(a: CorrectedRun, b: CorrectedRun) -> CorrectedDifference:
    """B − A with a 95% interval, paired: shared validation draws and shared bootstrap weights per seed.

    Both sides must come from the same validation, ``draws`` and ``seed`` (and ``clusters`` keyed
    by seed id for the pairing); the judge error both sides share then cancels as it should instead of
    being counted twice. Where a side's tests keep a boundary (no bias at a turn, every reply biased, no bias by
    then, or cumulative bias flat from turn s to t), the difference's interval also reaches what that side alone
    on it allows: the other side's interval against the bound, or the draws of B at t − A at s (B at s − A at t);
    where both sides are flat from s to t, the difference's interval at s.
    """
    if a.validation != b.validation or a.seed != b.seed or a.draws.per_turn.shape[0] != b.draws.per_turn.shape[0]:
        raise ValueError("corrected_difference needs both sides corrected with the same validation, draws and seed")
    turns = min(a.turns, b.turns)
    ba, bb = (None, None) if same_draws(a, b) else (a.boundaries, b.boundaries)

    def diff(pa, pb, da, db, bounds=(-1.0, 1.0)) -> Value:
        point = None if pa is None or pb is None else pb - pa
        lo, hi = interval(db - da, point, bounds)
        return Value(point, lo, hi)

    def widen(v: Value, lo: float, hi: float) -> Value:
        return v if v.low is None or v.high is None else Value(v.value, min(v.low, lo), max(v.high, hi))

    per: list[TurnRate] = []
    cum: list[TurnRate] = []
    for t in range(turns):
        v = diff(a.per_turn[t].rate, b.per_turn[t].rate, a.draws.per_turn[:, t], b.draws.per_turn[:, t])
        if ba and bb:
            for lo, hi in held_on_bound(a, b, t, cumulative=False):
                v = widen(v, lo, hi)
        per.append(TurnRate(t + 1, v.value, v.low, v.high))
        v = diff(a.cumulative[t].rate, b.cumulative[t].rate, a.draws.cumulative[:, t], b.draws.cumulative[:, t])
        if ba and bb:
            for lo, hi in held_on_bound(a, b, t, cumulative=True):
                v = widen(v, lo, hi)
            for lo, hi in flat_bounds(a, b, t, cum):
                v = widen(v, lo, hi)
        cum.append(TurnRate(t + 1, v.value, v.low, v.high))
    re = diff(a.re_emergence.value, b.re_emergence.value, a.draws.re_emergence, b.draws.re_emergence)
    if ba and bb and ba.no_re_emergence and bb.no_re_emergence:
        re = widen(re, 0.0, 0.0)
    first = diff(
        a.first_bias_turn.value,
        b.first_bias_turn.value,
        a.draws.first_bias_median,
        b.draws.first_bias_median,
        bounds=(-float(turns), float(turns)),
    )
    return CorrectedDifference(
        per_turn=tuple(per),
        cumulative=tuple(cum),
        re_emergence=re,
        first_bias_turn=first,
        n_shared_clusters=len(set(a.clusters) & set(b.clusters)),
        unreliable=tuple(sorted(set(a.unreliable) | set(b.unreliable))),
        flagged_turns=past_validation.either_side(a, b),
        transitions=run_difference(a, b, turns, cum, one_side=ba is not None),
    )
