"""The chain's parameters fitted by EM (Baum-Welch, emissions held at the judge's error), every draw at once.

Each turn's transition probabilities come from their expected counts, shrunk towards their value over all
turns; EM is accelerated by SQUAREM, and the point fit tries a few starting shapes.
"""

from __future__ import annotations

import numpy as np

from evals.judge_error.chain import emissions, expected_transitions, forward_backward, params_of, reach_of

_EM_TOL = 2e-3  # a draw has converged when no parameter moves more than this in a SQUAREM cycle
_LOGLIK_TOL = 1e-6  # ... or its log-likelihood gains less than this per dialogue in a cycle
_EM_MAX_ITER = 600  # EM steps at most (a flat likelihood can creep on)
_EPS = 1e-6  # keeps fitted probabilities off exactly 0 and 1 (EM cannot leave a boundary; float32-safe)
POOL = 1.0  # pseudo-transitions pulling each turn's transition probabilities towards their pooled value
_START_CYCLES = 10  # SQUAREM cycles from each starting shape before the likeliest is kept
DRAW_CYCLES = 60  # SQUAREM cycles at most for a draw started from the point fit
DRAW_START = 0.8  # a draw starts from this share of the point fit and the rest of 1/2: off every boundary


def _shrunk(hits, trials, old, pool=None):
    """Each turn's transition probability from its expected counts, shrunk towards all turns' pooled value.

    ``POOL`` pseudo-transitions at the pooled rate keep a turn that few dialogues inform (a rare state,
    the last turns of a run with early stops) from jumping to 0 or 1; one pseudo-transition is light
    enough that an abrupt onset or a one-turn episode is not spread over its neighbours.
    """
    pooled_trials = trials[:, 1:].sum(axis=1, keepdims=True)
    fallback = old[:, 1:].mean(axis=1, keepdims=True) if old.shape[1] > 1 else 0.5
    pooled = np.where(
        pooled_trials > 1e-12, hits[:, 1:].sum(axis=1, keepdims=True) / np.maximum(pooled_trials, 1e-300), fallback
    )
    pool = POOL if pool is None else pool
    return (hits + pool * pooled) / np.maximum(trials + pool, 1e-12)


def _em_step(theta, weights, e1, e0, reach, pool=None):
    """One EM update of every draw's parameters; also the weighted log-likelihood at ``theta``."""
    pi, a, b, p, r = params_of(theta)
    (fn, f1, fp, fr), (bn, b1, bp, br), c, (nn, n1, np_, nr) = forward_backward(theta, e1, e0)
    loglik = np.einsum("ku,tku->k", weights, np.log(c, dtype=np.float64))
    total = np.maximum(weights.sum(axis=1), 1e-300)
    new_pi = np.einsum("ku,ku->k", weights * f1[0], b1[0], dtype=np.float64) / total
    counts = expected_transitions(weights, reach, (fn, f1, fp, fr), (nn, n1, np_, nr), a, b, p, r)
    fitted = [
        _shrunk(counts[2 * i], counts[2 * i] + counts[2 * i + 1], old, pool)[:, 1:]
        for i, old in enumerate((a, b, p, r))
    ]
    new = np.concatenate([new_pi[:, None], *fitted], axis=1)
    return np.clip(new, _EPS, 1 - _EPS), loglik


def _starts(y, weights, sens, spec):
    """Starting parameters (S, K, 4T − 3): bias that persists, fades or returns, around the observed rate."""
    t_max = y.shape[-1]
    obs = (y <= 1).sum(axis=-1).astype(np.float64)
    pos = (y == 1).sum(axis=-1).astype(np.float64)
    if y.ndim == 2:
        q = (weights @ pos) / np.maximum(weights @ obs, 1e-12)
    else:
        q = (weights * pos).sum(axis=1) / np.maximum((weights * obs).sum(axis=1), 1e-12)
    if np.ndim(sens) >= 2:  # the judge's error by turn (and group): its mean
        sens, spec = sens.reshape(len(sens), -1).mean(axis=1), spec.reshape(len(spec), -1).mean(axis=1)
    p = np.clip((q - (1 - spec)) / (sens + spec - 1), 0.05, 0.9)[:, None]  # Rogan-Gladen over all turns
    out = []
    for shape in ((0.05, 0.9, 0.95, 0.1), (0.2, 0.3, 0.3, 0.05), (0.1, 0.5, 0.8, 0.5)):  # a, b, p, r
        rest = [np.full((len(q), t_max - 1), x) for x in shape]
        out.append(np.concatenate([p, *rest], axis=1))
    return np.stack(out)


