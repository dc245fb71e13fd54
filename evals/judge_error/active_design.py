"""Choosing which replies people label: a stratified random draw with Neyman allocation, and its design-weighted
validation.

The design (``evals.annotate export --design active``). Every judged reply of a run falls in one stratum:
its target × mode cell, its judge label, and its dialogue's group by how many of its replies the judge
called biased (``k``): a judged-biased reply of a dialogue with one (``k1``), two (``k2``) or more
(``k3+``) judged-biased replies, a judged-unbiased reply of a dialogue with none (``k0``), between two
judged-biased ones (``gap``) or before the first or after the last of them (``k1+``); and its turn (in
``TURN_BANDS`` bands of turns at most: each turn of a run of up to 5 turns, pairs of turns for 6 to 10).
Those groups are what decides a dialogue-level metric: a dialogue with one judged-biased reply was ever
biased exactly when that reply is, one with many almost surely was, and a gap reply decides whether the
dialogue re-emerged; the turn says which turns' rates a reply moves (an early one moves every later
turn's cumulative rate). The budget is split over the strata by a defensive Neyman allocation:
``n_h ∝ N_h · S_h`` (stratum size × the standard deviation of what its labels teach; ``spread``) with
``S_h`` shrunk towards its mean by ``DEFENSIVE``, so each stratum gets at least that share of a random
draw's, weighing the aims of ``AIMS``: the dialogues' status (how much a reply's true label moves its
dialogue's metrics, from the fitted chain: ``evals.judge_error.reply_value``; without it the rule of thumb
``r_h``: 1/k for a judged-biased reply of a dialogue with k of them, 1 for a gap reply, 1/m for another
judged-unbiased one, m the dialogue's judged replies) and the judge's sensitivity and specificity (the
derivatives of the estimate below). Where the strata split the run into two bands of turns or more, ``DRIFT_SHARE``
of the batch is reserved for the drift check (``drift_reserve``) and allocated by Neyman on the slopes of the two
rates over the bands alone (``drift_spread``): a band's rate moves the slope by its distance from the middle band,
and a band's sensitivity is decided by its few false negatives among many judged-unbiased replies (most where the
band holds few truly biased replies), so the reserve goes to the first and last bands' judged-unbiased and
judged-biased replies. Every non-empty stratum gets at least ``minimum_for`` picks (two where that takes at most
half the batch, else one); within a stratum the picks are a simple random sample, so every reply of stratum ``h``
is picked with the known probability ``p_h = n_h / N_h``, written into the ``draw`` column. Once a run's labels
reach ``FALLBACK_SHARE`` of its judged replies, ``export --design active`` draws at random.

The validation (``design_validation``). A sample stratified by the judge's label is not a random sample
of the run: ``tp / (tp + fn)`` of its raw counts is not the judge's sensitivity. Within each stratum
the labelled replies are a simple random sample (also over several batches, each a stratified draw from
the replies not yet labelled, and over random draws), so the stratum's share of truly biased replies
``π_h`` is estimated by its labelled share (a stratum without a label borrows its group's over the other
turns, then its judge label's), and the run's counts of true × judged replies by
``N_h π_h`` summed over strata (Tenenbein's stratified double-sampling estimator, post-stratified):
sensitivity = Σ_{judged biased} W_h π_h / Σ_h W_h π_h, specificity likewise. Its variance (delta
method) carries each ``π_h``'s binomial variance and the multinomial variance of the strata's shares
``W_h`` among the run's replies; it is turned into the effective counts of a ``JudgeValidation``
whose Beta posterior has the estimate's mean and variance, so the correction uses it unchanged.
People's labels still enter the chain as known states: the choice depends only on the judge's labels,
which the chain conditions on, so it is ignorable in the chain's likelihood.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from evals.judge_error.codes import KNOWN_BIASED, KNOWN_NOT, LabelLike, code
from evals.judge_error.drift_reserve import DRIFT_SHARE, band_slope, drift_derivatives, reserve_for, slope_spread
from evals.judge_error.neyman import MIN_PER_STRATUM, allocate
from evals.judge_error.validation import JudgeValidation

__all__ = [
    "ACTIVE",
    "FALLBACK_SHARE",
    "MIN_PER_STRATUM",
    "TURN_BANDS",
    "falls_back",
    "merged",
    "minimum_for",
    "Pick",
    "Stratum",
    "allocate",
    "allocation",
    "band_slope",
    "drift_derivatives",
    "drift_reserve",
    "drift_spread",
    "DRIFT_SHARE",
    "design_validation",
    "describe_pick",
    "draw_active",
    "parse_pick",
    "spread",
    "strata_of",
]

ACTIVE = "active"
TURN_BANDS = 5  # a group's replies are split by turn into at most this many bands of consecutive turns
# At or past this share of the run's judged replies labelled, the active design gained nothing measurable on the
# per-turn and cumulative intervals over a random draw (python -m benchmarks judge_error --labelling: 400 labels of
# 600 replies), so export --design active draws a simple random sample instead.
FALLBACK_SHARE = 0.5
PRIOR_Q = {"k1": 0.5, "k2": 0.5, "k3+": 0.9, "k0": 0.1, "k1+": 0.1, "gap": 0.5}  # guessed share truly biased
# The share of each batch drawn in proportion to the strata's sizes, the rest by Neyman allocation (a defensive
# allocation): each stratum gets at least DEFENSIVE times a random draw's expected share of the batch, which bounds
# how much wider than a random draw's any stratified estimate can be, whatever the allocation's guesses got wrong.
DEFENSIVE = 0.4


def falls_back(labels: int, judged: int) -> bool:
    """Whether a run with ``labels`` human labels in all (after this batch) of ``judged`` judged replies is better
    served by a random draw: past ``FALLBACK_SHARE`` of the run labelled, the active design showed no gain."""
    return judged > 0 and labels >= FALLBACK_SHARE * judged


@dataclass(frozen=True)
class Stratum:
    """One stratum: its cell, the judge's label of its replies, its dialogues' group, its turns, and its members."""

    cell: Hashable
    judged: int  # 1 biased, 0 not
    group: str  # k1, k2, k3+ (judged biased); k0, gap, k1+ (judged not biased)
    members: tuple[tuple[int, int], ...]  # (dialogue index in the cell, turn from 1)
    relevance: float  # r_h: how much one reply's true label moves its dialogue's status (the rule of thumb)
    turns: tuple[int, int] | None = None  # the band of turns (first, last) its replies are at

    @property
    def name(self) -> str:
        cell = "·".join(map(str, self.cell)) if isinstance(self.cell, tuple) else str(self.cell)
        band = (
            ""
            if self.turns is None
            else f"/t{self.turns[0]}" + (f"-{self.turns[1]}" if self.turns[1] > self.turns[0] else "")
        )
        # one word in the draw column
        return "_".join(f"{cell}/{'b' if self.judged else 'nb'}/{self.group}{band}".split())

    @property
    def parent(self) -> tuple[Hashable, int, str]:
        """The stratum's cell, judge label and group over all turns: where an unlabelled stratum borrows from."""
        return (self.cell, self.judged, self.group)

    def keeping(self, skip: Iterable[tuple[int, int]]) -> Stratum:
        """The stratum without the members in ``skip`` (replies labelled already)."""
        gone = set(skip)
        return replace(self, members=tuple(m for m in self.members if m not in gone))

    @property
    def key(self) -> str:
        """A short id of the stratum for the annotators' file, which must not tell them the judge's label."""
        return hashlib.blake2b(self.name.encode(), digest_size=4).hexdigest()

    @property
    def size(self) -> int:
        return len(self.members)


