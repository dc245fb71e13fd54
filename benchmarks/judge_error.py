"""``python -m benchmarks judge_error``: the judge-error correction's speed on the paper grid, and its coverage.

Speed: the paper grid, 6 targets × 2 modes × 240 seeds, 10 turns (2,880 dialogues). Labels are
synthetic: a fifth of the seeds elicit bias at every turn, the rest now and then (10% of turns), judged
with recall 0.75 and specificity 0.70 and validated on 300 items drawn evenly over the turns (so the judge's error
is drawn turn by turn, docs/judge-error.md). Times ``correct_cells`` at its default
number of draws and prints its CPU time ÷ the 30-second target.

``--coverage``: the simulation suite (``benchmarks.simulation.coverage.SUITE``, declared in
docs/judge-error.md): for every truth × judge × size, the share of 95% intervals that contain the truth
at the worst turn of each metric, for the correction and for the comparison method, and the width of the
correction's per-turn intervals ÷ the peers' per-turn Rogan–Gladen intervals. Cells are spread over one
process per core; ``--quick`` runs a fifth of the sets of the smallest size only.

``--labelling`` (alone): the active labelling design against random double sampling at equal budgets
(``benchmarks.simulation.labelling_designs``): for every shape of the suite with the fair judge, at 50, 150 and 400
human labels of a 120 × 5 and a 480 × 10 run, and with each other judge of the suite at 50 and 150 labels
of a 120 × 5 run, each corrected interval's mean width under the active design ÷ under random double
sampling, and under the tool's own choice (``evals.judge_error.design_choice``: the active design, or random where
the tool's prediction from the judge labels says active would be wider), with how many data sets the tool
drew at random in, and the floor: the width with every reply labelled ÷ random's (what labels cannot remove);
then, for each judge, one budget over a three-target grid
drawn for a paired difference (``export --compare``) against an even split. ``--labelling --quick``:
every judge at 120 × 5 only (and the fair judge at 400 labels too), with fewer data sets.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from evals.judge_error.cells import Cell
from evals.judge_error.correction import DEFAULT_DRAWS, correct_cells
from evals.judge_error.validation import JudgeValidation
from evals.metric_registry import DIALOGUE_METRICS

TARGET_CPU_S = 30.0
COVERAGE_TARGET = 0.90
WIDTH_TARGET = 1.5


def _grid(seeds: int, turns: int) -> dict[tuple[str, str], list[list[int]]]:
    rng = np.random.default_rng(1)
    cells = {}
    for target in range(6):
        for mode in ("implicit", "assessment"):
            truth = (rng.random(seeds) < 0.2)[:, None] | (rng.random((seeds, turns)) < 0.1)
            labels = np.where(truth, rng.random((seeds, turns)) < 0.75, rng.random((seeds, turns)) < 0.30)
            cells[(f"target-{target}", mode)] = labels.astype(int).tolist()
    return cells


def speed(*, seeds: int = 240, turns: int = 10, draws: int = DEFAULT_DRAWS) -> dict:
    cells = _grid(seeds, turns)
    # 300 labelled replies drawn evenly over the turns (a double-sampled validation): the judge's error by turn
    rng = np.random.default_rng(2)
    at, truth = rng.integers(1, turns + 1, 300), rng.random(300) < 0.5
    judged = np.where(truth, rng.random(300) < 0.75, rng.random(300) < 0.30)
    validation = JudgeValidation.from_pairs(
        "annotate:benchmark", [(int(a), int(b), int(t)) for a, b, t in zip(truth, judged, at)]
    )
    seed_ids = [f"seed-{i}" for i in range(seeds)]
    run = {key: Cell(rows, seed_ids) for key, rows in cells.items()}
    started, cpu = time.perf_counter(), time.process_time()
    results = correct_cells(run, validation, draws=draws)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    first = results[("target-0", "implicit")]
    return {
        "cells": len(cells),
        "dialogues": seeds * len(cells),
        "turns": turns,
        "draws": draws,
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "target_cpu_s": TARGET_CPU_S,
        "example_cumulative": None if isinstance(first, Exception) else first.cumulative[-1].__dict__,
    }


def _measure(job) -> dict:
    from benchmarks.simulation.coverage import measure

    spec, sets, widths = job
    started = time.process_time()
    out = measure(spec, sets, compare_pooled=widths).as_dict()
    out["cpu_seconds"] = time.process_time() - started
    return out


def coverage(
    *, quick: bool = False, processes: int | None = None, drift: str = "default", widths: bool = False
) -> dict:
    from benchmarks.simulation.coverage import suite

    jobs = sorted(
        ((spec, sets, widths) for spec, sets in suite(quick, drift=drift)),
        key=lambda job: -job[0].turns * job[0].dialogues * job[1],  # longest first
    )
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=processes or len(os.sched_getaffinity(0))) as pool:
        cells = list(pool.map(_measure, jobs))
    return {"cells": cells, "seconds": time.perf_counter() - started, "quick": quick, "drift": drift}


LABELLING_SIZES = ((120, 5, 100), (480, 10, 40))  # dialogues, turns, simulated data sets per shape and budget
LABELLING_BUDGETS = (50, 150, 400)
OTHER_JUDGES = ((120, 5, 30), (50, 150))  # the other judges of the suite: (size, data sets), budgets
QUICK = ((120, 5, 12), (50, 150))  # --labelling --quick: every judge at this size only
QUICK_PAST_HALF = 400  # ... and the fair judge at this budget too, past half the run (the tool draws at random)
SPLIT_PAIRS = ("none-vs-onset", "fade-vs-relapse", "persistent-vs-mixture")
SPLIT_SIZE = (120, 5, 100)  # dialogues, turns, budget of the paired-difference split
SPLIT_SETS, SPLIT_SETS_QUICK = 30, 10
LABELLING_DRAWS = 100


def _compare(job) -> dict:
    from benchmarks.simulation.labelling_designs import compare_designs, compare_splits

    kind, shape, judge, dialogues, turns, budget, sets = job
    started = time.process_time()
    if kind == "split":
        out = compare_splits(
            shape, judge=judge, dialogues=dialogues, turns=turns, budget=budget, sets=sets, draws=LABELLING_DRAWS
        ).as_dict()
    else:
        out = compare_designs(
            shape, judge=judge, dialogues=dialogues, turns=turns, budget=budget, sets=sets, draws=LABELLING_DRAWS
        ).as_dict()
    out["cpu_seconds"] = time.process_time() - started
    return out


def labelling_jobs(*, quick: bool = False) -> list[tuple]:
    """(kind, shape or pair, judge, dialogues, turns, budget, sets) of every cell of the comparison, longest first."""
    from benchmarks.simulation.suite import JUDGES, SHAPES

    if quick:
        (n, t, sets), budgets = QUICK
        jobs = [("design", s, j, n, t, b, sets) for j in JUDGES for b in budgets for s in SHAPES]
        jobs += [("design", s, "fair", n, t, QUICK_PAST_HALF, sets) for s in SHAPES]
    else:
        jobs = [
            ("design", s, "fair", n, t, b, sets)
            for n, t, sets in LABELLING_SIZES
            for b in LABELLING_BUDGETS
            for s in SHAPES
        ]
        (n, t, sets), budgets = OTHER_JUDGES
        jobs += [("design", s, j, n, t, b, sets) for j in JUDGES if j != "fair" for b in budgets for s in SHAPES]
    n, t, budget = SPLIT_SIZE
    jobs += [
        ("split", pair, j, n, t, budget, SPLIT_SETS_QUICK if quick else SPLIT_SETS)
        for j in JUDGES
        for pair in SPLIT_PAIRS
    ]
    return sorted(jobs, key=lambda job: -job[3] * job[4] * job[6])


def labelling(*, processes: int | None = None, quick: bool = False) -> dict:
    """Active ÷ random labelling at equal budgets, every shape and judge of the suite; and the paired-difference
    split."""
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=processes or len(os.sched_getaffinity(0))) as pool:
        cells = list(pool.map(_compare, labelling_jobs(quick=quick)))
    return {
        "cells": [c for c in cells if "shape" in c],
        "splits": [c for c in cells if "pair" in c],
        "seconds": time.perf_counter() - started,
        "draws": LABELLING_DRAWS,
        "quick": quick,
    }


def run(
    *,
    coverage_suite: bool = False,
    quick: bool = False,
    labelling_part: bool = False,
    drift: str = "default",
    widths: bool = False,
) -> dict:
    if labelling_part:
        return {"labelling": labelling(quick=quick)}
    out = {"speed": speed()}
    if coverage_suite:
        out["coverage"] = coverage(quick=quick, drift=drift, widths=widths)
    return out


def _fmt(worst: float, turn) -> str:
    if worst != worst:  # nan: the metric is undefined for this truth
        return "   –    "
    mark = "*" if worst < COVERAGE_TARGET else " "
    return f"{worst:.2f}{mark}" + (f"@{turn:<2d}" if turn else "   ")


def coverage_lines(result: dict) -> list[str]:
    """The suite's table: worst-turn coverage per metric, the comparison method's, and the width ratio."""
    lines = [
        f"  {'truth':22s} {'judge':8s} {'T':>2s} {'N':>4s} {'V':>4s}  chain: per-turn cumul.  re-em.   first    "
        f"| deconvolution: per-turn cumul.   re-em.  | width ÷ RG"
    ]
    from benchmarks.simulation.suite import JUDGES

    rows = sorted(
        (c for c in result["cells"] if c["judge"] in JUDGES and c.get("kind", "turns") == "turns"),
        key=lambda c: (c["paired"], c["turns"], c["dialogues"], c["validation"], c["truth"], c["judge"]),
    )
    below = 0
    for c in rows:
        m = c["metrics"]

        def w(key: str) -> str:
            entry = m.get(key)  # noqa: B023 - called within this iteration
            return _fmt(entry["worst"], entry["worst_turn"]) if entry else "   –    "

        chain = [m.get(f"chain.{k}") for k in DIALOGUE_METRICS]
        below += any(e is not None and e["worst"] == e["worst"] and e["worst"] < COVERAGE_TARGET for e in chain)
        ratio = "   – "
        if "rogan_gladen.per_turn" in m:
            ours, peer = m["chain.per_turn"], m["rogan_gladen.per_turn"]
            both = [
                o / p
                for o, p, co, cp in zip(ours["width"], peer["width"], ours["coverage"], peer["coverage"])
                if p and co >= COVERAGE_TARGET and cp >= COVERAGE_TARGET
            ]
            if both:
                ratio = f"{max(both):5.2f}"
        truth = ("Δ " if c["paired"] else "") + c["truth"]
        lines.append(
            f"  {truth:22s} {c['judge']:8s} {c['turns']:>2d} {c['dialogues']:>4d} {c['validation']:>4d}  "
            f"{w('chain.per_turn')} {w('chain.cumulative')} {w('chain.re_emergence')} {w('chain.first_bias_turn')} | "
            f"{w('deconvolution.per_turn')} {w('deconvolution.cumulative')} {w('deconvolution.re_emergence')} | {ratio}"
        )
    sets = sum(c["sets"] for c in rows)
    lines.append(
        f"  {len(rows)} cells, {sets} simulated data sets, {below} cells with a metric below {COVERAGE_TARGET:.0%} "
        f"at some turn (marked *)"
    )
    lines += drift_lines([c for c in result["cells"] if c not in rows])
    lines += width_lines(result["cells"])
    lines.append(
        f"  {len(result['cells'])} cells in all, {sum(c['sets'] for c in result['cells'])} data sets, in "
        f"{result['seconds'] / 60:.1f} min on {len(os.sched_getaffinity(0))} cores (target ≤ 15 min for the default "
        "table)"
    )
    return lines


METRIC_KEYS = DIALOGUE_METRICS


def drift_lines(cells: list[dict]) -> list[str]:
    """The drift suite's table: worst-turn coverage with judges whose error changes with the turn (and the category
    judge's by-category correction), and with a context-free validation how often the correction flagged numbers
    past turn 1, and how the numbers it did not flag covered."""
    if not cells:
        return []
    lines = [
        "  judges whose error changes with the turn: worst-turn coverage, flagged data sets (context-free), coverage "
        "of the numbers not flagged",
        f"  {'truth':22s} {'judge':12s} {'T':>2s} {'N':>4s} {'V':>4s} {'validation':12s} per-turn cumul.   re-em.   "
        "first    | flagged | unflagged: per-turn cumul.",
    ]
    rows = sorted(cells, key=lambda c: (c["kind"], c["paired"], c["turns"], c["validation"], c["judge"], c["truth"]))
    below = 0
    for c in rows:
        m = c["metrics"]

        def w(key: str, field: str = "coverage") -> str:
            entry = m.get(key)  # noqa: B023 - called within this iteration
            if not entry:
                return "   –    "
            values = [x for x in entry[field] if x is not None and x == x]
            if not values:
                return "   –    "
            low = min(values)
            turn = entry[field].index(low) + 1 if len(entry[field]) > 1 else None
            return _fmt(low, turn)

        chain = [m.get(f"chain.{k}") for k in METRIC_KEYS]
        below += any(e is not None and e["worst"] == e["worst"] and e["worst"] < COVERAGE_TARGET for e in chain)
        truth = ("Δ " if c["paired"] else "") + c["truth"]
        flagged = f"{c['flagged_sets']:>3d}/{c['sets'] - c['refused']:<3d}"
        line = (
            f"  {truth:22s} {c['judge']:12s} {c['turns']:>2d} {c['dialogues']:>4d} {c['validation']:>4d} "
            f"{c['kind']:12s} {' '.join(w(f'chain.{k}') for k in METRIC_KEYS)} | {flagged} |"
        )
        if c["kind"] == "context-free":
            line += f" {w('chain.per_turn', 'kept_coverage')} {w('chain.cumulative', 'kept_coverage')}"
        if "category.per_turn" in m:
            line += " | by category: " + " ".join(w(f"category.{k}") for k in METRIC_KEYS)
        lines.append(line)
    lines.append(f"  {len(rows)} drift cells, {below} with a metric below {COVERAGE_TARGET:.0%} at some turn")
    return lines


def width_lines(cells: list[dict]) -> list[str]:
    """With --widths: each metric's mean interval width with the judge's error by turn ÷ with one error for all turns,
    over the cells (median and largest), and the coverage of the latter."""
    with_pooled = [c for c in cells if "pooled.per_turn" in c["metrics"]]
    if not with_pooled:
        return []
    lines = ["  width with the judge's error by turn ÷ with one error for every turn (same data sets):"]
    for k in METRIC_KEYS:
        ratios, low = [], []
        for c in with_pooled:
            ours, flat = c["metrics"].get(f"chain.{k}"), c["metrics"].get(f"pooled.{k}")
            if not ours or not flat:
                continue
            pairs = [(o, f) for o, f in zip(ours["width"], flat["width"]) if o == o and f == f and f > 0]
            if pairs:
                ratios.append(sum(o for o, _ in pairs) / sum(f for _, f in pairs))
                low.append(flat["worst"])
        if ratios:
            ratios.sort()
            lines.append(
                f"    {k:13s} median {ratios[len(ratios) // 2]:.2f}, largest {ratios[-1]:.2f} over {len(ratios)} cells"
                f" (one error for all: worst coverage {min(x for x in low if x == x):.2f})"
            )
    return lines


def _design_row(c: dict) -> tuple[str, dict]:
    """One comparison cell's line, and what it adds to the tallies."""
    from evals.metric_registry import RATE_METRICS as METRICS

    m, size = c["metrics"], f"{c['dialogues']}×{c['turns']}"
    head = f"  {c['judge']:8s} {c['shape']:13s} {size:>7s} {c['budget']:>6d}"
    if not c["compared"]:
        return (
            f"{head} {c['sets']:>4d}  refused by both designs in {c['refused']['random']}/{c['refused']['active']} "
            "sets "
            "(no truly biased reply to validate sensitivity)"
        ), {}

    def cov(design: str) -> str:
        return " ".join(
            f"{m[k][design]['coverage']:.2f}{'*' if m[k][design]['coverage'] < COVERAGE_TARGET else ' '}"
            for k in METRICS
        )

    def ratios(key: str) -> str:
        return " ".join(f"{m[k][key]:5.2f}" for k in METRICS)

    fell_back = c.get("fell_back", 0)
    worse = {
        arm: [k for k in METRICS if m[k][key] - 2 * m[k][key + "_se"] > 1]
        for arm, key in (("active", "ratio"), ("tool", "tool_ratio"))
    }
    flag = "".join(f"  {arm} wider: {', '.join(ks)}" for arm, ks in worse.items() if ks)
    line = (
        f"{head} {c['compared']:>4d}  {ratios('ratio')} | {ratios('tool_ratio')} {fell_back:>3d}/{c['compared']:<3d} | "
        f"{ratios('floor_ratio')} | {cov('random')} | {cov('active')}{flag}"
    )
    tally = {
        "budget": c["budget"],
        "size": size,
        "fell_back": fell_back,
        "compared": c["compared"],
        "ratios": {k: m[k]["ratio"] for k in METRICS if m[k]["ratio"] == m[k]["ratio"]},
        "tool": {k: m[k]["tool_ratio"] for k in METRICS if m[k]["tool_ratio"] == m[k]["tool_ratio"]},
        "floor": {k: m[k]["floor_ratio"] for k in METRICS if m[k]["floor_ratio"] == m[k]["floor_ratio"]},
        "wider": {arm: len(ks) for arm, ks in worse.items()},
        "low": {d: any(m[k][d]["coverage"] < COVERAGE_TARGET for k in METRICS) for d in ("random", "active")},
    }
    return line, tally


