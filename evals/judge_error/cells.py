"""A run's target × mode cells: their label sequences as read from the store (``RunCells``), and one cell as the
array of codes the chain is fitted on (``Cell``), with each dialogue's length and cluster key.

Encoding drops dialogues without a parsed label (they say nothing); a dialogue ends at its last labelled turn, and
people's labels of sampled turns replace the judge's.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from checkpoints.queries import StoreQueries
from checkpoints.run_record import role_specs, run_settings
from checkpoints.vocabulary import PRIMARY_LABELS
from evals.judge_error.codes import KNOWN_BIASED, KNOWN_NOT, MISSING, LabelLike, RowLike, code
from evals.judge_error.validation import CorrectionRefused


@dataclass(frozen=True)
class Cell:
    """A cell's kept dialogues as codes: ``y`` (N, T) in 0..4 (``codes``), ``length`` (N,) = last labelled turn."""

    y: np.ndarray
    length: np.ndarray
    clusters: tuple[Hashable, ...]
    # each kept dialogue's seed category (None: not known); the judge's error may differ by category
    categories: tuple[str | None, ...] | None = None


def encode_cell(
    sequences: Sequence[RowLike],
    turns: int | None,
    clusters: Sequence[Hashable] | None,
    known: Mapping[tuple[int, int], LabelLike] | None = None,
    categories: Sequence[str | None] | None = None,
) -> Cell:
    """Encode a cell, dropping dialogues without a parsed label; a dialogue ends at its last labelled turn.

    ``known`` maps (dialogue index, turn) to a person's label of that reply: its true label is then
    known (double sampling), coded 3 (biased) or 4 (not biased) in place of the judge's label.
    """
    if isinstance(sequences, (str, bytes)):
        raise TypeError("sequences must be a list of per-dialogue label lists")
    if clusters is not None and len(clusters) != len(sequences):
        raise ValueError(f"clusters ({len(clusters)}) and sequences ({len(sequences)}) differ in length")
    if categories is not None and len(categories) != len(sequences):
        raise ValueError(f"categories ({len(categories)}) and sequences ({len(sequences)}) differ in length")
    rows = [[code(x) for x in row] for row in sequences]
    width = turns if turns is not None else max((len(r) for r in rows), default=0)
    if width < 1:
        raise CorrectionRefused("no corrected rates: no turns to correct")
    y = np.full((len(rows), width), MISSING, dtype=np.int8)
    for i, r in enumerate(rows):
        r = r[:width]
        y[i, : len(r)] = r
    # A row padded with None past its end (a dialogue that stopped early) has no replies there: its
    # length is its last turn with any label, unparsed included (an unparsed reply exists).
    length = np.array(
        [max((j + 1 for j, x in enumerate(list(seq)[:width]) if x is not None), default=1) for seq in sequences],
        dtype=np.int64,
    )
    for (i, turn), label in (known or {}).items():
        if not (
            isinstance(i, (int, np.integer))
            and 0 <= i < len(rows)
            and isinstance(turn, (int, np.integer))
            and 1 <= turn <= width
        ):
            raise ValueError(
                f"known label at {(i, turn)!r} is outside the cell: keys are (dialogue index, turn from 1)"
            )
        truth = code(label)
        if truth != MISSING:
            y[i, turn - 1] = KNOWN_BIASED if truth else KNOWN_NOT
            length[i] = max(length[i], turn)
    keep = (y != MISSING).any(axis=1)
    if not keep.any():
        raise CorrectionRefused("no corrected rates: no dialogue in this cell has a parsed label")
    keys = tuple(range(len(rows))) if clusters is None else tuple(clusters)
    return Cell(
        y=y[keep],
        length=length[keep],
        clusters=tuple(k for k, kept in zip(keys, keep) if kept),
        categories=None if categories is None else tuple(c for c, kept in zip(categories, keep) if kept),
    )


@dataclass(frozen=True)
class RunCells:
    """A run's judge labels by cell (``(target, mode)``, or any key), each cell's dialogues in one order: their
    label rows, seed ids (the bootstrap's clusters), thread ids and seed categories, and the run's number of turns
    (None: each cell's longest row)."""

    sequences: dict[Any, list[list[str | None]]]
    clusters: dict[Any, list[Hashable]] = field(default_factory=dict)
    threads: dict[Any, list[str]] = field(default_factory=dict)
    categories: dict[Any, list[str | None]] = field(default_factory=dict)
    turns: int | None = None

    @property
    def width(self) -> int:
        """The turns the cells are corrected over: ``turns``, else the longest row (at least 1)."""
        if self.turns is not None:
            return self.turns
        return max((len(row) for rows in self.sequences.values() for row in rows), default=1)


def cells_of(
    dialogues: Sequence[dict[str, Any]],
    matrix: Mapping[str, Sequence[str | None]],
    *,
    default_target: str | None,
    turns: int | None = None,
) -> RunCells:
    """Label sequences by (target, mode), in the order of ``dialogues`` (the store's rows); dialogues without labels
    are left out."""
    cells = RunCells({}, turns=turns)
    for d in dialogues:
        if d["thread_id"] not in matrix:
            continue
        key = (d.get("target") or default_target or "", d["mode"])
        cells.sequences.setdefault(key, []).append(list(matrix[d["thread_id"]]))
        cells.clusters.setdefault(key, []).append(d.get("seed_id") or d["thread_id"])
        cells.threads.setdefault(key, []).append(d["thread_id"])
        cells.categories.setdefault(key, []).append(d.get("category"))
    return cells


def run_cells(store: StoreQueries, run_id: str, *, label_set: str = PRIMARY_LABELS) -> RunCells:
    """A stored run's cells, as the correction groups them; ``turns`` is the run's, or its longest dialogue's."""
    config = (store.get_run(run_id) or {}).get("config")
    found = cells_of(
        store.dialogues(run_id),
        store.label_matrix(run_id, label_set=label_set),
        default_target=role_specs(config).get("target"),
    )
    longest = max((len(row) for rows in found.sequences.values() for row in rows), default=1)
    turns = max(int(run_settings(config).get("turns") or 0), longest)
    return RunCells(found.sequences, found.clusters, found.threads, found.categories, turns)