def _group(judged: int, k: int, between: bool = False) -> str:
    if judged:
        return "k1" if k == 1 else "k2" if k == 2 else "k3+"
    return "k0" if k == 0 else "gap" if between else "k1+"


def _relevance(judged: int, group: str, k: int, m: int) -> float:
    """r_h: how much one reply's true label moves its dialogue's status; a gap reply (judged not biased between two
    judged-biased ones) decides alone whether the dialogue re-emerged."""
    return 1.0 / k if judged else 1.0 if group == "gap" else 1.0 / m


def _band(turn: int, turns: int) -> tuple[int, int]:
    """The band of consecutive turns ``turn`` falls in: ``TURN_BANDS`` bands at most over a cell's ``turns``."""
    width = max(1, math.ceil(turns / TURN_BANDS))
    first = (turn - 1) // width * width + 1
    return first, min(first + width - 1, turns)


def strata_of(cells: Mapping[Any, Sequence[Sequence[LabelLike]]]) -> list[Stratum]:
    """Every judged reply of every cell in its stratum (cell × judge label × dialogue group × band of turns), in a
    fixed order."""
    out: list[Stratum] = []
    for cell, rows in cells.items():
        members: dict[tuple[int, str, tuple[int, int]], list[tuple[int, int]]] = {}
        relevance: dict[tuple[int, str, tuple[int, int]], list[float]] = {}
        turns = max((len(row) for row in rows), default=1)
        for i, row in enumerate(rows):
            codes = [code(x) for x in row]
            judged = [(t + 1, c) for t, c in enumerate(codes) if c in (0, 1)]
            k = sum(c for _, c in judged)
            biased = [t for t, c in judged if c]
            for turn, c in judged:
                group = _group(c, k, bool(biased) and biased[0] < turn < biased[-1])
                key = (c, group, _band(turn, turns))
                members.setdefault(key, []).append((i, turn))
                relevance.setdefault(key, []).append(_relevance(c, group, k, len(judged)))
        for key, m in sorted(members.items(), key=lambda kv: (-kv[0][0], kv[0][1], kv[0][2])):
            out.append(Stratum(cell, key[0], key[1], tuple(m), float(np.mean(relevance[key])), key[2]))
    return out


