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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoints.queries import StoreQueries
from checkpoints.run_record import role_specs
from checkpoints.scores import HUMAN_BIAS, ScoreRow
from checkpoints.vocabulary import BIASED, NOT_BIASED, PARSED_LABELS, PRIMARY_LABELS
from evals.annotation import AnnotationError, Annotations, Item, item_id, parse_item_id
from evals.judge_error.active_design import (
    ACTIVE,
    describe_pick,
    design_validation,
    draw_active,
    merged,
    parse_pick,
    strata_of,
)
from evals.judge_error.cells import Cell, labels_of, run_cells
from evals.judge_error.difference_design import draw_for_difference
from evals.judge_error.reply_value import valued_strata
from evals.judge_error.validation import JudgeValidation
from evals.stats.agreement import majority

HUMAN = "human"  # the scorer of stored human labels
RANDOM = "random"


@dataclass(frozen=True)
class Counts:
    """The judge against the human label on the same items (biased = positive).

    After an active draw the counts are the design-weighted validation's effective counts (fractional),
    and ``labels`` the number of people's labels behind them.
    """

    tp: float
    fp: float
    fn: float
    tn: float
    labels: int | None = None
    by_turn: tuple[tuple[float, ...], ...] = ()  # (turn, tp, fp, fn, tn): where they sat
    by_category: tuple[tuple[Any, ...], ...] = ()  # (seed category, tp, fp, fn, tn)

    @property
    def n(self) -> float:
        return self.labels if self.labels is not None else self.tp + self.fp + self.fn + self.tn

    def validation(self, source: str) -> JudgeValidation:
        """These counts as the validation the correction uses (turns and categories included)."""
        return JudgeValidation(
            source, self.tp, self.fp, self.fn, self.tn, by_turn=self.by_turn, by_category=self.by_category
        )


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


def random_draw(
    items: Sequence[Item], n: int, *, seed: int = 0, exclude: frozenset[str] | set[str] = frozenset()
) -> list[Item]:
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
    """The draw of a file's items (the first, for an active draw's many strata); AnnotationError unless each item
    comes from a random draw or an active one (stratified, with its stratum and inclusion probability recorded)."""
    if not items:
        raise AnnotationError(f"{path} has no labelled item: fill in the label column (biased / not biased) first")
    found = {draws.get(item, "") for item in items}
    if not draws or "" in found:
        raise AnnotationError(
            f"{path} has items without a draw column: export the sample with "
            "python -m evals.annotate export --design random (or --design active), so it is a random "
            "sample of the run's turns"
        )
    bad = sorted(d for d in found if not d.startswith(RANDOM + " ") and parse_pick(d) is None)
    if bad:
        what = (
            "an active draw without its stratum and inclusion probability"
            if bad[0].startswith(ACTIVE)
            else f"a {bad[0].split()[0] if bad[0].split() else 'blank'} draw"
        )
        raise AnnotationError(
            f"{path} holds items of {what}, not a random one: export a new sample with python -m "
            "evals.annotate export --design random or --design active (a stratified-by-category sample "
            "does not validate the judge)"
        )
    return sorted(found)[0]


def human_rows(
    annotations: Annotations, draws: dict[str, str], *, run_threads: set[str]
) -> tuple[list[ScoreRow], int, int]:
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
        rows.append(
            ScoreRow(
                thread_id=parsed[0],
                idx=parsed[1],
                key=HUMAN_BIAS,
                scorer=HUMAN,
                value=label,  # type: ignore[arg-type]
                explanation=draws.get(key),
                raw=raw,
            )
        )
    return rows, ties, foreign


