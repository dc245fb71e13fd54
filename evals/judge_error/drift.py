"""The judge's error by turn: sensitivity and specificity as curves over the conversation, their draws, the drift check.

A judge validated on short exchanges may err differently on a reply at turn 10, which sits on a long conversation.
Each of the judge's two rates is modelled over the turn by one of two models, and the correction draws whole
curves (one value per turn) from their posterior given the validation's items, so that a drift's own uncertainty
reaches every interval:

- ``slope`` (the default): the rate is constant (the "spike": exactly the Beta posterior of the pooled counts
  that a validation without turns gives), or logistic in the turn, ``logit q(t) = α + β u(t)`` with
  ``u(t) = (t − 1) / (T − 1)`` over the run's T turns (the "slab": β ~ Normal(0, ``SLOPE_SD``²), α with the
  logistic prior that makes q uniform), each with prior weight ½. The data weigh the two by their marginal
  likelihoods: a judge whose validation shows no drift keeps near today's constant rates, one that shows a
  drift follows it, and a validation too small to tell keeps both in the draws (a wider interval).
- ``walk``: the rate's logit at each turn follows a random walk, ``logit q(t) = logit q(t − 1) + ε_t`` with
  ``ε_t ~ Normal(0, τ²)``; τ is drawn from its posterior over a grid (0 included: a constant rate), each
  τ's curve posterior by a Laplace approximation.

Outside the turns the validation holds items at, the judge's error is held at its value at the nearest turn it
does hold (no trend is extrapolated past what the validation can see); the correction flags the numbers that rest
on those turns when the run's own labels change there (``beyond_check``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evals.judge_error.intervals import interval

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "SLOPE_SD",
    "DriftCheck",
    "JudgeCurves",
    "RateCurve",
    "judge_curves",
    "rate_curve",
    "tested_counts",
]

SLOPE_SD = 2.0  # prior sd of the logit's change from a run's first turn to its last (slab): 0.9 → 0.5 is −2.0
SLAB_PRIOR = 0.5  # prior probability that a rate changes with the turn at all
MODELS = ("slope", "walk")
DEFAULT_MODEL = "slope"
WALK_TAUS = (0.0, 0.05, 0.1, 0.2, 0.4, 0.8)  # random-walk step sds (logit per turn) the walk model weighs
_GRID = 61  # points per axis of the slab's posterior grid
_SPAN = 7.0  # the grid reaches this many posterior sds from the mode on each axis
CAN_TELL = 0.25  # a change interval wider than this on either side of 0 cannot rule out a drift that matters


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(_log_sigmoid(x))


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


@dataclass(frozen=True)
class RateCurve:
    """One of the judge's rates over a run's turns: its posterior mean per turn and its draws, (T,) and (K, T).

    ``drift_probability`` is the posterior weight of a rate that changes with the turn; ``change`` the change
    from the first validated turn to the last under that model (point, low, high), None where the validation
    holds items at one turn only.
    """

    point: np.ndarray
    draws: np.ndarray
    drift_probability: float
    change: tuple[float, float, float] | None


def _positions(turns: Sequence[float] | np.ndarray, horizon: int) -> np.ndarray:
    return (np.asarray(turns, dtype=np.float64) - 1.0) / max(horizon - 1, 1)


def _clamped_grid(horizon: int, lo: float, hi: float) -> np.ndarray:
    """The run's turns as positions, held inside the validated stretch [lo, hi]."""
    return np.clip(_positions(np.arange(1, horizon + 1), horizon), lo, hi)


def _slab_log_posterior(alpha: np.ndarray, beta: np.ndarray, u: np.ndarray, k: np.ndarray, n: np.ndarray):
    """log prior + log likelihood of (α, β) (arrays of one shape) given successes ``k`` of ``n`` at positions ``u``."""
    eta = alpha[..., None] + beta[..., None] * u
    loglik = (k * _log_sigmoid(eta) + (n - k) * _log_sigmoid(-eta)).sum(axis=-1)
    log_prior_alpha = _log_sigmoid(alpha) + _log_sigmoid(-alpha)  # q = σ(α) uniform
    log_prior_beta = -0.5 * (beta / SLOPE_SD) ** 2 - math.log(SLOPE_SD * math.sqrt(2 * math.pi))
    return loglik + log_prior_alpha + log_prior_beta