# The weight of each quantity's variance in the batch's allocation: the dialogues' status and the judge's two rates.
AIMS = {"dialogues": 0.5, "sensitivity": 0.25, "specificity": 0.25}


def share_biased(
    s: Stratum,
    known: Mapping[Any, Mapping[tuple[int, int], LabelLike]] | None,
    prior: Mapping[int, float] | None = None,
) -> float:
    """q_h: the stratum's share truly biased, from its people's labels with two pseudo-labels at a prior guess
    (``prior`` by judge label, else ``PRIOR_Q`` by group)."""
    mine = (known or {}).get(s.cell) or {}
    labels = [c for c in (code(mine[m]) for m in s.members if m in mine) if c in (0, 1)]
    guess = prior[s.judged] if prior is not None else PRIOR_Q[s.group]
    return (sum(labels) + 2 * guess) / (len(labels) + 2)


def spread(
    strata: Sequence[Stratum],
    known: Mapping[Any, Mapping[tuple[int, int], LabelLike]] | None = None,
    *,
    aims: Mapping[str, float] | None = None,
    dialogues: Mapping[Any, int] | None = None,
    value: Sequence[float] | None = None,
) -> list[float]:
    """S_h of each stratum: the standard deviation of what its labels teach, the aims weighted by ``AIMS``.

    For each aim k, S_hk = c_hk · sqrt(q_h (1 − q_h)), with c_hk how much a reply's true label moves that
    quantity: its dialogue's status (r_h), the judge's sensitivity or specificity (the derivative of the
    stratified estimate with respect to the stratum's share truly biased, per unit of the stratum's weight). (The
    drift check's part of a batch has its own spreads: :func:`drift_spread`.)
    Neyman allocation with S_h² = Σ_k AIMS_k S_hk² / Σ_h W_h S_hk² minimises the weighted sum of the
    variances, each relative to its variance under proportional allocation (a random draw). ``aims`` replaces
    ``AIMS``; ``dialogues`` (cell -> its dialogues) divides each stratum's dialogue part by its cell's
    dialogues, so a reply moves its cell's rate (a share of that cell's dialogues) rather than its dialogue's
    status.
    ``value`` (per stratum) replaces the dialogues' r_h √(q_h (1 − q_h)) by what the fitted chain says a label
    of the stratum moves its dialogue's metrics by (``evals.judge_error.reply_value``).
    """
    if not strata:
        return []
    q = np.array([share_biased(s, known) for s in strata])
    w = np.array([s.size for s in strata], dtype=float)
    w /= max(w.sum(), 1.0)
    pos = np.array([s.judged == 1 for s in strata])
    a, b = float(w[pos] @ q[pos]), float(w[~pos] @ q[~pos])
    c, d = float(w[pos] @ (1 - q[pos])), float(w[~pos] @ (1 - q[~pos]))
    sd = np.sqrt(q * (1 - q))
    moved = np.array([s.relevance for s in strata]) * sd if value is None else np.asarray(value, dtype=float)
    if dialogues is not None:
        moved = moved / np.array([max(dialogues.get(s.cell, 1), 1) for s in strata])
    parts = {
        "dialogues": moved,
        "sensitivity": np.where(pos, b, a) / max(a + b, 1e-12) ** 2 * sd,
        "specificity": np.where(pos, d, c) / max(c + d, 1e-12) ** 2 * sd,
    }
    total = np.zeros(len(strata))
    for aim, weight in (AIMS if aims is None else aims).items():
        scale = float(w @ parts[aim] ** 2)
        if scale > 0:
            total += weight * parts[aim] ** 2 / scale
    neyman = np.sqrt(total)
    # n_h ∝ N_h (λ / N + (1 − λ) S_h / Σ N_j S_j): S_h shrunk towards its size-weighted mean
    return [float(x) for x in DEFENSIVE * float(w @ neyman) + (1 - DEFENSIVE) * neyman]


