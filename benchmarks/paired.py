"""``python -m benchmarks.paired``: paired comparisons of the paper's grid, vectorised against pure Python.

The paper's grid has 6 targets × 2 modes on 240 seeds and 10 turns: 36 comparisons (targets
within a mode, modes within a target), each with cumulative and per-turn rows by turn. Labels
are synthetic (20% biased); only the time matters. Prints seconds and the speed-up of the
vectorised interval (evals.comparison) over evals.stats' pure-Python clustered bootstrap on
the same rows.
"""

from __future__ import annotations

import argparse
import random
import time

from evals.comparison import Group, Unit, compare_groups, cumulative_label, paired_diff_interval
from evals.stats import paired_bootstrap_diff


def _units(seeds: int, turns: int, samples: int) -> list[Unit]:
    rng = random.Random(1)
    groups = [Group("paper", f"target-{i}", mode) for i in range(6) for mode in ("implicit", "assessment")]
    return [
        Unit(g, f"s{s}", k, tuple("biased" if rng.random() < 0.2 else "not_biased" for _ in range(turns)))
        for g in groups for s in range(seeds) for k in range(samples)
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks.paired", description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=240)
    p.add_argument("--samples", type=int, default=1)
    p.add_argument("--n-boot", type=int, default=2000)
    args = p.parse_args(argv)
    units = _units(args.seeds, 10, args.samples)
    started = time.perf_counter()
    comparisons = compare_groups(units, n_boot=args.n_boot)
    grid = time.perf_counter() - started
    rows = sum(len(c.rows) for c in comparisons)
    print(f"{len(comparisons)} comparisons, {rows} rows, {args.n_boot} resamples: {grid:.1f} s")
    a, b = comparisons[0].a, comparisons[0].b
    side_a = {(u.seed_id, u.sample): u for u in units if u.group == a}
    side_b = {(u.seed_id, u.sample): u for u in units if u.group == b}
    keys = sorted(side_a)
    pairs = [(cumulative_label(side_a[k].labels, 10) == "biased", cumulative_label(side_b[k].labels, 10) == "biased") for k in keys]
    clusters = [k[0] for k in keys]
    started = time.perf_counter()
    paired_diff_interval(pairs, clusters, n_boot=args.n_boot)
    fast = time.perf_counter() - started
    started = time.perf_counter()
    paired_bootstrap_diff(pairs, n_boot=args.n_boot, clusters=clusters)
    slow = time.perf_counter() - started
    print(f"one row: vectorised {1000 * fast:.1f} ms, pure Python {1000 * slow:.1f} ms: ×{slow / fast:.0f} faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
