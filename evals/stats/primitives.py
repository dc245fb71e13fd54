"""Pure-Python statistics for DyMT-ESB: bootstrap intervals, rater agreement, paired tests.

Everything here is deterministic given its inputs (and its seed, for the bootstrap),
has no third-party dependencies, and returns ``None`` where a quantity is undefined
rather than guessing a value.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_EXCLUDE: tuple[object, ...] = ("unparsed", None)

__all__ = [
    "DEFAULT_EXCLUDE",
    "McNemarResult",
    "PairedDiff",
    "bootstrap_ci",
    "cohens_kappa",
    "gwet_ac1",
    "gwet_ac1_multi",
    "holm",
    "mcnemar_exact",
    "paired_bootstrap_diff",
    "percent_agreement",
    "percentile",
]


# --------------------------------------------------------------------------- bootstrap


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Return the q-quantile (0..1) of pre-sorted values by linear interpolation (numpy's default)."""
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q!r}")
    position = q * (len(sorted_values) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(sorted_values) - 1)
    fraction = position - lower
    return sorted_values[lower] + (sorted_values[upper] - sorted_values[lower]) * fraction


def _check_bootstrap_args(n_boot: int, level: float) -> None:
    """Reject bootstrap settings that cannot produce a meaningful interval."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")


def _cluster_pool(rows: Sequence[T], clusters: Sequence[Hashable] | None) -> list[list[T]]:
    """Rows grouped by cluster in first-seen order; without clusters every row is its own cluster."""
    if clusters is None:
        return [[row] for row in rows]
    if len(clusters) != len(rows):
        raise ValueError(f"clusters ({len(clusters)}) and rows ({len(rows)}) differ in length")
    grouped: dict[Hashable, list[T]] = {}
    for row, cluster in zip(rows, clusters):
        grouped.setdefault(cluster, []).append(row)
    return list(grouped.values())


def bootstrap_ci(
    rows: Sequence[T],
    statistic: Callable[[Sequence[T]], float | None],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    clusters: Sequence[Hashable] | None = None,
) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of ``statistic`` resampling whole rows (dialogues) with replacement.

    With ``clusters`` (one id per row, e.g. the seed of each dialogue) whole clusters are
    resampled instead: repeated samples of one seed are not independent observations.
    Resamples whose statistic is ``None`` are skipped; ``(None, None)`` when no resample
    is computable. Reproducible: the same seed and rows give the same interval (and with
    one row per cluster, the same interval as without clusters).
    """
    _check_bootstrap_args(n_boot, level)
    if len(rows) == 0:
        return (None, None)
    rng = random.Random(seed)
    pool = _cluster_pool(rows, clusters)
    values: list[float] = []
    for _ in range(n_boot):
        value = statistic([row for cluster in rng.choices(pool, k=len(pool)) for row in cluster])
        if value is not None:
            values.append(float(value))
    if not values:
        return (None, None)
    values.sort()
    alpha = (1.0 - level) / 2.0
    return (percentile(values, alpha), percentile(values, 1.0 - alpha))


# --------------------------------------------------------------------------- agreement


def _kept_pairs(
    a: Sequence[Hashable | None], b: Sequence[Hashable | None], exclude: Collection[object]
) -> list[tuple[Hashable, Hashable]]:
    """Pair two raters' labels item by item, dropping pairs where either label is excluded."""
    if len(a) != len(b):
        raise ValueError(f"raters rated different numbers of items: {len(a)} != {len(b)}")
    return [(x, y) for x, y in zip(a, b) if x not in exclude and y not in exclude]


def _category_count(observed: set[Hashable], categories: Collection[Hashable] | None) -> int:
    """Number of categories Q: the declared ones if given (checked against the data), else those observed."""
    if categories is None:
        return len(observed)
    unknown = observed - set(categories)
    if unknown:
        raise ValueError(f"labels outside the declared categories: {sorted(map(repr, unknown))}")
    return len(set(categories))


def percent_agreement(
    a: Sequence[Hashable | None],
    b: Sequence[Hashable | None],
    *,
    exclude: Collection[object] = DEFAULT_EXCLUDE,
) -> float | None:
    """Share of kept item pairs on which the two raters agree; ``None`` if no pair is kept."""
    pairs = _kept_pairs(a, b, exclude)
    if not pairs:
        return None
    return sum(x == y for x, y in pairs) / len(pairs)


def cohens_kappa(
    a: Sequence[Hashable | None],
    b: Sequence[Hashable | None],
    *,
    exclude: Collection[object] = DEFAULT_EXCLUDE,
) -> float | None:
    """Cohen's kappa (po - pe) / (1 - pe) with pe = sum_k pA_k * pB_k; ``None`` if undefined (no pairs, pe == 1)."""
    p_observed = percent_agreement(a, b, exclude=exclude)  # po: the share of kept pairs that agree
    if p_observed is None:
        return None
    pairs = _kept_pairs(a, b, exclude)
    n = len(pairs)
    margins_a = Counter(x for x, _ in pairs)
    margins_b = Counter(y for _, y in pairs)
    p_expected = sum(margins_a[k] * margins_b[k] for k in margins_a) / (n * n)
    if p_expected == 1.0:
        return None
    return (p_observed - p_expected) / (1.0 - p_expected)