def _judge_lines(judge: str, tallies: list[dict]) -> list[str]:
    """A judge's means over its cells: active and the tool's choice ÷ random, the floor, and where the tool fell
    back."""
    from benchmarks.simulation.suite import JUDGES
    from evals.metric_registry import RATE_METRICS as METRICS

    def mean(rows: list[dict], key: str) -> dict[str, float]:
        return {k: float(np.mean([t[key][k] for t in rows if k in t[key]] or [np.nan])) for k in METRICS}

    lines = []
    for name, key in (("active", "ratios"), ("the tool's choice", "tool"), ("every reply labelled (floor)", "floor")):
        x = mean(tallies, key)
        lines.append(
            f"  {judge} {JUDGES[judge]}: mean width ÷ random, {name}: per-turn {x['per_turn']:.2f}, cumulative "
            f"{x['cumulative']:.2f}, re-emergence {x['re_emergence']:.2f}"
        )
    for (size, budget), rows in sorted(
        _by(tallies, lambda t: (t["size"], t["budget"])).items(), key=lambda kv: (kv[0][0], kv[0][1])
    ):
        tool, floor = mean(rows, "tool")["cumulative"], mean(rows, "floor")["cumulative"]
        fell = sum(t["fell_back"] for t in rows)
        reach = "within reach" if floor <= 0.8 else "out of reach"
        lines.append(
            f"  {judge} {size} at {budget} labels: cumulative tool ÷ random {tool:.2f}, floor {floor:.2f} "
            f"(20% narrower is {reach}); the tool drew at random in {fell} of "
            f"{sum(t['compared'] for t in rows)} data sets"
        )
    lines.append(
        f"  {judge}: cells wider than random beyond the noise: active {sum(t['wider']['active'] > 0 for t in tallies)},"
        f" the tool's choice {sum(t['wider']['tool'] > 0 for t in tallies)}; cells with a coverage below "
        f"{COVERAGE_TARGET:.0%} at some turn (marked *): random {sum(t['low']['random'] for t in tallies)}, active "
        f"{sum(t['low']['active'] for t in tallies)} of {len(tallies)}"
    )
    return lines