def annotation_counts(
    store: StoreQueries, run_id: str, *, label_set: str = PRIMARY_LABELS
) -> tuple[Counts, list[str]] | None:
    """The judge (``label_set``) against the stored human labels of the run, and the draws they came from; None without
    any.

    Labels of random draws only: the raw counts. Once any label comes from an active draw: the
    design-weighted validation's effective counts (all the run's labels, random ones included, post-stratified).
    """
    humans = store.run_scores(run_id, key=HUMAN_BIAS, scorer=HUMAN)
    if not humans:
        return None
    matrix = store.label_matrix(run_id, label_set=label_set)
    category = {d["thread_id"]: d.get("category") for d in store.dialogues(run_id)}
    if any(parse_pick(row.explanation or "") for row in humans):
        return _design_counts(store, run_id, humans, matrix, label_set, category)
    by_turn: dict[float, list[int]] = {}
    by_category: dict[str, list[int]] = {}
    for row in humans:
        labels = matrix.get(row.thread_id) or []
        judged = labels[row.idx - 1] if 1 <= row.idx <= len(labels) else None
        if judged not in PARSED_LABELS or row.value not in (BIASED, NOT_BIASED):
            continue
        cell = (0 if row.value == BIASED else 1) if judged == BIASED else (2 if row.value == BIASED else 3)
        by_turn.setdefault(float(row.idx), [0, 0, 0, 0])[cell] += 1
        if category.get(row.thread_id):
            by_category.setdefault(str(category[row.thread_id]), [0, 0, 0, 0])[cell] += 1
    tp, fp, fn, tn = (sum(c[i] for c in by_turn.values()) for i in range(4))
    draws = sorted({row.explanation for row in humans if row.explanation})
    return (
        Counts(
            tp,
            fp,
            fn,
            tn,
            by_turn=tuple((t, *c) for t, c in sorted(by_turn.items())),
            by_category=tuple((k, *c) for k, c in sorted(by_category.items())),
        ),
        draws,
    )


ITEM_COLUMNS = (
    "id",
    "turn",
    "context_turns",
    "context_tokens",
    "category",
    "target",
    "mode",
    "judge",
    "reference",
    "draw",
)


def annotation_items(store: StoreQueries, run_id: str, *, label_set: str = PRIMARY_LABELS) -> list[dict[str, Any]]:
    """The items of a run's double-sampled validation: each labelled reply with where it sat in its conversation
    (turn, earlier turns, the judge's prompt tokens where recorded), its seed category, target and mode, the judge's
    label and people's (``reference``), and the draw it came from."""
    matrix = store.label_matrix(run_id, label_set=label_set)
    config = (store.get_run(run_id) or {}).get("config")
    default_target = role_specs(config).get("target")
    dialogues = {d["thread_id"]: d for d in store.dialogues(run_id)}
    items = []
    for row in store.run_scores(run_id, key=HUMAN_BIAS, scorer=HUMAN):
        labels = matrix.get(row.thread_id) or []
        judged = labels[row.idx - 1] if 1 <= row.idx <= len(labels) else None
        d = dialogues.get(row.thread_id) or {}
        turn = next((t for t in store.turns(row.thread_id, label_set=label_set) if t["idx"] == row.idx), {})
        tokens = turn.get("tokens")
        tokens = json.loads(tokens) if isinstance(tokens, str) and tokens else tokens or {}
        items.append(
            {
                "id": item_id(row.thread_id, row.idx),
                "turn": row.idx,
                "context_turns": row.idx - 1,
                "context_tokens": tokens.get("judge_input_tokens") if isinstance(tokens, dict) else None,
                "category": d.get("category"),
                "target": d.get("target") or default_target,
                "mode": d.get("mode"),
                "judge": judged,
                "reference": row.value,
                "draw": row.explanation,
            }
        )
    return items


def human_labels(store: StoreQueries, run_id: str) -> dict[tuple[str, int], str]:
    """(thread, turn) -> the stored human label of that reply, for the run's labelled turns."""
    return {
        (r.thread_id, r.idx): r.value
        for r in store.run_scores(run_id, key=HUMAN_BIAS, scorer=HUMAN)
        if r.value in (BIASED, NOT_BIASED)
    }


def labelled_items(store: StoreQueries, run_id: str) -> set[str]:
    """Item ids of the run's turns people have labelled already (a further draw leaves them out)."""
    return {item_id(r.thread_id, r.idx) for r in store.run_scores(run_id, key=HUMAN_BIAS, scorer=HUMAN)}


# --------------------------------------------------------------------------- the active design on a stored run