def gwet_ac1(
    a: Sequence[Hashable | None],
    b: Sequence[Hashable | None],
    *,
    exclude: Collection[object] = DEFAULT_EXCLUDE,
    categories: Collection[Hashable] | None = None,
) -> float | None:
    """Gwet's AC1 for two raters: pe = sum_k pi_k (1 - pi_k) / (Q - 1), pi_k = mean of the raters' shares.

    Q is ``len(categories)`` if given, else the number of categories observed in kept
    pairs; ``None`` when no pair is kept or Q < 2 (chance agreement undefined).
    """
    pairs = _kept_pairs(a, b, exclude)
    if not pairs:
        return None
    n = len(pairs)
    counts = Counter(x for x, _ in pairs) + Counter(y for _, y in pairs)
    q = _category_count(set(counts), categories)
    if q < 2:
        return None
    p_observed = sum(x == y for x, y in pairs) / n
    p_expected = sum((c / (2 * n)) * (1.0 - c / (2 * n)) for c in counts.values()) / (q - 1)
    return (p_observed - p_expected) / (1.0 - p_expected)


def gwet_ac1_multi(
    ratings: Sequence[Sequence[Hashable | None]],
    *,
    exclude: Collection[object] = DEFAULT_EXCLUDE,
    categories: Collection[Hashable] | None = None,
) -> float | None:
    """Gwet's (2008) AC1 for several raters, items x raters, with missing ratings allowed.

    pa = mean over items with r_i >= 2 of sum_k r_ik (r_ik - 1) / (r_i (r_i - 1));
    pi_k = mean over items with r_i >= 1 of r_ik / r_i; pe = sum_k pi_k (1 - pi_k) / (Q - 1).
    Excluded labels count as missing. ``None`` when no item has two ratings or Q < 2.
    """
    item_counts = [Counter(r for r in item if r not in exclude) for item in ratings]
    rated = [c for c in item_counts if sum(c.values()) >= 1]
    multiply_rated = [c for c in rated if sum(c.values()) >= 2]
    if not multiply_rated:
        return None
    observed: set[Hashable] = set()
    for counts in rated:
        observed.update(counts)
    q = _category_count(observed, categories)
    if q < 2:
        return None
    p_agree = 0.0
    for counts in multiply_rated:
        r_i = sum(counts.values())
        p_agree += sum(c * (c - 1) for c in counts.values()) / (r_i * (r_i - 1))
    p_agree /= len(multiply_rated)
    shares: Counter[Hashable] = Counter()
    for counts in rated:
        r_i = sum(counts.values())
        for category, c in counts.items():
            shares[category] += c / r_i  # type: ignore[assignment]  # a Counter of float shares
    p_expected = sum((s / len(rated)) * (1.0 - s / len(rated)) for s in shares.values()) / (q - 1)
    return (p_agree - p_expected) / (1.0 - p_expected)


# --------------------------------------------------------------------------- paired tests


@dataclass(frozen=True)
class McNemarResult:
    """Discordant counts and exact two-sided p-value of McNemar's test."""

    b: int  # before True -> after False
    c: int  # before False -> after True
    p_value: float


@dataclass(frozen=True)
class PairedDiff:
    """Mean paired difference in rate (after - before) with its percentile bootstrap interval."""

    diff: float | None
    low: float | None
    high: float | None
    n: int


def paired_test_dict(diff: PairedDiff, test: McNemarResult) -> dict[str, Any]:
    """A paired difference and its McNemar test as plain data: ``diff``, ``ci95`` and ``mcnemar``."""
    return {
        "diff": diff.diff,
        "ci95": [diff.low, diff.high],
        "mcnemar": {"b": test.b, "c": test.c, "p_value": test.p_value},
    }


def mcnemar_exact(pairs: Sequence[tuple[bool, bool]]) -> McNemarResult:
    """Exact McNemar test: p = min(1, 2 * P(X <= min(b, c))), X ~ Binomial(b + c, 1/2); p = 1 if b + c = 0."""
    b = sum(1 for before, after in pairs if before and not after)
    c = sum(1 for before, after in pairs if not before and after)
    n = b + c
    if n == 0:
        return McNemarResult(b=b, c=c, p_value=1.0)
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))
    return McNemarResult(b=b, c=c, p_value=min(1.0, 2 * tail / 2**n))


def _mean_paired_diff(pairs: Sequence[tuple[bool, bool]]) -> float | None:
    """Rate of ``after`` minus rate of ``before``; ``None`` for no pairs."""
    if not pairs:
        return None
    return sum(int(bool(after)) - int(bool(before)) for before, after in pairs) / len(pairs)


def paired_bootstrap_diff(
    pairs: Sequence[tuple[bool, bool]],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    clusters: Sequence[Hashable] | None = None,
) -> PairedDiff:
    """Mean difference in rate (after - before) with a percentile interval from resampling pairs (or clusters of
    pairs)."""
    low, high = bootstrap_ci(pairs, _mean_paired_diff, n_boot=n_boot, seed=seed, level=level, clusters=clusters)
    return PairedDiff(diff=_mean_paired_diff(pairs), low=low, high=high, n=len(pairs))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: the i-th smallest of m is multiplied by m - i,
    made monotone, capped at 1. Controls the family-wise error rate over the whole family."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