def _by(rows: list[dict], key) -> dict:
    out: dict = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def labelling_lines(result: dict) -> list[str]:
    """The design comparison's table: width ratios (active, the tool's choice, every reply labelled ÷ random) and
    worst-turn coverage of both designs, per judge."""
    from benchmarks.simulation.suite import JUDGES

    lines = [
        f"  {'judge':8s} {'shape':13s} {'N×T':>7s} {'labels':>6s} {'sets':>4s}  width ÷ random (per-turn cumul. "
        "re-em.): active | the tool's choice, data sets where it drew at random | floor: every reply labelled | "
        "coverage (per-turn cumul. re-em.): random | active"
    ]
    order = list(JUDGES)
    rows = sorted(result["cells"], key=lambda c: (order.index(c["judge"]), c["dialogues"], c["budget"], c["shape"]))
    per_judge: dict[str, list[dict]] = {}
    for c in rows:
        line, tally = _design_row(c)
        lines.append(line)
        if tally:
            per_judge.setdefault(c["judge"], []).append(tally)
    for judge, tallies in per_judge.items():
        lines += _judge_lines(judge, tallies)
    lines.append(
        "  'wider' marks a ratio above 1 by more than twice its standard error; the tool's choice is the active "
        "design, or the same data set's random draw where the tool, from the judge labels alone, predicted the "
        "active draw wider (evals.judge_error.design_choice); aim: cumulative ≤ 0.80"
    )
    lines += split_lines(result.get("splits") or [])
    cpu = sum(c.get("cpu_seconds", 0.0) for c in [*rows, *(result.get("splits") or [])])
    lines.append(
        f"  {result['draws']} draws, data sets per cell as shown (the same for every arm)"
        f"{' (--quick)' if result.get('quick') else ''}, in {result['seconds'] / 60:.1f} min on "
        f"{len(os.sched_getaffinity(0))} cores, {cpu / 60:.1f} CPU-min"
    )
    return lines