def minimum_for(budget: int, strata: Sequence[Stratum]) -> int:
    """Picks each non-empty stratum gets at least: ``MIN_PER_STRATUM`` where that takes at most half the
    batch, else one (many strata and a small batch leave the rest to the allocation)."""
    filled = sum(1 for s in strata if s.size)
    return MIN_PER_STRATUM if MIN_PER_STRATUM * filled <= budget / 2 else 1


def drift_reserve(strata: Sequence[Stratum], budget: int) -> int:
    """Picks of a batch of ``budget`` reserved for the drift check: ``DRIFT_SHARE`` of it where the strata hold two
    bands of turns or more and the rest of the batch still gives every stratum its minimum, else none."""
    return reserve_for(strata, budget, minimum_for(budget, strata) * sum(1 for s in strata if s.size))


def drift_spread(
    strata: Sequence[Stratum], known: Mapping[Any, Mapping[tuple[int, int], LabelLike]] | None = None
) -> list[float]:
    """S_h of the drift check's reserve (``evals.judge_error.drift_reserve.slope_spread``), each stratum's share
    truly biased from its people's labels and the prior guess (:func:`share_biased`)."""
    return slope_spread(strata, np.array([share_biased(s, known) for s in strata]))


def allocation(
    strata: Sequence[Stratum],
    spreads: Sequence[float],
    budget: int,
    *,
    known: Mapping[Any, Mapping[tuple[int, int], LabelLike]] | None = None,
) -> list[int]:
    """Picks per stratum of a batch of ``budget``: :func:`allocate` with the minimum of :func:`minimum_for` of all
    but the drift check's reserve (:func:`drift_reserve`), which :func:`allocate` spreads by :func:`drift_spread`
    over what the first part left (``known``: people's labels so far, for the strata's shares truly biased). The
    stratum's picks are one simple random sample of it either way."""
    sizes = [s.size for s in strata]
    reserve = drift_reserve(strata, min(budget, sum(sizes)))
    main = allocate(sizes, spreads, budget - reserve, minimum=minimum_for(budget, strata))
    if not reserve:
        return main
    left = [size - n for size, n in zip(sizes, main)]
    extra = allocate(left, drift_spread(strata, known), reserve, minimum=0)
    return [a + b for a, b in zip(main, extra)]


@dataclass(frozen=True)
class Pick:
    """One chosen reply: its cell, dialogue index and turn, its stratum's key and its inclusion probability."""

    cell: Hashable
    dialogue: int
    turn: int
    stratum: str
    probability: float


def draw_active(
    strata: Sequence[Stratum],
    budget: int,
    *,
    seed: int = 0,
    exclude: Mapping[Any, Iterable[tuple[int, int]]] | None = None,
    spreads: Sequence[float] | None = None,
    known: Mapping[Any, Mapping[tuple[int, int], LabelLike]] | None = None,
) -> list[Pick]:
    """A stratified random draw of ``budget`` replies (Neyman allocation), none of ``exclude``; reproducible with
    ``seed``.

    ``exclude`` (cell → (dialogue, turn) already labelled) leaves replies out of their strata before
    allocating, so a further batch is a stratified draw of what is left.
    """
    skip = {cell: set(v) for cell, v in (exclude or {}).items()}
    left = [s.keeping(skip.get(s.cell, ())) for s in strata]
    spreads = list(spreads) if spreads is not None else spread(left)
    n = allocation(left, spreads, budget, known=known)
    rng = random.Random(seed)
    picks: list[Pick] = []
    for s, n_h in zip(left, n):
        if n_h <= 0:
            continue
        p = n_h / s.size
        for i, turn in rng.sample(sorted(s.members), n_h):
            picks.append(Pick(s.cell, i, turn, s.key, p))
    return picks


def merged(strata: Sequence[Stratum]) -> list[Stratum]:
    """The strata over all turns: each cell × judge label × group's bands in one stratum (a difference's draw, whose
    rule of thumb does not tell turns apart). A draw stratified this coarsely is still validated over the finer
    strata (post-stratified: within each, its labels are a simple random sample of it too)."""
    groups: dict[tuple[Hashable, int, str], list[Stratum]] = {}
    for s in strata:
        groups.setdefault(s.parent, []).append(s)
    out = []
    for (cell, judged, group), parts in groups.items():
        members = tuple(sorted(m for s in parts for m in s.members))
        size = sum(s.size for s in parts)
        relevance = sum(s.relevance * s.size for s in parts) / size if size else parts[0].relevance
        out.append(Stratum(cell, judged, group, members, float(relevance)))
    return out


