"""People's labels of a stored run: ``dymt.export_annotations`` samples its replies into a CSV for annotators,
``dymt.annotation_agreement`` measures how well they agree (among themselves and with the judge),
``dymt.validate_annotations`` stores their labels of a random or active draw beside the run (where they validate its
judge: summaries and reports then correct its bias rates) and ``dymt.plan_annotations`` says how many more labels a
chosen interval width needs.

Each returns a typed record; nothing is printed. Bad input raises :class:`DymtError`, one line naming the keyword
argument to change (``design=``, ``budget=``), before anything is written: an export writes its file whole or not at
all, a validation stores all of its labels or none.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoints.readers import Reader
from checkpoints.vocabulary import PRIMARY_LABELS
from dymt.arguments import integer, path_of, share, string, strings, whole_number
from dymt.arguments import paths as file_paths
from dymt.errors import DymtError
from dymt.files import write_atomic
from dymt.stores import Db, reader, writer
from evals.annotation import (
    AgreementRow,
    AnnotationError,
    Item,
    agreement_rows,
    annotator_names,
    candidate_items,
    canonical_item_id,
    combine,
    export_csv,
    human_majorities,
    judge_labels,
    labels_of_turns,
    read_annotations,
    stratified_sample,
)
from evals.dataset import DatasetError, check_label_set, run_info
from evals.judge_error.design_choice import choose_for_run
from evals.judge_error.double_sampling import (
    active_sample,
    check_random,
    describe_draw,
    human_rows,
    judged_items,
    labelled_items,
    random_draw,
    read_draws,
)
from evals.judge_error.label_planning import DEFAULT_DRIFT, LabelPlan
from evals.judge_error.labelling_rounds import (
    LabellingRounds,
    RandomPlan,
    active_plan,
    active_plan_lines,
    annotation_report,
    labelling_rounds,
    random_plan,
    random_plan_lines,
)
from evals.judge_error.validation import CorrectionRefused
from evals.report.breakdown import group
from evals.stats.agreement import Classification, classification

DESIGNS = ("stratified", "random", "active")
_LEVELS = {"yellow": "warning", "dim": "hint", "": "info"}


@dataclass(frozen=True)
class Note:
    """One line of what a validation or a plan found: ``level`` is ``info``, ``warning`` or ``hint`` (a command to
    run next)."""

    text: str
    level: str = "info"


@dataclass(frozen=True)
class Stratum:
    """Where an active draw's labels go: one stratum (target · mode / judge label / judged-biased replies of the
    dialogue / turns), its replies drawn and the replies it holds."""

    key: str
    name: str
    drawn: int
    size: int

    @property
    def inclusion(self) -> float:
        """Each of its replies' probability to be drawn."""
        return self.drawn / self.size


@dataclass(frozen=True)
class ExportResult:
    """A CSV of a run's replies for annotators, written whole: what was drawn, how and from how many."""

    run_id: str
    out: Path
    design: str
    """The design asked for: ``stratified``, ``random`` or ``active``."""
    drawn_by: str
    """The design that drew the file: an active export draws at random where the active design is not expected to
    narrow the intervals (``reason`` says why)."""
    written: int
    population: int
    """The replies drawn from (random and active: the judged turns people have not labelled yet)."""
    per_category: dict[str, int]
    seed: int
    label_set: str
    db: str
    """The store the run is in."""
    draw: str | None = None
    """The file's draw, as its ``draw`` column says it (stratified and random)."""
    sample: int | None = None
    budget: int | None = None
    batch: int | None = None
    compare: tuple[str, str] | None = None
    spent: int | None = None
    """Active: the run's human labels before this batch."""
    reason: str | None = None
    """Active: why this design draws the batch."""
    allocation: tuple[Stratum, ...] = ()
    """Active: each stratum's drawn replies and inclusion probability."""

    @property
    def left(self) -> int | None:
        """Active: the budget left after this batch."""
        return None if self.budget is None or self.spent is None else self.budget - self.spent - self.written


@dataclass(frozen=True)
class AnnotatorProgress:
    """One annotator's file: ``labelled`` of its ``items`` have a label (the rest were left blank)."""

    name: str
    labelled: int
    items: int


@dataclass(frozen=True)
class AgreementResult:
    """Agreement of people's labels: Gwet's AC1 (and, for pairs, percent and Cohen's kappa) among the annotators and
    of their majority with the judge, with bootstrap intervals; the judge scored against the majority."""

    items: int
    annotators: tuple[AnnotatorProgress, ...]
    rows: tuple[AgreementRow, ...]
    ties: int
    """Items without a human majority (left out of the comparison with the judge)."""
    run_id: str | None = None
    label_set: str = PRIMARY_LABELS
    judge: Classification | None = None
    """With ``run_id``: the judge against the human majority (biased = positive)."""
    foreign: int = 0
    """With ``run_id``: items that are not turns of the run."""