def split_lines(splits: list[dict]) -> list[str]:
    """One budget over a three-target grid for the paired difference B − A: drawn for it ÷ split evenly."""
    if not splits:
        return []
    lines = [
        "  one budget over a grid (targets A, B paired on seeds; C another), the corrected cumulative B − A: mean "
        "width "
        "drawn for the difference (export --compare) ÷ split evenly over the three cells | over A and B; worst-turn "
        "coverage"
    ]
    for c in sorted(splits, key=lambda c: (c["judge"], c["pair"])):
        cov = " ".join(
            f"{s} {c[s]['coverage']:.2f}{'*' if c[s]['coverage'] < COVERAGE_TARGET else ''}"
            for s in ("even", "even_pair", "difference")
        )
        lines.append(
            f"  {c['judge']:8s} {c['pair']:22s} {c['dialogues']}×{c['turns']} {c['budget']:>4d} labels "
            f"{c['sets'] - c['refused']:>3d} sets: {c['ratio']:.2f} | {c['ratio_even_pair']:.2f}   coverage {cov}"
        )
    return lines


def report(result: dict) -> list[str]:
    if "labelling" in result and "speed" not in result:
        return labelling_lines(result["labelling"])
    r = result["speed"]
    lines = [
        f"  paper grid: {r['dialogues']} dialogues × {r['turns']} turns in {r['cells']} cells, {r['draws']} draws: "
        f"CPU {r['cpu_seconds']:.1f} s = {r['cpu_seconds'] / r['target_cpu_s']:.2f} × the {r['target_cpu_s']:.0f} s "
        "target "
        f"(wall {r['seconds']:.1f} s)",
    ]
    if "coverage" in result:
        cov = result["coverage"]
        if cov.get("drift") == "transitions":
            from benchmarks.transition_coverage import transition_lines

            lines += transition_lines(cov["cells"])
        else:
            lines += coverage_lines(cov)
    return lines


if __name__ == "__main__":
    for line in report(run()):
        print(line)
