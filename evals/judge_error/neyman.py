"""Neyman allocation of a budget of labels over strata, in whole picks (the active design's split of a batch)."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["MIN_PER_STRATUM", "allocate"]

MIN_PER_STRATUM = 2  # picks per stratum where two per stratum take at most half the batch (else one)


def allocate(
    sizes: Sequence[int], spreads: Sequence[float], budget: int, *, minimum: int = MIN_PER_STRATUM
) -> list[int]:
    """Neyman allocation ``n_h ∝ N_h S_h`` of ``budget`` picks, each stratum at least ``min(minimum, N_h)``, at most
    ``N_h``.

    The picks sum to ``min(budget, Σ N_h)``. Strata that the proportional share would overfill are taken
    whole and the rest re-allocated; whole picks by largest remainder.
    """
    sizes = [int(x) for x in sizes]
    total = min(int(budget), sum(sizes))
    n = [0] * len(sizes)
    floor = [min(minimum, s) for s in sizes]
    if sum(floor) >= total:  # the budget cannot even give each its minimum: one each by size, largest first
        for h in sorted(range(len(sizes)), key=lambda h: -sizes[h] * (spreads[h] + 1e-9)):
            if total <= 0:
                break
            take = min(floor[h], total)
            n[h], total = take, total - take
        return n
    n = floor[:]
    left = total - sum(n)
    open_ = [h for h in range(len(sizes)) if n[h] < sizes[h]]
    while left > 0 and open_:
        score = [sizes[h] * max(spreads[h], 1e-6) for h in open_]
        share = [left * x / sum(score) for x in score]
        over = [h for h, x in zip(open_, share) if n[h] + x >= sizes[h]]
        if over:  # fill the strata that the share would overflow, then re-allocate the rest
            for h in over:
                left -= sizes[h] - n[h]
                n[h] = sizes[h]
            open_ = [h for h in open_ if h not in over]
            continue
        whole = [math.floor(x) for x in share]
        for h, w in zip(open_, whole):
            n[h] += w
        left -= sum(whole)
        for h, _ in sorted(zip(open_, share), key=lambda hx: -(hx[1] - math.floor(hx[1]))):
            if left <= 0:
                break
            if n[h] < sizes[h]:
                n[h] += 1
                left -= 1
        break
    return n
