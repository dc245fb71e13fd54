"""Every draw of a cell: validation draw k of (sensitivity, specificity) with bootstrap weights k, fitted and measured.

Poisson bootstrap weights come from one random stream per cluster key (a seed), so cells on the same seeds
share them and two results can be subtracted draw by draw (a paired difference). Draws are fitted in
chunks to keep a large cell's arrays small; the chunking changes no number.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence

import numpy as np

from evals.judge_error.cells import Cell
from evals.judge_error.chain import emissions, posterior_metrics
from evals.judge_error.fit import fit

_CHUNK = 2_000_000  # draws × dialogues × turns per batch: ~8 MB per float32 array of the forward-backward


def cluster_weights(clusters: Sequence[Hashable], draws: int, seed: int) -> np.ndarray:
    """(draws, N) Poisson(1) bootstrap weights, one stream per cluster key, so cells sharing a seed share its weights."""
    columns: dict[Hashable, np.ndarray] = {}
    for key in dict.fromkeys(clusters):
        digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
        rng = np.random.default_rng([seed, 0xB007, int.from_bytes(digest, "little")])
        columns[key] = rng.poisson(1.0, size=draws).astype(np.float64)
    return np.stack([columns[k] for k in clusters], axis=1) if clusters else np.zeros((draws, 0))


def _unique(cell: Cell, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge dialogues with identical labels and length (their weights add): the same result, less work."""
    keyed = np.concatenate([cell.y.astype(np.int64), cell.length[:, None]], axis=1)
    rows, inverse = np.unique(keyed, axis=0, return_inverse=True)
    merged = np.zeros((weights.shape[0], len(rows)))
    np.add.at(merged.T, inverse.ravel(), weights.T)
    return rows[:, :-1].astype(np.int8), rows[:, -1], merged


def point_and_draws(cell: Cell, point: tuple[float, float], sens: np.ndarray, spec: np.ndarray, weights: np.ndarray):
    """Metrics at the point estimate (all dialogues once) and for every draw (warm-started from the point fit)."""
    at_point, theta = run_draws(cell, np.array([point[0]]), np.array([point[1]]), np.ones((1, weights.shape[1])))
    drawn, _ = run_draws(cell, sens, spec, weights, start=theta)
    return at_point, drawn


def run_draws(cell: Cell, sens: np.ndarray, spec: np.ndarray, weights: np.ndarray, start=None):
    """Fit every draw (sensitivity, specificity, bootstrap weights) and return (metrics, fitted parameters)."""
    y, length, merged = _unique(cell, weights)
    # draws in chunks, so that a large cell's (turns × draws × dialogues) arrays stay small in memory
    size = max(1, _CHUNK // max(1, y.shape[0] * y.shape[1]))
    if start is not None and len(start) == 1:
        start = np.repeat(start, len(sens), axis=0)
    parts, thetas = [], []
    for i in range(0, len(sens), size):
        part = slice(i, i + size)
        theta, reach = fit(y, length, merged[part], sens[part], spec[part], None if start is None else start[part])
        e1, e0 = emissions(y, sens[part], spec[part])
        parts.append(posterior_metrics(y, length, merged[part], theta, reach, e1, e0))
        thetas.append(theta)
    metrics = tuple(np.concatenate([p[j] for p in parts]) for j in range(len(parts[0])))
    return metrics, np.concatenate(thetas)
