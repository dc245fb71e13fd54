"""``python -m benchmarks paired``: paired comparisons of the paper's grid, vectorised against pure Python.

The paper's grid has 6 targets × 2 modes on 240 seeds and 10 turns: 36 comparisons (targets
within a mode, modes within a target), each with cumulative and per-turn rows by turn. Labels
are synthetic (20% biased); only the time matters. Prints seconds and the speed-up of the
vectorised interval (evals.stats.group_comparison) over evals.stats.primitives' pure-Python clustered bootstrap on
the same rows.
"""

from __future__ import annotations

import random
import time

from evals.stats.group_comparison import Group, Unit, compare_groups, cumulative_label, paired_diff_interval
from evals.stats.primitives import paired_bootstrap_diff


def _units(seeds: int, turns: int, samples: int) -> list[Unit]:
    rng = random.Random(1)
    groups = [Group("paper", f"target-{i}", mode) for i in range(6) for mode in ("implicit", "assessment")]
    return [
        Unit(g, f"s{s}", k, tuple("biased" if rng.random() < 0.2 else "not_biased" for _ in range(turns)))
        for g in groups
        for s in range(seeds)
        for k in range(samples)
    ]


def run(*, seeds: int = 240, samples: int = 1, n_boot: int = 2000) -> dict:
    units = _units(seeds, 10, samples)
    started = time.perf_counter()
    comparisons = compare_groups(units, n_boot=n_boot)
    grid = time.perf_counter() - started
    a, b = comparisons[0].a, comparisons[0].b
    side_a = {(u.seed_id, u.sample): u for u in units if u.group == a}
    side_b = {(u.seed_id, u.sample): u for u in units if u.group == b}
    keys = sorted(side_a)
    pairs = [
        (cumulative_label(side_a[k].labels, 10) == "biased", cumulative_label(side_b[k].labels, 10) == "biased")
        for k in keys
    ]
    clusters = [k[0] for k in keys]
    started = time.perf_counter()
    paired_diff_interval(pairs, clusters, n_boot=n_boot)
    fast = time.perf_counter() - started
    started = time.perf_counter()
    paired_bootstrap_diff(pairs, n_boot=n_boot, clusters=clusters)
    slow = time.perf_counter() - started
    return {
        "comparisons": len(comparisons),
        "rows": sum(len(c.rows) for c in comparisons),
        "n_boot": n_boot,
        "grid_s": grid,
        "row_fast_ms": 1000 * fast,
        "row_slow_ms": 1000 * slow,
    }


def report(result: dict) -> list[str]:
    r = result
    return [
        f"  {r['comparisons']} comparisons, {r['rows']} rows, {r['n_boot']} resamples: {r['grid_s']:.1f} s",
        f"  one row: vectorised {r['row_fast_ms']:.1f} ms, pure Python {r['row_slow_ms']:.1f} ms: "
        f"x{r['row_slow_ms'] / r['row_fast_ms']:.0f} faster",
    ]


if __name__ == "__main__":
    for line in report(run()):
        print(line)
