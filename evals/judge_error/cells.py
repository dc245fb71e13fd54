"""One target × mode cell's label sequences as an array of codes, with each dialogue's length and cluster key.

The cell is what the chain is fitted on: dialogues without a parsed label are dropped (they say nothing),
a dialogue ends at its last labelled turn, and people's labels of sampled turns replace the judge's.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evals.judge_error.codes import KNOWN_BIASED, KNOWN_NOT, MISSING, Label, Row, code
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
    sequences: Sequence[Row],
    turns: int | None,
    clusters: Sequence[Hashable] | None,
    known: Mapping[tuple[int, int], Label] | None = None,
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
