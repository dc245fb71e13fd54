"""What a person's label of a reply is worth to the dialogue metrics, from the fitted chain: the active design's aim
for the dialogues.

A reply's true label moves its own dialogue's posterior: whether (and when) the dialogue has been biased, and
its other turns' true labels. For a judged reply ``j`` of dialogue ``i``, with ``p_j`` its posterior share
truly biased under the chain fitted to the cell's judge and people's labels, the expected reduction of the
posterior variance of the dialogue's cumulative curve ``c_i(t)`` (biased by turn t) and per-turn curve
``z_i(t)`` that its label buys is

    R_j = p_j (1 − p_j) Σ_t [(c_i(t | j biased) − c_i(t | j not))² + (z_i(t | j biased) − z_i(t | j not))²],

computed exactly by the chain's forward-backward with the reply pinned either way (a person's label pins
the state). ``R_j`` is large for a reply that decides its dialogue's onset (a lone judged-biased reply, the
first of two, a judged-unbiased one just before a judged-biased run) and small for one whose dialogue is
settled either way; it depends on the turn in the way the fitted chain says (an onset the chain expects
late makes late replies count). A stratum's value is √(mean ``R_j``): the standard deviation of what its
labels teach about the dialogues, which the Neyman allocation of ``evals.judge_error.active_design`` weighs
against what they teach about the judge's sensitivity and specificity.

The chain is fitted at one (sensitivity, specificity) point: the validation the run's correction uses when it
has one (``evals.judge_error.design_choice`` passes it), else the design-weighted validation of the run's people's
labels when they can validate the judge, else ``PRIOR_POINT``. The value only steers how many labels each
stratum gets; the picks stay random within their strata with known probabilities, so a wrong fit costs
width, never bias.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from evals.judge_error.active_design import Stratum, design_validation, merged, spread
from evals.judge_error.chain import emissions, forward_backward, reach_of
from evals.judge_error.codes import KNOWN_BIASED, KNOWN_NOT, MISSING, LabelLike, code
from evals.judge_error.fit import fit

__all__ = ["PRIOR_POINT", "reply_values", "run_point", "stratum_values", "valued_spread", "valued_strata"]

PRIOR_POINT = (0.75, 0.75)  # the judge's (sensitivity, specificity) before its labels can say: a middling judge


def _codes(
    rows: Sequence[Sequence[LabelLike]], known: Mapping[tuple[int, int], LabelLike]
) -> tuple[np.ndarray, np.ndarray]:
    """(N, T) codes with people's labels pinned, and each dialogue's length (its last labelled turn)."""
    width = max((len(r) for r in rows), default=1)
    y = np.full((len(rows), width), MISSING, dtype=np.int64)
    for i, row in enumerate(rows):
        y[i, : len(row)] = [code(x) for x in row]
    for (i, turn), label in known.items():
        truth = code(label)
        if 0 <= i < len(rows) and 1 <= turn <= width and truth != MISSING:
            y[i, turn - 1] = KNOWN_BIASED if truth else KNOWN_NOT
    seen = y != MISSING
    length = np.where(seen.any(axis=1), width - np.argmax(seen[:, ::-1], axis=1), 1)
    return y, length


def _curves(y: np.ndarray, length: np.ndarray, theta: np.ndarray, point: tuple[float, float]):
    """Each row's posterior cumulative curve P(biased by t) and per-turn curve P(biased at t), (U, T) each."""
    e1, e0 = emissions(y, np.array([point[0]]), np.array([point[1]]))
    (fn, f1, fp, _), (bn, b1, bp, _), _, _ = forward_backward(theta, e1, e0)
    reach = reach_of(length, y.shape[1])
    never = (fn * bn).astype(np.float64)
    for t in range(1, y.shape[1]):
        never[t] = np.where(reach[t] < 1, never[t - 1], never[t])
    per_turn = (f1 * b1 + fp * bp).astype(np.float64) * reach
    return 1 - never[:, 0, :].T, per_turn[:, 0, :].T


