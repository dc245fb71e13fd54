"""Which labels buy the narrowest honest intervals: the active design against random double sampling, by simulation.

A comparison cell is a shape of the simulation suite, a judge, a size (dialogues × turns) and a budget
of human labels. Each simulated data set is labelled twice over, at the same budget: by a simple random
sample of its judged replies (validated by the raw counts, as ``export --design random`` is) and by the
active design (``evals.judge_error.active_design``: stratified draw, design-weighted validation); people's
labels are the chosen replies' true labels, and they enter the chain as known states in both. Both are
corrected through ``correct_encoded`` on the same draws, and each interval's width and whether it
contains the shape's exact population value are tallied per design. Two more arms: what the tool draws
(``evals.judge_error.design_choice``: the active design, or the same random draw where the tool's own prediction
from the judge labels falls back to it) and the floor (every reply labelled, its true label known: the
width labels cannot remove, from the dialogues' own sampling).

``compare_splits`` does the same for one budget over a three-target grid and the paired difference of two of
its targets: drawn for the difference (``export --compare``) against an even split over the grid's cells and
over the two compared cells.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from benchmarks.simulation.suite import JUDGES, PAIRS, simulate, simulate_pair, truth_of
from evals.judge_error.active_design import design_validation, draw_active, strata_of
from evals.judge_error.cells import Cell
from evals.judge_error.correction import CorrectedRun, correct_encoded, corrected_difference
from evals.judge_error.design_choice import choose_design
from evals.judge_error.difference_design import draw_for_difference
from evals.judge_error.reply_value import valued_strata
from evals.judge_error.validation import JudgeValidation
from evals.metric_registry import RATE_METRICS

__all__ = ["ARMS", "DESIGNS", "SPLITS", "DesignComparison", "SplitComparison", "compare_designs", "compare_splits"]

DESIGNS = ("random", "active")
# the two designs, what the tool draws (active, or the random draw where it falls back), every reply labelled
ARMS = (*DESIGNS, "tool", "floor")
_TOL = 1e-9


def _setting(comparison: DesignComparison | SplitComparison) -> dict[str, Any]:
    """A comparison's setting and counts as plain data: its fields but the per-set widths and hits."""
    return {f.name: getattr(comparison, f.name) for f in fields(comparison) if f.name not in ("widths", "hits")}


@dataclass
class DesignComparison:
    """Widths and coverage of each metric under each design, over the data sets both could correct."""

    shape: str
    judge: str
    dialogues: int
    turns: int
    budget: int
    sets: int = 0
    fell_back: int = 0  # compared data sets where the tool drew at random
    refused: dict[str, int] = field(default_factory=lambda: {d: 0 for d in DESIGNS})
    widths: dict[str, dict[str, list[list[float]]]] = field(
        default_factory=lambda: {d: {m: [] for m in RATE_METRICS} for d in ARMS}
    )
    hits: dict[str, dict[str, list[list[bool]]]] = field(
        default_factory=lambda: {d: {m: [] for m in RATE_METRICS} for d in ARMS}
    )

    @property
    def compared(self) -> int:
        return len(self.widths["random"]["cumulative"])

    def mean_width(self, design: str, metric: str) -> float:
        """Mean width over data sets and turns (nan without a compared set)."""
        rows = self.widths[design][metric]
        return float(np.mean(rows)) if rows else float("nan")

    def ratio(self, metric: str, arm: str = "active") -> float:
        """Mean width under ``arm`` (the active design, the tool's choice, the floor) ÷ under random double sampling."""
        return self.mean_width(arm, metric) / self.mean_width("random", metric)

    def ratio_spread(self, metric: str, arm: str = "active") -> float:
        """Standard error of the ratio over data sets (paired: each set's widths under both)."""
        if self.compared < 2:
            return float("nan")
        a = np.mean(self.widths[arm][metric], axis=1)
        r = np.mean(self.widths["random"][metric], axis=1)
        ratio = a.mean() / r.mean()
        resid = (a - ratio * r) / r.mean()  # delta method for a ratio of paired means
        return float(resid.std(ddof=1) / np.sqrt(len(a)))

    def coverage(self, design: str, metric: str) -> float:
        """Lowest coverage over turns (the metric's only column for re-emergence)."""
        rows = self.hits[design][metric]
        return float(np.min(np.mean(rows, axis=0))) if rows else float("nan")

    def as_dict(self) -> dict:
        return {
            **_setting(self),
            "compared": self.compared,
            "metrics": {
                m: {
                    "ratio": self.ratio(m),
                    "ratio_se": self.ratio_spread(m),
                    "tool_ratio": self.ratio(m, "tool"),
                    "tool_ratio_se": self.ratio_spread(m, "tool"),
                    "floor_ratio": self.ratio(m, "floor"),
                    **{d: {"width": self.mean_width(d, m), "coverage": self.coverage(d, m)} for d in ARMS},
                }
                for m in RATE_METRICS
            },
        }