def _slab_mode(u: np.ndarray, k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The slab posterior's mode and covariance (Newton's method on its log density)."""
    total_k, total_n = k.sum(), n.sum()
    x = np.array([math.log((total_k + 1) / (total_n - total_k + 1)), 0.0])
    for _ in range(50):
        eta = x[0] + x[1] * u
        p = _sigmoid(eta)
        w = n * p * (1 - p)
        g = np.array([(k - n * p).sum(), ((k - n * p) * u).sum()])
        pa = _sigmoid(x[0])
        g[0] += 1 - 2 * pa  # d/dα of log σ(α) + log σ(−α)
        g[1] -= x[1] / SLOPE_SD**2
        h = np.array([[w.sum(), (w * u).sum()], [(w * u).sum(), (w * u * u).sum()]])
        h[0, 0] += 2 * pa * (1 - pa)
        h[1, 1] += 1 / SLOPE_SD**2
        step = np.linalg.solve(h, g)
        x = x + step
        if np.abs(step).max() < 1e-10:
            break
    return x, np.linalg.inv(h)


def _slope_curve(u, k, n, pooled, grid_u, draws, rng, first_last) -> RateCurve:
    """The ``slope`` model's posterior: a mixture of the constant rate (pooled Beta) and the logistic slab."""
    a0, b0 = pooled[0] + 1, pooled[1] - pooled[0] + 1  # Beta of the pooled counts (the constant rate)
    spike = rng.beta(a0, b0, size=draws)
    one_position = np.ptp(u) < 1e-12 if len(u) else True
    if one_position or n.sum() <= 0:
        point = np.full(len(grid_u), a0 / (a0 + b0))
        return RateCurve(point, np.repeat(spike[:, None], len(grid_u), axis=1), 0.0, None)
    mode, cov = _slab_mode(u, k, n)
    sd = np.sqrt(np.maximum(np.diag(cov), 1e-12))
    axes = [np.linspace(m - _SPAN * s, m + _SPAN * s, _GRID) for m, s in zip(mode, sd)]
    alpha, beta = np.meshgrid(*axes, indexing="ij")
    logpost = _slab_log_posterior(alpha, beta, u, k, n)
    cell = (axes[0][1] - axes[0][0]) * (axes[1][1] - axes[1][0])
    top = logpost.max()
    log_slab = top + math.log(np.exp(logpost - top).sum() * cell)
    # the constant rate's marginal likelihood on the same data (by position): ∫ Π_j q^k_j (1 − q)^(n_j − k_j) dq
    log_spike = _log_beta(k.sum() + 1, (n - k).sum() + 1)
    w_slab = 1 / (1 + math.exp(log_spike - log_slab) * (1 - SLAB_PRIOR) / SLAB_PRIOR)
    weights = np.exp(logpost - top).ravel()
    weights /= weights.sum()
    # the slab's curves: grid cells drawn by posterior weight, jittered inside the cell
    pick = rng.choice(len(weights), size=draws, p=weights)
    step = np.array([axes[0][1] - axes[0][0], axes[1][1] - axes[1][0]])
    a_draw = alpha.ravel()[pick] + (rng.random(draws) - 0.5) * step[0]
    b_draw = beta.ravel()[pick] + (rng.random(draws) - 0.5) * step[1]
    slab = _sigmoid(a_draw[:, None] + b_draw[:, None] * grid_u[None, :])
    use_slab = rng.random(draws) < w_slab
    curves = np.where(use_slab[:, None], slab, spike[:, None])
    slab_mean = (weights[:, None] * _sigmoid(alpha.ravel()[:, None] + beta.ravel()[:, None] * grid_u[None, :])).sum(0)
    point = (1 - w_slab) * a0 / (a0 + b0) + w_slab * slab_mean
    lo, hi = first_last
    ends = _sigmoid(a_draw[:, None] + b_draw[:, None] * np.array([lo, hi])[None, :])
    change_draws = ends[:, 1] - ends[:, 0]
    ends_mean = (weights[:, None] * _sigmoid(alpha.ravel()[:, None] + beta.ravel()[:, None] * np.array([lo, hi]))).sum(
        0
    )
    c_point = float(ends_mean[1] - ends_mean[0])
    c_lo, c_hi = interval(change_draws, None, (-1.0, 1.0))
    return RateCurve(point, curves, float(w_slab), (c_point, float(c_lo), float(c_hi)))  # type: ignore[arg-type]


