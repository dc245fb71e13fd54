"""Whether the data are consistent with a boundary value of a metric: exact tests and likelihood-ratio tests.

An interval of a rate must reach 0 (or 1) whenever the data cannot tell the rate from 0 (or 1): a
bootstrap of a fit that is constrained to [0, 1] cannot do that by itself (its draws pile up inside the
range). Each boundary has a test, and a test that does not reject at 5% extends the interval to it:

- per-turn bias 0 at turn t (no reply at t truly biased): the run's judge positives at t are then false
  positives, as frequent as among the validation's unbiased items: Fisher's exact test, one-sided;
- per-turn bias 1 (every reply at t truly biased): the same with negatives and the validation's biased items;
- cumulative bias 0 by turn t: the same test over every reply of turns 1..t;
- no first bias in turns s+1..t (cumulative bias flat from s to t) and no re-emergence: likelihood-ratio
  tests of the chain with those transitions held at 0, the judge's sensitivity and specificity estimated
  from the validation and the run together; the statistic is referred to the chi-bar-squared law of
  parameters on their boundary (Self & Liang 1987).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from evals.judge_error.chain import FLOAT, emissions, expected_transitions, forward_backward, params_of, reach_of
from evals.judge_error.codes import KNOWN_BIASED, KNOWN_NOT

__all__ = [
    "ALPHA",
    "boundary_tests",
    "chi2_sf",
    "chibar_critical",
    "fisher_greater",
    "joint_fit",
]

ALPHA = 0.05  # a boundary value is kept when its test does not reject at this level
_EPS = 1e-6
_TOL = 1e-3  # joint EM stops when the log-likelihood gains less than this in a cycle (a test needs ~0.05)


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_greater(x: int, m: int, v: int, n: int) -> float:
    """One-sided p-value that x of m run items share a rate above v of n validation items (Fisher's exact test).

    Under the null both are draws at one rate; given the x + v events in all, x is hypergeometric and the
    p-value is P(X >= x).
    """
    if m <= 0 or x <= 0:
        return 1.0
    total = x + v
    lo, hi = max(0, total - n), min(m, total)
    if x > hi:
        return 0.0
    den = _log_choose(m + n, total)
    terms = [_log_choose(m, k) + _log_choose(n, total - k) - den for k in range(max(x, lo), hi + 1)]
    top = max(terms)
    return float(min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms)))


def chi2_sf(x: float, df: int) -> float:
    """Survival function of the chi-squared law with integer degrees of freedom (closed forms, no scipy)."""
    if x <= 0:
        return 1.0
    if df % 2 == 0:
        term = total = math.exp(-x / 2)
        for k in range(1, df // 2):
            term *= x / (2 * k)
            total += term
        return min(1.0, total)
    total = math.erfc(math.sqrt(x / 2))
    term = math.sqrt(2 * x / math.pi) * math.exp(-x / 2)
    for k in range(1, (df + 1) // 2):
        total += term
        term *= x / (2 * k + 1)
    return min(1.0, total)


@lru_cache(maxsize=64)
def chibar_critical(d: int, alpha: float = ALPHA) -> float:
    """Critical value of the chi-bar-squared law of ``d`` independent parameters held on their boundary.

    Its weights are Binomial(d, 1/2): each constrained parameter is at its boundary or free with equal
    chance under the null (Self & Liang 1987), so P(stat > c) = sum_j C(d, j) 2^-d P(chi2_j > c).
    """
    if d <= 0:
        return math.inf
    weights = [math.comb(d, j) / 2**d for j in range(d + 1)]

    def tail(c: float) -> float:
        return sum(w * chi2_sf(c, j) for j, w in enumerate(weights) if j)

    lo, hi = 0.0, 100.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tail(mid) > alpha else (lo, mid)
    return hi


# --------------------------------------------------------------------------- the chain's joint likelihood


def _judge_masks(y):
    """(T, K or 1, U) masks of the judge's positive and negative labels (people's known labels excluded)."""
    codes = y.T[:, None, :] if y.ndim == 2 else y.transpose(2, 0, 1)
    return (codes == 1).astype(FLOAT), (codes == 0).astype(FLOAT)


def _joint_step(x, y, weights, reach, val, zero, pos, neg, offsets=None, groups=None, positions=None):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if positions is not None:
            return _joint_update_by_position(x, y, weights, reach, val, zero, pos, neg, positions)
        return _joint_update(x, y, weights, reach, val, zero, pos, neg, offsets, groups)


def _logit(p):
    return np.log(p) - np.log1p(-p)


def _level(level, offsets, hits, misses):
    """The judge rate's level whose curve σ(logit(level) + offset_t) best fits ``hits`` and ``misses`` by turn.

    Newton's method on the level's logit (the curve's shape held): with no offset, the plain share.
    """
    x = _logit(np.clip(level, _EPS, 1 - _EPS))
    trials = hits + misses
    for _ in range(6):
        q = 1 / (1 + np.exp(-(x[:, None] + offsets)))
        g = (hits - trials * q).sum(axis=1)
        h = np.maximum((trials * q * (1 - q)).sum(axis=1), 1e-12)
        x = x + np.clip(g / h, -4, 4)
    return 1 / (1 + np.exp(-x))


def _judge_levels(biased, unbiased, pos, neg, val, sens_level, spec_level, offsets, groups):
    """The M-step of the judge's levels: the run's expected true labels of the replies it labelled (``biased``,
    ``unbiased`` (T, K, U)) against its labels (``pos``, ``neg``), plus the validation's counts ``val``."""
    tp, fp_v, fn_v, tn = val
    k = len(sens_level)
    if offsets is None:
        tp_run = np.einsum("tku,tku->k", biased, np.broadcast_to(pos, biased.shape), dtype=np.float64)
        fn_run = np.einsum("tku,tku->k", biased, np.broadcast_to(neg, biased.shape), dtype=np.float64)
        fp_run = np.einsum("tku,tku->k", unbiased, np.broadcast_to(pos, unbiased.shape), dtype=np.float64)
        tn_run = np.einsum("tku,tku->k", unbiased, np.broadcast_to(neg, unbiased.shape), dtype=np.float64)
        tp, fp_v, fn_v, tn = (v.sum(axis=1) for v in (tp, fp_v, fn_v, tn))
        new_sens = (tp_run + tp) / np.maximum(tp_run + fn_run + tp + fn_v, 1e-300)
        new_spec = (tn_run + tn) / np.maximum(tn_run + fp_run + tn + fp_v, 1e-300)
    elif groups is None:
        by_turn = lambda z, mask: np.einsum(  # noqa: E731
            "tku,tku->kt", z, np.broadcast_to(mask, z.shape), dtype=np.float64
        )
        tp_run, fn_run = by_turn(biased, pos), by_turn(biased, neg)
        fp_run, tn_run = by_turn(unbiased, pos), by_turn(unbiased, neg)
        new_sens = _level(sens_level, offsets[:, 0], tp_run + tp, fn_run + fn_v)
        new_spec = _level(spec_level, offsets[:, 1], tn_run + tn, fp_run + fp_v)
    else:
        # the run's expected counts by group and turn, each with its group's offsets; the validation's by turn
        n_groups = offsets.shape[2] - 1
        g = np.asarray(groups)
        g = np.broadcast_to(g, (k, g.shape[-1])) if g.ndim == 1 else g
        one_hot = (g[:, :, None] == np.arange(n_groups)[None, None, :]).astype(np.float64)  # (K, U, G)
        by_group = lambda z, mask: np.einsum(  # noqa: E731
            "tku,tku,kug->kgt", z, np.broadcast_to(mask, z.shape), one_hot, dtype=np.float64
        ).reshape(k, -1)
        hits_s = np.concatenate([by_group(biased, pos), tp], axis=1)
        miss_s = np.concatenate([by_group(biased, neg), fn_v], axis=1)
        hits_p = np.concatenate([by_group(unbiased, neg), tn], axis=1)
        miss_p = np.concatenate([by_group(unbiased, pos), fp_v], axis=1)
        off_s = np.concatenate([offsets[:, 0, 1:].reshape(k, -1), offsets[:, 0, 0]], axis=1)
        off_p = np.concatenate([offsets[:, 1, 1:].reshape(k, -1), offsets[:, 1, 0]], axis=1)
        new_sens = _level(sens_level, off_s, hits_s, miss_s)
        new_spec = _level(spec_level, off_p, hits_p, miss_p)
    return new_sens, new_spec


def _chain_update(weights, reach, theta, forward, backward, terms):
    """The M-step of the chain's parameters (no pooling: the likelihood ratio compares maximum likelihoods)."""
    params = params_of(theta)
    a, b, p, r = params.a, params.b, params.p, params.r
    total = np.maximum(weights.sum(axis=1), 1e-300)
    new_pi = np.einsum("ku,ku->k", weights.astype(FLOAT) * forward.b1[0], backward.b1[0], dtype=np.float64) / total
    counts = expected_transitions(weights, reach, forward, terms, a, b, p, r)
    fitted = []
    for i in range(4):
        hits, trials = counts[2 * i], counts[2 * i] + counts[2 * i + 1]
        old = (a, b, p, r)[i]
        fitted.append(np.where(trials > 1e-9, hits / np.maximum(trials, 1e-300), old)[:, 1:])
    return new_pi, fitted


def _joint_update_by_position(x, y, weights, reach, val, zero, pos, neg, positions):
    """One joint EM step with the judge's sensitivity and specificity free at each of the validation's positions.

    ``x`` is (K, 4T − 3 + 2J): the chain's packed parameters, then sensitivity at each of J positions, then
    specificity; ``positions`` (K, T) maps each turn to its position (the validated turn nearest to it, so turns
    past the validated ones share the last one's error); ``val`` (K, J, 4) the validation's counts at each
    position. The judge's error is estimated from the run and the validation together at every position, so a
    likelihood-ratio test is not held to one shape of drift.
    """
    t_max = y.shape[-1]
    n_theta = 4 * t_max - 3
    theta, judge = x[:, :n_theta], x[:, n_theta:]
    j_max = judge.shape[1] // 2
    sens_j, spec_j = judge[:, :j_max], judge[:, j_max:]
    sens, spec = np.take_along_axis(sens_j, positions, axis=1), np.take_along_axis(spec_j, positions, axis=1)
    e1, e0 = emissions(y, sens, spec)
    forward, backward, c, terms = forward_backward(theta, e1, e0)
    tp, fp_v, fn_v, tn = val[..., 0], val[..., 1], val[..., 2], val[..., 3]  # (K, J)
    loglik = np.einsum("ku,tku->k", weights, np.log(c, dtype=np.float64))
    loglik += (tp * np.log(sens_j) + fn_v * np.log(1 - sens_j) + tn * np.log(spec_j) + fp_v * np.log(1 - spec_j)).sum(1)
    new_pi, fitted = _chain_update(weights, reach, theta, forward, backward, terms)
    (fn, f1, fp, fr), (bn, b1, bp, br) = forward, backward
    w = weights.astype(FLOAT)[None] * reach.astype(FLOAT)
    biased, unbiased = (f1 * b1 + fp * bp) * w, (fn * bn + fr * br) * w
    one_hot = (positions[:, :, None] == np.arange(j_max)[None, None, :]).astype(np.float64)  # (K, T, J)
    by_position = lambda z, mask: np.einsum(  # noqa: E731
        "tku,tku,ktj->kj", z, np.broadcast_to(mask, z.shape), one_hot, dtype=np.float64
    )
    hits_s, trials_s = by_position(biased, pos) + tp, by_position(biased, pos) + by_position(biased, neg) + tp + fn_v
    hits_p = by_position(unbiased, neg) + tn
    trials_p = hits_p + by_position(unbiased, pos) + fp_v
    new_s = np.where(trials_s > 1e-9, hits_s / np.maximum(trials_s, 1e-300), sens_j)
    new_p = np.where(trials_p > 1e-9, hits_p / np.maximum(trials_p, 1e-300), spec_j)
    new = np.concatenate([new_pi[:, None], *fitted, new_s, new_p], axis=1)
    new = np.clip(new, _EPS, 1 - _EPS)
    new[:, :n_theta][zero] = _EPS
    return new, loglik


def _joint_update(x, y, weights, reach, val, zero, pos, neg, offsets=None, groups=None):
    """One EM step of the chain's parameters and the judge's sensitivity and specificity, run and validation together.

    ``x`` is (K, 4T − 3 + 2): the chain's packed parameters, then the levels of sensitivity and specificity;
    ``zero`` marks the chain parameters held at 0. ``offsets`` (K, 2, T), when given, are the judge's rates by turn
    as logit offsets from their level (the shape of its drift, held): sensitivity at turn t is
    σ(logit(level) + offset_t), and ``val`` holds the validation's counts by turn (K, T, 4). With ``groups`` (each
    dialogue's judge-error group: (U,) or (K, U)), ``offsets`` is (K, 2, 1 + G, T): index 0 the validation's own
    curves by turn, 1.. each group's, so the run's dialogues are judged with their group's error and the validation
    with its own. Returns the update and the log-likelihood at ``x``.
    """
    theta, sens_level, spec_level = x[:, :-2], x[:, -2], x[:, -1]
    if offsets is None:
        sens, spec = sens_level, spec_level
        vals = val[:, None, :] if val.ndim == 2 else val
        run_s, run_p = sens, spec
    else:
        if groups is None:
            sens = 1 / (1 + np.exp(-(_logit(sens_level)[:, None] + offsets[:, 0])))
            spec = 1 / (1 + np.exp(-(_logit(spec_level)[:, None] + offsets[:, 1])))
            run_s, run_p = sens, spec
        else:
            sens = 1 / (1 + np.exp(-(_logit(sens_level)[:, None] + offsets[:, 0, 0])))
            spec = 1 / (1 + np.exp(-(_logit(spec_level)[:, None] + offsets[:, 1, 0])))
            run_s = 1 / (1 + np.exp(-(_logit(sens_level)[:, None, None] + offsets[:, 0, 1:])))
            run_p = 1 / (1 + np.exp(-(_logit(spec_level)[:, None, None] + offsets[:, 1, 1:])))
        vals = val
    e1, e0 = emissions(y, run_s, run_p, groups)
    pi, a, b, p, r = params_of(theta)
    (fn, f1, fp, fr), (bn, b1, bp, br), c, (nn, n1, np_, nr) = forward_backward(theta, e1, e0)
    tp, fp_v, fn_v, tn = vals[..., 0], vals[..., 1], vals[..., 2], vals[..., 3]  # (K, T or 1)
    s2, p2 = (sens, spec) if offsets is not None else (sens[:, None], spec[:, None])
    loglik = np.einsum("ku,tku->k", weights, np.log(c, dtype=np.float64))
    loglik += (tp * np.log(s2) + fn_v * np.log(1 - s2) + tn * np.log(p2) + fp_v * np.log(1 - p2)).sum(axis=1)
    total = np.maximum(weights.sum(axis=1), 1e-300)
    w32 = weights.astype(FLOAT)
    new_pi = np.einsum("ku,ku->k", w32 * f1[0], b1[0], dtype=np.float64) / total
    counts = expected_transitions(weights, reach, (fn, f1, fp, fr), (nn, n1, np_, nr), a, b, p, r)
    fitted = []
    for i in range(4):
        hits, trials = counts[2 * i], counts[2 * i] + counts[2 * i + 1]
        old = (a, b, p, r)[i]
        fitted.append(np.where(trials > 1e-9, hits / np.maximum(trials, 1e-300), old)[:, 1:])
    # the judge: expected true labels of the replies it labelled, plus the validation's counts
    biased = (f1 * b1 + fp * bp) * (w32[None] * reach.astype(FLOAT))
    unbiased = (fn * bn + fr * br) * (w32[None] * reach.astype(FLOAT))
    new_sens, new_spec = _judge_levels(
        biased, unbiased, pos, neg, (tp, fp_v, fn_v, tn), sens_level, spec_level, offsets, groups
    )
    new = np.concatenate([new_pi[:, None], *fitted, new_sens[:, None], new_spec[:, None]], axis=1)
    new = np.clip(new, _EPS, 1 - _EPS)
    new[:, :-2][zero] = _EPS
    return new, loglik


def joint_fit(
    y, length, weights, val, start, zero=None, cycles=150, offsets=None, groups=None, positions=None, one=None
):
    """Maximise the joint likelihood of the run and the validation (SQUAREM-accelerated EM); returns (x, loglik).

    ``val`` (K, 4) holds each row's validation counts (tp, fp, fn, tn), or (K, T, 4) by turn with ``offsets``
    (K, 2, T), the judge's drift as logit offsets of sensitivity and specificity from their levels; ``start``
    (K, 4T − 1) is the chain's packed parameters followed by the levels of sensitivity and specificity; ``zero``
    (K, 4T − 3) marks parameters held at 0, ``one`` those held at 1. With ``positions`` (K, T), the judge's error
    is free at each position (``_joint_update_by_position``): ``start`` then ends in 2J columns and ``val`` is
    (K, J, 4).
    """
    t_max = y.shape[-1]
    n_theta = 4 * t_max - 3
    reach = reach_of(length, t_max)
    pos, neg = _judge_masks(y)
    x = np.array(start, dtype=np.float64)
    zero = np.zeros((len(x), n_theta), bool) if zero is None else zero
    x[:, :n_theta][zero] = _EPS
    if one is not None:
        x[:, :n_theta][one] = 1 - _EPS
    loglik = np.full(len(x), -np.inf)
    active = np.arange(len(x))
    per_row = y.ndim == 3

    def step(rows, value):
        yy = y[rows] if per_row else y
        rr = reach if reach.shape[1] == 1 else reach[:, rows]
        pp = pos if pos.shape[1] == 1 else pos[:, rows]
        nn = neg if neg.shape[1] == 1 else neg[:, rows]
        off = None if offsets is None else offsets[rows]
        gg = None if groups is None else (groups[rows] if np.ndim(groups) == 2 else groups)
        at = None if positions is None else positions[rows]
        new, loglik = _joint_step(value, yy, weights[rows], rr, val[rows], zero[rows], pp, nn, off, gg, at)
        if one is not None:  # a probability's M-step is its own: held at 1, its maximum under the constraint
            new[:, :n_theta][one[rows]] = 1 - _EPS
        return new, loglik

    for _ in range(cycles):
        x0 = x[active]
        x1, l0 = step(active, x0)
        x2, l1 = step(active, x1)
        r = x1 - x0
        v = x2 - x1 - r
        alpha = -np.sqrt((r * r).sum(1) / np.maximum((v * v).sum(1), 1e-300))
        alpha = np.minimum(alpha, -1.0)[:, None]
        xp = np.clip(x0 - 2 * alpha * r + alpha * alpha * v, _EPS, 1 - _EPS)
        xp[:, :n_theta][zero[active]] = _EPS
        if one is not None:
            xp[:, :n_theta][one[active]] = 1 - _EPS
        x3, lp = step(active, xp)
        better = lp >= l1 - 1e-10
        x[active] = np.where(better[:, None], x3, x2)
        loglik[active] = np.where(better, lp, l1)
        done = np.abs(np.maximum(lp, l1) - l0) < _TOL
        active = active[~done]
        if not len(active):
            break
    # the log-likelihood at the returned parameters
    _, loglik = step(np.arange(len(x)), x)
    return x, loglik


def _onset_columns(t_max: int) -> np.ndarray:
    """Column of a_t (t = 2..T, 1-based) in the packed parameters."""
    return 1 + np.arange(t_max - 1)


def _relapse_columns(t_max: int) -> np.ndarray:
    return 1 + 3 * (t_max - 1) + np.arange(t_max - 1)


def boundary_tests(y, length, weights, val, full_x, full_loglik, offsets=None, groups=None, positions=None):
    """Likelihood-ratio tests of every cell at once: flat cumulative windows and no re-emergence.

    Each row of the inputs is one cell (``y`` (S, U, T) codes, ``length`` and ``weights`` (S, U), ``val``
    (S, 4), ``full_x`` and ``full_loglik`` the joint fit). Returns ``flat`` (S, T, T) with flat[i, s, t]
    (0-based turns, s < t): 'no first bias in turns s+1..t' is not rejected, so cumulative bias may be
    the same at t as at s; and ``no_relapse`` (S,): 'no dialogue re-emerges' is not rejected.
    """
    n_cells, t_max = y.shape[0], y.shape[-1]
    windows = [(s, t) for t in range(1, t_max) for s in range(t)]
    n_par = 4 * t_max - 3
    tests = len(windows) + (t_max >= 3)
    zero = np.zeros((tests, n_par), bool)
    for i, (s, t) in enumerate(windows):
        zero[i, _onset_columns(t_max)[s:t]] = True  # a at 1-based turns s+2..t+1: after turn s+1, up to t+1
    if t_max >= 3:
        zero[-1, _relapse_columns(t_max)] = True
    flat = np.zeros((n_cells, t_max, t_max), bool)
    no_relapse = np.ones(n_cells, bool)
    if not tests:
        return flat, no_relapse
    rows = np.repeat(np.arange(n_cells), tests)
    _, loglik = joint_fit(
        y[rows],
        length[rows],
        weights[rows],
        val[rows],
        full_x[rows],
        zero=np.tile(zero, (n_cells, 1)),
        offsets=None if offsets is None else offsets[rows],
        groups=None if groups is None else groups[rows],
        positions=None if positions is None else positions[rows],
    )
    stat = (2 * (full_loglik[rows] - loglik)).reshape(n_cells, tests)
    for i, (s, t) in enumerate(windows):
        flat[:, s, t] = stat[:, i] <= chibar_critical(t - s)
    if t_max >= 3:
        no_relapse = stat[:, -1] <= chibar_critical(t_max - 2)
    return flat, no_relapse


def known_codes(y) -> tuple[np.ndarray, np.ndarray]:
    """Masks of people's known labels (biased, not biased) in a cell's codes."""
    return y == KNOWN_BIASED, y == KNOWN_NOT