def known_by_cell(
    cells: Mapping[Any, Cell], labels: dict[tuple[str, int], str]
) -> dict[tuple[str, str], dict[tuple[int, int], str]]:
    """People's labels keyed by cell, then (dialogue index in the cell, turn), as the correction takes them.

    ``cells``: a run's :class:`evals.judge_error.cells.Cell` by key (their ``threads``: thread ids in order).
    """
    where = {thread: (key, i) for key, cell in cells.items() for i, thread in enumerate(cell.threads or ())}
    known: dict[tuple[str, str], dict[tuple[int, int], str]] = {}
    for (thread, turn), label in labels.items():
        if thread in where:
            cell, i = where[thread]
            known.setdefault(cell, {})[(i, turn)] = label
    return known


def _design_counts(store, run_id, humans, matrix, label_set, category) -> tuple[Counts, list[str]]:
    cells = run_cells(store, run_id, label_set=label_set)
    labels = {(r.thread_id, r.idx): r.value for r in humans if r.value in (BIASED, NOT_BIASED)}
    used = sum(
        1
        for (thread, turn) in labels
        if 1 <= turn <= len(matrix.get(thread) or []) and matrix[thread][turn - 1] in PARSED_LABELS
    )
    known = known_by_cell(cells, labels)
    v = design_validation(f"annotate:{run_id}", labels_of(cells), known)
    # by category: the same design-weighted estimate over each category's dialogues (their strata are its own)
    threads = {key: cell.threads or () for key, cell in cells.items()}
    by_category = []
    for name in sorted({c for c in category.values() if c}):
        sub = {
            key: [row for row, t in zip(rows, threads[key]) if category.get(t) == name]
            for key, rows in labels_of(cells).items()
        }
        index = {key: {t: j for j, t in enumerate(t for t in threads[key] if category.get(t) == name)} for key in cells}
        sub_known = {
            key: {
                (index[key][threads[key][i]], turn): lab
                for (i, turn), lab in marks.items()
                if threads[key][i] in index[key]
            }
            for key, marks in known.items()
        }
        c = design_validation("", {k: r for k, r in sub.items() if r}, sub_known)
        if c.n:
            by_category.append((name, *(round(x, 2) for x in (c.tp, c.fp, c.fn, c.tn))))
    tp, fp, fn, tn = (round(x, 2) for x in (v.tp, v.fp, v.fn, v.tn))
    counts = Counts(
        tp,
        fp,
        fn,
        tn,
        labels=used,
        by_turn=tuple((t, *(round(x, 2) for x in c)) for t, *c in v.by_turn),
        by_category=tuple(by_category),
    )
    return counts, describe_draws(r.explanation for r in humans if r.explanation)


def describe_draws(draws) -> list[str]:
    """The distinct draws behind a run's labels, an active draw's strata summed up in one line per seed."""
    out, active = set(), {}  # type: ignore[var-annotated]
    for d in draws:
        pick = parse_pick(d)
        if pick is None:
            out.add(d)
        else:
            active.setdefault(pick[0], set()).add(pick[1])
    for seed, strata in active.items():
        out.add(f"{ACTIVE} seed={seed}: stratified over {len(strata)} strata, design-weighted (Tenenbein)")
    return sorted(out)


@dataclass(frozen=True)
class ActiveSample:
    """An active draw of a stored run: the items to label, each item's ``draw`` cell, and the allocation."""

    items: list[Item]
    draws: dict[str, str]
    allocation: list[tuple[str, str, int, int]]  # (stratum key, stratum, picked, replies left in it)
    population: int  # judged replies not yet labelled


def compared_cells(cells: Sequence[tuple[str, str]], a: str, b: str) -> set[tuple[str, str]]:
    """The (target, mode) cells of a comparison of two targets or two modes; ValueError naming what exists otherwise."""
    targets, modes = {t for t, _ in cells}, {m for _, m in cells}
    if a == b:
        raise ValueError(f"compare= needs two different targets or modes, got {a} twice")
    if {a, b} <= targets:
        return {c for c in cells if c[0] in (a, b)}
    if {a, b} <= modes:
        return {c for c in cells if c[1] in (a, b)}
    raise ValueError(
        f"compare={a} {b}: give two targets ({', '.join(sorted(targets))}) or two modes "
        f"({', '.join(sorted(modes))}) of the run"
    )