def _walk_laplace(k_t: np.ndarray, n_t: np.ndarray, tau: float):
    """Laplace approximation of the random walk's logits (T,) given per-turn counts: mode, covariance, log evidence."""
    t_max = len(k_t)
    # the walk's precision: increments ε_t = θ_t − θ_{t−1} ~ N(0, τ²); θ_1 with the logistic prior
    d = np.zeros((t_max - 1, t_max))
    d[np.arange(t_max - 1), np.arange(t_max - 1)] = -1.0
    d[np.arange(t_max - 1), np.arange(1, t_max)] = 1.0
    prec = d.T @ d / tau**2
    theta = np.full(t_max, math.log((k_t.sum() + 1) / (n_t.sum() - k_t.sum() + 1)))
    for _ in range(100):
        p = _sigmoid(theta)
        g = k_t - n_t * p - prec @ theta
        g[0] += 1 - 2 * p[0]
        h = np.diag(n_t * p * (1 - p)) + prec
        h[0, 0] += 2 * p[0] * (1 - p[0])
        step = np.linalg.solve(h, g)
        theta = theta + step
        if np.abs(step).max() < 1e-10:
            break
    p = _sigmoid(theta)
    loglik = float((k_t * _log_sigmoid(theta) + (n_t - k_t) * _log_sigmoid(-theta)).sum())
    log_prior = float(_log_sigmoid(theta[0]) + _log_sigmoid(-theta[0]))
    log_prior += float(-0.5 * theta @ prec @ theta - (t_max - 1) * math.log(tau * math.sqrt(2 * math.pi)))
    sign, logdet = np.linalg.slogdet(h)
    evidence = loglik + log_prior + 0.5 * t_max * math.log(2 * math.pi) - 0.5 * logdet
    return theta, np.linalg.inv(h), evidence


def _walk_curve(turns, k, n, pooled, horizon, lo_turn, hi_turn, draws, rng) -> RateCurve:
    """The ``walk`` model's posterior over the validated turns, held constant beyond them."""
    a0, b0 = pooled[0] + 1, pooled[1] - pooled[0] + 1
    spike = rng.beta(a0, b0, size=draws)
    span = np.arange(lo_turn, hi_turn + 1)
    if len(span) < 2 or n.sum() <= 0:
        point = np.full(horizon, a0 / (a0 + b0))
        return RateCurve(point, np.repeat(spike[:, None], horizon, axis=1), 0.0, None)
    at = np.clip(np.rint(turns).astype(int), lo_turn, hi_turn) - lo_turn
    k_t, n_t = np.bincount(at, k, len(span)), np.bincount(at, n, len(span))
    log_spike = _log_beta(k.sum() + 1, (n - k).sum() + 1)
    fits = [_walk_laplace(k_t, n_t, tau) for tau in WALK_TAUS[1:]]
    logs = np.array([log_spike] + [f[2] for f in fits])
    prior = np.array([SLAB_PRIOR * 0 + (1 - SLAB_PRIOR)] + [SLAB_PRIOR / len(fits)] * len(fits))
    post = np.exp(logs - logs.max()) * prior
    post /= post.sum()
    which = rng.choice(len(post), size=draws, p=post)
    inside = np.repeat(spike[:, None], len(span), axis=1)
    means = np.zeros((len(post), len(span)))
    means[0] = a0 / (a0 + b0)
    for j, (theta, cov, _) in enumerate(fits, start=1):
        rows = np.flatnonzero(which == j)
        z = rng.multivariate_normal(theta, cov, size=max(len(rows), 1), method="cholesky")
        if len(rows):
            inside[rows] = _sigmoid(z[: len(rows)])
        means[j] = _sigmoid(rng.multivariate_normal(theta, cov, size=400, method="cholesky")).mean(0)
    index = np.clip(np.arange(1, horizon + 1), lo_turn, hi_turn) - lo_turn
    curves = inside[:, index]
    point = (post[:, None] * means).sum(0)[index]
    change_draws = inside[:, -1] - inside[:, 0]
    c_lo, c_hi = interval(change_draws, None, (-1.0, 1.0))
    c_point = float(point[-1] - point[0]) if hi_turn <= horizon else float(means[:, -1] @ post - means[:, 0] @ post)
    return RateCurve(point, curves, float(1 - post[0]), (c_point, float(c_lo), float(c_hi)))  # type: ignore[arg-type]