def reply_values(
    cells: Mapping[Any, Sequence[Sequence[LabelLike]]],
    known: Mapping[Any, Mapping[tuple[int, int], LabelLike]] | None = None,
    point: tuple[float, float] = PRIOR_POINT,
) -> dict[Any, np.ndarray]:
    """Each cell's (N, T) array of ``R_j`` for its judged replies (nan elsewhere), the chain fitted at ``point``."""
    out: dict[Any, np.ndarray] = {}
    for cell, rows in cells.items():
        y, length = _codes(rows, (known or {}).get(cell) or {})
        values = np.full(y.shape, np.nan)
        at = np.argwhere((y == 0) | (y == 1))
        if not len(at):
            out[cell] = values
            continue
        weights = (y != MISSING).any(axis=1).astype(np.float64)[None]
        theta, _ = fit(y[None], length[None], weights, np.array([point[0]]), np.array([point[1]]))
        cum, per_turn = _curves(y, length, theta, point)
        rows_at, turns_at = at[:, 0], at[:, 1]
        pinned = {}
        for state in (KNOWN_BIASED, KNOWN_NOT):
            variant = y[rows_at].copy()
            variant[np.arange(len(at)), turns_at] = state
            pinned[state] = _curves(variant, np.maximum(length[rows_at], turns_at + 1), theta, point)
        p = np.clip(per_turn[rows_at, turns_at], 0.0, 1.0)
        moved = sum(((pinned[KNOWN_BIASED][k] - pinned[KNOWN_NOT][k]) ** 2).sum(axis=1) for k in (0, 1))
        values[rows_at, turns_at] = p * (1 - p) * moved
        out[cell] = values
    return out


def stratum_values(strata: Sequence[Stratum], values: Mapping[Hashable, np.ndarray]) -> list[float]:
    """√(mean ``R_j``) over each stratum's members (0 for an empty stratum)."""
    out = []
    for s in strata:
        got = [values[s.cell][i, turn - 1] for i, turn in s.members]
        got = [x for x in got if x == x]
        out.append(float(np.sqrt(max(np.mean(got), 0.0))) if got else 0.0)
    return out


def valued_strata(
    strata: Sequence[Stratum],
    cells: Mapping[Any, Sequence[Sequence[LabelLike]]],
    known: Mapping[Any, Mapping[tuple[int, int], LabelLike]] | None,
    budget: int,
    *,
    point: tuple[float, float] | None = None,
) -> tuple[list[Stratum], list[float]]:
    """The strata a batch of ``budget`` labels is drawn over, and their :func:`valued_spread`: by turn where the
    batch can give each of them a label, else each group over all its turns (a grid of many cells and a small
    batch). Labels drawn over whole groups are still validated over the strata by turn (post-stratified)."""
    drawn = list(strata) if sum(1 for s in strata if s.size) <= budget else merged(strata)
    return drawn, valued_spread(drawn, cells, known, point=point)


def run_point(
    cells: Mapping[Any, Sequence[Sequence[LabelLike]]], known: Mapping[Any, Mapping[tuple[int, int], LabelLike]] | None
) -> tuple[float, float]:
    """The judge's point to fit the chain at: the design-weighted validation of people's labels so far when it can
    validate the judge (better than chance), else ``PRIOR_POINT``."""
    if not any(known.values() if known else ()):
        return PRIOR_POINT
    v = design_validation("labels so far", cells, known or {})
    if v.refusal() is not None:
        return PRIOR_POINT
    sens, spec = v.point()
    return (sens, spec) if sens + spec > 1.05 else PRIOR_POINT


def valued_spread(
    strata: Sequence[Stratum],
    cells: Mapping[Any, Sequence[Sequence[LabelLike]]],
    known: Mapping[Any, Mapping[tuple[int, int], LabelLike]] | None = None,
    *,
    point: tuple[float, float] | None = None,
) -> list[float]:
    """The active design's spreads (``evals.judge_error.active_design.spread``) with the dialogues' aim from the fitted
    chain: what each stratum's labels move their dialogues' metrics by. The chain is fitted at ``point`` (the
    judge's sensitivity and specificity), by default :func:`run_point`."""
    at = point if point is not None else run_point(cells, known)
    values = reply_values({c: cells[c] for c in {s.cell for s in strata}}, known, at)
    return spread(strata, known, value=stratum_values(strata, values))