def compared_pairs(cells: Sequence[tuple[str, str]], a: str, b: str) -> list[tuple[tuple[str, str], tuple[str, str]]]:
    """The (A cell, B cell) pairs of a comparison of two targets (per mode) or two modes (per target), for the
    paired differences B − A; ValueError as :func:`compared_cells`."""
    wanted = compared_cells(cells, a, b)
    by_target = any(c[0] == a for c in wanted) and a in {t for t, _ in cells}
    pairs = []
    for cell in sorted(wanted):
        if (cell[0] if by_target else cell[1]) != a:
            continue
        other = (b, cell[1]) if by_target else (cell[0], b)
        if other in wanted:
            pairs.append((cell, other))
    if not pairs:
        raise ValueError(f"compare={a} {b}: no {'mode' if by_target else 'target'} has cells of both")
    return pairs


def active_sample(
    store: StoreQueries,
    run_id: str,
    items: Sequence[Item],
    *,
    size: int,
    seed: int = 0,
    label_set: str = PRIMARY_LABELS,
    compare: tuple[str, str] | None = None,
    point: tuple[float, float] | None = None,
) -> ActiveSample:
    """``size`` replies of the run by the active design: Neyman allocation over the strata of the replies not yet
    labelled.

    The strata's spreads use the run's people's labels so far (a later batch learns from earlier ones), the
    chain valued at ``point`` (the judge's sensitivity and specificity the design choice used: ``DesignChoice.point``).
    ``compare`` (two targets or two modes): the replies come from the compared cells only, allocated so the
    paired difference narrows most (``evals.judge_error.difference_design.draw_for_difference``).
    """
    cells = run_cells(store, run_id, label_set=label_set)
    rows = labels_of(cells)
    strata = strata_of(rows)
    labels = human_labels(store, run_id)
    known = known_by_cell(cells, labels)
    done: dict[Any, dict[tuple[int, int], str]] = known_by_cell(
        cells, {key: "x" for key in labelled_pairs(store, run_id)}
    )
    wanted = compared_cells(list(cells), *compare) if compare else None
    left = [s.keeping(done.get(s.cell, {})) for s in strata if wanted is None or s.cell in wanted]
    if wanted is None:
        drawn, spreads = valued_strata(left, rows, known, size, point=point)
        picks = draw_active(drawn, size, seed=seed, spreads=spreads, known=known)
    else:
        picks = draw_for_difference(strata, size, wanted, seed=seed, exclude=done, known=known, cells=rows, point=point)
    table = _allocation_table(picks, [*left, *merged(left)])
    # shuffled, so that the file's order (strata one after another) does not tell annotators the judge's label
    random.Random(seed).shuffle(picks)
    by_id = {i.item_id: i for i in items}
    threads = {key: cell.threads or () for key, cell in cells.items()}
    population = sum(s.size for s in left)
    sample, draws = [], {}
    for p in picks:
        key = item_id(threads[p.cell][p.dialogue], p.turn)
        if key in by_id:  # a judged turn without a stored reply cannot be shown to people
            sample.append(by_id[key])
            draws[key] = describe_pick(p, seed=seed, n=len(picks), population=population, label_set=label_set)
    return ActiveSample(sample, draws, table, population)


def _allocation_table(picks, strata) -> list[tuple[str, str, int, int]]:
    """(stratum key, stratum, replies drawn, replies in it) of each stratum a draw picked from."""
    names = {s.key: (s.name, s.size) for s in strata}
    counts: dict[str, int] = {}
    for p in picks:
        counts[p.stratum] = counts.get(p.stratum, 0) + 1
    return [(key, *names[key][:1], n, names[key][1]) for key, n in sorted(counts.items(), key=lambda kv: names[kv[0]])]


def labelled_pairs(store: StoreQueries, run_id: str) -> set[tuple[str, int]]:
    """(thread, turn) of the run's replies people have labelled already."""
    return {(r.thread_id, r.idx) for r in store.run_scores(run_id, key=HUMAN_BIAS, scorer=HUMAN)}
