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

import numpy as np

from evals.judge_error.cells import encode_cell
from evals.judge_error.correction import DEFAULT_DRAWS, CorrectedRun, correct_encoded, corrected_difference
from evals.judge_error.deconvolution import deconvolved_metrics
from evals.judge_error.draws import cluster_weights
from evals.judge_error.intervals import interval
from evals.judge_error.suite import JUDGES, PAIRS, SHAPES, Truth, simulate, simulate_pair, truth_of

__all__ = ["SUITE", "CellSpec", "Coverage", "measure", "suite"]

METRICS = ("per_turn", "cumulative", "re_emergence", "first_bias")
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

    def label(self) -> str:
        return f"{self.truth} · {self.judge} · T={self.turns} N={self.dialogues} V={self.validation}"


def _grid(shapes, judges, *, turns, dialogues, validation, sets, paired=False):
    return tuple((CellSpec(s, j, turns, dialogues, validation, paired), sets) for s in shapes for j in judges)


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


def suite(quick: bool = False) -> tuple[tuple[CellSpec, int], ...]:
    """The declared suite, or its quick subset (a fifth of the sets of the smallest size's cells)."""
    if not quick:
        return SUITE
    return tuple(
        (spec, sets // 5) for spec, sets in SUITE if spec.turns == 5 and spec.dialogues == 60 and spec.validation == 100
    )


@dataclass
class Tally:
    """Hits and widths by turn (one column for a metric without turns) over the data sets seen."""

    hits: np.ndarray
    width: np.ndarray
    seen: np.ndarray

    @classmethod
    def of(cls, columns: int) -> Tally:
        return cls(np.zeros(columns), np.zeros(columns), np.zeros(columns))

    def add(self, column: int, low: float | None, high: float | None, truth: float | None) -> None:
        if truth is None:
            return
        self.seen[column] += 1
        if low is None or high is None:
            self.width[column] += 1.0
            return
        self.hits[column] += low - _TOL <= truth <= high + _TOL
        self.width[column] += high - low

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
            "sets": self.sets,
            "refused": self.refused,
            "metrics": {},
        }
        for (method, metric), t in self.tallies.items():
            worst, turn = self.worst(method, metric)
            out["metrics"][f"{method}.{metric}"] = {  # type: ignore[index]
                "coverage": t.coverage().tolist(),
                "width": t.mean_width().tolist(),
                "worst": worst,
                "worst_turn": turn,
            }
        return out


def _truths(truth: Truth) -> dict[str, list[float | None]]:
    return {
        "per_turn": list(truth.per_turn),
        "cumulative": list(truth.cumulative),
        "re_emergence": [truth.re_emergence],
        "first_bias": [truth.first_bias_median],
    }


def _chain_values(r: CorrectedRun) -> dict[str, list[tuple[float | None, float | None]]]:
    return {
        "per_turn": [(x.low, x.high) for x in r.per_turn],
        "cumulative": [(x.low, x.high) for x in r.cumulative],
        "re_emergence": [(r.re_emergence.low, r.re_emergence.high)],
        "first_bias": [(r.first_bias_turn.low, r.first_bias_turn.high)],
    }


def _peer_values(r: CorrectedRun, cell) -> dict[str, dict[str, list[tuple[float | None, float | None]]]]:
    """The comparison method and the peers' per-turn Rogan–Gladen interval, on the result's own draws."""
    k = len(r.draws.sensitivity)
    weights = cluster_weights(cell.clusters, k, r.seed)
    point = deconvolved_metrics(
        cell, np.array(r.validation.point()[:1]), np.array(r.validation.point()[1:]), np.ones((1, len(cell.clusters)))
    )
    drawn = deconvolved_metrics(cell, r.draws.sensitivity, r.draws.specificity, weights)
    t_max = cell.y.shape[1]
    dec = {
        "per_turn": [interval(drawn[0][:, t], point[0][0, t]) for t in range(t_max)],
        "cumulative": [interval(drawn[1][:, t], point[1][0, t]) for t in range(t_max)],
        "re_emergence": [interval(drawn[2], point[2][0])],
        "first_bias": [interval(drawn[3], point[3][0], (1.0, float(t_max)))],
    }
    rg = {"per_turn": [interval(drawn[0][:, t]) for t in range(t_max)]}
    return {"deconvolution": dec, "rogan_gladen": rg}


def _record(cov: Coverage, method: str, values, truths) -> None:
    for metric, pairs in values.items():
        tally = cov.tally(method, metric, len(pairs))
        for column, (low, high) in enumerate(pairs):
            tally.add(column, low, high, truths[metric][column])


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
        "first_bias": [first],
    }


def _batches(n: int) -> Iterator[range]:
    for start in range(0, n, _BATCH):
        yield range(start, min(n, start + _BATCH))


def measure(spec: CellSpec, sets: int, *, draws: int = DEFAULT_DRAWS, seed: int = 0, peers: bool = True) -> Coverage:
    """Simulate ``sets`` data sets of a suite cell, correct each, and count how often each interval covers."""
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
        ]
    )
    judge = JUDGES[spec.judge]
    size = dict(dialogues=spec.dialogues, turns=spec.turns, validation_items=spec.validation)
    cov = Coverage(spec)
    clusters = [f"seed-{i}" for i in range(spec.dialogues)]
    for batch in _batches(sets):
        if spec.paired:
            data = [simulate_pair(spec.truth, judge, rng=rng, **size) for _ in batch]
        else:
            data = [(simulate(spec.truth, judge, rng=rng, **size),) for _ in batch]  # type: ignore[misc]
        kept = [d for d in data if d[0].validation.refusal() is None]
        cov.sets += len(data)
        cov.refused += len(data) - len(kept)
        if not kept:
            continue
        cells = [encode_cell(s.labels.tolist(), spec.turns, clusters) for d in kept for s in d]
        validations = [s.validation for d in kept for s in d]
        results = correct_encoded(cells, validations, draws=draws, seed=int(rng.integers(1 << 31)))
        if spec.paired:
            a, b = PAIRS[spec.truth]
            truths = _differences(truth_of(a, spec.turns), truth_of(b, spec.turns))
            for i in range(len(kept)):
                d = corrected_difference(results[2 * i], results[2 * i + 1])
                _record(
                    cov,
                    "chain",
                    {
                        "per_turn": [(x.low, x.high) for x in d.per_turn],
                        "cumulative": [(x.low, x.high) for x in d.cumulative],
                        "re_emergence": [(d.re_emergence.low, d.re_emergence.high)],
                        "first_bias": [(d.first_bias_turn.low, d.first_bias_turn.high)],
                    },
                    truths,
                )
            continue
        truths = _truths(truth_of(spec.truth, spec.turns))
        for r, cell in zip(results, cells):
            _record(cov, "chain", _chain_values(r), truths)
            if peers:
                for method, values in _peer_values(r, cell).items():
                    _record(cov, method, values, truths)
    return cov
