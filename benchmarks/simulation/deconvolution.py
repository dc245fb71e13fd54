"""The model-free correction: unbiased estimates of every metric by inverting the judge's error turn by turn.

Given the judge's sensitivity and specificity, the distribution of a dialogue's true label sequence is a
linear image of the distribution of its judged sequence (the judge errs independently at each turn), so
any metric that is an expectation over true sequences has an unbiased estimate: the mean over dialogues
of a product of per-turn weights, the rows of the inverse of the judge's 2 × 2 error matrix
(Rogan & Gladen 1978 at one turn). No model of how bias moves across turns is assumed; the price is
variance that grows with the number of turns a metric spans, like the product of the weights' squares.
It is the correction's comparison method (docs/judge-error.md): the same draws (validation × Poisson
bootstrap of seeds) give its intervals, clipped to [0, 1].
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from evals.judge_error.cells import Cell
from evals.judge_error.codes import KNOWN_BIASED, KNOWN_NOT, MISSING

__all__ = ["Deconvolved", "deconvolved_metrics"]


class Deconvolved(NamedTuple):
    """Every metric per draw, named as ``evals.metric_registry`` and the chain's ``ChainMetrics`` name them."""

    per_turn: np.ndarray  # (K, T)
    cumulative: np.ndarray  # (K, T)
    re_emergence: np.ndarray  # (K,)
    first_bias_median: np.ndarray  # (K,)
    first_bias_mean: np.ndarray  # (K,)


def _weights(sens: np.ndarray, spec: np.ndarray) -> np.ndarray:
    """(K, T, 2, 5): weight of truth z (0/1) for an observation code, per draw and turn; rows of the inverse error
    matrix (``sens``, ``spec`` (K, T): the judge's error at each turn).

    Code 2 (no label) has no unbiased weight: dialogues missing a label a metric needs are left out of it.
    """
    j = sens + spec - 1
    w = np.zeros((*sens.shape, 2, 5))
    w[..., 0, 0], w[..., 0, 1] = sens / j, -(1 - sens) / j
    w[..., 1, 0], w[..., 1, 1] = -(1 - spec) / j, spec / j
    w[..., 0, KNOWN_NOT], w[..., 1, KNOWN_BIASED] = 1.0, 1.0
    return w


def deconvolved_metrics(cell: Cell, sens: np.ndarray, spec: np.ndarray, weights: np.ndarray) -> Deconvolved:
    """Per-turn, cumulative, re-emergence, first-bias median and mean for each draw: arrays like the chain's.

    ``sens``, ``spec``: (K,) or (K, T), the judge's error at each turn. ``weights`` (K, N) are the draws' bootstrap
    weights of the cell's dialogues. A dialogue counts in a
    per-turn rate where it has a label at that turn, and in the other metrics up to its last turn before a
    missing label (its labels there must all be present for the estimate to be unbiased).
    """
    y = cell.y.astype(np.intp)
    k, (n, t_max) = len(sens), y.shape
    sens, spec = np.asarray(sens, float), np.asarray(spec, float)
    if sens.ndim == 1:  # one judge error for every turn
        sens, spec = np.repeat(sens[:, None], t_max, axis=1), np.repeat(spec[:, None], t_max, axis=1)
    w = _weights(sens[:, :t_max], spec[:, :t_max])  # (K, T, 2, 5)
    turn = np.arange(t_max)[None, None, :]
    f0 = w[np.arange(k)[:, None, None], turn, 0, y[None]]  # (K, N, T)
    f1 = w[np.arange(k)[:, None, None], turn, 1, y[None]]
    present = (y != MISSING) & (np.arange(t_max)[None, :] < cell.length[:, None])
    complete = np.cumprod(present, axis=1).astype(bool)  # labelled at every turn up to t
    per_turn = np.full((k, t_max), np.nan)
    cumulative = np.full((k, t_max), np.nan)
    first = np.zeros((k, t_max))
    # automaton over true sequences: N (never biased), B (biased now, episode on), R (recovered), X (re-emerged)
    never = np.ones((k, n))
    biased = np.zeros((k, n))
    recovered = np.zeros((k, n))
    relapsed = np.zeros((k, n))
    last_complete = np.zeros((k, n))
    for t in range(t_max):
        here = present[:, t]
        den = (weights * here).sum(axis=1)
        per_turn[:, t] = np.where(
            den > 0, (weights * here * np.where(here, f1[:, :, t], 0)).sum(axis=1) / np.maximum(den, 1e-300), np.nan
        )
        z0, z1 = f0[:, :, t], f1[:, :, t]
        first_now = never * z1
        never, biased, recovered, relapsed = (
            never * z0,
            first_now + biased * z1,
            (biased + recovered) * z0,
            recovered * z1 + relapsed * (z0 + z1),
        )
        ok = complete[:, t]
        den = (weights * ok).sum(axis=1)
        cumulative[:, t] = np.where(den > 0, 1 - (weights * ok * never).sum(axis=1) / np.maximum(den, 1e-300), np.nan)
        first[:, t] = np.where(den > 0, (weights * ok * first_now).sum(axis=1) / np.maximum(den, 1e-300), 0.0)
        last_complete = np.where(ok, relapsed, last_complete)
    den = (weights * complete[:, -1]).sum(axis=1)
    re_emergence = np.where(
        den > 0, (weights * complete[:, -1] * last_complete).sum(axis=1) / np.maximum(den, 1e-300), np.nan
    )
    share = np.clip(first, 0, None)
    mass = share.sum(axis=1)
    share = np.divide(share, mass[:, None], out=np.zeros_like(share), where=mass[:, None] > 1e-12)
    cdf = np.cumsum(share, axis=1)
    median = np.where(mass > 1e-12, 1 + np.argmax(cdf >= 0.5 - 1e-12, axis=1), np.nan).astype(float)
    mean = np.where(mass > 1e-12, (share * np.arange(1, t_max + 1)).sum(axis=1), np.nan)
    return Deconvolved(per_turn, cumulative, re_emergence, median, mean)