def rate_curve(
    turns: Sequence[float] | np.ndarray,
    successes: Sequence[float] | np.ndarray,
    trials: Sequence[float] | np.ndarray,
    pooled: tuple[float, float],
    *,
    horizon: int,
    draws: int,
    rng: np.random.Generator,
    model: str = DEFAULT_MODEL,
) -> RateCurve:
    """One rate's curve over turns 1..``horizon`` from its per-position counts (``pooled``: (successes, trials) of the
    constant rate's Beta posterior)."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    t = np.asarray(turns, dtype=np.float64)
    k, n = np.asarray(successes, dtype=np.float64), np.asarray(trials, dtype=np.float64)
    keep = n > 0
    t, k, n = t[keep], k[keep], n[keep]
    lo_turn = max(1, min(horizon, int(math.floor(t.min())))) if len(t) else 1
    hi_turn = max(1, min(horizon, int(math.ceil(t.max())))) if len(t) else 1
    if model == "walk":
        return _walk_curve(t, k, n, pooled, horizon, lo_turn, hi_turn, draws, rng)
    u = _positions(t, horizon)
    lo_u, hi_u = (float(u.min()), float(u.max())) if len(u) else (0.0, 0.0)
    grid_u = _clamped_grid(horizon, max(lo_u, 0.0), min(max(hi_u, 0.0), 1.0) if horizon > 1 else 0.0)
    ends = (max(lo_u, 0.0), min(hi_u, 1.0))
    return _slope_curve(u, k, n, pooled, grid_u, draws, rng, ends)


def change_block(change: float, low: float, high: float, drift_probability: float) -> dict[str, Any]:
    """One rate's change in a drift block: the change, its 95% interval and the posterior weight of drift."""
    return {"change": change, "ci95": [low, high], "drift_probability": drift_probability}


def drift_block(
    first_turn: int,
    last_turn: int,
    items_by_turn: Sequence[tuple[int, float]],
    sensitivity: dict[str, Any] | None,
    specificity: dict[str, Any] | None,
    verdict: str,
    reason: str,
) -> dict[str, Any]:
    """The drift check as its JSON block (each rate's change a ``change_block``, None where there is none): the
    summary's and ``dymt``'s ``JudgeDrift`` alike."""
    return {
        "first_turn": first_turn,
        "last_turn": last_turn,
        "items_by_turn": [{"turn": t, "items": n} for t, n in items_by_turn],
        "sensitivity": sensitivity,
        "specificity": specificity,
        "verdict": verdict,
        "reason": reason,
    }


@dataclass(frozen=True)
class DriftCheck:
    """How much the judge's sensitivity and specificity change from the first validated turn to the last.

    ``verdict``: "drift" (a change whose 95% interval excludes 0), "flat" (no change beyond ``CAN_TELL`` either way
    fits the validation), "cannot tell" (the validation holds items at one turn only, or too few late ones).
    """

    first_turn: int
    last_turn: int
    items_by_turn: tuple[tuple[int, float], ...]
    sensitivity: RateCurve = field(repr=False)
    specificity: RateCurve = field(repr=False)
    verdict: str
    reason: str
    model: str = DEFAULT_MODEL

    def as_dict(self) -> dict[str, Any]:
        def change(curve: RateCurve) -> dict[str, Any] | None:
            return None if curve.change is None else change_block(*curve.change, curve.drift_probability)

        block = drift_block(
            self.first_turn,
            self.last_turn,
            self.items_by_turn,
            change(self.sensitivity),
            change(self.specificity),
            self.verdict,
            self.reason,
        )
        return {**block, "model": self.model}

    def describe(self) -> str:
        """One line: the verdict and each rate's change with its interval."""
        parts = []
        for name, curve in (("sensitivity", self.sensitivity), ("specificity", self.specificity)):
            if curve.change is not None:
                value, low, high = curve.change
                parts.append(f"{name} {value:+.2f} [{low:+.2f}, {high:+.2f}]")
        span = f"turn {self.first_turn} to {self.last_turn}"
        changes = f" from {span}: " + ", ".join(parts) if parts else ""
        return f"judge drift: {self.verdict}{changes} ({self.reason})"