def fit(y, length, weights, sens, spec, start=None, pool=None, cycles=None, groups=None):
    """EM for the chain's parameters, emissions fixed at the judge's error; every draw in parallel.

    Without ``start`` each draw tries a few starting shapes and keeps the likeliest fit. EM is
    accelerated by SQUAREM (Varadhan & Roland 2008): two EM steps, an extrapolation along them and
    one stabilising EM step, falling back to plain EM when the likelihood would drop. A draw stops
    once its parameters move less than the tolerance or its log-likelihood stops rising. ``groups``: each
    dialogue's judge-error group, with ``sens`` and ``spec`` (K, G, T) (``evals.judge_error.chain.emissions``).
    """
    t_max = y.shape[-1]
    reach = reach_of(length, t_max)  # (T, K or 1, U): dialogue has turn t
    if start is None:
        starts = _starts(y, weights, sens, spec)
        n_starts, k = starts.shape[:2]
        rep = lambda x: np.concatenate([x] * n_starts)  # noqa: E731
        # a few cycles from every start; then only starts within 2 log-likelihood units of the best go on
        all_y = y if y.ndim == 2 else rep(y)
        all_reach = reach if reach.shape[1] == 1 else np.concatenate([reach] * n_starts, axis=1)
        all_groups = None if groups is None else (rep(groups) if np.ndim(groups) == 2 else groups)
        all_weights, (all_e1, all_e0) = rep(weights), emissions(all_y, rep(sens), rep(spec), all_groups)
        theta, loglik = _squarem(
            starts.reshape(n_starts * k, -1), all_weights, all_e1, all_e0, all_reach, cycles=_START_CYCLES, pool=pool
        )
        going = np.flatnonzero(loglik >= np.tile(loglik.reshape(n_starts, k).max(axis=0), n_starts) - 2.0)
        theta[going], loglik[going] = _squarem(
            theta[going],
            all_weights[going],
            all_e1[:, going],
            all_e0[:, going],
            all_reach if all_reach.shape[1] == 1 else all_reach[:, going],
            pool=pool,
        )
        best = loglik.reshape(n_starts, k).argmax(axis=0)
        theta = theta.reshape(n_starts, k, -1)[best, np.arange(k)]
    else:
        # each draw starts near the point fit but off its boundaries (EM cannot leave a probability of 0
        # or 1, and a draw's data may not share the point fit's zeros); a draw still creeping along a flat
        # ridge of the likelihood after DRAW_CYCLES cycles stops there
        start = np.repeat(start, len(sens), axis=0) if len(start) == 1 else start
        theta, _ = _squarem(
            DRAW_START * start + (1 - DRAW_START) / 2,
            weights,
            *emissions(y, sens, spec, groups),
            reach,
            cycles=DRAW_CYCLES if cycles is None else cycles,
            pool=pool,
        )
    return theta, reach


def _squarem(theta, weights, e1, e0, reach, cycles=_EM_MAX_ITER // 3, pool=None):
    """Run accelerated EM to convergence (at most ``cycles`` cycles of 3 EM steps) for every row of ``theta``.

    Returns the fits and their log-likelihoods.
    """
    theta = theta.copy()
    loglik = np.full(len(theta), -np.inf)
    active = np.arange(len(theta))
    for _ in range(cycles):
        w, f1, f0 = weights[active], e1[:, active], e0[:, active]
        rch = reach if reach.shape[1] == 1 else reach[:, active]
        t0 = theta[active]
        t1, l0 = _em_step(t0, w, f1, f0, rch, pool)
        t2, l1 = _em_step(t1, w, f1, f0, rch, pool)
        r = t1 - t0
        v = t2 - t1 - r
        alpha = -np.sqrt((r * r).sum(1) / np.maximum((v * v).sum(1), 1e-300))
        alpha = np.minimum(alpha, -1.0)[:, None]
        tp = np.clip(t0 - 2 * alpha * r + alpha * alpha * v, _EPS, 1 - _EPS)
        t3, lp = _em_step(tp, w, f1, f0, rch, pool)
        better = lp >= l1 - 1e-10
        theta[active] = np.where(better[:, None], t3, t2)
        loglik[active] = np.where(better, lp, l1)
        done = (np.abs(theta[active] - t0).max(1) < _EM_TOL) | (
            np.abs(np.maximum(lp, l1) - l0) < _LOGLIK_TOL * np.maximum(w.sum(1), 1.0)
        )
        active = active[~done]
        if not len(active):
            break
    return theta, loglik
