"""Benchmark 2, concurrency: 64 dialogues × 5 turns at --max-concurrency 16 against a stub server.

The stub (tests/support/stub_server.py, its own process) answers every request after a fixed
latency L through the real ``openai:`` provider path. Turns within a dialogue are
sequential, so the floor is 4 waves × 5 turns × 3 calls × L; the ratio of wall time to
that floor is what our code (runner, checkpoints, cache, tracing, HTTP client) adds.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from benchmarks.common import play_run, run_async, scratch_dir, synthetic_seeds
from checkpoints.cache import ResponseCache
from models.call_policy import CallPolicy
from models.registry import Sampling, create_role_model
from models.retries import RetryPolicy
from nodes.context import Models

LATENCY = 0.2
DIALOGUES = 64
TURNS = 5
CONCURRENCY = 16
TARGET_RATIO = 1.15


def floor_seconds() -> float:
    waves = -(-DIALOGUES // CONCURRENCY)
    return waves * TURNS * 3 * LATENCY


class StubProcess:
    """The stub server in a process of its own, so its work does not share our interpreter."""

    def __init__(self, latency: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.stub_server", "--latency", str(latency)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self.proc.stdout.readline().strip()  # type: ignore[union-attr]
        if not self.url.startswith("http"):
            raise RuntimeError(f"stub server did not start: {self.url!r}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


async def one_run(url: str, *, cache: bool, trace: bool) -> dict[str, Any]:
    with scratch_dir() as tmp:
        db = tmp / "bench.db"
        policy = CallPolicy(retry=RetryPolicy(attempts=1, timeout=30), cache=ResponseCache(db) if cache else None)
        models = Models(
            **{
                role: create_role_model(
                    f"openai:stub-{role}", role=role, sampling=Sampling(base_url=url, seed=0), policy=policy
                )
                for role in ("user", "target", "judge")
            }
        )
        result, timing = await play_run(
            db, models, synthetic_seeds(DIALOGUES), turns=TURNS, concurrency=CONCURRENCY, trace=trace
        )
        if policy.cache is not None:
            policy.cache.close()
    failed = [o for o in result.outcomes if o.status != "finished"]
    if failed:
        raise RuntimeError(f"{len(failed)} dialogues failed, first: {failed[0].error}")
    return {"wall_s": timing.wall, "cpu_s": timing.cpu, "ratio": timing.wall / floor_seconds()}


def run() -> dict[str, Any]:
    stub = StubProcess(LATENCY)
    try:
        # One event loop for every variant: langchain-openai keeps one async HTTP client per base URL.
        async def variants():
            return {
                "graph.run default (checkpoints, store, response cache, tracing)": await one_run(
                    stub.url, cache=True, trace=True
                ),
                "--no-trace (checkpoints, store, response cache)": await one_run(stub.url, cache=True, trace=False),
                "--no-trace --no-cache (checkpoints, store)": await one_run(stub.url, cache=False, trace=False),
            }

        rows = run_async(variants())
    finally:
        stub.stop()
    return {
        "latency_s": LATENCY,
        "dialogues": DIALOGUES,
        "turns": TURNS,
        "concurrency": CONCURRENCY,
        "floor_s": floor_seconds(),
        "target_ratio": TARGET_RATIO,
        "rows": rows,
    }


def report(result: dict[str, Any]) -> list[str]:
    lines = [
        f"{result['dialogues']} dialogues × {result['turns']} turns at concurrency {result['concurrency']}, "
        f"stub latency {1000 * result['latency_s']:.0f} ms: floor {result['floor_s']:.1f} s, target ≤ "
        f"{result['target_ratio']}"
    ]
    for name, row in result["rows"].items():
        verdict = "ok" if row["ratio"] <= result["target_ratio"] else "ABOVE TARGET"
        lines.append(
            f"  {name:<66} {row['wall_s']:6.2f} s  ratio {row['ratio']:.3f}  ({verdict}; CPU {row['cpu_s']:.1f} s)"
        )
    return lines
