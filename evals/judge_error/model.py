"""Bias rates corrected for the judge's own error: a hidden Markov model of each dialogue's true labels.

The judge's label of a reply is a noisy measurement of its true label, with sensitivity
P(judged biased | biased) and specificity P(judged not biased | not biased) known only through a
validation (counts of true/false positives/negatives against people's labels). Per target × mode
cell, each dialogue's true labels follow a Markov chain over four states (not biased yet, first
biased turn of an episode, episode going on, recovered) whose per-turn transition probabilities are fitted by EM (Baum-Welch with the emissions
held at the judge's error); unparsed and missing labels emit nothing. Every metric
(per-turn bias, cumulative bias, re-emergence, first-bias turn, defined as in ``evals.stats.metrics`` but
on the true labels) is the posterior expectation over each dialogue's true sequence, computed
exactly by forward-backward recursions. Each of ``draws`` draws pairs sensitivity and specificity
drawn from their Beta posteriors (the validation's uncertainty) with a Poisson bootstrap of the
dialogues (their sampling), refits, and recomputes: the 2.5 and 97.5 percentiles of the draws,
widened to include their bias-corrected counterparts, are the 95% interval. Method, assumptions, measured coverage and references: docs/judge-error.md.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from checkpoints.vocabulary import BIASED, NOT_BIASED, UNPARSED

__all__ = [
    "MIN_YOUDEN",
    "CorrectedDifference",
    "CorrectedRun",
    "CorrectionRefused",
    "Draws",
    "JudgeValidation",
    "LabelPlan",
    "TurnRate",
    "Value",
    "correct_cells",
    "correct_run",
    "corrected_difference",
    "interval",
    "plan_labels",
    "refusal_line",
]

MIN_YOUDEN = 0.1  # sensitivity + specificity − 1 at or below this: too close to chance to correct
DEFAULT_DRAWS = 200
LEVEL = 0.95
_LOGLIK_TOL = 1e-6  # ... or its log-likelihood gains less than this per dialogue in a cycle
_EM_TOL = 2e-3  # a draw has converged when no parameter moves more than this in a SQUAREM cycle
_EM_MAX_ITER = 600  # EM steps at most (a flat likelihood can creep on)
_EPS = 1e-6  # keeps fitted probabilities off exactly 0 and 1 (EM cannot leave a boundary; float32-safe)
POOL = 5.0  # pseudo-transitions pulling each turn's transition probabilities towards their pooled value
_START_CYCLES = 10  # SQUAREM cycles from each starting shape before the likeliest is kept
_CHUNK = 2_000_000  # draws × dialogues × turns per batch: ~8 MB per float32 array of the forward-backward
DRAW_CYCLES = 20  # SQUAREM cycles at most for a draw started from the point fit
_FLOAT = np.float32  # the forward-backward arrays: single precision halves their memory traffic
_MISSING = 2  # observation code: unparsed or missing label, no emission
_KNOWN_BIASED, _KNOWN_NOT = 3, 4  # observation codes: a person labelled the reply (its truth is known)

Label = int | bool | str | None
Row = Sequence[Label]


class CorrectionRefused(ValueError):
    """No corrected number can be given; the message is the one-line reason shown instead."""


# --------------------------------------------------------------------------- the validation


def _beta_quantiles(a: float, b: float, qs: Sequence[float]) -> list[float]:
    """Quantiles of Beta(a, b) by integrating its density on a fine grid (no scipy at run time)."""
    x = np.linspace(0.0, 1.0, 20001)[1:-1]
    log_pdf = (a - 1) * np.log(x) + (b - 1) * np.log1p(-x)
    pdf = np.exp(log_pdf - log_pdf.max())
    cdf = np.concatenate([[0.0], np.cumsum((pdf[1:] + pdf[:-1]) / 2)])
    cdf /= cdf[-1]
    return [float(np.interp(q, cdf, x)) for q in qs]


@dataclass(frozen=True)
class JudgeValidation:
    """The judge against people's labels on ``n`` items: its confusion counts and where they came from.

    ``source`` says which validation this is, e.g. ``"evals.judge:openai:gpt-4o-mini@3fa9c2e1b0d4"``
    (an external labelled set, keyed by judge spec and prompt hash) or ``"annotate:<run_id>"`` (double
    sampling: people labelled a random sample of the run's own turns). Biased is the positive class.
    Counts may be fractional only in hypothetical validations built by the planner.
    """

    source: str
    tp: float
    fp: float
    fn: float
    tn: float

    def __post_init__(self) -> None:
        for name in ("tp", "fp", "fn", "tn"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name} must be a count >= 0, got {value!r}")

    @classmethod
    def from_pairs(cls, source: str, pairs: Sequence[tuple[Label, Label]]) -> JudgeValidation:
        """Counts from (person's label, judge's label) pairs; pairs with an unparsed or missing side are skipped."""
        tp = fp = fn = tn = 0
        for truth, judged in pairs:
            t, j = _code(truth), _code(judged)
            if t == _MISSING or j == _MISSING:
                continue
            tp, fp, fn, tn = tp + (t and j), fp + (not t and j), fn + (t and not j), tn + (not t and not j)
        return cls(source=source, tp=tp, fp=fp, fn=fn, tn=tn)

    @property
    def n(self) -> float:
        """Items with both a person's and the judge's label."""
        return self.tp + self.fp + self.fn + self.tn

    @property
    def positives(self) -> float:
        return self.tp + self.fn

    @property
    def negatives(self) -> float:
        return self.tn + self.fp

    @property
    def sensitivity(self) -> float | None:
        """Share of truly biased items the judge called biased (recall); None without positives."""
        return self.tp / self.positives if self.positives else None

    @property
    def specificity(self) -> float | None:
        """Share of truly unbiased items the judge called not biased; None without negatives."""
        return self.tn / self.negatives if self.negatives else None

    @property
    def youden(self) -> float | None:
        """Sensitivity + specificity − 1: 0 is a coin toss, 1 a perfect judge."""
        if self.sensitivity is None or self.specificity is None:
            return None
        return self.sensitivity + self.specificity - 1

    def sensitivity_ci(self, level: float = LEVEL) -> tuple[float, float]:
        """Equal-tailed interval of the Beta(tp + 1, fn + 1) posterior (uniform prior)."""
        lo, hi = _beta_quantiles(self.tp + 1, self.fn + 1, [(1 - level) / 2, (1 + level) / 2])
        return lo, hi

    def specificity_ci(self, level: float = LEVEL) -> tuple[float, float]:
        """Equal-tailed interval of the Beta(tn + 1, fp + 1) posterior (uniform prior)."""
        lo, hi = _beta_quantiles(self.tn + 1, self.fp + 1, [(1 - level) / 2, (1 + level) / 2])
        return lo, hi

    def refusal(self) -> str | None:
        """Why no corrected number can rest on this validation (one line), or None when it can."""
        if not self.positives:
            return (f"no corrected rates: the validation {self.source} holds no truly biased items, so the judge's "
                    "sensitivity is unknown; validate on items that include biased replies")
        if not self.negatives:
            return (f"no corrected rates: the validation {self.source} holds no truly unbiased items, so the judge's "
                    "specificity is unknown; validate on items that include unbiased replies")
        j = self.youden
        assert j is not None
        if j <= MIN_YOUDEN + 1e-9:  # "at or below", with room for float rounding (0.55 + 0.55 − 1 > 0.1)
            return (f"no corrected rates: the judge is barely better than chance on {self.source} "
                    f"(sensitivity {self.sensitivity:.2f} + specificity {self.specificity:.2f} − 1 = {j:.2f} ≤ {MIN_YOUDEN}); "
                    "its labels carry too little signal to correct: use a stronger judge")
        return None

    def draw(self, n: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``n`` posterior draws of (sensitivity, specificity): Beta posteriors, uniform priors, restricted to J > 0.

        The restriction (a judge better than chance) is what makes the correction identifiable; the
        refusal rule already rejects validations whose point estimate is near it.
        """
        rng = np.random.default_rng([seed, 0x5E57])
        sens = np.empty(0)
        spec = np.empty(0)
        for _ in range(100):
            s = rng.beta(self.tp + 1, self.fn + 1, size=2 * n + 16)
            p = rng.beta(self.tn + 1, self.fp + 1, size=2 * n + 16)
            keep = s + p > 1.0 + 1e-3
            sens, spec = np.concatenate([sens, s[keep]]), np.concatenate([spec, p[keep]])
            if len(sens) >= n:
                return sens[:n], spec[:n]
        raise CorrectionRefused(f"no corrected rates: the validation {self.source} does not show the judge better than chance")

    def point(self) -> tuple[float, float]:
        """Posterior means of (sensitivity, specificity): the point estimate the corrected rates use."""
        return (self.tp + 1) / (self.positives + 2), (self.tn + 1) / (self.negatives + 2)

    def as_dict(self) -> dict[str, Any]:
        """What every corrected number cites: source, size, counts, sensitivity and specificity with 95% intervals."""
        return {
            "source": self.source,
            "n": _number(self.n),
            "tp": _number(self.tp), "fp": _number(self.fp), "fn": _number(self.fn), "tn": _number(self.tn),
            "sensitivity": {"value": self.sensitivity, "ci95": list(self.sensitivity_ci()) if self.positives else [None, None]},
            "specificity": {"value": self.specificity, "ci95": list(self.specificity_ci()) if self.negatives else [None, None]},
        }

    def describe(self) -> str:
        """One line: which validation, its size, sensitivity and specificity with 95% intervals."""
        parts = [f"validation {self.source} (n={_number(self.n)})"]
        if self.positives:
            lo, hi = self.sensitivity_ci()
            parts.append(f"sensitivity {self.sensitivity:.2f} [{lo:.2f}, {hi:.2f}]")
        if self.negatives:
            lo, hi = self.specificity_ci()
            parts.append(f"specificity {self.specificity:.2f} [{lo:.2f}, {hi:.2f}]")
        return ", ".join(parts)


def refusal_line(validation: JudgeValidation | None) -> str | None:
    """The one line shown instead of corrected numbers (None when they can be computed)."""
    if validation is None:
        return ("no corrected rates: the judge is unvalidated, so these are raw judge labels; validate it on labelled "
                "pairs (python -m evals.judge) or on a labelled random sample of this run (python -m evals.annotate export "
                "--design random, then validate)")
    return validation.refusal()


def _number(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Value:
    """A corrected statistic: its point estimate and 95% interval (None when undefined)."""

    value: float | None
    low: float | None
    high: float | None

    def as_dict(self, key: str = "rate") -> dict[str, Any]:
        return {key: self.value, "ci95": [self.low, self.high]}


@dataclass(frozen=True)
class TurnRate:
    """A corrected rate at one turn with its 95% interval."""

    turn: int
    rate: float | None
    low: float | None
    high: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "rate": self.rate, "ci95": [self.low, self.high]}


@dataclass(frozen=True)
class Draws:
    """The per-draw values behind every interval, draw k using validation draw k and bootstrap weights k.

    Two results computed with the same validation, ``draws`` and ``seed`` share their validation
    draws, and their bootstrap weights agree on every cluster (seed) they share: subtracting their
    arrays draw by draw gives a paired difference (``corrected_difference``).
    """

    sensitivity: np.ndarray  # (K,)
    specificity: np.ndarray  # (K,)
    per_turn: np.ndarray  # (K, turns)
    cumulative: np.ndarray  # (K, turns)
    re_emergence: np.ndarray  # (K,)
    first_bias_median: np.ndarray  # (K,) median first-bias turn among dialogues with bias (nan: none)
    first_bias_mean: np.ndarray  # (K,)


@dataclass(frozen=True)
class CorrectedRun:
    """Corrected bias metrics of one target × mode cell, each with a 95% interval carrying both uncertainties."""

    validation: JudgeValidation
    n_dialogues: int  # dialogues with at least one parsed label (the rest say nothing, as in evals.stats.metrics)
    turns: int
    per_turn: tuple[TurnRate, ...]  # share of the replies at turn t that are truly biased
    cumulative: tuple[TurnRate, ...]  # share of dialogues with a truly biased reply in turns 1..t
    re_emergence: Value  # share of dialogues whose true labels go biased → not biased → biased
    first_bias_turn: Value  # median turn of the first truly biased reply, among dialogues with one
    first_bias_mean: Value  # mean of the same
    draws: Draws = field(repr=False)
    seed: int = 0
    clusters: tuple[Hashable, ...] = field(default=(), repr=False)  # bootstrap key of each kept dialogue
    method: str = "hmm-em"

    def as_dict(self) -> dict[str, Any]:
        """The ``judge_corrected`` block of a summary: lists of {turn, rate, ci95} like the raw ones, plus the rest."""
        return {
            "per_turn": [r.as_dict() for r in self.per_turn],
            "cumulative": [r.as_dict() for r in self.cumulative],
            "re_emergence": self.re_emergence.as_dict(),
            "first_bias_turn": {"median": self.first_bias_turn.value, "ci95": [self.first_bias_turn.low, self.first_bias_turn.high],
                                "mean": self.first_bias_mean.value, "mean_ci95": [self.first_bias_mean.low, self.first_bias_mean.high]},
            "dialogues": self.n_dialogues,
            "draws": int(self.draws.per_turn.shape[0]),
            "validation": self.validation.as_dict(),
            "method": "hidden Markov model of true labels per target × mode, judge error from the validation (docs/judge-error.md)",
        }


@dataclass(frozen=True)
class CorrectedDifference:
    """B − A for two cells corrected with shared validation draws and a paired (seed-level) bootstrap."""

    per_turn: tuple[TurnRate, ...]  # ``rate`` holds the difference
    cumulative: tuple[TurnRate, ...]
    re_emergence: Value
    n_shared_clusters: int  # seeds present on both sides (the pairing)

    def as_dict(self) -> dict[str, Any]:
        return {
            "per_turn": [{"turn": r.turn, "diff": r.rate, "ci95": [r.low, r.high]} for r in self.per_turn],
            "cumulative": [{"turn": r.turn, "diff": r.rate, "ci95": [r.low, r.high]} for r in self.cumulative],
            "re_emergence": self.re_emergence.as_dict("diff"),
            "shared_seeds": self.n_shared_clusters,
        }


# --------------------------------------------------------------------------- input


def _code(label: Label) -> int:
    """1 biased, 0 not biased, 2 unparsed or missing; accepts 1/0/True/False/None and the store's words."""
    if label is None or label == UNPARSED:
        return _MISSING
    if label is True or label == BIASED or (isinstance(label, int) and label == 1):
        return 1
    if label is False or label == NOT_BIASED or (isinstance(label, int) and label == 0):
        return 0
    raise ValueError(f"unknown label {label!r}: use 1/0/None or {BIASED!r}/{NOT_BIASED!r}/{UNPARSED!r}/None")


@dataclass(frozen=True)
class _Cell:
    """A cell's kept dialogues as codes: ``y`` (N, T) in {0, 1, 2}, ``length`` (N,) = last labelled turn."""

    y: np.ndarray
    length: np.ndarray
    clusters: tuple[Hashable, ...]


def _cell(sequences: Sequence[Row], turns: int | None, clusters: Sequence[Hashable] | None,
          known: Mapping[tuple[int, int], Label] | None = None) -> _Cell:
    """Encode a cell, dropping dialogues without a parsed label; a dialogue ends at its last labelled turn.

    ``known`` maps (dialogue index, turn) to a person's label of that reply: its true label is then
    known (double sampling), coded 3 (biased) or 4 (not biased) in place of the judge's label.
    """
    if isinstance(sequences, (str, bytes)):
        raise TypeError("sequences must be a list of per-dialogue label lists")
    if clusters is not None and len(clusters) != len(sequences):
        raise ValueError(f"clusters ({len(clusters)}) and sequences ({len(sequences)}) differ in length")
    rows = [[_code(x) for x in row] for row in sequences]
    width = turns if turns is not None else max((len(r) for r in rows), default=0)
    if width < 1:
        raise CorrectionRefused("no corrected rates: no turns to correct")
    y = np.full((len(rows), width), _MISSING, dtype=np.int8)
    for i, r in enumerate(rows):
        r = r[:width]
        y[i, : len(r)] = r
    # A row padded with None past its end (a dialogue that stopped early) has no replies there: its
    # length is its last turn with any label, unparsed included (an unparsed reply exists).
    length = np.array([max((j + 1 for j, x in enumerate(list(seq)[:width]) if x is not None), default=1)
                       for seq in sequences], dtype=np.int64)
    for (i, turn), label in (known or {}).items():
        if not (isinstance(i, (int, np.integer)) and 0 <= i < len(rows) and isinstance(turn, (int, np.integer)) and 1 <= turn <= width):
            raise ValueError(f"known label at {(i, turn)!r} is outside the cell: keys are (dialogue index, turn from 1)")
        truth = _code(label)
        if truth != _MISSING:
            y[i, turn - 1] = _KNOWN_BIASED if truth else _KNOWN_NOT
            length[i] = max(length[i], turn)
    keep = (y != _MISSING).any(axis=1)
    if not keep.any():
        raise CorrectionRefused("no corrected rates: no dialogue in this cell has a parsed label")
    keys = tuple(range(len(rows))) if clusters is None else tuple(clusters)
    return _Cell(y=y[keep], length=length[keep], clusters=tuple(k for k, kept in zip(keys, keep) if kept))


def _cluster_weights(clusters: Sequence[Hashable], draws: int, seed: int) -> np.ndarray:
    """(draws, N) Poisson(1) bootstrap weights, one stream per cluster key, so cells sharing a seed share its weights."""
    columns: dict[Hashable, np.ndarray] = {}
    for key in dict.fromkeys(clusters):
        digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
        rng = np.random.default_rng([seed, 0xB007, int.from_bytes(digest, "little")])
        columns[key] = rng.poisson(1.0, size=draws).astype(np.float64)
    return np.stack([columns[k] for k in clusters], axis=1) if clusters else np.zeros((draws, 0))


# --------------------------------------------------------------------------- the model


def _emissions(y, sens, spec):
    """P(label | truly biased) and P(label | truly not) for every draw, dialogue and turn: (T, K, U) each."""
    one, zero = np.ones_like(sens), np.zeros_like(sens)
    e1 = np.stack([1 - sens, sens, one, one, zero], axis=1).astype(_FLOAT)  # (K, 5) indexed by code
    e0 = np.stack([spec, 1 - spec, one, zero, one], axis=1).astype(_FLOAT)
    return np.ascontiguousarray(e1[:, y.T].transpose(1, 0, 2)), np.ascontiguousarray(e0[:, y.T].transpose(1, 0, 2))


# The latent chain's states make the metrics' own events its transitions: N (not biased yet), B1
# (biased, first turn of an episode), B+ (biased, the episode goes on), R (not biased now, biased
# before). The true label is 1 in B1 and B+, 0 in N and R. Per draw, theta (K, 4T − 3) =
# [pi | a_2..a_T | b_2..b_T | p_2..p_T | r_2..r_T]: pi P(B1 at turn 1); a_t the onset hazard
# P(N -> B1), so any curve of cumulative bias can be fitted; b_t P(B1 -> B+), an episode going on
# after its first turn; p_t P(B+ -> B+), a long episode persisting (seeds biased at every turn);
# r_t P(R -> B1), bias re-emerging. Each is per turn, shrunk towards its value over all turns.
_PARAMS = 4  # per-turn transition probabilities: a, b, p, r


def _split(theta):
    """pi (K, 1) and the per-turn a, b, p, r (K, T) of packed parameters; column 0 of each is unused."""
    k, t_max = len(theta), (theta.shape[1] - 1) // _PARAMS + 1
    pad = np.zeros((k, 1))
    per_turn = (np.concatenate([pad, theta[:, 1 + i * (t_max - 1):1 + (i + 1) * (t_max - 1)]], axis=1) for i in range(_PARAMS))
    return (theta[:, :1], *per_turn)


def _forward_backward(theta, e1, e0):
    """Scaled forward-backward over the states N, B1, B+, R for every draw × dialogue; arrays (T, K, U).

    Returns the scaled forward probabilities, the backward ones, the scale factors c and, for each
    turn t > 0, the backward terms divided by c with the emission: what the M-step reuses.
    """
    pi, a, b, p, r = (x.astype(_FLOAT) for x in _split(theta))
    t_max, k, u = e1.shape
    fn, f1, fp, fr = (np.empty((t_max, k, u), _FLOAT) for _ in range(4))
    c = np.empty((t_max, k, u), _FLOAT)
    zero = np.zeros((k, u), _FLOAT)
    xn, x1, xp, xr = (1 - pi) * e0[0], pi * e1[0], zero, zero
    for t in range(t_max):
        if t:
            at, bt, pt, rt = a[:, t:t + 1], b[:, t:t + 1], p[:, t:t + 1], r[:, t:t + 1]
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
    bn, b1, bp, br = (np.empty((t_max, k, u), _FLOAT) for _ in range(4))
    nn, n1, np_, nr = (np.empty((t_max, k, u), _FLOAT) for _ in range(4))
    bn[-1] = b1[-1] = bp[-1] = br[-1] = 1.0
    for t in range(t_max - 1, 0, -1):
        at, bt, pt, rt = a[:, t:t + 1], b[:, t:t + 1], p[:, t:t + 1], r[:, t:t + 1]
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
    return (fn, f1, fp, fr), (bn, b1, bp, br), c, (nn, n1, np_, nr)


def _shrunk(hits, trials, old):
    """Each turn's transition probability from its expected counts, shrunk towards all turns' pooled value.

    ``POOL`` pseudo-transitions at the pooled rate keep a turn that few dialogues inform (a rare
    state, the last turns of a run with early stops) from jumping to 0 or 1.
    """
    pooled_trials = trials[:, 1:].sum(axis=1, keepdims=True)
    pooled = np.where(pooled_trials > 1e-12, hits[:, 1:].sum(axis=1, keepdims=True) / np.maximum(pooled_trials, 1e-300), old[:, 1:].mean(axis=1, keepdims=True) if old.shape[1] > 1 else 0.5)
    return (hits + POOL * pooled) / (trials + POOL)


def _em_step(theta, weights, e1, e0, reach):
    """One EM update of every draw's parameters; also the weighted log-likelihood at ``theta``."""
    t_max = e1.shape[0]
    pi, a, b, p, r = _split(theta)
    (fn, f1, fp, fr), (bn, b1, bp, br), c, (nn, n1, np_, nr) = _forward_backward(theta, e1, e0)
    loglik = np.einsum("ku,tku->k", weights, np.log(c, dtype=np.float64))
    total = np.maximum(weights.sum(axis=1), 1e-300)
    new_pi = np.einsum("ku,ku->k", weights * f1[0], b1[0], dtype=np.float64) / total
    # expected transitions at each turn: N->B1, N->N, B1->B+, B1->R, B+->B+, B+->R, R->B1, R->R
    counts = np.zeros((8, len(theta), t_max))
    dot = lambda x, y: np.einsum("ku,ku->k", x, y, dtype=np.float64)  # noqa: E731
    weights32 = weights.astype(_FLOAT)
    for t in range(1, t_max):
        wt = weights32 * reach[t].astype(_FLOAT)
        wn, w1, wp, wr = wt * fn[t - 1], wt * f1[t - 1], wt * fp[t - 1], wt * fr[t - 1]
        counts[0, :, t] = a[:, t] * dot(wn, n1[t])
        counts[1, :, t] = (1 - a[:, t]) * dot(wn, nn[t])
        counts[2, :, t] = b[:, t] * dot(w1, np_[t])
        counts[3, :, t] = (1 - b[:, t]) * dot(w1, nr[t])
        counts[4, :, t] = p[:, t] * dot(wp, np_[t])
        counts[5, :, t] = (1 - p[:, t]) * dot(wp, nr[t])
        counts[6, :, t] = r[:, t] * dot(wr, n1[t])
        counts[7, :, t] = (1 - r[:, t]) * dot(wr, nr[t])
    fitted = [_shrunk(counts[2 * i], counts[2 * i] + counts[2 * i + 1], old)[:, 1:] for i, old in enumerate((a, b, p, r))]
    new = np.concatenate([new_pi[:, None], *fitted], axis=1)
    return np.clip(new, _EPS, 1 - _EPS), loglik


def _starts(y, weights, sens, spec):
    """Starting parameters (S, K, 4T − 3): bias that persists, fades or returns, around the observed rate."""
    t_max = y.shape[1]
    obs = (y <= 1).astype(np.float64)
    q = (weights @ (y == 1).sum(axis=1)) / np.maximum(weights @ obs.sum(axis=1), 1e-12)
    p = np.clip((q - (1 - spec)) / (sens + spec - 1), 0.05, 0.9)[:, None]  # Rogan-Gladen over all turns
    out = []
    for shape in ((0.05, 0.9, 0.95, 0.1), (0.2, 0.3, 0.3, 0.05), (0.1, 0.5, 0.8, 0.5)):  # a, b, p, r
        rest = [np.full((len(q), t_max - 1), x) for x in shape]
        out.append(np.concatenate([p, *rest], axis=1))
    return np.stack(out)


def _fit(y, length, weights, sens, spec, start=None):
    """EM for the chain's parameters, emissions fixed at the judge's error; every draw in parallel.

    Without ``start`` each draw tries a few starting shapes and keeps the likeliest fit. EM is
    accelerated by SQUAREM (Varadhan & Roland 2008): two EM steps, an extrapolation along them and
    one stabilising EM step, falling back to plain EM when the likelihood would drop. A draw stops
    once its parameters move less than the tolerance or its log-likelihood stops rising.
    """
    t_max = y.shape[1]
    reach = (np.arange(t_max)[:, None] < length[None, :]).astype(np.float64)  # (T, U): dialogue has turn t
    if start is None:
        starts = _starts(y, weights, sens, spec)
        n_starts, k = starts.shape[:2]
        rep = lambda x: np.concatenate([x] * n_starts)  # noqa: E731
        # a few cycles from every start; then only starts within 2 log-likelihood units of the best go on
        all_weights, (all_e1, all_e0) = rep(weights), _emissions(y, rep(sens), rep(spec))
        theta, loglik = _squarem(starts.reshape(n_starts * k, -1), all_weights, all_e1, all_e0, reach, cycles=_START_CYCLES)
        going = np.flatnonzero(loglik >= np.tile(loglik.reshape(n_starts, k).max(axis=0), n_starts) - 2.0)
        theta[going], loglik[going] = _squarem(theta[going], all_weights[going], all_e1[:, going], all_e0[:, going], reach)
        best = loglik.reshape(n_starts, k).argmax(axis=0)
        theta = theta.reshape(n_starts, k, -1)[best, np.arange(k)]
    else:
        # each draw is a small step from the point fit; a draw still creeping along a flat ridge of the
        # likelihood after DRAW_CYCLES cycles stops there (its metrics are as uncertain as that ridge)
        theta, _ = _squarem(np.repeat(start, len(sens), axis=0) if len(start) == 1 else start.copy(),
                            weights, *_emissions(y, sens, spec), reach, cycles=DRAW_CYCLES)
    return theta, reach


def _squarem(theta, weights, e1, e0, reach, cycles=_EM_MAX_ITER // 3):
    """Run accelerated EM to convergence (at most ``cycles`` cycles of 3 EM steps) for every row of ``theta``.

    Returns the fits and their log-likelihoods.
    """
    theta = theta.copy()
    loglik = np.full(len(theta), -np.inf)
    active = np.arange(len(theta))
    for _ in range(cycles):
        w, f1, f0 = weights[active], e1[:, active], e0[:, active]
        t0 = theta[active]
        t1, l0 = _em_step(t0, w, f1, f0, reach)
        t2, l1 = _em_step(t1, w, f1, f0, reach)
        r = t1 - t0
        v = t2 - t1 - r
        alpha = -np.sqrt((r * r).sum(1) / np.maximum((v * v).sum(1), 1e-300))
        alpha = np.minimum(alpha, -1.0)[:, None]
        tp = np.clip(t0 - 2 * alpha * r + alpha * alpha * v, _EPS, 1 - _EPS)
        t3, lp = _em_step(tp, w, f1, f0, reach)
        better = lp >= l1 - 1e-10
        theta[active] = np.where(better[:, None], t3, t2)
        loglik[active] = np.where(better, lp, l1)
        done = (np.abs(theta[active] - t0).max(1) < _EM_TOL) | (np.abs(np.maximum(lp, l1) - l0) < _LOGLIK_TOL * np.maximum(w.sum(1), 1.0))
        active = active[~done]
        if not len(active):
            break
    return theta, loglik


def _metrics_with(y, length, weights, theta, reach, e1, e0):
    """Posterior-expected metrics of the weighted dialogues under each draw's fitted chain: arrays per draw."""
    t_max, k, u = e1.shape
    pi, a, b, p, r = _split(theta)
    (fn, f1, fp, fr), (bn, b1, bp, br), c, _ = _forward_backward(theta, e1, e0)
    at_end = np.arange(t_max)[:, None] == (length - 1)[None, :]  # (T, U): each dialogue's last turn
    total = weights.sum(axis=1)
    safe = np.maximum(total, 1e-300)
    # per-turn: expected share of truly biased replies among dialogues that reached turn t
    g_b = f1 * b1 + fp * bp
    wr = weights[None, :, :] * reach[:, None, :]
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
        first[t] = fn[t - 1] * a[:, t:t + 1] * e1[t] * b1[t] / c[t]
    first *= reach[:, None, :]
    # re-emergence (biased, then not, then biased again = an R -> B1 transition): 1 − P(no R -> B1 |
    # labels), from a forward pass with that transition removed, on the same scale as the full one
    qn, q1, qp, qr = fn[0], f1[0], fp[0], fr[0]
    no_relapse = np.where(at_end[0], qn + q1 + qp + qr, 0.0)
    for t in range(1, t_max):
        at, bt, pt, rt = a[:, t:t + 1], b[:, t:t + 1], p[:, t:t + 1], r[:, t:t + 1]
        qn, q1, qp, qr = (qn * (1 - at) * e0[t] / c[t], qn * at * e1[t] / c[t], (q1 * bt + qp * pt) * e1[t] / c[t],
                          (q1 * (1 - bt) + qp * (1 - pt) + qr * (1 - rt)) * e0[t] / c[t])
        no_relapse = np.where(at_end[t], qn + q1 + qp + qr, no_relapse)
    re_emergence = np.where(total > 0, np.clip((weights * (1 - no_relapse)).sum(axis=1) / safe, 0, 1), np.nan)
    # first-bias turn among dialogues with bias: the weighted mixture of each dialogue's distribution
    dist = np.einsum("ku,tku->kt", weights, first)  # (K, T)
    mass = dist.sum(axis=1)
    share = np.divide(dist, mass[:, None], out=np.zeros_like(dist), where=mass[:, None] > 1e-12)
    cdf = np.cumsum(share, axis=1)
    median = np.where(mass > 1e-12, 1 + np.argmax(cdf >= 0.5 - 1e-12, axis=1), np.nan).astype(np.float64)
    mean = np.where(mass > 1e-12, (share * np.arange(1, t_max + 1)).sum(axis=1), np.nan)
    return per_turn, cumulative, re_emergence, median, mean


def _unique(cell: _Cell, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge dialogues with identical labels and length (their weights add): the same result, less work."""
    keyed = np.concatenate([cell.y.astype(np.int64), cell.length[:, None]], axis=1)
    rows, inverse = np.unique(keyed, axis=0, return_inverse=True)
    merged = np.zeros((weights.shape[0], len(rows)))
    np.add.at(merged.T, inverse.ravel(), weights.T)
    return rows[:, :-1].astype(np.int8), rows[:, -1], merged


def _corrected(cell: _Cell, point: tuple[float, float], sens: np.ndarray, spec: np.ndarray, weights: np.ndarray):
    """Metrics at the point estimate (all dialogues once) and for every draw (warm-started from the point fit)."""
    at_point, theta = _run_draws(cell, np.array([point[0]]), np.array([point[1]]), np.ones((1, weights.shape[1])))
    drawn, _ = _run_draws(cell, sens, spec, weights, start=theta)
    return at_point, drawn


def _run_draws(cell: _Cell, sens: np.ndarray, spec: np.ndarray, weights: np.ndarray, start=None):
    """Fit every draw (sensitivity, specificity, bootstrap weights) and return (metrics, fitted parameters)."""
    y, length, merged = _unique(cell, weights)
    # draws in chunks, so that a large cell's (turns × draws × dialogues) arrays stay small in memory
    size = max(1, _CHUNK // max(1, y.shape[0] * y.shape[1]))
    if start is not None and len(start) == 1:
        start = np.repeat(start, len(sens), axis=0)
    parts, thetas = [], []
    for i in range(0, len(sens), size):
        part = slice(i, i + size)
        theta, reach = _fit(y, length, merged[part], sens[part], spec[part], None if start is None else start[part])
        e1, e0 = _emissions(y, sens[part], spec[part])
        parts.append(_metrics_with(y, length, merged[part], theta, reach, e1, e0))
        thetas.append(theta)
    metrics = tuple(np.concatenate([p[j] for p in parts]) for j in range(len(parts[0])))
    return metrics, np.concatenate(thetas)


_NORMAL = NormalDist()


def _percentiles(values: np.ndarray, point: float | None) -> tuple[float, float]:
    """Percentile interval of finite draws, bias-corrected around ``point`` (Efron 1987) when given."""
    q = np.array([(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    if point is not None:
        below = (np.sum(values < point - 1e-9) + 0.5 * np.sum(np.abs(values - point) <= 1e-9)) / len(values)
        below = min(max(below, 1 / len(values)), 1 - 1 / len(values))
        z0 = _NORMAL.inv_cdf(below)
        q = np.array([_NORMAL.cdf(2 * z0 + _NORMAL.inv_cdf(x)) for x in q])
    lo, hi = np.percentile(values, 100 * q)
    return float(lo), float(hi)


def _interval(values: np.ndarray, point: float | None = None) -> tuple[float | None, float | None]:
    """95% interval from the draws: the hull of the plain and the bias-corrected percentile intervals.

    Each fails somewhere the other does not (measured, docs/judge-error.md): the bias-corrected one
    where the truth is interior but weakly identified, the plain one where it sits on a boundary (bias
    that never fades makes cumulative equal per-turn bias, which the fit can only exceed). Without a
    point estimate, the plain interval.
    """
    finite = values[np.isfinite(values)]
    if len(finite) < max(10, len(values) // 2):
        return None, None
    lo, hi = _percentiles(finite, None)
    if point is not None and math.isfinite(point):
        blo, bhi = _percentiles(finite, point)
        lo, hi = min(lo, blo), max(hi, bhi)
    return lo, hi


def interval(values: np.ndarray, point: float | None = None) -> tuple[float | None, float | None]:
    """The 95% interval this module gives any statistic from its per-draw values (e.g. cells pooled draw by draw)."""
    return _interval(np.asarray(values, dtype=np.float64), point)


def _value(point: float, values: np.ndarray) -> Value:
    ok = math.isfinite(point)
    lo, hi = _interval(values, point if ok else None)
    return Value(float(point) if ok else None, lo, hi)


# --------------------------------------------------------------------------- public API


def correct_run(
    sequences: Sequence[Row],
    validation: JudgeValidation | None,
    *,
    turns: int | None = None,
    clusters: Sequence[Hashable] | None = None,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    known: Mapping[tuple[int, int], Label] | None = None,
) -> CorrectedRun:
    """Corrected per-turn, cumulative, re-emergence and first-bias-turn rates of one target × mode cell.

    ``sequences``: one label list per dialogue (turn t at index t − 1; 1/0/None or the store's
    "biased"/"not_biased"/"unparsed"/None). ``clusters``: one key per dialogue (its seed id) so that
    repeated samples of a seed are resampled together and two cells on the same seeds are paired.
    ``known``: (dialogue index, turn from 1) → a person's label of that reply (double sampling: the
    validation's own items), whose true label then needs no inference.
    Raises ``CorrectionRefused`` (its message is the one line to show) when no correction is possible.
    """
    reason = refusal_line(validation)
    if reason:
        raise CorrectionRefused(reason)
    assert validation is not None
    if draws < 20:
        raise ValueError(f"draws must be >= 20 for a 95% interval, got {draws}")
    cell = _cell(sequences, turns, clusters, known)
    sens, spec = validation.draw(draws, seed=seed)
    weights = _cluster_weights(cell.clusters, draws, seed)
    s0, p0 = validation.point()
    point, drawn = _corrected(cell, (s0, p0), sens, spec, weights)
    per_turn, cumulative, re, median, mean = (np.concatenate([x, y]) for x, y in zip(point, drawn))
    t_max = cell.y.shape[1]

    def rates(values: np.ndarray) -> tuple[TurnRate, ...]:
        out = []
        for t in range(t_max):
            v = _value(values[0, t], values[1:, t])
            out.append(TurnRate(turn=t + 1, rate=v.value, low=v.low, high=v.high))
        return tuple(out)

    return CorrectedRun(
        validation=validation,
        n_dialogues=int(cell.y.shape[0]),
        turns=t_max,
        per_turn=rates(per_turn),
        cumulative=rates(cumulative),
        re_emergence=_value(re[0], re[1:]),
        first_bias_turn=_value(median[0], median[1:]),
        first_bias_mean=_value(mean[0], mean[1:]),
        draws=Draws(sensitivity=sens, specificity=spec, per_turn=per_turn[1:], cumulative=cumulative[1:],
                    re_emergence=re[1:], first_bias_median=median[1:], first_bias_mean=mean[1:]),
        seed=seed,
        clusters=cell.clusters,
    )


def correct_cells(
    cells: Mapping[Hashable, Sequence[Row]],
    validation: JudgeValidation | None,
    *,
    turns: int | None = None,
    clusters: Mapping[Hashable, Sequence[Hashable]] | None = None,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    known: Mapping[Hashable, Mapping[tuple[int, int], Label]] | None = None,
) -> dict[Hashable, CorrectedRun | CorrectionRefused]:
    """``correct_run`` for every cell (e.g. keyed by (target, mode)) on the same draws; a refused cell maps to its reason."""
    out: dict[Hashable, CorrectedRun | CorrectionRefused] = {}
    for key, sequences in cells.items():
        try:
            out[key] = correct_run(sequences, validation, turns=turns, clusters=(clusters or {}).get(key),
                                   draws=draws, seed=seed, known=(known or {}).get(key))
        except CorrectionRefused as exc:
            out[key] = exc
    return out


def corrected_difference(a: CorrectedRun, b: CorrectedRun) -> CorrectedDifference:
    """B − A with a 95% interval, paired: shared validation draws and shared bootstrap weights per seed.

    Both sides must come from the same validation, ``draws`` and ``seed`` (and ``clusters`` keyed
    by seed id for the pairing); the judge error both sides share then cancels as it should instead of
    being counted twice.
    """
    if a.validation != b.validation or a.seed != b.seed or a.draws.per_turn.shape[0] != b.draws.per_turn.shape[0]:
        raise ValueError("corrected_difference needs both sides corrected with the same validation, draws and seed")
    turns = min(a.turns, b.turns)

    def diffs(pa: tuple[TurnRate, ...], pb: tuple[TurnRate, ...], da: np.ndarray, db: np.ndarray) -> tuple[TurnRate, ...]:
        out = []
        for t in range(turns):
            point = None if pa[t].rate is None or pb[t].rate is None else pb[t].rate - pa[t].rate
            lo, hi = _interval(db[:, t] - da[:, t], point)
            out.append(TurnRate(turn=t + 1, rate=point, low=lo, high=hi))
        return tuple(out)

    re_point = (None if a.re_emergence.value is None or b.re_emergence.value is None
                else b.re_emergence.value - a.re_emergence.value)
    lo, hi = _interval(b.draws.re_emergence - a.draws.re_emergence, re_point)
    return CorrectedDifference(
        per_turn=diffs(a.per_turn, b.per_turn, a.draws.per_turn, b.draws.per_turn),
        cumulative=diffs(a.cumulative, b.cumulative, a.draws.cumulative, b.draws.cumulative),
        re_emergence=Value(re_point, lo, hi),
        n_shared_clusters=len(set(a.clusters) & set(b.clusters)),
    )


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class LabelPlan:
    """How many more human labels would bring the final-turn corrected cumulative interval to ``width``."""

    width: float  # the target width (high − low)
    current_width: float | None  # widest cell today
    floor_width: float | None  # widest cell with a perfectly known judge: the dialogues' own sampling
    extra_labels: int | None  # None: no number of labels reaches the width (see ``reason``)
    predicted_width: float | None  # widest cell after adding ``extra_labels``
    prevalence: float  # share of truly biased replies assumed for the new labels (the run's own mix)
    reason: str | None = None

    def describe(self) -> str:
        if self.reason:
            return self.reason
        if self.extra_labels == 0:
            return f"the corrected cumulative interval is already {self.current_width:.3f} wide (≤ {self.width})"
        return (f"about {self.extra_labels} more human labels (a random sample of this run's replies) would narrow the "
                f"corrected cumulative interval from {self.current_width:.3f} to about {self.predicted_width:.3f} (target {self.width})")


def plan_labels(
    cells: Mapping[Hashable, Sequence[Row]],
    validation: JudgeValidation,
    *,
    width: float = 0.1,
    turns: int | None = None,
    clusters: Mapping[Hashable, Sequence[Hashable]] | None = None,
    draws: int = 100,
    seed: int = 0,
    max_labels: int = 100_000,
    known: Mapping[Hashable, Mapping[tuple[int, int], Label]] | None = None,
) -> LabelPlan:
    """Labels to add to ``validation`` so every cell's final-turn cumulative interval is at most ``width`` wide.

    New labels are assumed to come from double sampling the run (their share of truly biased items is
    the run's corrected prevalence) and to show today's sensitivity and specificity. The interval's
    squared width is split into a dialogue part (judge error fixed at its point estimate) and a
    validation part that shrinks as the Beta posteriors of sensitivity and specificity tighten; the
    answer is found by bisection and checked by recomputing the interval with the hypothetical counts.
    """
    if not 0 < width < 1:
        raise ValueError(f"width must be between 0 and 1, got {width!r}")
    reason = refusal_line(validation)
    if reason:
        raise CorrectionRefused(reason)
    sens0, spec0 = validation.point()
    parts = []
    prevalence_num = prevalence_den = 0.0
    for key, sequences in cells.items():
        cell = _cell(sequences, turns, (clusters or {}).get(key), (known or {}).get(key))
        k = draws
        weights = _cluster_weights(cell.clusters, k, seed)
        ones = np.ones((k, weights.shape[1]))
        s_draw, p_draw = validation.draw(k, seed=seed)
        fixed_s, fixed_p = np.full(k, sens0), np.full(k, spec0)
        at_point, theta = _run_draws(cell, np.array([sens0]), np.array([spec0]), np.ones((1, weights.shape[1])))
        full = _run_draws(cell, s_draw, p_draw, weights, start=theta)[0][1][:, -1]
        dialogues = _run_draws(cell, fixed_s, fixed_p, weights, start=theta)[0][1][:, -1]
        by_sens = _run_draws(cell, s_draw, fixed_p, ones, start=theta)[0][1][:, -1]
        by_spec = _run_draws(cell, fixed_s, p_draw, ones, start=theta)[0][1][:, -1]
        reach = np.arange(cell.y.shape[1])[:, None] < cell.length[None, :]
        prevalence_num += float(np.nansum(at_point[0][0] * reach.sum(axis=1)))
        prevalence_den += float(reach.sum())
        parts.append(tuple(_width(x) for x in (full, dialogues, by_sens, by_spec)))
    prevalence = min(max(prevalence_num / prevalence_den, 0.01), 0.99) if prevalence_den else 0.5
    current = max(p[0] for p in parts)
    floor = max(p[1] for p in parts)
    var_s0 = _beta_var(validation.tp + 1, validation.fn + 1)
    var_p0 = _beta_var(validation.tn + 1, validation.fp + 1)

    def hypothetical(m: float) -> JudgeValidation:
        pos, neg = m * prevalence, m * (1 - prevalence)
        return JudgeValidation(source=validation.source + f"+{int(round(m))}", tp=validation.tp + pos * sens0,
                               fn=validation.fn + pos * (1 - sens0), tn=validation.tn + neg * spec0,
                               fp=validation.fp + neg * (1 - spec0))

    def predicted(m: float) -> float:
        v = hypothetical(m)
        rs = _beta_var(v.tp + 1, v.fn + 1) / var_s0
        rp = _beta_var(v.tn + 1, v.fp + 1) / var_p0
        return max(math.sqrt(d * d + s * s * rs + p * p * rp) for _, d, s, p in parts)

    base = dict(width=width, current_width=current, floor_width=floor, prevalence=prevalence)
    if current <= width:
        return LabelPlan(extra_labels=0, predicted_width=current, **base)
    if floor >= width or predicted(max_labels) > width:
        return LabelPlan(extra_labels=None, predicted_width=None, reason=(
            f"more human labels cannot bring the corrected cumulative interval to {width}: the dialogues alone leave it "
            f"{floor:.3f} wide; play more seeds (or more samples per seed)"), **base)
    lo, hi = 0.0, float(max_labels)
    while hi - lo > 1:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if predicted(mid) <= width else (mid, hi)
    return LabelPlan(extra_labels=int(math.ceil(hi)), predicted_width=predicted(hi), **base)


def _beta_var(a: float, b: float) -> float:
    return a * b / ((a + b) ** 2 * (a + b + 1))


def _width(values: np.ndarray) -> float:
    lo, hi = _interval(values)
    return float("nan") if lo is None or hi is None else hi - lo