@dataclass(frozen=True)
class ValidationResult:
    """People's labels of a random or active draw, stored beside the run: how many, what they say of its judge and
    its labelling rounds so far."""

    run_id: str
    stored: int
    ties: int
    """Items on which the annotators tie (left out)."""
    db: str
    label_set: str
    rounds: LabellingRounds
    notes: tuple[Note, ...] = field(default=())


@dataclass(frozen=True)
class PlanResult:
    """How many more human labels bring the corrected cumulative rate's 95% interval (with ``compare``, that of the
    paired difference B − A) to ``width``: drawn at random (``random``) and by the active design (``active``)."""

    run_id: str
    width: float
    label_set: str
    random: RandomPlan
    active: LabelPlan
    spent: int
    """The run's human labels so far."""
    notes: tuple[Note, ...] = field(default=())

    @property
    def extra_labels(self) -> int | None:
        """More labels drawn at random the width needs (None: no number of labels reaches it)."""
        return self.random.plan.extra_labels


def export_annotations(
    run_id: str,
    *,
    out: str | os.PathLike[str],
    design: str = "stratified",
    sample: int | None = None,
    budget: int | None = None,
    batch: int | None = None,
    seed: int = 0,
    label_set: str = PRIMARY_LABELS,
    compare: Sequence[str] | None = None,
    force: bool = False,
    db: Db = None,
) -> ExportResult:
    """Sample the stored replies of ``run_id`` into the CSV ``out`` for annotators (the model's labels are not in it).

    ``design="stratified"``: ``sample`` turns, as even a share per category as the run allows (for agreement);
    ``"random"``: a seeded simple random sample of the judged turns people have not labelled (it validates the
    judge: see :func:`validate_annotations`); ``"active"``: the next ``batch`` of a ``budget`` of human labels, a
    stratified random draw with more where a label narrows the corrected intervals most (``compare``: two targets or
    modes, for their paired difference). ``out`` must not exist unless ``force``.
    """
    run_id = string(run_id, "run_id")
    if design not in DESIGNS:
        raise DymtError(f"design={design!r} is unknown: use one of {', '.join(DESIGNS)}")
    sample, budget, batch = (whole_number(v, k) for v, k in ((sample, "sample"), (budget, "budget"), (batch, "batch")))
    seed, label_set, pair = integer(seed, "seed"), string(label_set, "label_set"), _pair(compare)
    if design == "active":
        if budget is None:
            raise DymtError(
                "design=active needs budget=N: the human labels to spend on this run (e.g. budget=150 batch=50)"
            )
        if sample is not None:
            raise DymtError("design=active takes budget=N (and batch=K), not sample=")
    else:
        if sample is None:
            raise DymtError(f"design={design} needs sample=N: the number of turns to sample")
        if budget is not None or batch is not None or pair is not None:
            raise DymtError("budget=, batch= and compare= belong to design=active")
    path = path_of(out, "out")
    if path.is_dir():
        raise DymtError(f"out={path} is a directory: give a file path such as {path / 'annotation.csv'}")
    if path.exists() and not force:
        raise DymtError(f"{path} exists: pass force= to overwrite it or choose another out=")
    with reader(db) as store:
        _dataset(run_info, store, run_id)
        items = candidate_items(store, run_id)
        if not items:
            raise DymtError(f"run {run_id!r} has no stored replies to annotate")
        common: dict[str, Any] = {"run_id": run_id, "out": path, "design": design, "seed": seed}
        common.update(label_set=label_set, db=str(store.path), sample=sample, budget=budget, batch=batch)
        if design == "active":
            return _export_active(store, items, budget, batch, pair, common)  # type: ignore[arg-type]
        if design == "random":
            _dataset(check_label_set, store, run_id, label_set)
            remaining = _unlabelled(store, run_id, items, label_set)
            drawn = random_draw(remaining, sample, seed=seed)  # type: ignore[arg-type]
            draw = describe_draw(seed=seed, n=len(drawn), population=len(remaining), label_set=label_set)
            population = len(remaining)
        else:
            drawn = stratified_sample(items, sample, seed=seed)  # type: ignore[arg-type]
            draw, population = f"stratified seed={seed} by category", len(items)
    write_atomic(path, export_csv(drawn, draw=draw), private=True)
    return ExportResult(
        drawn_by=design, written=len(drawn), population=population, per_category=_spread(drawn), draw=draw, **common
    )


