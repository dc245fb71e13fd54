"""Labelling in rounds: how much the latest batch of people's labels narrowed each corrected interval, and the next
batch.

A run's human labels come in batches, one per ``evals.annotate export`` (its ``draw`` column names the
design and seed, stored with each label by ``validate``). :func:`labelling_rounds` corrects the run twice,
with every label and with all but the latest batch, on the same draws, and reports each target × mode
cell's corrected intervals (cumulative bias by the last turn, per-turn bias at the last turn,
re-emergence) before and after. It also draws the next batch exactly as ``export`` would (the same size
as the latest, the next seed: the active design, or a random draw where ``evals.judge_error.design_choice`` says
the active one would not narrow the intervals) and
says how wide the widest cell's cumulative interval is expected to be after it
(:func:`evals.judge_error.label_planning.width_model`, which counts the validation's narrowing only, so the
expectation errs on the wide side). The results page serves that batch for labelling. :func:`random_plan` and
:func:`active_plan` are ``evals.annotate plan``'s answers for the random and the active design, on the same width model.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checkpoints.queries import StoreQueries
from checkpoints.scores import HUMAN_BIAS, ScoreRow
from checkpoints.vocabulary import PARSED_LABELS, PRIMARY_LABELS
from evals.annotation import candidate_items
from evals.judge_error.active_design import ACTIVE
from evals.judge_error.cells import labels_of, run_cells, run_width, with_known
from evals.judge_error.correction import CorrectedRun
from evals.judge_error.design_choice import choose_for_run
from evals.judge_error.double_sampling import (
    HUMAN,
    RANDOM,
    active_sample,
    compared_pairs,
    describe_draw,
    human_labels,
    judged_items,
    known_by_cell,
    labelled_items,
    random_draw,
)
from evals.judge_error.drift import DriftCheck
from evals.judge_error.label_planning import DEFAULT_DRIFT, DriftPlan, LabelPlan, drift_labels, plan_labels, width_model
from evals.judge_error.run_blocks import PAIRS, annotation_validation, choose_validation, correct_run_cells, known_in
from evals.judge_error.validation import CorrectionRefused, JudgeValidation
from evals.metric_registry import RATE_METRICS

__all__ = [
    "Batch",
    "Narrowing",
    "NextBatch",
    "LabellingRounds",
    "RandomPlan",
    "active_plan",
    "active_plan_lines",
    "batches_of",
    "labelling_rounds",
    "random_plan",
    "random_plan_lines",
]

FIRST_BATCH = 50  # a run without people's labels yet: the first batch the results page serves


@dataclass(frozen=True)
class Batch:
    """One export's labels: its design (active or random), seed, and the (thread, turn) it labelled."""

    design: str
    seed: int
    items: frozenset[tuple[str, int]]


def batches_of(rows: Sequence[ScoreRow]) -> list[Batch]:
    """The run's human labels grouped by the export they came from (design and seed of the ``draw``), oldest first."""
    groups: dict[tuple[str, int], list[ScoreRow]] = {}
    for row in rows:
        words = (row.explanation or "").split()
        design = words[0] if words and words[0] in (ACTIVE, RANDOM) else "unknown"
        seed = next((int(w[5:]) for w in words[1:2] if w.startswith("seed=") and w[5:].lstrip("-").isdigit()), 0)
        groups.setdefault((design, seed), []).append(row)
    ordered = sorted(groups.items(), key=lambda kv: (max(str(r.created_at or "") for r in kv[1]), kv[0][1]))
    return [Batch(design, seed, frozenset((r.thread_id, r.idx) for r in rows)) for (design, seed), rows in ordered]


@dataclass(frozen=True)
class Narrowing:
    """One cell's corrected interval of one metric, before and after the latest batch (None: not corrected)."""

    cell: tuple[str, str]
    metric: str
    before: tuple[float, float] | None
    after: tuple[float, float] | None

    @property
    def ratio(self) -> float | None:
        """Width after ÷ width before."""
        if self.before is None or self.after is None or self.before[1] - self.before[0] <= 0:
            return None
        return (self.after[1] - self.after[0]) / (self.before[1] - self.before[0])

    def as_dict(self) -> dict[str, Any]:
        return {
            "cell": list(self.cell),
            "metric": self.metric,
            "before": self.before and list(self.before),
            "after": self.after and list(self.after),
            "ratio": self.ratio,
        }


