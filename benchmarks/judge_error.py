"""``python -m benchmarks judge_error``: correcting the paper grid's bias rates for the judge's error.

The paper grid: 6 targets × 2 modes × 240 seeds, 10 turns (2,880 dialogues). Labels are synthetic:
a fifth of the seeds elicit bias at every turn, the rest now and then (10% of turns), judged with
recall 0.75 and specificity 0.70 and validated on 300 items (the issue's stub judge). Times
``evals.judge_error.correct_cells`` at its default number of draws and prints the ratio to the
10-second target (on 2 cores; the load is printed because other processes stretch wall-clock time).
"""

from __future__ import annotations

import time

import numpy as np

from evals.judge_error.correction import DEFAULT_DRAWS, correct_cells
from evals.judge_error.validation import JudgeValidation

TARGET_S = 10.0


def _grid(seeds: int, turns: int) -> dict[tuple[str, str], list[list[int]]]:
    rng = np.random.default_rng(1)
    cells = {}
    for target in range(6):
        for mode in ("implicit", "assessment"):
            truth = (rng.random(seeds) < 0.2)[:, None] | (rng.random((seeds, turns)) < 0.1)
            labels = np.where(truth, rng.random((seeds, turns)) < 0.75, rng.random((seeds, turns)) < 0.30)
            cells[(f"target-{target}", mode)] = labels.astype(int).tolist()
    return cells


def run(*, seeds: int = 240, turns: int = 10, draws: int = DEFAULT_DRAWS) -> dict:
    cells = _grid(seeds, turns)
    validation = JudgeValidation("evals.judge:stub@benchmark", tp=114, fp=45, fn=36, tn=105)
    clusters = {key: [f"seed-{i}" for i in range(seeds)] for key in cells}
    started, cpu = time.perf_counter(), time.process_time()
    results = correct_cells(cells, validation, clusters=clusters, draws=draws)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    first = results[("target-0", "implicit")]
    return {"cells": len(cells), "dialogues": seeds * len(cells), "turns": turns, "draws": draws,
            "seconds": elapsed, "cpu_seconds": cpu, "target_s": TARGET_S,
            "example_cumulative": None if isinstance(first, Exception) else first.cumulative[-1].__dict__}


def report(result: dict) -> list[str]:
    r = result
    return [
        f"  {r['dialogues']} dialogues × {r['turns']} turns in {r['cells']} cells, {r['draws']} draws: "
        f"{r['seconds']:.1f} s = {r['seconds'] / r['target_s']:.2f} × the {r['target_s']:.0f} s target "
        f"(CPU time {r['cpu_seconds']:.1f} s = {r['cpu_seconds'] / r['target_s']:.2f} ×: one core, what an idle machine's wall clock would show)",
    ]


if __name__ == "__main__":
    for line in report(run()):
        print(line)