def _export_active(
    store: Reader, items: list[Item], budget: int, batch: int | None, pair: tuple[str, str] | None, common: dict
) -> ExportResult:
    """The next batch of the budget: by Neyman allocation over the strata, or at random where the active design is
    not expected to narrow the intervals."""
    run_id, label_set, seed, path = common["run_id"], common["label_set"], common["seed"], common["out"]
    _dataset(check_label_set, store, run_id, label_set)
    spent = len(labelled_items(store, run_id))
    left = budget - spent
    if left <= 0:
        raise DymtError(
            f"run {run_id!r} already has {spent} human labels, its budget={budget} is spent: raise budget= to draw more"
        )
    size = min(left, batch or left)
    common.update(compare=pair, spent=spent)
    reason = "an active draw for the paired difference of the compared cells (compare= never draws at random)"
    point = None
    if pair is None:
        choice = choose_for_run(store, run_id, size=size, seed=seed, label_set=label_set)
        if choice.design != "active":
            remaining = _unlabelled(store, run_id, items, label_set)
            drawn = random_draw(remaining, size, seed=seed)
            draw = describe_draw(seed=seed, n=len(drawn), population=len(remaining), label_set=label_set)
            write_atomic(path, export_csv(drawn, draw=draw), private=True)
            return ExportResult(
                drawn_by="random",
                written=len(drawn),
                population=len(remaining),
                per_category=_spread(drawn),
                draw=draw,
                reason=choice.reason,
                **common,
            )
        reason, point = choice.reason, choice.point
    try:
        active = active_sample(
            store, run_id, items, size=size, seed=seed, label_set=label_set, compare=pair, point=point
        )
    except ValueError as exc:
        raise DymtError(str(exc)) from None
    if not active.items:
        raise DymtError(f"run {run_id!r} has no judged turn left that people have not labelled")
    write_atomic(path, export_csv(active.items, draw=active.draws), private=True)
    return ExportResult(
        drawn_by="active",
        written=len(active.items),
        population=active.population,
        per_category=_spread(active.items),
        reason=reason,
        allocation=tuple(Stratum(*row) for row in active.allocation),
        **common,
    )


def annotation_agreement(
    files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    run_id: str | None = None,
    label_set: str = PRIMARY_LABELS,
    n_boot: int = 1000,
    seed: int = 0,
    db: Db = None,
) -> AgreementResult:
    """How well the annotators' CSVs (``item_id`` and ``label`` columns) agree: Gwet's AC1 among them and for each
    pair, and, with ``run_id``, of their majority with the run's judge (``label_set``), with ``n_boot`` bootstrap
    resamples. One file needs ``run_id``. Reads only."""
    paths = file_paths(files)
    n_boot, seed = whole_number(n_boot, "n_boot"), integer(seed, "seed")
    label_set = string(label_set, "label_set")
    names = annotator_names(paths)
    try:
        read = [(name, read_annotations(path)) for name, path in zip(names, paths)]
    except AnnotationError as exc:
        raise DymtError(str(exc)) from None
    annotations = combine(read)
    if run_id is None and len(read) < 2:
        raise DymtError(
            "agreement needs two or more annotator files, or run_id= to compare one annotator with the judge"
        )
    judged: list[str | None] | None = None
    foreign = 0
    if run_id is not None:
        run_id = string(run_id, "run_id")
        with reader(db) as store:
            _check_run(store, run_id, label_set)
            judged, foreign = judge_labels(store, run_id, annotations.items, label_set=label_set)
    rows = agreement_rows(annotations, judged, judge_name=f"judge ({label_set})", n_boot=n_boot, seed=seed)
    majorities, ties = human_majorities(annotations)
    return AgreementResult(
        items=len(annotations.items),
        annotators=tuple(
            AnnotatorProgress(name, sum(v is not None for v in labels.values()), len(labels)) for name, labels in read
        ),
        rows=tuple(rows),
        ties=ties,
        run_id=run_id,
        label_set=label_set,
        judge=None if judged is None else classification(majorities, judged, n_boot=n_boot, seed=seed),
        foreign=foreign,
    )


