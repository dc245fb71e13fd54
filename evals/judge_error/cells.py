"""One target × mode cell of a run (``Cell``): its dialogues' judge labels in one order, with each dialogue's seed
(its cluster), thread and seed category, people's labels of its replies, and the turns it is corrected over; and
the same cell as the array of codes the chain is fitted on (``Cell.y``, ``Cell.length``), computed from those.

Encoding drops dialogues without a parsed label (they say nothing); a dialogue ends at its last labelled turn, and
people's labels of sampled turns replace the judge's. A run's cells are a mapping of key (``(target, mode)``, or
any key) to ``Cell`` (``cells_of``, ``run_cells``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from checkpoints.queries import StoreQueries
from checkpoints.run_record import role_specs, run_settings
from checkpoints.vocabulary import PRIMARY_LABELS
from evals.judge_error.codes import KNOWN_BIASED, KNOWN_NOT, MISSING, LabelLike, RowLike, code
from evals.judge_error.validation import CorrectionRefused


@dataclass(frozen=True, eq=False)
class Cell:
    """One cell's dialogues, in one order.

    ``labels``: one label row per dialogue (turn t at index t − 1; 1/0/None or the store's
    "biased"/"not_biased"/"unparsed"/None). ``clusters``: one key per dialogue (its seed id), so that repeated
    samples of a seed are resampled together and two cells on the same seeds are paired (None: each dialogue its
    own). ``threads``: each dialogue's thread id (to match people's labels to it). ``categories``: each dialogue's
    seed category (None: not known; the judge's error may differ by category). ``known``: (dialogue index, turn
    from 1) → a person's label of that reply, whose true label then needs no inference (double sampling).
    ``turns``: the turns the cell is corrected over (None: its longest row).

    What the chain is fitted on, computed when first asked for: ``y`` (N, T) codes in 0..4
    (``evals.judge_error.codes``) and ``length`` (N,) = last labelled turn, of the kept dialogues (those with a
    parsed or a person's label), whose clusters and categories are ``kept_clusters`` and ``kept_categories``.
    Asking for them raises ``CorrectionRefused`` when nothing in the cell can be corrected.
    """

    labels: Sequence[RowLike]
    clusters: Sequence[Hashable] | None = None
    threads: Sequence[str] | None = None
    categories: Sequence[str | None] | None = None
    known: Mapping[tuple[int, int], LabelLike] | None = None
    turns: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.labels, (str, bytes)):
            raise TypeError("labels must be a list of per-dialogue label lists")
        n = len(self.labels)
        for name in ("clusters", "threads", "categories"):
            given = getattr(self, name)
            if given is not None and len(given) != n:
                raise ValueError(f"{name} ({len(given)}) and labels ({n}) differ in length")
        for i, turn in self.known or {}:
            if not (
                isinstance(i, (int, np.integer))
                and 0 <= i < n
                and isinstance(turn, (int, np.integer))
                and 1 <= turn <= self.width
            ):
                raise ValueError(
                    f"known label at {(i, turn)!r} is outside the cell: keys are (dialogue index, turn from 1)"
                )

    @property
    def width(self) -> int:
        """The turns the cell is corrected over: ``turns``, else its longest row."""
        if self.turns is not None:
            return self.turns
        return max((len(row) for row in self.labels), default=0)

    @property
    def y(self) -> np.ndarray:
        return self._encoded[0]

    @property
    def length(self) -> np.ndarray:
        return self._encoded[1]

    @property
    def kept(self) -> np.ndarray:
        """Which of ``labels``' dialogues are kept (N bools over all of them)."""
        return self._encoded[2]

    @property
    def kept_clusters(self) -> tuple[Hashable, ...]:
        """The kept dialogues' cluster keys (their indices in ``labels`` when ``clusters`` is None)."""
        keys = range(len(self.labels)) if self.clusters is None else self.clusters
        return tuple(k for k, kept in zip(keys, self._encoded[2]) if kept)

    @property
    def kept_categories(self) -> tuple[str | None, ...] | None:
        if self.categories is None:
            return None
        return tuple(c for c, kept in zip(self.categories, self._encoded[2]) if kept)

    @cached_property
    def _encoded(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(``y``, ``length``, which dialogues are kept)."""
        width = self.width
        if width < 1:
            raise CorrectionRefused("no corrected rates: no turns to correct")
        rows = [[code(x) for x in row] for row in self.labels]
        y = np.full((len(rows), width), MISSING, dtype=np.int8)
        for i, r in enumerate(rows):
            r = r[:width]
            y[i, : len(r)] = r
        # A row padded with None past its end (a dialogue that stopped early) has no replies there: its
        # length is its last turn with any label, unparsed included (an unparsed reply exists).
        length = np.array(
            [max((j + 1 for j, x in enumerate(list(seq)[:width]) if x is not None), default=1) for seq in self.labels],
            dtype=np.int64,
        )
        for (i, turn), label in (self.known or {}).items():
            truth = code(label)
            if truth != MISSING:
                y[i, turn - 1] = KNOWN_BIASED if truth else KNOWN_NOT
                length[i] = max(length[i], turn)
        keep = (y != MISSING).any(axis=1)
        if not keep.any():
            raise CorrectionRefused("no corrected rates: no dialogue in this cell has a parsed label")
        return y[keep], length[keep], keep


def with_known(cells: Mapping[Any, Cell], known: Mapping[Any, Mapping[tuple[int, int], LabelLike]]) -> dict[Any, Cell]:
    """The cells with people's labels (by key, then (dialogue index, turn from 1)) added to their own."""
    return {
        key: replace(cell, known={**(cell.known or {}), **known[key]}) if known.get(key) else cell
        for key, cell in cells.items()
    }


def known_of(cells: Mapping[Any, Cell]) -> dict[Any, Mapping[tuple[int, int], LabelLike]]:
    """Each cell's people's labels, by key (cells without any left out)."""
    return {key: cell.known for key, cell in cells.items() if cell.known}


def labels_of(cells: Mapping[Any, Cell]) -> dict[Any, Sequence[RowLike]]:
    """Each cell's label rows, by key (what the labelling designs draw replies from)."""
    return {key: cell.labels for key, cell in cells.items()}


def cells_of(
    dialogues: Sequence[dict[str, Any]],
    matrix: Mapping[str, Sequence[str | None]],
    *,
    default_target: str | None,
    turns: int | None = None,
) -> dict[Any, Cell]:
    """A run's cells by (target, mode), each dialogue in the order of ``dialogues`` (the store's rows), with its seed
    id (the cluster), thread id and category; dialogues without labels are left out."""
    found: dict[Any, list[dict[str, Any]]] = {}
    for d in dialogues:
        if d["thread_id"] in matrix:
            found.setdefault((d.get("target") or default_target or "", d["mode"]), []).append(d)
    return {
        key: Cell(
            [list(matrix[d["thread_id"]]) for d in members],
            [d.get("seed_id") or d["thread_id"] for d in members],
            [d["thread_id"] for d in members],
            [d.get("category") for d in members],
            turns=turns,
        )
        for key, members in found.items()
    }


def run_cells(store: StoreQueries, run_id: str, *, label_set: str = PRIMARY_LABELS) -> dict[Any, Cell]:
    """A stored run's cells, as the correction groups them; ``turns`` is the run's, or its longest dialogue's."""
    config = (store.get_run(run_id) or {}).get("config")
    dialogues = store.dialogues(run_id)
    matrix = store.label_matrix(run_id, label_set=label_set)
    longest = max((len(matrix[d["thread_id"]]) for d in dialogues if d["thread_id"] in matrix), default=1)
    turns = max(int(run_settings(config).get("turns") or 0), longest)
    return cells_of(dialogues, matrix, default_target=role_specs(config).get("target"), turns=turns)


def run_width(cells: Mapping[Any, Cell]) -> int:
    """The turns a run's cells are corrected over: the widest cell's (at least 1)."""
    return max((cell.width for cell in cells.values()), default=1) or 1