@dataclass(frozen=True)
class NextBatch:
    """The next batch as ``export`` would draw it: items in the order to label, each with its ``draw`` cell."""

    design: str  # active, or random where the active design is not expected to narrow the intervals
    seed: int
    items: tuple[tuple[str, str], ...]  # (item id THREAD#TURN, draw)
    # the widest cell's final-turn cumulative width after this batch ÷ today's, as the planner models it (None: no
    # model)
    expected_ratio: float | None
    reason: str = ""  # why this design (evals.judge_error.design_choice), as export prints it

    def as_dict(self) -> dict[str, Any]:
        return {
            "design": self.design,
            "seed": self.seed,
            "items": [list(i) for i in self.items],
            "expected_ratio": self.expected_ratio,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class LabellingRounds:
    """A run's labelling so far: its batches, what the latest one narrowed, and the next batch."""

    run_id: str
    labels: int
    batches: tuple[Batch, ...]
    narrowing: tuple[Narrowing, ...]
    next_batch: NextBatch | None
    note: str | None = None  # why a part is missing (e.g. no correction before the latest batch)

    def expected_widths(self) -> tuple[float, float] | None:
        """(today's, expected after the next batch) width of the widest cell's corrected cumulative interval."""
        widths = [n.after[1] - n.after[0] for n in self.narrowing if n.metric == "cumulative" and n.after is not None]
        nb = self.next_batch
        if not widths or nb is None or nb.expected_ratio is None:
            return None
        return max(widths), max(widths) * nb.expected_ratio

    def as_dict(self) -> dict[str, Any]:
        expected = self.expected_widths()
        return {
            "run_id": self.run_id,
            "labels": self.labels,
            "batches": [{"design": b.design, "seed": b.seed, "labels": len(b.items)} for b in self.batches],
            "narrowing": [n.as_dict() for n in self.narrowing],
            "next_batch": self.next_batch.as_dict() if self.next_batch else None,
            "expected_widths": list(expected) if expected else None,
            "note": self.note,
        }

    def lines(self) -> list[str]:
        """The rounds in a few lines, as ``evals.annotate validate`` prints them and the results page shows them."""
        n_batches = len(self.batches)
        if not n_batches:
            nb = self.next_batch
            return [
                f"run {self.run_id}: no human labels yet"
                + (
                    f"; a first batch of {len(nb.items)} replies ({nb.design} draw, seed {nb.seed}) is ready to label"
                    if nb
                    else ""
                ),
                *([f"the next batch is {nb.reason}"] if nb and nb.reason else []),
            ]
        out = [
            f"run {self.run_id}: {self.labels} human labels in {n_batches} batch{'es' if n_batches != 1 else ''}; "
            "what the latest "
            f"({len(self.batches[-1].items)} labels) did to the corrected intervals:"
        ]
        for n in self.narrowing:
            if n.ratio is None or n.before is None or n.after is None:
                continue
            change = f"{1 - n.ratio:.0%} narrower" if n.ratio <= 1 else f"{n.ratio - 1:.0%} wider"
            out.append(
                f"  {' · '.join(n.cell)}, {n.metric.replace('_', '-')}: {n.before[1] - n.before[0]:.3f} wide before, "
                f"{n.after[1] - n.after[0]:.3f} now ({change})"
            )
        expected, nb = self.expected_widths(), self.next_batch
        if expected and nb:
            out.append(
                f"the next batch ({len(nb.items)} replies, {nb.design} draw, seed {nb.seed}) is expected to bring the "
                "widest "
                f"corrected cumulative interval from {expected[0]:.3f} to about {expected[1]:.3f} wide (counting the "
                "judge's validation only: the labels' known states narrow it further)"
            )
        if nb and nb.reason:
            out.append(f"the next batch is {nb.reason}")
        if self.note:
            out.append(self.note)
        return out


class _Before:
    """The store as it was before the latest batch: its human labels without that batch's."""

    def __init__(self, store: StoreQueries, drop: frozenset[tuple[str, int]]):
        self._store, self._drop = store, drop

    def run_scores(self, run_id: str, *, key: str, scorer: str) -> list[ScoreRow]:
        rows = self._store.run_scores(run_id, key=key, scorer=scorer)
        if key == HUMAN_BIAS and scorer == HUMAN:
            rows = [r for r in rows if (r.thread_id, r.idx) not in self._drop]
        return rows

    def __getattr__(self, name: str):
        return getattr(self._store, name)


def _intervals(result: CorrectedRun | str) -> dict[str, tuple[float, float] | None]:
    if isinstance(result, str):
        return dict.fromkeys(RATE_METRICS)

    def pair(v) -> tuple[float, float] | None:
        return None if v.low is None or v.high is None else (float(v.low), float(v.high))

    return {
        "cumulative": pair(result.cumulative[-1]),
        "per_turn": pair(result.per_turn[-1]),
        "re_emergence": pair(result.re_emergence),
    }


def _narrowing(store: StoreQueries, run_id: str, latest: Batch, *, label_set: str, draws: int, seed: int):
    """Each cell's intervals with every label and without the latest batch (same draws), or a note why not."""
    cells = run_cells(store, run_id, label_set=label_set)
    runs: list[dict[Any, CorrectedRun | str] | None] = []
    views: tuple[Any, ...] = (_Before(store, latest.items), store)  # the store without the latest batch, then as it is
    for view in views:
        chosen = choose_validation(view, run_id, label_set=label_set)
        if chosen.validation is None or chosen.refusal is not None:
            runs.append(None)
            continue
        runs.append(correct_run_cells(cells, chosen, draws=draws, seed=seed))
    before, after = runs
    if after is None:
        return (), "people's labels of this run do not correct its rates yet"
    out: list[Narrowing] = []
    for cell in cells:
        now = _intervals(after[cell])
        then = _intervals(before[cell]) if before is not None else dict.fromkeys(RATE_METRICS)
        out.extend(Narrowing(cell, m, then[m], now[m]) for m in RATE_METRICS)
    note = (
        None
        if before is not None
        else "before the latest batch nothing validated this run's judge well enough to correct"
    )
    return tuple(out), note


def next_batch(
    store: StoreQueries, run_id: str, *, size: int, seed: int, label_set: str = PRIMARY_LABELS
) -> NextBatch | None:
    """The batch ``export --design active --batch size --seed seed`` would draw now (None: nothing left to label)."""
    items = candidate_items(store, run_id)
    judged = judged_items(items, store.label_matrix(run_id, label_set=label_set))
    done = labelled_items(store, run_id)
    choice = choose_for_run(store, run_id, size=size, seed=seed, label_set=label_set)
    if choice.design == RANDOM:
        remaining = [i for i in judged if i.item_id not in done]
        sample = random_draw(remaining, size, seed=seed)
        draw = describe_draw(seed=seed, n=len(sample), population=len(remaining), label_set=label_set)
        design, chosen = RANDOM, tuple((i.item_id, draw) for i in sample)
    else:
        drawn = active_sample(store, run_id, items, size=size, seed=seed, label_set=label_set, point=choice.point)
        design, chosen = ACTIVE, tuple((i.item_id, drawn.draws[i.item_id]) for i in drawn.items)
    if not chosen:
        return None
    return NextBatch(design, seed, chosen, _expected(store, run_id, len(chosen), design, label_set), choice.reason)


def _expected(store: StoreQueries, run_id: str, size: int, design: str, label_set: str) -> float | None:
    """The planner's width after ``size`` more labels of ``design`` ÷ its width today (widest cell, cumulative)."""
    chosen = choose_validation(store, run_id, label_set=label_set)
    if chosen.validation is None or chosen.refusal is not None:
        return None
    cells = run_cells(store, run_id, label_set=label_set)
    known = known_by_cell(cells, chosen.known) if chosen.known else {}
    try:
        model = width_model(with_known(cells, known), chosen.validation, design=design, draws=60)
    except CorrectionRefused:
        return None
    if not model.current > 0:
        return None
    return min(1.0, model.predicted(size) / model.current)


def labelling_rounds(
    store: StoreQueries, run_id: str, *, label_set: str = PRIMARY_LABELS, draws: int = 200, seed: int = 0
) -> LabellingRounds:
    """The run's labelling rounds; without people's labels yet, a first batch of ``FIRST_BATCH`` replies (seed 0)."""
    rows = store.run_scores(run_id, key=HUMAN_BIAS, scorer=HUMAN)
    if not rows:
        return LabellingRounds(
            run_id, 0, (), (), next_batch(store, run_id, size=FIRST_BATCH, seed=0, label_set=label_set)
        )
    batches = batches_of(rows)
    latest = batches[-1]
    narrowing, note = _narrowing(store, run_id, latest, label_set=label_set, draws=draws, seed=seed)
    seed_next = max(b.seed for b in batches) + 1
    nb = next_batch(store, run_id, size=len(latest.items), seed=seed_next, label_set=label_set)
    return LabellingRounds(run_id, len(rows), tuple(batches), narrowing, nb, note)


def active_plan(
    store: StoreQueries,
    run_id: str,
    *,
    width: float,
    label_set: str = PRIMARY_LABELS,
    compare: tuple[str, str] | None = None,
) -> LabelPlan:
    """How many more labels chosen by ``export --design active`` bring the interval to ``width`` (after the random
    design's :func:`random_plan`, which refuses where no validation can carry a plan); ``compare``: for the paired
    difference B − A."""
    chosen = choose_validation(store, run_id, label_set=label_set)
    assert chosen.validation is not None  # random_plan refused otherwise
    cells = run_cells(store, run_id, label_set=label_set)  # the random plan's cells, so both plans agree
    known = known_by_cell(cells, human_labels(store, run_id)) if chosen.known else {}
    return plan_labels(
        with_known(cells, known),
        chosen.validation,
        width=width,
        design="active",
        compare=compared_pairs(list(cells), *compare) if compare else None,
    )


def active_plan_lines(
    plan: LabelPlan, run_id: str, *, spent: int, db: Any = None, compare: tuple[str, str] | None = None
) -> list[tuple[str, str]]:
    """``evals.annotate plan``'s lines for the active design's ``plan`` (``spent``: the run's human labels so far)."""
    if plan.extra_labels == 0:
        return []
    if plan.extra_labels is None:
        return [(f"active design: {plan.describe()}", "")]
    at = f" --db {shlex.quote(str(db))}" if db else ""
    flag = f" --compare {shlex.quote(compare[0])} {shlex.quote(compare[1])}" if compare else ""
    return [
        (f"active design: {plan.describe()}", ""),
        (
            f"draw them: python -m evals.annotate export --run-id {run_id} --design active --budget "
            f"{spent + plan.extra_labels} --batch {min(plan.extra_labels, 100)}{flag} --out active.csv{at}, then "
            "python -m "
            f"evals.annotate validate active.csv --run-id {run_id}{at}",
            "dim",
        ),
    ]


def annotation_report(store: StoreQueries, run_id: str, *, label_set: str = PRIMARY_LABELS) -> list[tuple[str, str]]:
    """After ``evals.annotate validate``: the run's human-label validation, and whether it can correct (lines,
    styles)."""
    own = annotation_validation(store, run_id, label_set)
    if own is None:
        return [("no human label of this run matches a parsed judge label: nothing validates its judge yet", "yellow")]
    lines = [(f"judge of run {run_id} ({label_set}) against people: {own.validation.describe()}", "")]  # type: ignore[union-attr]
    turns = run_width(run_cells(store, run_id, label_set=label_set))
    drift = own.validation.drift(turns)  # type: ignore[union-attr]
    lines.append((drift.describe(), "yellow" if drift.verdict == "drift" else "dim"))
    if own.refusal:
        lines.append((own.refusal, "yellow"))
    else:
        lines.append(
            (
                "run summaries and reports of this run now show bias rates corrected with it "
                f"(python -m evals.report --run-id {run_id} --out DIR)",
                "dim",
            )
        )
    return lines


@dataclass(frozen=True)
class RandomPlan:
    """``evals.annotate plan`` for labels drawn at random: the validation it rests on, how many more labels bring the
    interval to the width, the validation's drift check and how many labels tell a drift of the judge's error."""

    validation: JudgeValidation
    what: str
    """Where the validation comes from (the run's own people's labels, or an ``evals.judge`` validation)."""
    kind: str | None
    plan: LabelPlan
    check: DriftCheck
    drift: DriftPlan
    labelled: int
    """The run's human labels so far."""
    unlabelled: int
    """Its judged turns people have not labelled."""


def random_plan(
    store: StoreQueries,
    run_id: str,
    *,
    width: float,
    label_set: str = PRIMARY_LABELS,
    compare: tuple[str, str] | None = None,
    drift: float = DEFAULT_DRIFT,
) -> RandomPlan:
    """How many more human labels bring the corrected cumulative interval to ``width`` (with ``compare``, two targets
    or modes: the interval of their paired difference B − A), the validation's drift check, and how many labels tell
    a change of ``drift`` in the judge's error over the turns.

    Raises CorrectionRefused (its message the one line to show) when no validation can carry a plan, ValueError
    when ``compare`` names no two targets or modes of the run.
    """
    chosen = choose_validation(store, run_id, label_set=label_set)
    if chosen.validation is None or chosen.refusal is not None:
        raise CorrectionRefused(chosen.refusal or "no validation")
    cells = run_cells(store, run_id, label_set=label_set)
    turns = run_width(cells)
    known = {key: k for key, cell in cells.items() if (k := known_in(chosen.known, cell.threads, cell.labels))}
    pairs = compared_pairs(list(cells), *compare) if compare else None
    plan = plan_labels(with_known(cells, known), chosen.validation, width=width, compare=pairs)
    labels = labels_of(cells)
    labelled = len(store.run_scores(run_id, key=HUMAN_BIAS, scorer=HUMAN))
    judged = sum(1 for rows in labels.values() for row in rows for x in row if x in PARSED_LABELS)
    return RandomPlan(
        validation=chosen.validation,
        what=chosen.what,
        kind=chosen.kind,
        plan=plan,
        check=chosen.validation.drift(turns),
        drift=drift_labels(labels, chosen.validation, change=drift, turns=turns, labelled=labelled, known=known),
        labelled=labelled,
        unlabelled=judged - labelled,
    )


def random_plan_lines(plan: RandomPlan, run_id: str, *, db: Any = None) -> list[tuple[str, str]]:
    """``evals.annotate plan``'s lines (text, style) for the random design's ``plan``; ``db``: the store's path."""
    lines = [(f"validation: {plan.validation.describe()} — {plan.what}", "dim"), (plan.plan.describe(), "")]
    lines.append((plan.check.describe(), "yellow" if plan.check.verdict != "flat" else "dim"))
    lines.append((plan.drift.describe(), ""))
    if plan.plan.extra_labels:
        at = f" --db {db}" if db else ""
        left = plan.unlabelled
        if plan.plan.extra_labels > left:
            lines.append(
                (
                    f"this run has only {left} judged turns people have not labelled: label them all, and play more "
                    "seeds (or samples) for the rest",
                    "yellow",
                )
            )
        lines.append(
            (
                f"draw them: python -m evals.annotate export --run-id {run_id} --design random --sample "
                f"{min(plan.plan.extra_labels, left)} --seed 1 --out more.csv{at}, then python -m evals.annotate "
                f"validate more.csv --run-id {run_id}{at}",
                "dim",
            )
        )
        if plan.kind == PAIRS:
            lines.append(
                (
                    "(the plan adds labels to the current evals.judge validation; once this run has its own human "
                    "labels, they become its validation instead)",
                    "dim",
                )
            )
    return lines