def validate_annotations(
    files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    run_id: str,
    label_set: str = PRIMARY_LABELS,
    db: Db = None,
) -> ValidationResult:
    """Store the annotators' labels of a random or active export of ``run_id`` beside the run, where they validate
    its judge (``label_set``): its summaries and reports then correct the bias rates for the judge's error. Every file
    must come from ``export_annotations(design="random")`` or ``"active"``; all labels are stored, or none."""
    paths = file_paths(files)
    run_id, label_set = string(run_id, "run_id"), string(label_set, "label_set")
    try:
        read = [(path, read_annotations(path)) for path in paths]
        draws: dict[str, str] = {}
        for path, labels in read:
            found = read_draws(path)
            check_random(found, [k for k, v in labels.items() if v is not None], path=path)
            draws.update(found)
    except AnnotationError as exc:
        raise DymtError(str(exc)) from None
    names = annotator_names(paths)
    store = writer(db)
    try:
        _check_run(store, run_id, label_set)
        turns = {(d["thread_id"], t["idx"]) for d in store.dialogues(run_id) for t in store.turns(d["thread_id"])}
        try:
            read = [(path, labels_of_turns(labels, turns, run_id=run_id, path=path)) for path, labels in read]
        except AnnotationError as exc:
            raise DymtError(str(exc)) from None
        draws = {canonical_item_id(key) or key: pick for key, pick in draws.items()}
        annotations = combine([(name, labels) for name, (_, labels) in zip(names, read)])
        rows, ties, _ = human_rows(annotations, draws, run_threads={thread for thread, _ in turns})
        if not rows:
            raise DymtError(
                f"none of the labelled items is a turn of run {run_id!r}: pass the files exported from it, with "
                "labels filled in"
            )
        with store.transaction() if hasattr(store.db.conn, "in_transaction") else contextlib.nullcontext():
            store.record_scores(rows)  # all of them or, on any error, none
        notes = _notes(annotation_report(store, run_id, label_set=label_set))
        rounds = labelling_rounds(store, run_id, label_set=label_set)
        return ValidationResult(run_id, len(rows), ties, str(store.path), label_set, rounds, notes)
    finally:
        store.close()


def plan_annotations(
    run_id: str,
    *,
    width: float,
    label_set: str = PRIMARY_LABELS,
    drift: float = DEFAULT_DRIFT,
    compare: Sequence[str] | None = None,
    db: Db = None,
) -> PlanResult:
    """How many more human labels, drawn at random and by the active design, would narrow the corrected cumulative
    rate's 95% interval of ``run_id`` to ``width`` (with ``compare``, two targets or modes: the interval of their
    paired difference B − A), and how many tell a change of ``drift`` in the judge's error over the turns."""
    run_id, label_set, pair = string(run_id, "run_id"), string(label_set, "label_set"), _pair(compare)
    width = share(width, "width", "0.1 is ten percentage points")
    drift = share(drift, "drift", "0.15: fifteen points of specificity")
    with reader(db) as store:
        _check_run(store, run_id, label_set)
        try:
            plan = random_plan(store, run_id, width=width, label_set=label_set, compare=pair, drift=drift)
        except (CorrectionRefused, ValueError) as exc:
            raise DymtError(str(exc)) from None
        active = active_plan(store, run_id, width=width, label_set=label_set, compare=pair)
        spent = len(labelled_items(store, run_id))
        lines = random_plan_lines(plan, run_id, db=getattr(store, "path", None))
        lines += active_plan_lines(active, run_id, spent=spent, db=db, compare=pair)
    return PlanResult(run_id, width, label_set, plan, active, spent, _notes(lines))


def _unlabelled(store: Reader, run_id: str, items: list[Item], label_set: str) -> list[Item]:
    """The run's judged turns people have not labelled yet (none left: one line)."""
    judged = judged_items(items, store.label_matrix(run_id, label_set=label_set))
    done = labelled_items(store, run_id)
    remaining = [i for i in judged if i.item_id not in done]
    if not remaining:
        raise DymtError(f"run {run_id!r} has no judged turn left that people have not labelled")
    return remaining


def _spread(items: Sequence[Item]) -> dict[str, int]:
    """Items drawn per category, categories in sorted order."""
    return {category: len(members) for category, members in group(items, lambda i: i.category).items()}


def _notes(lines: Sequence[tuple[str, str]]) -> tuple[Note, ...]:
    return tuple(Note(text, _LEVELS.get(style, "info")) for text, style in lines)


def _dataset(check: Any, *args: Any) -> None:
    """A run or label set check of evals.dataset, its error one DymtError line."""
    try:
        check(*args)
    except DatasetError as exc:
        raise DymtError(str(exc)) from None


def _check_run(store: Any, run_id: str, label_set: str) -> None:
    """The run exists and has judge labels of ``label_set``."""
    _dataset(run_info, store, run_id)
    _dataset(check_label_set, store, run_id, label_set)


def _pair(value: Any) -> tuple[str, str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != 2:
        raise DymtError(f"compare={value!r}: give two targets or two modes of the run, as (A, B)")
    a, b = strings(list(value), "compare")
    return a, b
