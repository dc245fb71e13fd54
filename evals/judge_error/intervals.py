"""The 95% interval of any corrected statistic from its per-draw values: three bootstrap intervals, their hull.

One rule for every interval the correction gives (cells, paired differences, pools of cells, the label
planner), so they all read the same way. Whether an interval reaches a boundary value (0 or 1) is decided
by tests of that value (``evals.judge_error.boundaries``), not here.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

__all__ = ["LEVEL", "interval"]

LEVEL = 0.95
BASIC = True  # include the basic interval in the hull

_NORMAL = NormalDist()


def _percentiles(values: np.ndarray, point: float | None) -> tuple[float, float]:
    """Percentile interval of finite draws, bias-corrected around ``point`` (Efron 1987) when given."""
    q = np.array([(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    if point is not None:
        below = float(np.sum(values < point - 1e-9) + 0.5 * np.sum(np.abs(values - point) <= 1e-9)) / len(values)
        below = min(max(below, 1 / len(values)), 1 - 1 / len(values))
        z0 = _NORMAL.inv_cdf(below)
        q = np.array([_NORMAL.cdf(2 * z0 + _NORMAL.inv_cdf(x)) for x in q])
    lo, hi = np.percentile(values, 100 * q)
    return float(lo), float(hi)


def interval(
    values: np.ndarray, point: float | None = None, bounds: tuple[float, float] | None = (0.0, 1.0)
) -> tuple[float | None, float | None]:
    """95% interval from the draws: the hull of the percentile, bias-corrected and basic intervals, within ``bounds``.

    Each fails where the others do not (measured, docs/judge-error.md): the percentile interval where a
    fit cannot follow the truth to a boundary (the draws pile up on one side of it), the bias-corrected
    one where the truth is inside but weakly identified, and the basic interval (the percentile interval
    reflected about the point estimate, Davison & Hinkley 1997) covers the estimate's own drift near a
    boundary, which the draws repeat. Without a point estimate, the percentile interval. (None, None) when
    fewer than 10 draws, or than half of them, are finite.
    """
    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    if len(finite) < max(10, len(values) // 2):
        return None, None
    lo, hi = _percentiles(finite, None)
    if point is not None and math.isfinite(point):
        blo, bhi = _percentiles(finite, point)
        if BASIC:
            lo, hi = min(lo, blo, 2 * point - hi), max(hi, bhi, 2 * point - lo)
        else:
            lo, hi = min(lo, blo), max(hi, bhi)
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return float(lo), float(hi)