@dataclass(frozen=True)
class JudgeCurves:
    """The judge's error over a run's turns: point curves (T,), draws (K, T), and the validated stretch of turns."""

    sensitivity: np.ndarray
    specificity: np.ndarray
    sens_draws: np.ndarray
    spec_draws: np.ndarray
    first_turn: int
    last_turn: int
    check: DriftCheck


def _verdict(sens: RateCurve, spec: RateCurve, first: int, last: int, turns_known: bool) -> tuple[str, str]:
    if not turns_known:
        return "cannot tell", "the validation does not record its items' turns: it validates turn 1 only"
    if last <= first:
        return "cannot tell", f"the validation holds items at turn {first} only"
    changes = [c.change for c in (sens, spec) if c.change is not None]
    if any(low > 0 or high < 0 for _, low, high in changes):
        return "drift", f"validated on turns {first}–{last}"
    widest = max((max(-low, high) for _, low, high in changes), default=1.0)
    if widest > CAN_TELL:
        return "cannot tell", f"too few labels at late turns: a change of up to {widest:.2f} fits the validation"
    return "flat", f"no change above {widest:.2f} fits the validation (turns {first}–{last})"


def judge_curves(
    by_turn: Sequence[tuple[float, ...]],
    pooled: tuple[float, float, float, float],
    *,
    horizon: int,
    draws: int,
    seed: int = 0,
    model: str = DEFAULT_MODEL,
) -> JudgeCurves:
    """The judge's sensitivity and specificity curves over turns 1..``horizon`` (point and ``draws`` draws).

    ``by_turn``: (turn, tp, fp, fn, tn) per position (empty: turns not recorded, taken as turn 1); ``pooled``:
    (tp, fp, fn, tn), whose Beta posteriors are the constant rates. Draws are restricted to a judge better than
    chance at every turn (sensitivity + specificity > 1), which identifies the correction; fewer than ``draws``
    come back when the validation rarely shows it so.
    """
    tp, fp, fn, tn = pooled
    turns_known = bool(by_turn)
    rows = np.array(by_turn, dtype=np.float64) if by_turn else np.array([[1.0, tp, fp, fn, tn]])
    t = rows[:, 0]
    rng = np.random.default_rng([seed, 0x5E57, 0xD21F])
    sens_parts, spec_parts = [], []
    sens = spec = None
    kept = 0

    def curve(right: np.ndarray, wrong: np.ndarray, overall: tuple[float, float]) -> RateCurve:
        """A rate's curve from the items judged right and wrong at each validated turn."""
        return rate_curve(t, right, right + wrong, overall, horizon=horizon, draws=2 * draws + 16, rng=rng, model=model)

    for _ in range(100):
        sens = curve(rows[:, 1], rows[:, 3], (tp, tp + fn))
        spec = curve(rows[:, 4], rows[:, 2], (tn, tn + fp))
        ok = (sens.draws + spec.draws > 1.0 + 1e-3).all(axis=1)
        sens_parts.append(sens.draws[ok])
        spec_parts.append(spec.draws[ok])
        kept += int(ok.sum())
        if kept >= draws:
            break
    assert sens is not None and spec is not None
    occupied = rows[(rows[:, 1:].sum(axis=1) > 0)]
    first = int(max(1, math.floor(occupied[:, 0].min()))) if len(occupied) else 1
    last = int(max(1, math.ceil(occupied[:, 0].max()))) if len(occupied) else 1
    counts: dict[int, float] = {}
    for r in occupied:
        counts[int(round(r[0]))] = counts.get(int(round(r[0])), 0.0) + float(r[1:].sum())
    verdict, reason = _verdict(sens, spec, first, min(last, horizon), turns_known)
    check = DriftCheck(
        first_turn=first,
        last_turn=min(last, horizon),
        items_by_turn=tuple(sorted(counts.items())),
        sensitivity=sens,
        specificity=spec,
        verdict=verdict,
        reason=reason,
        model=model,
    )
    return JudgeCurves(
        sensitivity=sens.point,
        specificity=spec.point,
        sens_draws=np.concatenate(sens_parts)[:draws],
        spec_draws=np.concatenate(spec_parts)[:draws],
        first_turn=first,
        last_turn=min(last, horizon),
        check=check,
    )


# --------------------------------------------------------------------------- the counts the exact tests read

BEND_SD = 1.0  # prior sd of the test curve's bend: the logit's departure at the middle turn from the line
_TEST_DRAWS = 4000  # draws of each turn's rate behind the exact tests' effective counts


