"""Human annotation of stored turns: a stratified sample to export, the annotators' files read back, agreement rows."""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoints.queries import StoreQueries
from evals.report.breakdown import group
from evals.scorers.posthoc import history_before
from evals.stats.agreement import majority, multi_rater_agreement, pairwise_agreement
from evals.stats.metrics import BIASED, NOT_BIASED, Estimate
from nodes.dialogue import format_history

EXPORT_COLUMNS = ("item_id", "category", "statement", "context", "reply", "label", "notes", "draw")
_HUMAN = {
    "biased": BIASED,
    "b": BIASED,
    "1": BIASED,
    "yes": BIASED,
    "y": BIASED,
    "true": BIASED,
    "not biased": NOT_BIASED,
    "not_biased": NOT_BIASED,
    "not-biased": NOT_BIASED,
    "unbiased": NOT_BIASED,
    "nb": NOT_BIASED,
    "0": NOT_BIASED,
    "no": NOT_BIASED,
    "n": NOT_BIASED,
    "false": NOT_BIASED,
}

# An annotator may leave an item open; these count as not annotated, like a blank cell.
_SKIPPED = {"", "?", "skip", "unsure", "n/a", "na"}


class AnnotationError(ValueError):
    """An annotation file that cannot be read, naming the file, the line and the fix."""


@dataclass(frozen=True)
class Item:
    item_id: str
    thread_id: str
    idx: int
    category: str
    statement: str
    context: str
    reply: str


def item_id(thread_id: str, idx: int) -> str:
    return f"{thread_id}#{idx}"


def parse_item_id(value: str) -> tuple[str, int] | None:
    thread_id, sep, idx = value.rpartition("#")
    if not sep or not idx.isdigit():
        return None
    return thread_id, int(idx)


def canonical_item_id(key: str) -> str | None:
    """An item id as the export writes it (``THREAD#1``, not ``THREAD#01``); None if it is not one."""
    parsed = parse_item_id(key.strip())
    return None if parsed is None else f"{parsed[0]}#{parsed[1]}"


def labels_of_turns(
    labels: dict[str, str | None], turns: set[tuple[str, int]], *, run_id: str, path: Path
) -> dict[str, str | None]:
    """One annotator's labels keyed by canonical item ids; AnnotationError if an id is not a turn of the run, or names
    a turn twice (nothing is stored then)."""
    out: dict[str, str | None] = {}
    seen: dict[str, str] = {}
    for key, label in labels.items():
        canonical = canonical_item_id(key)
        parsed = parse_item_id(canonical) if canonical else None
        if canonical is None or parsed is None or parsed not in turns:
            thread = parsed[0] if parsed else None
            why = (
                "is not an item id (THREAD#TURN)"
                if parsed is None
                else f"is not a turn of run {run_id} (its dialogue has turns 1-"
                f"{max(i for t, i in turns if t == thread)})"
                if any(t == thread for t, _ in turns)
                else f"is not a dialogue of run {run_id}"
            )
            raise AnnotationError(
                f"{path}: item {key!r} {why}: nothing was stored; fix or remove that row and validate again"
            )
        if canonical in seen:
            raise AnnotationError(
                f"{path}: items {seen[canonical]!r} and {key!r} are the same turn ({canonical}): nothing was stored; "
                "keep one row per turn"
            )
        seen[canonical] = key
        out[canonical] = label
    return out


def annotator_names(paths: Sequence[Path]) -> list[str]:
    """Each annotator file's name: its stem, or its whole path where two stems are the same."""
    names = [path.stem for path in paths]
    return names if len(set(names)) == len(names) else [str(path) for path in paths]


def candidate_items(store: StoreQueries, run_id: str) -> list[Item]:
    """Every stored reply of the run, with the context its judge saw."""
    items = []
    for dialogue in store.dialogues(run_id):
        turns = store.turns(dialogue["thread_id"])
        for turn in turns:
            if turn["reply"] is None:
                continue
            history, reply = history_before(turns, turn["idx"])
            items.append(
                Item(
                    item_id=item_id(dialogue["thread_id"], turn["idx"]),
                    thread_id=dialogue["thread_id"],
                    idx=turn["idx"],
                    category=dialogue["category"] or "?",
                    statement=dialogue["statement"] or "",
                    context=format_history(history),
                    reply=reply,
                )
            )
    return items


def stratified_sample(items: Sequence[Item], n: int, *, seed: int = 0) -> list[Item]:
    """``n`` items spread as evenly over categories as they allow (a category with few items gives all it has).

    Round-robin over categories in a shuffled order within each; the result is shuffled
    again so annotators do not see the categories in blocks. Reproducible with ``seed``.
    """
    rng = random.Random(seed)
    strata = {category: list(members) for category, members in group(items, lambda i: i.category).items()}
    for members in strata.values():
        rng.shuffle(members)
    chosen: list[Item] = []
    while len(chosen) < n and any(strata.values()):
        for members in strata.values():
            if members and len(chosen) < n:
                chosen.append(members.pop())
    rng.shuffle(chosen)
    return chosen