def random_labels(truth: np.ndarray, labels: np.ndarray, budget: int, rng: np.random.Generator):
    """A simple random sample of the judged replies: (known labels, validation from the raw counts)."""
    judged = np.flatnonzero((labels == 0) | (labels == 1))
    chosen = rng.choice(judged, min(budget, len(judged)), replace=False)
    i, t = np.divmod(chosen, labels.shape[1])
    tr, jd = truth[i, t], labels[i, t] == 1
    # as annotate validate records them: each label at its turn
    validation = JudgeValidation.from_pairs(
        "annotate:random", [(int(a), int(b), int(c) + 1) for a, b, c in zip(tr, jd, t)]
    )
    return {(int(a), int(b) + 1): int(c) for a, b, c in zip(i, t, tr)}, validation


def active_labels(truth: np.ndarray, labels: np.ndarray, budget: int, seed: int):
    """The active design's picks: (known labels, design-weighted validation)."""
    cells = {"cell": labels.tolist()}
    strata, spreads = valued_strata(strata_of(cells), cells, None, budget)
    picks = draw_active(strata, budget, seed=seed, spreads=spreads)
    known = {(p.dialogue, p.turn): int(truth[p.dialogue, p.turn - 1]) for p in picks}
    return known, design_validation("annotate:active", cells, {"cell": known})


def _intervals(r: CorrectedRun) -> dict[str, list[tuple[float | None, float | None]]]:
    return {
        "per_turn": [(x.low, x.high) for x in r.per_turn],
        "cumulative": [(x.low, x.high) for x in r.cumulative],
        "re_emergence": [(r.re_emergence.low, r.re_emergence.high)],
    }


def compare_designs(
    shape: str,
    *,
    judge: str = "fair",
    dialogues: int,
    turns: int,
    budget: int,
    sets: int,
    draws: int = 100,
    seed: int = 0,
    batch: int = 10,
) -> DesignComparison:
    """Simulate ``sets`` data sets and correct each under both designs at ``budget`` labels; tally widths and
    coverage."""
    rng = np.random.default_rng([seed, dialogues, turns, budget, *shape.encode()])
    truth = truth_of(shape, turns)
    truths = {
        "per_turn": list(truth.per_turn),
        "cumulative": list(truth.cumulative),
        "re_emergence": [truth.re_emergence],
    }
    out = DesignComparison(shape, judge, dialogues, turns, budget)
    for start in range(0, sets, batch):
        cells, validations, tool = [], [], []
        for k in range(start, min(sets, start + batch)):
            data = simulate(shape, JUDGES[judge], dialogues=dialogues, turns=turns, validation_items=0, rng=rng)
            out.sets += 1
            labels = data.labels.tolist()
            pair = [
                random_labels(data.truth, data.labels, budget, rng),
                active_labels(data.truth, data.labels, budget, seed + k),
            ]
            refused = [v.refusal() is not None for _, v in pair]
            for design, no in zip(DESIGNS, refused):
                out.refused[design] += no
            if any(refused):
                continue
            # the tool's own decision sees the judge labels only (one batch, no label stored yet)
            tool.append(choose_design({"cell": Cell(labels, turns=turns)}, budget, seed=seed + k).design)
            every = {(i, t + 1): int(data.truth[i, t]) for i in range(dialogues) for t in range(turns)}
            floor = JudgeValidation.from_pairs("every reply", [(v, labels[i][t - 1], t) for (i, t), v in every.items()])
            for known, validation in (*pair, (every, floor)):
                cells.append(Cell(labels, known=known, turns=turns))
                validations.append(validation)
        if not cells:
            continue
        with np.errstate(all="ignore"):
            results = correct_encoded(cells, validations, draws=draws, seed=int(rng.integers(1 << 31)))
        for choice, trio in zip(tool, zip(results[0::3], results[1::3], results[2::3])):
            out.fell_back += choice != "active"
            arms = {"random": trio[0], "active": trio[1], "tool": trio[1] if choice == "active" else trio[0]}
            for design, r in (*arms.items(), ("floor", trio[2])):
                for metric, values in _intervals(r).items():
                    widths, hits = [], []
                    for (low, high), value in zip(values, truths[metric]):
                        if low is None or high is None:
                            widths.append(1.0)
                            hits.append(False)
                            continue
                        widths.append(high - low)
                        hits.append(low - _TOL <= value <= high + _TOL)
                    out.widths[design][metric].append(widths)
                    out.hits[design][metric].append(hits)
    return out


# --------------------------------------------------------------------------- one budget over a grid, for a paired
# difference

SPLITS = ("even", "even_pair", "difference")  # over all three cells, evenly over A and B, drawn for the difference


