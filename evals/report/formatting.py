"""Estimates as text: a rate as a percentage, with its interval; a coefficient with its interval."""

from __future__ import annotations

from evals.metric_registry import format_interval, format_value
from evals.stats.metrics import Estimate


def pct(value: float | None) -> str:
    return format_value(value)


def estimate_text(est: Estimate) -> str:
    """ "42% [30–55]" (or "–"), as ``evals.metric_registry`` formats a share."""
    return format_interval(est.value, est.low, est.high)


def number(est: Estimate, digits: int = 2) -> str:
    """ "0.41 [0.20–0.60]" for agreement coefficients and scores."""
    if est.value is None:
        return "–"
    if est.low is None or est.high is None:
        return f"{est.value:.{digits}f}"
    return f"{est.value:.{digits}f} [{est.low:.{digits}f}–{est.high:.{digits}f}]"
