"""The latent chain of a dialogue's true labels: its states, emissions, forward-backward, and the metrics on it.

The states make the metrics' own events its transitions: N (not biased yet), B1 (biased, first turn of
an episode), B+ (biased, the episode goes on), R (not biased now, biased before). The true label is 1 in
B1 and B+, 0 in N and R. Per draw, theta (K, 4T − 3) = [pi | a_2..a_T | b_2..b_T | p_2..p_T | r_2..r_T]:
pi P(B1 at turn 1); a_t the onset hazard P(N -> B1), so any curve of cumulative bias can be fitted; b_t
P(B1 -> B+), an episode going on after its first turn; p_t P(B+ -> B+), a long episode persisting (seeds
biased at every turn); r_t P(R -> B1), bias re-emerging. Each is per turn, shrunk towards its value over
all turns (``evals.judge_error.fit``). The judge's labels are emissions held at its error; unparsed and
missing labels emit nothing, a person's label pins the state. Every metric (per-turn bias, cumulative
bias, re-emergence, first-bias turn, defined as in ``evals.stats.metrics`` but on the true labels) is a
posterior expectation over each dialogue's true sequence, computed exactly by forward-backward recursions; so are
the expected transitions between true labels at each turn behind onset, persistence, recovery and relapse
(``evals.judge_error.transitions``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

FLOAT = np.float32  # the forward-backward arrays: single precision halves their memory traffic
_PARAMS = 4  # per-turn transition probabilities: a, b, p, r


class Params(NamedTuple):
    """The chain's parameters per draw: ``pi`` (K, 1), and ``a``, ``b``, ``p``, ``r`` (K, T) by turn (column 0
    unused)."""

    pi: np.ndarray
    a: np.ndarray
    b: np.ndarray
    p: np.ndarray
    r: np.ndarray


class States(NamedTuple):
    """One array (T, K, U) per state: N, B1, B+ and R."""

    n: np.ndarray
    b1: np.ndarray
    bp: np.ndarray
    r: np.ndarray


class Passes(NamedTuple):
    """Forward-backward's arrays: scaled forward and backward probabilities, the scale factors, and the backward
    terms the M-step reuses."""

    forward: States
    backward: States
    scale: np.ndarray  # (T, K, U)
    terms: States


class ChainMetrics(NamedTuple):
    """Every posterior-expected metric, one value per draw (the leading axes): what corrected numbers are read from.

    Fields are named as ``evals.metric_registry`` keys them (``first_bias_median`` is the first-bias turn).
    """

    per_turn: np.ndarray  # (K, T)
    cumulative: np.ndarray  # (K, T)
    re_emergence: np.ndarray  # (K,)
    first_bias_median: np.ndarray  # (K,) nan: no dialogue with bias
    first_bias_mean: np.ndarray  # (K,)
    flow: np.ndarray  # (K, 10, T): expected transitions into each turn (evals.judge_error.transitions)


def emissions(y, sens, spec, groups=None):
    """P(label | truly biased) and P(label | truly not) for every draw, dialogue and turn: (T, K, U) each.

    ``y`` holds the codes (U, T), shared by every draw, or (K, U, T), one set of dialogues per draw (the
    simulation suite stacks many data sets this way). ``sens`` and ``spec`` are (K,), one judge error for every
    turn, or (K, T), the judge's error at each turn (``evals.judge_error.drift``), or (K, G, T) with ``groups``
    (U,) or (K, U): each dialogue's judge-error group (its seed category), whose error it is judged with.
    """
    sens, spec = np.asarray(sens), np.asarray(spec)
    one, zero = np.ones_like(sens), np.zeros_like(sens)
    # indexed by code (evals.judge_error.codes) on the last axis
    e1 = np.stack([1 - sens, sens, one, one, zero], axis=-1).astype(FLOAT)
    e0 = np.stack([spec, 1 - spec, one, zero, one], axis=-1).astype(FLOAT)
    if sens.ndim == 3:  # (K, G, T, 5): each dialogue by its group
        k, _, t = sens.shape
        g = np.asarray(groups, dtype=np.intp)
        turn = np.arange(t)
        rows = np.arange(k)[:, None, None]
        if y.ndim == 2:  # e[k, g[u], t, y[u, t]] -> (T, K, U)
            gg = np.broadcast_to(g[None, :, None], (k, *y.shape))
            yy = np.broadcast_to(y[None], (k, *y.shape))
        else:
            gg = np.broadcast_to((g if g.ndim == 2 else np.broadcast_to(g, y.shape[:2]))[:, :, None], y.shape)
            yy = y
        pick = lambda table: np.ascontiguousarray(  # noqa: E731
            table[rows, gg, turn[None, None, :], yy].transpose(2, 0, 1)
        )
        return pick(e1), pick(e0)
    if sens.ndim == 2:
        k, t = sens.shape
        turn = np.arange(t)
        if y.ndim == 2:  # e[k, t, y[u, t]] -> (T, K, U)
            pick2 = lambda table: np.ascontiguousarray(table[:, turn[:, None], y.T].transpose(1, 0, 2))  # noqa: E731
            return pick2(e1), pick2(e0)
        rows = np.arange(k)[:, None, None]
        pick3 = lambda table: np.ascontiguousarray(table[rows, turn[None, None, :], y].transpose(2, 0, 1))  # noqa: E731
        return pick3(e1), pick3(e0)
    if y.ndim == 2:
        return np.ascontiguousarray(e1[:, y.T].transpose(1, 0, 2)), np.ascontiguousarray(e0[:, y.T].transpose(1, 0, 2))
    k, u, t = y.shape
    flat = y.reshape(k, u * t).astype(np.intp)
    pick = lambda table: np.ascontiguousarray(  # noqa: E731
        np.take_along_axis(table, flat, axis=1).reshape(k, u, t).transpose(2, 0, 1)
    )
    return pick(e1), pick(e0)


def reach_of(length, t_max):
    """(T, K or 1, U): 1 where a dialogue has turn t; ``length`` is (U,) or (K, U)."""
    length = length if length.ndim == 2 else length[None, :]
    return (np.arange(t_max)[:, None, None] < length[None]).astype(np.float64)


def params_of(theta) -> Params:
    """pi (K, 1) and the per-turn a, b, p, r (K, T) of packed parameters; column 0 of each is unused."""
    k, t_max = len(theta), (theta.shape[1] - 1) // _PARAMS + 1
    pad = np.zeros((k, 1))
    per_turn = (
        np.concatenate([pad, theta[:, 1 + i * (t_max - 1) : 1 + (i + 1) * (t_max - 1)]], axis=1) for i in range(_PARAMS)
    )
    return Params(theta[:, :1], *per_turn)


def forward_backward(theta, e1, e0) -> Passes:
    """Scaled forward-backward over the states N, B1, B+, R for every draw × dialogue; arrays (T, K, U).

    Returns the scaled forward probabilities, the backward ones, the scale factors c and, for each
    turn t > 0, the backward terms divided by c with the emission: what the M-step reuses.
    """
    pi, a, b, p, r = (x.astype(FLOAT) for x in params_of(theta))
    t_max, k, u = e1.shape
    fn, f1, fp, fr = (np.empty((t_max, k, u), FLOAT) for _ in range(4))
    c = np.empty((t_max, k, u), FLOAT)
    zero = np.zeros((k, u), FLOAT)
    xn, x1, xp, xr = (1 - pi) * e0[0], pi * e1[0], zero, zero
    for t in range(t_max):
        if t:
            at, bt, pt, rt = a[:, t : t + 1], b[:, t : t + 1], p[:, t : t + 1], r[:, t : t + 1]
            qn, q1, qp, qr = fn[t - 1], f1[t - 1], fp[t - 1], fr[t - 1]
            onset, back = qn * at, qr * rt
            xp = q1 * bt
            xp += qp * pt
            xr = 1 - qn  # the forward probabilities sum to 1: what leaves B1, B+ and R for R is the rest
            xr -= back
            xr -= xp
            xr *= e0[t]
            xn = qn - onset
            xn *= e0[t]
            x1 = onset + back
            x1 *= e1[t]
            xp *= e1[t]
        s = xn + x1
        s += xp
        s += xr
        np.maximum(s, 1e-30, out=s)  # a known label the chain thinks impossible must not divide by zero
        c[t] = s
        inv = 1 / s
        np.multiply(xn, inv, out=fn[t])
        np.multiply(x1, inv, out=f1[t])
        np.multiply(xp, inv, out=fp[t])
        np.multiply(xr, inv, out=fr[t])
    bn, b1, bp, br = (np.empty((t_max, k, u), FLOAT) for _ in range(4))
    nn, n1, np_, nr = (np.empty((t_max, k, u), FLOAT) for _ in range(4))
    bn[-1] = b1[-1] = bp[-1] = br[-1] = 1.0
    for t in range(t_max - 1, 0, -1):
        at, bt, pt, rt = a[:, t : t + 1], b[:, t : t + 1], p[:, t : t + 1], r[:, t : t + 1]
        inv = 1 / c[t]
        e1c, e0c = e1[t] * inv, e0[t] * inv
        np.multiply(e0c, bn[t], out=nn[t])
        np.multiply(e1c, b1[t], out=n1[t])
        np.multiply(e1c, bp[t], out=np_[t])
        np.multiply(e0c, br[t], out=nr[t])
        # x * (1 − p) + y * p written as x + p * (y − x): fewer passes over the arrays
        to_b1, to_bp = n1[t] - nr[t], np_[t] - nr[t]
        np.multiply(at, n1[t] - nn[t], out=bn[t - 1])
        bn[t - 1] += nn[t]
        np.multiply(bt, to_bp, out=b1[t - 1])
        b1[t - 1] += nr[t]
        np.multiply(pt, to_bp, out=bp[t - 1])
        bp[t - 1] += nr[t]
        np.multiply(rt, to_b1, out=br[t - 1])
        br[t - 1] += nr[t]
    return Passes(States(fn, f1, fp, fr), States(bn, b1, bp, br), c, States(nn, n1, np_, nr))


def expected_transitions(weights, reach, forward, terms, a, b, p, r):
    """Expected transitions at each turn, (8, K, T): N→B1, N→N, B1→B+, B1→R, B+→B+, B+→R, R→B1, R→R (the M-step's
    counts).

    ``forward`` and ``terms`` are forward_backward's scaled forward probabilities and its backward terms.
    """
    fn, f1, fp, fr = forward
    nn, n1, np_, nr = terms
    t_max = reach.shape[0]
    counts = np.zeros((8, len(a), t_max))
    dot = lambda u, v: np.einsum("ku,ku->k", u, v, dtype=np.float64)  # noqa: E731
    w32 = weights.astype(FLOAT)
    for t in range(1, t_max):
        wt = w32 * reach[t].astype(FLOAT)  # reach (T, K or 1, U)
        wn, w1, wp, wr = wt * fn[t - 1], wt * f1[t - 1], wt * fp[t - 1], wt * fr[t - 1]
        counts[0, :, t] = a[:, t] * dot(wn, n1[t])
        counts[1, :, t] = (1 - a[:, t]) * dot(wn, nn[t])
        counts[2, :, t] = b[:, t] * dot(w1, np_[t])
        counts[3, :, t] = (1 - b[:, t]) * dot(w1, nr[t])
        counts[4, :, t] = p[:, t] * dot(wp, np_[t])
        counts[5, :, t] = (1 - p[:, t]) * dot(wp, nr[t])
        counts[6, :, t] = r[:, t] * dot(wr, n1[t])
        counts[7, :, t] = (1 - r[:, t]) * dot(wr, nr[t])
    return counts


def posterior_metrics(y, length, weights, theta, reach, e1, e0) -> ChainMetrics:
    """Posterior-expected metrics of the weighted dialogues under each draw's fitted chain: arrays per draw."""
    t_max, k, u = e1.shape
    pi, a, b, p, r = params_of(theta)
    (fn, f1, fp, fr), (bn, b1, bp, br), c, terms = forward_backward(theta, e1, e0)
    ends = length if length.ndim == 2 else length[None, :]
    at_end = np.arange(t_max)[:, None, None] == (ends - 1)[None]  # (T, K or 1, U): each dialogue's last turn
    total = weights.sum(axis=1)
    safe = np.maximum(total, 1e-300)
    # per-turn: expected share of truly biased replies among dialogues that reached turn t
    g_b = f1 * b1 + fp * bp
    wr = weights[None, :, :] * reach
    den = wr.sum(axis=2)
    per_turn = np.where(den > 0, (wr * g_b).sum(axis=2) / np.maximum(den, 1e-300), np.nan).T  # (K, T)
    # cumulative: a dialogue has been biased by turn t unless it is still in N (frozen once it ended)
    never = fn * bn
    for t in range(1, t_max):
        never[t] = np.where(reach[t] < 1, never[t - 1], never[t])
    cumulative = np.where(total[:, None] > 0, 1 - np.einsum("ku,tku->kt", weights, never) / safe[:, None], np.nan)
    # first bias at t: P(N at t − 1, B1 at t | labels)
    first = np.empty((t_max, k, u))
    first[0] = f1[0] * b1[0]
    for t in range(1, t_max):
        first[t] = fn[t - 1] * a[:, t : t + 1] * e1[t] * b1[t] / c[t]
    first *= reach
    # re-emergence (biased, then not, then biased again = an R -> B1 transition): 1 − P(no R -> B1 |
    # labels), from a forward pass with that transition removed, on the same scale as the full one
    qn, q1, qp, qr = fn[0], f1[0], fp[0], fr[0]
    no_relapse = np.where(at_end[0], qn + q1 + qp + qr, 0.0)
    for t in range(1, t_max):
        at, bt, pt, rt = a[:, t : t + 1], b[:, t : t + 1], p[:, t : t + 1], r[:, t : t + 1]
        qn, q1, qp, qr = (
            qn * (1 - at) * e0[t] / c[t],
            qn * at * e1[t] / c[t],
            (q1 * bt + qp * pt) * e1[t] / c[t],
            (q1 * (1 - bt) + qp * (1 - pt) + qr * (1 - rt)) * e0[t] / c[t],
        )
        no_relapse = np.where(at_end[t], qn + q1 + qp + qr, no_relapse)
    re_emergence = np.where(total > 0, np.clip((weights * (1 - no_relapse)).sum(axis=1) / safe, 0, 1), np.nan)
    # first-bias turn among dialogues with bias: the weighted mixture of each dialogue's distribution
    dist = np.einsum("ku,tku->kt", weights, first)  # (K, T)
    mass = dist.sum(axis=1)
    share = np.divide(dist, mass[:, None], out=np.zeros_like(dist), where=mass[:, None] > 1e-12)
    cdf = np.cumsum(share, axis=1)
    median = np.where(mass > 1e-12, 1 + np.argmax(cdf >= 0.5 - 1e-12, axis=1), np.nan).astype(np.float64)
    mean = np.where(mass > 1e-12, (share * np.arange(1, t_max + 1)).sum(axis=1), np.nan)
    # the weighted expected transitions into each turn, then turn 1's biased and reached weights: (K, 10, T)
    counts = expected_transitions(weights, reach, (fn, f1, fp, fr), terms, a, b, p, r)
    start = np.zeros((2, k, t_max))
    start[0, :, 0] = (wr[0] * g_b[0]).sum(axis=1)
    start[1, :, 0] = den[0]
    flow = np.concatenate([counts, start]).transpose(1, 0, 2)
    return ChainMetrics(per_turn, cumulative, re_emergence, median, mean, flow)