@dataclass
class SplitComparison:
    """The corrected cumulative difference B − A of a three-cell grid (A, B paired on seeds, C another target) at one
    budget: split evenly over the three cells or over A and B (each cell's share by the active design within it), or
    drawn from A and B by ``draw_for_difference``; widths by turn and whether each interval holds the true
    difference."""

    pair: str
    judge: str
    dialogues: int
    turns: int
    budget: int
    sets: int = 0
    refused: int = 0
    widths: dict[str, list[list[float]]] = field(default_factory=lambda: {s: [] for s in SPLITS})
    hits: dict[str, list[list[bool]]] = field(default_factory=lambda: {s: [] for s in SPLITS})

    def mean_width(self, split: str) -> float:
        return float(np.mean(self.widths[split])) if self.widths[split] else float("nan")

    def ratio(self, against: str = "even") -> float:
        """Mean width of the difference's interval drawn for the difference ÷ under the ``against`` split."""
        return self.mean_width("difference") / self.mean_width(against)

    def coverage(self, split: str) -> float:
        """Lowest coverage over turns."""
        return float(np.min(np.mean(self.hits[split], axis=0))) if self.hits[split] else float("nan")

    def as_dict(self) -> dict:
        return {
            **_setting(self),
            "ratio": self.ratio(),
            "ratio_even_pair": self.ratio("even_pair"),
            **{s: {"width": self.mean_width(s), "coverage": self.coverage(s)} for s in SPLITS},
        }


def _even_known(
    cells: dict[str, list], truths: dict[str, np.ndarray], budget: int, seed: int, names: tuple[str, ...]
) -> dict[str, dict]:
    """Each named cell's share of the budget (as even as whole labels allow), drawn by the active design within the
    cell."""
    known = {}
    for k, name in enumerate(names):
        share = budget // len(names) + (k < budget % len(names))
        own = {name: cells[name]}
        strata, spreads = valued_strata(strata_of(own), own, None, share)
        picks = draw_active(strata, share, seed=seed + k, spreads=spreads)
        known[name] = {(p.dialogue, p.turn): int(truths[name][p.dialogue, p.turn - 1]) for p in picks}
    return known


def compare_splits(
    pair: str = "persistent-vs-mixture",
    *,
    third: str = "persistent",
    judge: str = "fair",
    dialogues: int,
    turns: int,
    budget: int,
    sets: int,
    draws: int = 100,
    seed: int = 0,
) -> SplitComparison:
    """Simulate ``sets`` grids and correct the difference B − A under both splits of ``budget``; tally widths and
    coverage."""
    rng = np.random.default_rng([seed, dialogues, turns, budget, *pair.encode()])
    a_shape, b_shape = PAIRS[pair]
    truth = np.array(truth_of(b_shape, turns).cumulative) - np.array(truth_of(a_shape, turns).cumulative)
    out = SplitComparison(pair, judge, dialogues, turns, budget)
    for k in range(sets):
        a, b = simulate_pair(pair, JUDGES[judge], dialogues=dialogues, turns=turns, validation_items=0, rng=rng)
        c = simulate(third, JUDGES[judge], dialogues=dialogues, turns=turns, validation_items=0, rng=rng)
        cells = {"A": a.labels.tolist(), "B": b.labels.tolist(), "C": c.labels.tolist()}
        truths = {"A": a.truth, "B": b.truth, "C": c.truth}
        out.sets += 1
        picks = draw_for_difference(strata_of(cells), budget, ("A", "B"), seed=seed + k, cells=cells)
        chosen: dict[str, dict] = {}
        for p in picks:
            cell = str(p.cell)  # the strata of cells "A", "B", "C"
            chosen.setdefault(cell, {})[(p.dialogue, p.turn)] = int(truths[cell][p.dialogue, p.turn - 1])
        splits = {
            "even": _even_known(cells, truths, budget, seed + k, ("A", "B", "C")),
            "even_pair": _even_known(cells, truths, budget, seed + k, ("A", "B")),
            "difference": chosen,
        }
        validations = {s: design_validation(f"annotate:{s}", cells, known) for s, known in splits.items()}
        if any(v.refusal() is not None for v in validations.values()):
            out.refused += 1
            continue
        encoded, used = [], []
        for s in SPLITS:
            for name in ("A", "B"):
                encoded.append(Cell(cells[name], list(range(dialogues)), known=splits[s].get(name), turns=turns))
                used.append(validations[s])
        with np.errstate(all="ignore"):
            runs = correct_encoded(encoded, used, draws=draws, seed=int(rng.integers(1 << 31)))
        for s, (ra, rb) in zip(SPLITS, zip(runs[0::2], runs[1::2])):
            diff = corrected_difference(ra, rb)
            widths, hits = [], []
            for r, value in zip(diff.cumulative, truth):
                if r.low is None or r.high is None:
                    widths.append(2.0)
                    hits.append(False)
                else:
                    widths.append(r.high - r.low)
                    hits.append(r.low - _TOL <= value <= r.high + _TOL)
            out.widths[s].append(widths)
            out.hits[s].append(hits)
    return out
