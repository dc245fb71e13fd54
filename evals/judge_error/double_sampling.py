"""Double sampling: people label a seeded simple random sample of a run's judged turns, and that validates the judge.

``evals.annotate export --design random`` draws the sample (every judged turn of the run not yet
labelled by people has the same chance; the seed makes the draw reproducible) and writes the draw
into each row's ``draw`` column; ``evals.annotate validate`` reads the annotators' files back,
keeps the human majority of each item, stores it beside the run (``scores`` key ``human_bias``) and
counts it against the judge's label of the same turn. Because the sample comes from the run's own
turns, its sensitivity and specificity are those of the judge on this run's replies (the design
the literature calls internal validation, or double sampling).
"""

from __future__ import annotations

import csv
import io
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from checkpoints.queries import StoreQueries
from checkpoints.scores import HUMAN_BIAS, ScoreRow
from checkpoints.vocabulary import BIASED, NOT_BIASED, PARSED_LABELS, PRIMARY_LABELS
from evals.stats.agreement import majority
from evals.annotation import AnnotationError, Annotations, Item, item_id, parse_item_id

HUMAN = "human"  # the scorer of stored human labels
RANDOM = "random"


@dataclass(frozen=True)
class Counts:
    """The judge against the human label on the same items (biased = positive)."""

    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn


def judged_items(items: Sequence[Item], matrix: dict[str, list[str | None]]) -> list[Item]:
    """The items whose turn has a parsed judge label: the population a validation draw samples."""
    kept = []
    for item in items:
        row = matrix.get(item.thread_id) or []
        if 1 <= item.idx <= len(row) and row[item.idx - 1] in PARSED_LABELS:
            kept.append(item)
    return kept


def describe_draw(*, seed: int, n: int, population: int, label_set: str) -> str:
    """The ``draw`` column: what a later ``validate`` checks (a simple random draw) and reports."""
    return f"{RANDOM} seed={seed} n={n} of {population} judged turns ({label_set})"


def random_draw(items: Sequence[Item], n: int, *, seed: int = 0, exclude: set[str] = frozenset()) -> list[Item]:
    """A simple random sample of ``n`` items (fewer if fewer remain), none of ``exclude``; reproducible with ``seed``.

    Items are put in a fixed order (by item id) before drawing, so the same run and seed give the same sample.
    """
    population = sorted((i for i in items if i.item_id not in exclude), key=lambda i: i.item_id)
    return random.Random(seed).sample(population, min(n, len(population)))


def read_draws(path: Path) -> dict[str, str]:
    """item id -> its ``draw`` cell from an exported annotation file (empty when the column is missing)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (FileNotFoundError, UnicodeDecodeError) as exc:
        raise AnnotationError(f"cannot read {path}: {exc}") from None
    reader = csv.DictReader(io.StringIO(text))
    if "draw" not in (reader.fieldnames or ()):
        return {}
    return {(row.get("item_id") or "").strip(): (row.get("draw") or "").strip() for row in reader}


def check_random(draws: dict[str, str], items: Sequence[str], *, path: Path) -> str:
    """The one draw all of a file's items come from; AnnotationError unless it is a random draw."""
    if not items:
        raise AnnotationError(f"{path} has no labelled item: fill in the label column (biased / not biased) first")
    found = {draws.get(item, "") for item in items}
    if not draws or "" in found:
        raise AnnotationError(f"{path} has items without a draw column: export the sample with "
                              "python -m evals.annotate export --design random, so it is a random sample of the run's turns")
    bad = sorted(d for d in found if not d.startswith(RANDOM + " "))
    if bad:
        raise AnnotationError(f"{path} holds items of a {bad[0].split()[0]} draw, not a random one: export a new sample "
                              "with python -m evals.annotate export --design random (a stratified sample does not validate the judge)")
    return sorted(found)[0]


def human_rows(annotations: Annotations, draws: dict[str, str], *, run_threads: set[str]) -> tuple[list[ScoreRow], int, int]:
    """Rows to store: the human majority of each item of the run; and how many items tie and are not the run's."""
    rows: list[ScoreRow] = []
    ties = foreign = 0
    for key, ratings in zip(annotations.items, annotations.ratings):
        parsed = parse_item_id(key)
        if parsed is None or parsed[0] not in run_threads:
            foreign += 1
            continue
        label = majority(ratings)
        if label is None:
            ties += any(r is not None for r in ratings)
            continue
        raw = json.dumps({"annotators": dict(zip(annotations.annotators, ratings))})
        rows.append(ScoreRow(thread_id=parsed[0], idx=parsed[1], key=HUMAN_BIAS, scorer=HUMAN, value=label,
                             explanation=draws.get(key), raw=raw))
    return rows, ties, foreign


def annotation_counts(store: StoreQueries, run_id: str, *, label_set: str = PRIMARY_LABELS) -> tuple[Counts, list[str]] | None:
    """The judge (``label_set``) against the stored human labels of the run, and the draws they came from; None without any."""
    humans = store.run_scores(run_id, key=HUMAN_BIAS, scorer=HUMAN)
    if not humans:
        return None
    matrix = store.label_matrix(run_id, label_set=label_set)
    tp = fp = fn = tn = 0
    for row in humans:
        labels = matrix.get(row.thread_id) or []
        judged = labels[row.idx - 1] if 1 <= row.idx <= len(labels) else None
        if judged not in PARSED_LABELS or row.value not in (BIASED, NOT_BIASED):
            continue
        if judged == BIASED:
            tp, fp = (tp + 1, fp) if row.value == BIASED else (tp, fp + 1)
        else:
            fn, tn = (fn + 1, tn) if row.value == BIASED else (fn, tn + 1)
    draws = sorted({row.explanation for row in humans if row.explanation})
    return Counts(tp, fp, fn, tn), draws


def human_labels(store: StoreQueries, run_id: str) -> dict[tuple[str, int], str]:
    """(thread, turn) -> the stored human label of that reply, for the run's labelled turns."""
    return {(r.thread_id, r.idx): r.value for r in store.run_scores(run_id, key=HUMAN_BIAS, scorer=HUMAN)
            if r.value in (BIASED, NOT_BIASED)}


def labelled_items(store: StoreQueries, run_id: str) -> set[str]:
    """Item ids of the run's turns people have labelled already (a further draw leaves them out)."""
    return {item_id(r.thread_id, r.idx) for r in store.run_scores(run_id, key=HUMAN_BIAS, scorer=HUMAN)}
