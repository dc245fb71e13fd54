"""The drift check's share of an active design's batch: which strata's labels decide how the judge's sensitivity and
specificity change over the turns.

The drift check (``evals.judge_error.drift``) reads the design-weighted validation's rates by band of turns
(``evals.judge_error.active_design.design_validation``) and fits their slope. A band's rate moves that slope by its
distance from the middle band (``band_slope``), and a stratum's share truly biased moves its band's rate by the
derivative of the stratified estimate within the band (``drift_derivatives``): a band's sensitivity a_b / (a_b + b_b)
is decided by its few false negatives among many judged-unbiased replies, most where the band holds few truly biased
replies. ``DRIFT_SHARE`` of a batch is allocated by Neyman on those two slopes alone (``slope_spread``), the rest by
the active design's other aims; a stratum's picks are one simple random sample of it either way, so every reply
keeps its known inclusion probability.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Stratum(Protocol):
    """What the reserve reads of an active design's stratum (``evals.judge_error.active_design.Stratum``)."""

    @property
    def judged(self) -> int: ...  # 1: the judge called its replies biased

    @property
    def turns(self) -> tuple[int, int] | None: ...  # its band of turns

    @property
    def size(self) -> int: ...


__all__ = ["DRIFT_SHARE", "band_slope", "drift_derivatives", "reserve_for", "slope_spread"]

# The share of a batch over turns that is drawn for the drift check alone (``drift_reserve``): Neyman allocation on
# the slopes of the judge's two rates over the bands of turns, most to the first and last bands' judged-unbiased
# replies (whose few false negatives decide a band's sensitivity) and judged-biased ones (its false positives).
DRIFT_SHARE = 0.3


def band_slope(strata: Sequence[Stratum]) -> dict[tuple[int, int], float]:
    """Each band of turns' coefficient in the least-squares slope of a rate over the bands (per turn): how much the
    band's own rate moves the drift check's change. Empty with fewer than two bands."""
    bands = sorted({s.turns for s in strata if s.turns is not None and s.size})
    if len(bands) < 2:
        return {}
    mid = np.array([(a + b) / 2 for a, b in bands])
    centred = mid - mid.mean()
    return {band: float(c / (centred @ centred)) for band, c in zip(bands, centred)}


def drift_derivatives(strata: Sequence[Stratum], q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How much each stratum's share truly biased moves the slope over the turns of the judge's sensitivity and of
    its specificity, per unit of the stratum's weight in the run (0 without bands of turns).

    The drift check reads each band's design-weighted rate (``design_validation``'s counts by turn); a band's
    sensitivity is a_b / (a_b + b_b), a_b and b_b its truly biased replies judged biased and not, so a stratum of
    band b moves it by (N / N_b) · (b_b or a_b) / (a_b + b_b)²: most where the band holds few truly biased replies
    (the early turns of a target whose bias grows), and through the judged-unbiased strata, whose few false negatives
    decide it. That times the band's coefficient in the slope over the bands (the first and last bands' most)."""
    out = np.zeros((2, len(strata)))
    slope = band_slope(strata)
    total = sum(s.size for s in strata)
    for band, coefficient in slope.items():
        inside = np.array([s.turns == band and s.size > 0 for s in strata])
        size = sum(s.size for s, keep in zip(strata, inside) if keep)
        wb = np.array([s.size / size if keep else 0.0 for s, keep in zip(strata, inside)])
        pos = np.array([s.judged == 1 for s in strata])
        a, b = float(wb[pos] @ q[pos]), float(wb[~pos] @ q[~pos])
        c, d = float(wb[pos] @ (1 - q[pos])), float(wb[~pos] @ (1 - q[~pos]))
        scale = abs(coefficient) * total / size
        out[0, inside] = scale * np.where(pos, b, a)[inside] / max(a + b, 1e-12) ** 2
        out[1, inside] = scale * np.where(pos, d, c)[inside] / max(c + d, 1e-12) ** 2
    return out[0], out[1]


def reserve_for(strata: Sequence[Stratum], budget: int, minimum: int) -> int:
    """Picks of a batch of ``budget`` reserved for the drift check: ``DRIFT_SHARE`` of it where the strata hold two
    bands of turns or more and the rest still holds ``minimum`` (every stratum's minimum picks), else none."""
    if len(band_slope(strata)) < 2:
        return 0
    reserve = int(round(DRIFT_SHARE * budget))
    return reserve if minimum <= budget - reserve else 0


def slope_spread(strata: Sequence[Stratum], q: np.ndarray) -> list[float]:
    """S_h of the reserve: what a stratum's labels teach about the slopes of the judge's sensitivity and specificity
    over the turns (:func:`drift_derivatives` times √(q_h (1 − q_h)), ``q`` each stratum's share truly biased), each
    slope's part relative to its variance under a random draw and the two weighted equally."""
    w = np.array([s.size for s in strata], dtype=float)
    w /= max(w.sum(), 1.0)
    total = np.zeros(len(strata))
    for part in drift_derivatives(strata, q):
        part = part * np.sqrt(q * (1 - q))
        if (scale := float(w @ part**2)) > 0:
            total += 0.5 * part**2 / scale
    return [float(x) for x in np.sqrt(total)]
