"""How often the corrected intervals contain the truth, on the simulation suite: the measurement behind the docs' table.

A suite cell is a truth (a shape of bias, or a pair of them for paired differences), a judge and a size
(turns, dialogues, validation items). Each of its simulated data sets is corrected exactly as a run's
cells are (``correct_encoded``: the chain, the draws, the boundary tests), by the comparison method
(``deconvolved_metrics`` on the same draws) and by the per-turn Rogan–Gladen interval of the peer
tools (the same draws, percentile interval); an interval covers when it contains the exact population
value. Sets are corrected in batches, so one vectorised fit serves many of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.simulation.deconvolution import deconvolved_metrics
from benchmarks.simulation.suite import (
    CATEGORIES,
    CATEGORY_JUDGE,
    DRIFTS,
    JUDGES,
    PAIRS,
    SHAPES,
    Truth,
    simulate,
    simulate_pair,
    transition_truths,
    truth_of,
)
from evals.judge_error.cells import Cell
from evals.judge_error.correction import (
    DEFAULT_DRAWS,
    UNRELIABLE_NOTE,
    CorrectedRun,
    correct_encoded,
    corrected_difference,
)
from evals.judge_error.draws import cluster_weights
from evals.judge_error.drift import DEFAULT_MODEL
from evals.judge_error.intervals import interval
from evals.judge_error.validation import JudgeValidation
from evals.metric_registry import DIALOGUE_METRICS, METRIC
from evals.stats.transitions import Transitions

__all__ = ["DRIFT_SUITE", "SUITE", "TRANSITION_SUITE", "CellSpec", "Coverage", "measure", "suite"]

_TOL = 1e-9
_BATCH = 20  # data sets corrected in one vectorised call


@dataclass(frozen=True)
class CellSpec:
    """One cell of the suite: a shape (or a pair, for differences), a judge and a size."""

    truth: str
    judge: str
    turns: int
    dialogues: int
    validation: int
    paired: bool = False
    kind: str = "turns"  # how the validation knows its items' turns (benchmarks.simulation.suite.VALIDATION_KINDS)
    model: str = DEFAULT_MODEL  # how the correction lets the judge's error change with the turn

    def label(self) -> str:
        kind = "" if self.kind == "turns" else f" ({self.kind})"
        return f"{self.truth} · {self.judge} · T={self.turns} N={self.dialogues} V={self.validation}{kind}"


def _grid(shapes, judges, *, turns, dialogues, validation, sets, paired=False, kinds=("turns",)):
    return tuple(
        (CellSpec(s, j, turns, dialogues, validation, paired, kind), sets)
        for s in shapes
        for j in judges
        for kind in kinds
    )


ALL_JUDGES = tuple(JUDGES)
ALL_SHAPES = tuple(SHAPES)
# The declared suite (docs/judge-error.md): every shape with every judge at the smallest size, where
# intervals are widest and boundaries matter most; each larger size with the judges that strain it.
SUITE: tuple[tuple[CellSpec, int], ...] = (
    *_grid(ALL_SHAPES, ALL_JUDGES, turns=5, dialogues=60, validation=100, sets=100),
    *_grid(ALL_SHAPES, ("weak", "lenient"), turns=10, dialogues=60, validation=100, sets=50),
    *_grid(ALL_SHAPES, ("fair", "lenient"), turns=5, dialogues=500, validation=500, sets=50),
    *_grid(ALL_SHAPES, ("weak",), turns=5, dialogues=60, validation=500, sets=100),
    *_grid(("none", "onset-late", "relapse", "mixture"), ("fair",), turns=10, dialogues=500, validation=500, sets=30),
    *_grid(tuple(PAIRS), ALL_JUDGES, turns=5, dialogues=60, validation=100, sets=100, paired=True),
    *_grid(tuple(PAIRS), ("fair",), turns=10, dialogues=60, validation=100, sets=50, paired=True),
)


# Judges whose error changes with the turn (docs/judge-error.md#a-judge-whose-error-changes-with-the-turn): every
# drifting judge and the category judge on the suite's truths, with a validation of 300 items at recorded turns, and
# the flat judge beside them; with a context-free validation (all items at turn 1), how often the correction flags
# what it cannot see, drifting against flat.
DRIFT_TRUTHS = (
    "none",
    "persistent",
    "onset-early",
    "onset-middle",
    "onset-late",
    "one-turn",
    "appear-fade",
    "relapse",
    "mixture",
)
DRIFT_JUDGES = (*(j for j in DRIFTS if j != "flat"), CATEGORY_JUDGE)
DRIFT_SUITE: tuple[tuple[CellSpec, int], ...] = (
    *_grid(DRIFT_TRUTHS, (*DRIFT_JUDGES, "flat"), turns=10, dialogues=240, validation=300, sets=40),
    *_grid(DRIFT_TRUTHS, DRIFT_JUDGES, turns=5, dialogues=120, validation=300, sets=40),
    *_grid(
        ("none", "persistent", "onset-middle", "mixture"),
        DRIFT_JUDGES,
        turns=10,
        dialogues=240,
        validation=600,
        sets=40,
    ),
    *_grid(
        DRIFT_TRUTHS, (*DRIFT_JUDGES, "flat"), turns=10, dialogues=240, validation=300, sets=40, kinds=("context-free",)
    ),
    *_grid(tuple(PAIRS), ("spec-drift", "both-drift"), turns=10, dialogues=240, validation=300, sets=40, paired=True),
)
# Onset, survival, persistence, recovery and relapse (docs/judge-error.md#bias-dynamics-by-simulation): sizes where
# their bases hold 20 expected dialogues, every shape and pair, the constant judges and two drifting ones. A number
# enters a cell's coverage only at the turns where the truth's base holds at least 20 expected dialogues.
TRANSITION_SHAPES = tuple(s for s in SHAPES if s != "none")
TRANSITION_SUITE: tuple[tuple[CellSpec, int], ...] = (
    *_grid(
        TRANSITION_SHAPES, ("fair", "weak", "lenient", "spec-drift"), turns=5, dialogues=240, validation=300, sets=40
    ),
    *_grid(TRANSITION_SHAPES, ("fair", "both-drift"), turns=10, dialogues=240, validation=300, sets=20),
    *_grid(tuple(PAIRS), ("fair", "spec-drift"), turns=5, dialogues=240, validation=300, sets=40, paired=True),
)
# The drift part of the default table: the judges and truths that strain the correction most.
DRIFT_DEFAULT = tuple(
    (spec, sets // 2)
    for spec, sets in DRIFT_SUITE
    if spec.turns == 10
    and spec.validation == 300
    and spec.judge in ("spec-drift", "both-drift", "flat")
    and spec.truth in ("none", "persistent", "onset-late", "relapse", "mixture", *PAIRS)
)


def suite(quick: bool = False, *, drift: str = "default") -> tuple[tuple[CellSpec, int], ...]:
    """The declared suite with the default part of the drift suite (``drift="all"``: all of it; ``"none"``: none),
    or its quick subset (a fifth of the sets of the smallest size's cells); ``drift="transitions"``: the transition
    suite only (quick: its five-turn cells with half the sets)."""
    if drift == "transitions":
        return tuple((s, n // 2) for s, n in TRANSITION_SUITE if s.turns == 5) if quick else TRANSITION_SUITE
    if quick:
        return tuple(
            (spec, sets // 5)
            for spec, sets in SUITE
            if spec.turns == 5 and spec.dialogues == 60 and spec.validation == 100
        )
    extra = {"default": DRIFT_DEFAULT, "all": DRIFT_SUITE, "none": (), "only": DRIFT_SUITE}[drift]
    return extra if drift == "only" else (*SUITE, *extra)


@dataclass
class Tally:
    """Hits and widths by turn (one column for a metric without turns) over the data sets seen."""

    hits: np.ndarray
    width: np.ndarray
    seen: np.ndarray

    @classmethod
    def of(cls, columns: int) -> Tally:
        return cls(np.zeros(columns), np.zeros(columns), np.zeros(columns))

    flagged: np.ndarray | None = None  # numbers flagged unreliable, by column
    kept_hits: np.ndarray | None = None  # hits among the numbers not flagged

    def add(self, column: int, low: float | None, high: float | None, truth: float | None, flagged=False) -> None:
        if truth is None:
            return
        if self.flagged is None or self.kept_hits is None:
            self.flagged, self.kept_hits = np.zeros_like(self.hits), np.zeros_like(self.hits)
        self.seen[column] += 1
        self.flagged[column] += bool(flagged)
        if low is None or high is None:
            self.width[column] += 1.0
            return
        hit = low - _TOL <= truth <= high + _TOL
        self.hits[column] += hit
        self.kept_hits[column] += hit and not flagged
        self.width[column] += high - low

    def kept_coverage(self) -> np.ndarray:
        """Coverage among the numbers shown without a flag."""
        kept = self.seen - (self.flagged if self.flagged is not None else 0)
        hits = self.kept_hits if self.kept_hits is not None else self.hits
        return np.divide(hits, kept, out=np.full_like(self.hits, np.nan), where=kept > 0)

    def flag_rate(self) -> np.ndarray:
        flagged = self.flagged if self.flagged is not None else np.zeros_like(self.hits)
        return np.divide(flagged, self.seen, out=np.full_like(self.hits, np.nan), where=self.seen > 0)

    def coverage(self) -> np.ndarray:
        return np.divide(self.hits, self.seen, out=np.full_like(self.hits, np.nan), where=self.seen > 0)

    def mean_width(self) -> np.ndarray:
        return np.divide(self.width, self.seen, out=np.full_like(self.width, np.nan), where=self.seen > 0)


@dataclass
class Coverage:
    """A suite cell's coverage by method and metric (``chain``, ``deconvolution``, ``rogan_gladen``)."""

    spec: CellSpec
    sets: int = 0
    refused: int = 0
    tallies: dict[tuple[str, str], Tally] = field(default_factory=dict)
    flagged_sets: int = 0  # data sets with any number flagged unreliable past the validated turns

    def tally(self, method: str, metric: str, columns: int) -> Tally:
        return self.tallies.setdefault((method, metric), Tally.of(columns))

    def worst(self, method: str, metric: str) -> tuple[float, int | None]:
        """Lowest coverage over turns and the turn (1-based; None for a metric without turns)."""
        t = self.tallies.get((method, metric))
        if t is None or not (t.seen > 0).any():
            return float("nan"), None
        cov = t.coverage()
        i = int(np.nanargmin(cov))
        return float(cov[i]), (i + 1 if len(cov) > 1 else None)

    def as_dict(self) -> dict:
        out = {
            "truth": self.spec.truth,
            "judge": self.spec.judge,
            "turns": self.spec.turns,
            "dialogues": self.spec.dialogues,
            "validation": self.spec.validation,
            "paired": self.spec.paired,
            "kind": self.spec.kind,
            "model": self.spec.model,
            "sets": self.sets,
            "refused": self.refused,
            "flagged_sets": self.flagged_sets,
            "metrics": {},
        }
        for (method, metric), t in self.tallies.items():
            worst, turn = self.worst(method, metric)
            out["metrics"][f"{method}.{metric}"] = {  # type: ignore[index]
                "coverage": t.coverage().tolist(),
                "width": t.mean_width().tolist(),
                "worst": worst,
                "worst_turn": turn,
                "kept_coverage": t.kept_coverage().tolist(),
                "flag_rate": t.flag_rate().tolist(),
            }
        return out


def _truths(truth: Truth) -> dict[str, list[float | None]]:
    return {
        "per_turn": list(truth.per_turn),
        "cumulative": list(truth.cumulative),
        "re_emergence": [truth.re_emergence],
        "first_bias_turn": [truth.first_bias_median],
    }


def _flags_of(flagged: dict[str, tuple[str, tuple[int, ...] | None]], turns: int) -> dict[str, list[bool]]:
    """Which numbers of each metric are flagged past the validated turns (the size-based flag aside)."""
    out = {}
    for metric in DIALOGUE_METRICS:
        columns = turns if METRIC[metric].by_turn else 1
        flag = flagged.get(metric)
        if flag is None or flag[0] == UNRELIABLE_NOTE:
            out[metric] = [False] * columns
        elif flag[1] is None:
            out[metric] = [True] * columns
        else:
            out[metric] = [t + 1 in flag[1] for t in range(columns)]
    return out


def _chain_values(r: CorrectedRun) -> dict[str, list[tuple[float | None, float | None]]]:
    return {
        "per_turn": [(x.low, x.high) for x in r.per_turn],
        "cumulative": [(x.low, x.high) for x in r.cumulative],
        "re_emergence": [(r.re_emergence.low, r.re_emergence.high)],
        "first_bias_turn": [(r.first_bias_turn.low, r.first_bias_turn.high)],
    }


def _peer_values(r: CorrectedRun, cell) -> dict[str, dict[str, list[tuple[float | None, float | None]]]]:
    """The comparison method and the peers' per-turn Rogan–Gladen interval, on the result's own draws."""
    k = len(r.draws.sensitivity)
    weights = cluster_weights(cell.kept_clusters, k, r.seed)
    assert r.drift is not None
    t_max = cell.y.shape[1]
    point = deconvolved_metrics(
        cell,
        r.drift.sensitivity.point[None, :t_max],
        r.drift.specificity.point[None, :t_max],
        np.ones((1, len(cell.kept_clusters))),
    )
    drawn = deconvolved_metrics(cell, r.draws.sensitivity, r.draws.specificity, weights)
    dec = {
        "per_turn": [interval(drawn.per_turn[:, t], point.per_turn[0, t]) for t in range(t_max)],
        "cumulative": [interval(drawn.cumulative[:, t], point.cumulative[0, t]) for t in range(t_max)],
        "re_emergence": [interval(drawn.re_emergence, point.re_emergence[0])],
        "first_bias_turn": [interval(drawn.first_bias_median, point.first_bias_median[0], (1.0, float(t_max)))],
    }
    rg = {"per_turn": [interval(drawn.per_turn[:, t]) for t in range(t_max)]}
    return {"deconvolution": dec, "rogan_gladen": rg}


def _transition_record(cov: Coverage, tr: Transitions | None, truths, turns: int) -> None:
    """Each transition metric's interval at every turn whose truth's base holds; a withheld number ("too few
    dialogues") is counted as a miss and flagged, so ``kept_coverage`` is the coverage of the numbers shown."""
    if tr is None:
        return
    for metric, (value, held) in truths.items():
        tally = cov.tally("transitions", metric, turns)
        for r in tr.series(metric):
            t = r.turn - 1
            if held[t]:
                tally.add(t, r.low, r.high, float(value[t]), flagged=r.too_few)


def _record(cov: Coverage, method: str, values, truths, flags=None) -> None:
    for metric, pairs in values.items():
        tally = cov.tally(method, metric, len(pairs))
        for column, (low, high) in enumerate(pairs):
            tally.add(column, low, high, truths[metric][column], bool(flags and flags[metric][column]))


def _differences(ta: Truth, tb: Truth) -> dict[str, list[float | None]]:
    first = (
        None
        if ta.first_bias_median is None or tb.first_bias_median is None
        else tb.first_bias_median - ta.first_bias_median
    )
    return {
        "per_turn": list(tb.per_turn - ta.per_turn),
        "cumulative": list(tb.cumulative - ta.cumulative),
        "re_emergence": [tb.re_emergence - ta.re_emergence],
        "first_bias_turn": [first],
    }


def _batches(n: int) -> Iterator[range]:
    for start in range(0, n, _BATCH):
        yield range(start, min(n, start + _BATCH))


def _pooled(v: JudgeValidation) -> JudgeValidation:
    """The same validation handed over as four counts (its items' turns not recorded)."""
    return JudgeValidation(v.source, v.tp, v.fp, v.fn, v.tn)


def measure(
    spec: CellSpec,
    sets: int,
    *,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    peers: bool = True,
    compare_pooled: bool = False,
) -> Coverage:
    """Simulate ``sets`` data sets of a suite cell, correct each, and count how often each interval covers.

    ``compare_pooled``: also correct each data set with its validation as four counts (method ``pooled``), for the
    widths of a correction whose judge error may change with the turn against one whose error is constant.
    """
    rng = np.random.default_rng(
        [
            seed,
            sets,
            spec.turns,
            spec.dialogues,
            spec.validation,
            *spec.truth.encode(),
            *spec.judge.encode(),
            spec.paired,
            *(spec.kind.encode() if spec.kind != "turns" else ()),
        ]
    )
    size: dict[str, Any] = dict(
        dialogues=spec.dialogues, turns=spec.turns, validation_items=spec.validation, validation_kind=spec.kind
    )
    cov = Coverage(spec)
    clusters = [f"seed-{i}" for i in range(spec.dialogues)]
    for batch in _batches(sets):
        if spec.paired:
            data = [simulate_pair(spec.truth, spec.judge, rng=rng, **size) for _ in batch]
        else:
            data = [(simulate(spec.truth, spec.judge, rng=rng, **size),) for _ in batch]  # type: ignore[misc]
        kept = [d for d in data if d[0].validation.refusal() is None]
        cov.sets += len(data)
        cov.refused += len(data) - len(kept)
        if not kept:
            continue
        cells = [
            Cell(
                s.labels.tolist(),
                clusters,
                categories=None if s.categories is None else [f"category {c}" for c in s.categories],
                turns=spec.turns,
            )
            for d in kept
            for s in d
        ]
        validations = [s.validation for d in kept for s in d]
        run_seed = int(rng.integers(1 << 31))
        results = correct_encoded(cells, validations, draws=draws, seed=run_seed, model=spec.model)
        pooled = (
            correct_encoded(cells, [_pooled(v) for v in validations], draws=draws, seed=run_seed)
            if compare_pooled
            else None
        )
        if spec.paired:
            _record_pairs(cov, spec, results, pooled)
            continue
        _record_cells(cov, spec, results, pooled, cells, peers)
        if spec.judge == CATEGORY_JUDGE:
            _by_category(cov, kept, spec, clusters, _truths(truth_of(spec.truth, spec.turns)), draws, run_seed)
    return cov


def _record_pairs(cov: Coverage, spec: CellSpec, results, pooled) -> None:
    """Each data set's paired difference B − A (and the pooled one's, for --widths), against the truths'."""
    a, b = PAIRS[spec.truth]
    truths = _differences(truth_of(a, spec.turns), truth_of(b, spec.turns))
    ta, tb = (transition_truths(s, spec.turns, spec.dialogues) for s in (a, b))
    moves = {m: (tb[m][0] - ta[m][0], ta[m][1] & tb[m][1]) for m in ta}
    for i in range(len(results) // 2):
        d = corrected_difference(results[2 * i], results[2 * i + 1])
        _transition_record(cov, d.transitions, moves, spec.turns)
        flags = _flags_of(d.flagged, spec.turns)
        cov.flagged_sets += any(any(f) for f in flags.values())
        _record(cov, "chain", _difference_values(d), truths, flags)
        if pooled is not None:
            _record(cov, "pooled", _difference_values(corrected_difference(pooled[2 * i], pooled[2 * i + 1])), truths)


def _record_cells(cov: Coverage, spec: CellSpec, results, pooled, cells, peers: bool) -> None:
    """Each data set's intervals (and the pooled correction's, and the comparison methods') against the truth."""
    truths = _truths(truth_of(spec.truth, spec.turns))
    moves = transition_truths(spec.truth, spec.turns, spec.dialogues)
    for i, (r, cell) in enumerate(zip(results, cells)):
        _transition_record(cov, r.transitions, moves, spec.turns)
        flags = _flags_of(r.flagged, spec.turns)
        cov.flagged_sets += any(any(f) for f in flags.values())
        _record(cov, "chain", _chain_values(r), truths, flags)
        if pooled is not None:
            _record(cov, "pooled", _chain_values(pooled[i]), truths)
        if peers:
            for method, values in _peer_values(r, cell).items():
                _record(cov, method, values, truths)


def _difference_values(d) -> dict[str, list[tuple[float | None, float | None]]]:
    return {
        "per_turn": [(x.low, x.high) for x in d.per_turn],
        "cumulative": [(x.low, x.high) for x in d.cumulative],
        "re_emergence": [(d.re_emergence.low, d.re_emergence.high)],
        "first_bias_turn": [(d.first_bias_turn.low, d.first_bias_turn.high)],
    }


def _by_category(cov: Coverage, kept, spec: CellSpec, clusters, truths, draws: int, seed: int) -> None:
    """Each category's dialogues corrected with the validation's items of that category (method ``category``) and
    with the whole validation (method ``category-pooled``): how a breakdown by category holds."""
    cells, own, whole = [], [], []
    for (data,) in kept:
        for c in range(CATEGORIES):
            rows = np.flatnonzero(data.categories == c)
            v = data.validation.category(f"category {c}")
            if len(rows) == 0 or v is None or v.refusal() is not None:
                continue
            cells.append(Cell(data.labels[rows].tolist(), [clusters[i] for i in rows], turns=spec.turns))
            own.append(v)
            whole.append(data.validation)
    if not cells:
        return
    for method, validations in (("category", own), ("category-pooled", whole)):
        for r in correct_encoded(cells, validations, draws=draws, seed=seed, model=spec.model):
            _record(cov, method, _chain_values(r), truths)
