"""Tracing overhead per model call: the same run with and without the tracer, on an instant fake model.

    python -m benchmarks.tracing_overhead

The fake model answers at once, so this is the worst case: everything but the model
(graph steps, checkpoints, store writes, and with tracing the callbacks and the trace
rows) is divided by the model calls. Against a real model's latency the added
milliseconds per call matter, not the ratio. Both are printed, in wall-clock time and
in CPU time of all the process's threads (steadier on a busy machine).
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.common import instant_models, load_note, play_run, run_async, scratch_dir, synthetic_seeds

DIALOGUES = 4
TURNS = 5
REPEATS = 7
CALLS = DIALOGUES * TURNS * 3  # user simulator, target, judge


def one_run(*, trace: bool) -> tuple[float, float]:
    """(wall, CPU) seconds of one run into a fresh database."""
    with scratch_dir() as tmp:
        result, timing = run_async(
            play_run(tmp / "bench.db", instant_models(), synthetic_seeds(DIALOGUES), turns=TURNS, trace=trace)
        )
        assert all(o.status == "finished" for o in result.outcomes), result.outcomes
        return timing.wall, timing.cpu


def run() -> dict[str, Any]:
    one_run(trace=True)  # warm-up: imports, first database
    timings: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for i in range(REPEATS):
        for trace in (False, True) if i % 2 == 0 else (True, False):  # alternate, so drift hits both
            timings[trace].append(one_run(trace=trace))
    result: dict[str, Any] = {
        "dialogues": DIALOGUES,
        "turns": TURNS,
        "model_calls": CALLS,
        "repeats": REPEATS,
        "load": load_note(),
    }
    for index, clock in enumerate(("wall", "cpu")):
        untraced = statistics.median(t[index] for t in timings[False]) / CALLS * 1000
        traced = statistics.median(t[index] for t in timings[True]) / CALLS * 1000
        result[clock] = {
            "untraced_ms": untraced,
            "traced_ms": traced,
            "ratio": traced / untraced,
            "added_ms": traced - untraced,
        }
    return result


def report(result: dict[str, Any]) -> list[str]:
    lines = [
        f"{result['dialogues']} dialogues × {result['turns']} turns ({result['model_calls']} model calls), "
        f"instant fake model, median of {result['repeats']}; {result['load']}"
    ]
    for clock, label in (("wall", "wall clock"), ("cpu", "CPU, all threads")):
        r = result[clock]
        lines.append(
            f"  {label:<17} untraced {r['untraced_ms']:6.2f} ms/call   traced {r['traced_ms']:6.2f} ms/call   "
            f"ratio ×{r['ratio']:.2f}   (+{r['added_ms']:.2f} ms per model call)"
        )
    return lines


if __name__ == "__main__":
    print("\n".join(report(run())))
