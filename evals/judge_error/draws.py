"""Every draw of every cell: validation draw k with bootstrap weights k, fitted and measured, cells stacked.

Poisson bootstrap weights come from one random stream per cluster key (a seed), so cells on the same seeds
share them and two results can be subtracted draw by draw (a paired difference). Dialogues with the same
labels are merged (their weights add), cells are stacked into one padded array so that one vectorised fit
serves them all, and rows are fitted in chunks to keep the arrays small; none of this changes a number.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from evals.judge_error.cells import Cell
from evals.judge_error.chain import ChainMetrics, emissions, posterior_metrics
from evals.judge_error.codes import MISSING
from evals.judge_error.fit import fit

__all__ = ["Stack", "cluster_weights", "fit_stack", "run_draws", "stack"]

_CHUNK = 2_000_000  # rows × dialogues × turns per batch: ~8 MB per float32 array of the forward-backward


def cluster_weights(clusters: Sequence[Hashable], draws: int, seed: int) -> np.ndarray:
    """(draws, N) Poisson(1) bootstrap weights, one stream per cluster key, so cells sharing a seed share its
    weights."""
    columns: dict[Hashable, np.ndarray] = {}
    for key in dict.fromkeys(clusters):
        digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
        rng = np.random.default_rng([seed, 0xB007, int.from_bytes(digest, "little")])
        columns[key] = rng.poisson(1.0, size=draws).astype(np.float64)
    return np.stack([columns[k] for k in clusters], axis=1) if clusters else np.zeros((draws, 0))


@dataclass(frozen=True)
class Stack:
    """Cells stacked for one vectorised fit: each cell's distinct label rows, padded to a common count.

    ``y`` (S, U, T) codes (padding rows carry no label), ``length`` (S, U), ``counts`` (S, U) dialogues per
    row, for each cell ``members`` (N,) the row of each of its dialogues, and ``groups`` (S, U) each row's
    judge-error group (its index in ``group_names``: the cell's seed categories; 0 for a cell without groups).
    """

    y: np.ndarray
    length: np.ndarray
    counts: np.ndarray
    members: tuple[np.ndarray, ...]
    groups: np.ndarray | None = None
    group_names: tuple[tuple[str | None, ...], ...] = ()

    def merged(self, i: int, weights: np.ndarray) -> np.ndarray:
        """(K, U) weights of cell ``i``'s rows from (K, N) weights of its dialogues."""
        out = np.zeros((weights.shape[0], self.y.shape[1]))
        np.add.at(out.T, self.members[i], weights.T)
        return out


def stack(cells: Sequence[Cell], grouped: Sequence[bool] | None = None) -> Stack:
    """Merge each cell's dialogues with identical labels, length (and group), and pad the cells to one array.

    ``grouped``: which cells' dialogues are judged with their category's error (their rows keep categories apart).
    """
    t_max = max(c.y.shape[1] for c in cells)
    rows, members, names = [], [], []
    for i, cell in enumerate(cells):
        y = np.full((cell.y.shape[0], t_max), MISSING, dtype=np.int64)
        y[:, : cell.y.shape[1]] = cell.y
        use = bool(grouped and grouped[i] and cell.kept_categories is not None)
        cats = tuple(sorted({c for c in cell.kept_categories or () if c is not None}, key=str)) if use else ()
        index: dict[str | None, int] = {c: j + 1 for j, c in enumerate(cats)}  # 0: no known category
        g = (
            np.array([index.get(c, 0) for c in cell.kept_categories or ()], dtype=np.int64)
            if use
            else np.zeros(len(y), np.int64)
        )
        keyed = np.concatenate([y, cell.length[:, None], g[:, None]], axis=1)
        unique, inverse = np.unique(keyed, axis=0, return_inverse=True)
        rows.append(unique)
        members.append(inverse.ravel())
        names.append((None, *cats))
    width = max(len(r) for r in rows)
    y = np.full((len(cells), width, t_max), MISSING, dtype=np.int8)
    length = np.ones((len(cells), width), dtype=np.int64)
    counts = np.zeros((len(cells), width))
    groups = np.zeros((len(cells), width), dtype=np.int64)
    for i, (unique, inverse) in enumerate(zip(rows, members)):
        y[i, : len(unique)] = unique[:, :-2]
        length[i, : len(unique)] = unique[:, -2]
        groups[i, : len(unique)] = unique[:, -1]
        counts[i] = np.bincount(inverse, minlength=width)
    return Stack(y=y, length=length, counts=counts, members=tuple(members), groups=groups, group_names=tuple(names))


class Fitted(NamedTuple):
    """Rows fitted and measured: their metrics (each array's first axis the rows) and their fitted parameters."""

    metrics: ChainMetrics
    theta: np.ndarray  # (rows, 4T − 3)


class StackFit(NamedTuple):
    """A stack's cells fitted at their point estimates and for every draw (``fit_stack``)."""

    at_point: ChainMetrics  # each (S, ...)
    drawn: ChainMetrics  # each (S, K, ...)
    theta: np.ndarray  # (S, 4T − 3): the point fits the draws start from


def _fit_rows(y, length, weights, sens, spec, start=None, groups=None) -> Fitted:
    """Fit and measure rows (each with its own labels, weights, sensitivity and specificity) in chunks.

    ``groups`` (rows, U): each dialogue row's judge-error group, with ``sens``, ``spec`` (rows, G, T).
    """
    size = max(1, _CHUNK // max(1, y.shape[1] * y.shape[2]))
    parts, thetas = [], []
    for i in range(0, len(sens), size):
        part = slice(i, i + size)
        yy, ll = y[part], length[part]
        gg = None if groups is None else groups[part]
        theta, reach = fit(
            yy, ll, weights[part], sens[part], spec[part], None if start is None else start[part], groups=gg
        )
        e1, e0 = emissions(yy, sens[part], spec[part], gg)
        parts.append(posterior_metrics(yy, ll, weights[part], theta, reach, e1, e0))
        thetas.append(theta)
    metrics = ChainMetrics._make(np.concatenate(arrays) for arrays in zip(*parts))
    return Fitted(metrics, np.concatenate(thetas))


def fit_stack(st: Stack, points: np.ndarray, sens: np.ndarray, spec: np.ndarray, weights: np.ndarray) -> StackFit:
    """Metrics at each cell's point estimate and for each of its draws.

    ``points`` (S, 2) each cell's (sensitivity, specificity) point estimate, or (S, 2, T) the judge's error at each
    turn, or (S, 2, G, T) by turn for each judge-error group of ``st.groups``; ``sens``, ``spec`` (S, K) its
    validation draws, or (S, K, T) by turn, or (S, K, G, T); ``weights`` (S, K, U) its rows' bootstrap weights.
    Returns the metrics at the point estimates (each (S, ...)), for every draw (each (S, K, ...)) and the point
    fits (S, 4T − 3), from which the draws start.
    """
    n_cells, k = sens.shape[:2]
    grouped = sens.ndim == 4  # (S, K, G, T): each dialogue row judged with its group's error
    groups = st.groups if grouped else None
    at_point, theta = _fit_rows(st.y, st.length, st.counts, points[:, 0], points[:, 1], groups=groups)
    rows = np.repeat(np.arange(n_cells), k)
    flat_s, flat_p = sens.reshape(n_cells * k, *sens.shape[2:]), spec.reshape(n_cells * k, *spec.shape[2:])
    drawn, _ = _fit_rows(
        st.y[rows],
        st.length[rows],
        weights.reshape(n_cells * k, -1),
        flat_s,
        flat_p,
        start=theta[rows],
        groups=None if groups is None else groups[rows],
    )
    return StackFit(at_point, ChainMetrics._make(x.reshape(n_cells, k, *x.shape[1:]) for x in drawn), theta)


def run_draws(cell: Cell, sens: np.ndarray, spec: np.ndarray, weights: np.ndarray, start=None) -> Fitted:
    """Fit every draw of one cell (sensitivity, specificity, dialogue weights): its metrics and fitted
    parameters."""
    st = stack([cell])
    merged = st.merged(0, weights)
    k = len(sens)
    y, length = np.repeat(st.y, k, axis=0), np.repeat(st.length, k, axis=0)
    if start is not None and len(start) == 1:
        start = np.repeat(start, k, axis=0)
    return _fit_rows(y, length, merged, np.asarray(sens, float), np.asarray(spec, float), start)