def describe_pick(pick: Pick, *, seed: int, n: int, population: int, label_set: str) -> str:
    """The ``draw`` column of an active pick: the design, its stratum and inclusion probability (read back by
    validate)."""
    return (
        f"{ACTIVE} seed={seed} stratum={pick.stratum} p={pick.probability:.6g} n={n} of {population} "
        f"judged turns ({label_set})"
    )


_PICK = re.compile(r"^active seed=(-?\d+) stratum=(\S+) p=([0-9.eE+-]+) ")


def parse_pick(draw: str) -> tuple[int, str, float] | None:
    """(seed, stratum, inclusion probability) of an active draw's ``draw`` cell; None when it is not one."""
    m = _PICK.match(draw or "")
    if not m:
        return None
    p = float(m.group(3))
    return (int(m.group(1)), m.group(2), p) if 0 < p <= 1 else None


# --------------------------------------------------------------------------- the design-weighted validation


# How many labels' worth of its group's share (over all turns) a stratum's share is shrunk toward, for the
# variance only: the estimate itself keeps each stratum's own share.
SHRINK = 1.0


def design_validation(
    source: str,
    cells: Mapping[Any, Sequence[Sequence[LabelLike]]],
    known: Mapping[Any, Mapping[tuple[int, int], LabelLike]],
) -> JudgeValidation:
    """The judge's sensitivity and specificity on the run, from people's labels of a stratified draw, as a validation.

    Post-stratified over :func:`strata_of` (the strata of ``evals.annotate export --design active``):
    each stratum's share truly biased is its labelled share, weighted by the stratum's share of the run's
    judged replies. A stratum without any label borrows the pooled share of its group over the other turns,
    else of its judge label (in its cell, else over the run). The result's counts are effective counts
    (fractional): ``tp / (tp + fn)`` is the design-weighted sensitivity and ``tp + fn`` the size of a simple
    random sample of truly biased replies that would give the estimate's variance (likewise for specificity).

    The variance takes each stratum's share shrunk toward its group's share over all turns. A stratum's own
    share, from a few labels, understates: where false negatives are rare, most judged-unbiased strata see none,
    and the estimate's spread would be claimed at two thirds of its real spread (one-turn episodes, 480 × 10, 150
    labels). With no false negative found at all, the effective counts carry about what the rule of three allows
    for the judged-unbiased labels, not a near-certain sensitivity of 1.
    """
    strata = strata_of(cells)
    total = sum(s.size for s in strata)
    if not total:
        return JudgeValidation(source, 0, 0, 0, 0)
    labelled = []
    for s in strata:
        values = [code((known.get(s.cell) or {}).get(m)) for m in s.members]
        labelled.append([1 if v in (1, KNOWN_BIASED) else 0 for v in values if v in (0, 1, KNOWN_BIASED, KNOWN_NOT)])
    pooled: dict[tuple[Hashable, ...], list[int]] = {}
    for s, lab in zip(strata, labelled):
        pooled.setdefault(s.parent, []).extend(lab)
        pooled.setdefault((s.cell, s.judged), []).extend(lab)
        pooled.setdefault(("*", s.judged), []).extend(lab)
    whole = _design_counts(strata, labelled, pooled, np.ones(len(strata), bool), total)
    if whole is None:
        return JudgeValidation(source, 0, 0, 0, 0)
    # the same estimate within each band of turns (where the judge's error may change with the turn)
    by_turn: dict[float, Sequence[float]] = {}
    for band in sorted({s.turns for s in strata if s.turns is not None}):
        inside = np.array([s.turns == band for s in strata])
        if not any(lab for lab, keep in zip(labelled, inside) if keep):
            continue  # no label in this band: it says nothing about the judge's error there
        if (counts := _design_counts(strata, labelled, pooled, inside, total)) is None:
            continue
        at = np.mean([t for s, keep in zip(strata, inside) if keep for _, t in s.members])  # the band's mean turn
        by_turn[round(float(at), 3)] = counts
    tp, fp, fn, tn = whole
    return JudgeValidation(
        source, tp=tp, fp=fp, fn=fn, tn=tn, by_turn=tuple((t, *c) for t, c in sorted(by_turn.items()))
    )