def export_csv(items: Sequence[Item], *, draw: str | Mapping[str, str] = "") -> str:
    """The annotators' CSV; ``draw`` says how the items were sampled (evals.judge_error.double_sampling checks it),
    one string for all, or item id -> its own (an active draw records each item's stratum and inclusion probability)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=EXPORT_COLUMNS)
    writer.writeheader()
    for item in items:
        writer.writerow(
            {
                "item_id": item.item_id,
                "category": item.category,
                "statement": item.statement,
                "context": item.context,
                "reply": item.reply,
                "label": "",
                "notes": "",
                "draw": draw if isinstance(draw, str) else draw.get(item.item_id, ""),
            }
        )
    return buffer.getvalue()


def normalise_human(value: str) -> str | None:
    """An annotator's label as "biased"/"not_biased", None if left open; ValueError for anything else."""
    text = " ".join(value.strip().lower().split())
    if text in _SKIPPED:
        return None
    if text in _HUMAN:
        return _HUMAN[text]
    raise ValueError(f"label {value!r} is not biased / not biased (or b / nb, 1 / 0); leave it blank to skip")


def read_annotations(path: Path) -> dict[str, str | None]:
    """item id -> label from one annotator's CSV."""
    try:
        data = path.read_bytes()
        text = data.decode("utf-8-sig")
    except FileNotFoundError:
        raise AnnotationError(f"no file {path}: pass the CSVs the annotators filled in") from None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise AnnotationError(
            f"{path}:{line}: byte 0x{data[exc.start]:02x} is not UTF-8: save it as a UTF-8 CSV"
        ) from None
    reader = csv.DictReader(io.StringIO(text))
    missing = {"item_id", "label"} - set(reader.fieldnames or ())
    if missing:
        raise AnnotationError(
            f"{path} has no {', '.join(sorted(missing))} column: use the CSV that evals.annotate export wrote"
        )
    labels: dict[str, str | None] = {}
    for row in reader:
        where = f"{path}:{reader.line_num}"
        key = (row["item_id"] or "").strip()
        if not key:
            raise AnnotationError(f"{where}: empty item_id")
        if key in labels:
            raise AnnotationError(f"{where}: item {key!r} appears twice")
        try:
            labels[key] = normalise_human(row["label"] or "")
        except ValueError as exc:
            raise AnnotationError(f"{where}: {exc}") from None
    return labels


@dataclass(frozen=True)
class Annotations:
    annotators: tuple[str, ...]
    items: tuple[str, ...]
    ratings: tuple[tuple[str | None, ...], ...]  # items x annotators


def combine(files: Sequence[tuple[str, dict[str, str | None]]]) -> Annotations:
    """Items in first-seen order, one column per annotator (None where an annotator has no label)."""
    items: list[str] = []
    seen: set[str] = set()
    for _, labels in files:
        for key in labels:
            if key not in seen:
                seen.add(key)
                items.append(key)
    ratings = tuple(tuple(labels.get(key) for _, labels in files) for key in items)
    return Annotations(tuple(name for name, _ in files), tuple(items), ratings)


def judge_labels(
    store: StoreQueries, run_id: str, items: Sequence[str], *, label_set: str
) -> tuple[list[str | None], int]:
    """The judge's label for each item (None where it has none), and how many items are not turns of the run."""
    matrix = store.label_matrix(run_id, label_set=label_set)
    labels: list[str | None] = []
    foreign = 0
    for key in items:
        parsed = parse_item_id(key)
        row = matrix.get(parsed[0]) if parsed else None
        if row is None or not 1 <= parsed[1] <= len(row):  # type: ignore[index]
            foreign += 1
            labels.append(None)
        else:
            labels.append(row[parsed[1] - 1])  # type: ignore[index]
    return labels, foreign


@dataclass(frozen=True)
class AgreementRow:
    """One line of the agreement table: AC1 among all annotators, one pair, or the majority against the judge."""

    name: str
    n_compared: int
    percent: Estimate | None
    kappa: Estimate | None
    ac1: Estimate


def agreement_rows(
    annotations: Annotations,
    judged: Sequence[str | None] | None = None,
    *,
    judge_name: str = "judge",
    n_boot: int = 1000,
    seed: int = 0,
) -> list[AgreementRow]:
    """AC1 among all annotators, every pair of annotators, and the human majority against the judge."""
    boot: dict[str, Any] = {"n_boot": n_boot, "seed": seed}
    rows: list[AgreementRow] = []
    n = len(annotations.annotators)
    if n >= 2:
        multi = multi_rater_agreement(annotations.ratings, **boot)
        rows.append(AgreementRow(f"all {n} annotators", multi.n_rated_twice, None, None, multi.ac1))
        for i in range(n):
            for j in range(i + 1, n):
                pair = pairwise_agreement(
                    [r[i] for r in annotations.ratings], [r[j] for r in annotations.ratings], **boot
                )
                rows.append(
                    AgreementRow(
                        f"{annotations.annotators[i]} vs {annotations.annotators[j]}",
                        pair.n_compared,
                        pair.percent,
                        pair.kappa,
                        pair.ac1,
                    )
                )
    if judged is not None:
        majorities = [majority(r) for r in annotations.ratings]
        pair = pairwise_agreement(majorities, list(judged), **boot)
        rows.append(
            AgreementRow(f"human majority vs {judge_name}", pair.n_compared, pair.percent, pair.kappa, pair.ac1)
        )
    return rows


def human_majorities(annotations: Annotations) -> tuple[list[str | None], int]:
    """The human majority of each item (None on a tie or with no label), and how many labelled items tie."""
    majorities = [majority(r) for r in annotations.ratings]
    ties = sum(1 for r, m in zip(annotations.ratings, majorities) if m is None and any(x is not None for x in r))
    return majorities, ties  # type: ignore[return-value]