def _bent_fit(u: np.ndarray, k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mode and covariance of ``logit q(u) = α + β u + γ 4u(1 − u)`` (α's logistic prior, β and γ Normal(0, 2²))."""
    design = np.stack([np.ones_like(u), u, 4 * u * (1 - u)], axis=1)
    prior_prec = np.diag([0.0, 1 / SLOPE_SD**2, 1 / BEND_SD**2])
    x = np.array([math.log((k.sum() + 1) / (n.sum() - k.sum() + 1)), 0.0, 0.0])
    h = np.eye(3)
    for _ in range(50):
        p = _sigmoid(design @ x)
        pa = _sigmoid(np.array(x[0]))
        g = design.T @ (k - n * p) - prior_prec @ x
        g[0] += 1 - 2 * pa
        h = design.T @ (design * (n * p * (1 - p))[:, None]) + prior_prec
        h[0, 0] += 2 * pa * (1 - pa)
        step = np.linalg.solve(h, g)
        x = x + step
        if np.abs(step).max() < 1e-10:
            break
    return x, np.linalg.inv(h)


def _tested_rate(u, k, n, pooled, grid_u, drift_probability, rng) -> tuple[np.ndarray, np.ndarray]:
    """One rate as the exact tests read it at each turn: (successes, failures) of the Beta with its mean and spread.

    The drift model's own weight of a changing rate mixes the constant rate (the pooled Beta) with a curve that may
    bend (``_bent_fit``): the logistic line is the slope model's shape, but a drift that is straight in the
    probability, or in any other way not straight in the logit, leaves the line's middle turns off the truth by
    about as much as their spread, and a test that read them would reject a true boundary too readily. The bend's
    uncertainty widens those turns' spread, so their counts are what the validation's items can actually vouch for.
    """
    spike = rng.beta(pooled[0] + 1, pooled[1] - pooled[0] + 1, size=_TEST_DRAWS)
    rates = np.repeat(spike[:, None], len(grid_u), axis=1)
    if drift_probability > 0 and len(u) and np.ptp(u) > 1e-12:
        mode, cov = _bent_fit(u, k, n)
        z = rng.multivariate_normal(mode, cov, size=_TEST_DRAWS, method="cholesky")
        design = np.stack([np.ones_like(grid_u), grid_u, 4 * grid_u * (1 - grid_u)], axis=1)
        bent = _sigmoid(z @ design.T)
        rates = np.where((rng.random(_TEST_DRAWS) < drift_probability)[:, None], bent, rates)
    m, v = rates.mean(axis=0), np.maximum(rates.var(axis=0), 1e-12)
    size = np.maximum(m * (1 - m) / v - 1, 2.0)
    return np.maximum(m * size - 1, 0.0), np.maximum((1 - m) * size - 1, 0.0)


def tested_counts(
    by_turn: Sequence[tuple[float, ...]], pooled: tuple[float, float, float, float], check: DriftCheck, horizon: int
) -> np.ndarray:
    """The validation's effective (tp, fp, fn, tn) at each of turns 1..``horizon`` (T, 4), for the exact tests.

    Each rate comes from the drift check's weight of a changing rate (``check``), the curve allowed to bend, held
    at the nearest validated turn past the validated stretch.
    """
    tp, fp, fn, tn = pooled
    rows = np.array(by_turn, dtype=np.float64) if by_turn else np.array([[1.0, tp, fp, fn, tn]])
    rng = np.random.default_rng([0x7E57, 0xC0])
    out = []
    for right, wrong, total, curve in (
        (rows[:, 1], rows[:, 3], (tp, tp + fn), check.sensitivity),
        (rows[:, 4], rows[:, 2], (tn, tn + fp), check.specificity),
    ):
        n = right + wrong
        keep = n > 0
        u = _positions(rows[keep, 0], horizon)
        lo, hi = (float(u.min()), float(u.max())) if len(u) else (0.0, 0.0)
        grid_u = _clamped_grid(horizon, max(lo, 0.0), min(max(hi, 0.0), 1.0) if horizon > 1 else 0.0)
        out.append(_tested_rate(u, right[keep], n[keep], total, grid_u, curve.drift_probability, rng))
    (tp_t, fn_t), (tn_t, fp_t) = out
    return np.stack([tp_t, fp_t, fn_t, tn_t], axis=1)