def _design_counts(strata, labelled, pooled, inside: np.ndarray, total: int) -> tuple[float, ...] | None:
    """The design-weighted validation's effective (tp, fp, fn, tn) over the strata ``inside`` (all: the run)."""
    strata = [s for s, keep in zip(strata, inside) if keep]
    labelled = [lab for lab, keep in zip(labelled, inside) if keep]
    size = sum(s.size for s in strata)
    if not size:
        return None
    w = np.array([s.size / size for s in strata])
    pi, var_pi, smooth_pi = np.zeros(len(strata)), np.zeros(len(strata)), np.zeros(len(strata))
    for h, (s, lab) in enumerate(zip(strata, labelled)):
        near = pooled[s.parent] or pooled[(s.cell, s.judged)] or pooled[("*", s.judged)]
        lab = lab or near
        n = len(lab)
        if not n:
            continue  # no label of this judge label anywhere: its counts stay 0 and the validation refuses
        pi[h] = sum(lab) / n
        # the variance's share: the stratum's own, shrunk toward its group's over all turns (a stratum of a few
        # labels that all agree says little about its spread; nor does one lucky hit)
        prior = (sum(near) + 0.5) / (len(near) + 1)
        smooth = (sum(lab) + SHRINK * prior) / (n + SHRINK)
        var_pi[h], smooth_pi[h] = smooth * (1 - smooth) / n, smooth
    pos = np.array([s.judged == 1 for s in strata])
    has = {j: any(lab for s, lab in zip(strata, labelled) if s.judged == j) for j in (0, 1)}
    if not (has[0] or has[1]):
        return None
    a, b = float(w[pos] @ pi[pos]), float(w[~pos] @ pi[~pos])  # true biased: judged biased / judged not
    c, d = float(w[pos] @ (1 - pi[pos])), float(w[~pos] @ (1 - pi[~pos]))  # truly unbiased: judged biased / not
    var_sens, var_spec = stratified_variances(w, smooth_pi, var_pi, pos, size)
    sens = a / (a + b) if a + b > 0 else None
    spec = d / (c + d) if c + d > 0 else None

    def effective(value: float | None, smooth: float, var: float) -> tuple[float, float]:
        """(successes, failures) of the simple random sample with the same mean and variance."""
        if value is None:
            return 0.0, 0.0
        size = smooth * (1 - smooth) / max(var, 1e-12)
        return value * size, (1 - value) * size

    # the effective size from the smoothed shares, so that a stratum whose labels all agree still has a variance
    sa, sb = float(w[pos] @ smooth_pi[pos]), float(w[~pos] @ smooth_pi[~pos])
    sc, sd = float(w[pos] @ (1 - smooth_pi[pos])), float(w[~pos] @ (1 - smooth_pi[~pos]))
    tp, fn = effective(sens if a + b > 0 else None, sa / (sa + sb), var_sens)
    tn, fp = effective(spec if c + d > 0 else None, sd / (sc + sd), var_spec)
    return tp, fp, fn, tn


def stratified_variances(
    w: np.ndarray, pi: np.ndarray, var_pi: np.ndarray, pos: np.ndarray, total: int
) -> tuple[float, float]:
    """Delta-method variances of the stratified sensitivity and specificity: each share's binomial variance and
    the multinomial variance of the strata's weights among the run's ``total`` judged replies."""
    a, b = float(w[pos] @ pi[pos]), float(w[~pos] @ pi[~pos])
    c, d = float(w[pos] @ (1 - pi[pos])), float(w[~pos] @ (1 - pi[~pos]))
    # d/dπ_h and d/dW_h of sensitivity a/(a+b) and specificity d/(c+d)
    g_sens_pi = np.where(pos, b, -a) * w / max(a + b, 1e-12) ** 2
    g_sens_w = np.where(pos, b, -a) * pi / max(a + b, 1e-12) ** 2
    g_spec_pi = np.where(pos, d, -c) * w / max(c + d, 1e-12) ** 2  # dc/dπ = −w (judged biased), dd/dπ = −w (not)
    g_spec_w = np.where(pos, -d, c) * (1 - pi) / max(c + d, 1e-12) ** 2
    cov_w = (np.diag(w) - np.outer(w, w)) / max(total, 1)
    return (
        float(g_sens_pi**2 @ var_pi + g_sens_w @ cov_w @ g_sens_w),
        float(g_spec_pi**2 @ var_pi + g_spec_w @ cov_w @ g_spec_w),
    )
