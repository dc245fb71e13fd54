"""Benchmark 2b, adaptive concurrency: graph.run's default against fixed --max-concurrency settings, on a stub server
that answers 429 (Retry-After 1 s) beyond a few requests in flight, as a provider's concurrency limit does
(``--stub-limit N``: beyond N, default 6; 0: a stub that takes every request, whose limit is never reached).

Each setting plays the same run (``--processes 1``, no cache, no traces) through the real command; the stub counts
the requests it refused. The settings take turns, ROUNDS times, and each is reported by its median round: one round
of a 15-second run moves by a second with the machine.

The default should meet no more 429s than the fixed setting it starts from (16) and play
within 10% of the throughput of the best fixed setting, without being told the provider's limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from benchmarks.common import scratch_dir

LATENCY = 0.1
LIMIT = 6  # requests the stub takes at once; beyond, a 429
PER_CATEGORY = 8  # 48 dialogues
TURNS = 4
FIXED = (4, 6, 8, 16)  # and the stub's limit, when it is not one of them
THROUGHPUT_SHARE = 0.9
ROUNDS = 3


def _stub(limit: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.stub_server",
            "--latency",
            str(LATENCY),
            *(["--concurrency-limit", str(limit)] if limit else []),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    url = proc.stdout.readline().strip()  # type: ignore[union-attr]
    if not url.startswith("http"):
        raise RuntimeError(f"stub server did not start: {url!r}")
    return proc, url


def one_run(url: str, concurrency: int | None) -> dict[str, Any]:
    """One graph.run of the benchmark's shape at ``concurrency`` (None: the default); its wall time, 429s and reach."""
    with scratch_dir() as tmp:
        flags = [
            "--user-model",
            "openai:stub",
            "--target-model",
            "openai:stub",
            "--judge-model",
            "openai:stub",
            "--base-url",
            url,
            "--db",
            str(tmp / "bench.db"),
            "--per-category",
            str(PER_CATEGORY),
            "--turns",
            str(TURNS),
            "--no-cache",
            "--no-trace",
            "--json",
            "--quiet",
            "--processes",
            "1",
        ]
        if concurrency is not None:
            flags += ["--max-concurrency", str(concurrency)]
        env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))} | {"OPENAI_API_KEY": "x"}
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "graph.run", *flags], capture_output=True, text=True, env=env)
        wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"graph.run exited {done.returncode}: {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    endpoints = summary["concurrency"]["endpoints"]
    return {
        "wall_s": wall,
        "dialogues_per_min": 60 * summary["finished"] / wall,
        "http_429": summary["retries"]["by_reason"].get("HTTP 429", 0),
        "at_once": summary["concurrency"]["dialogues_at_once"],
        "limit_at_end": endpoints[0]["now"] if endpoints else None,
        "cuts": endpoints[0]["throttled"] if endpoints else 0,
    }


def run(limit: int = LIMIT, rounds: int = ROUNDS) -> dict[str, Any]:
    """Every fixed setting, then the default, ``rounds`` times in turn, against one stub that answers 429 beyond
    ``limit`` (0: never); each setting's median round."""
    proc, url = _stub(limit)
    settings: dict[str, int | None] = {f"--max-concurrency {c}": c for c in sorted({*FIXED, limit} - {0})}
    settings["default (adaptive, slow start to 16)"] = None
    tried: dict[str, list[dict[str, Any]]] = {name: [] for name in settings}
    try:
        for _ in range(rounds):
            for name, concurrency in settings.items():
                tried[name].append(one_run(url, concurrency))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    rows = {}
    for name, runs in tried.items():
        ordered = sorted(runs, key=lambda r: r["wall_s"])
        rows[name] = dict(
            ordered[len(ordered) // 2],
            walls=[round(r["wall_s"], 1) for r in runs],
            http_429_all=sum(r["http_429"] for r in runs),  # over every round: a count of one or two is noise
        )
    return {"latency_s": LATENCY, "limit": limit, "dialogues": 6 * PER_CATEGORY, "turns": TURNS, "rows": rows}


def report(result: dict[str, Any]) -> list[str]:
    rows = result["rows"]
    default = rows["default (adaptive, slow start to 16)"]
    fixed = {k: r for k, r in rows.items() if k.startswith("--max")}
    best = max(fixed.values(), key=lambda r: r["dialogues_per_min"])
    same_start = fixed["--max-concurrency 16"]
    beyond = f"429 beyond {result['limit']} requests in flight" if result["limit"] else "no limit (no 429)"
    lines = [
        f"{result['dialogues']} dialogues × {result['turns']} turns, stub latency {1000 * result['latency_s']:.0f} ms, "
        + beyond
        + f"; each setting's median of {len(next(iter(rows.values()))['walls'])} rounds"
    ]
    for name, r in rows.items():
        end = f", limit {r['limit_at_end']} at the end" if r["limit_at_end"] is not None else ""
        end += f", cut {r['cuts']}×" if r.get("cuts") else ""
        lines.append(
            f"  {name:<37} {r['wall_s']:6.1f} s  {r['dialogues_per_min']:6.1f} dialogues/min  "
            f"{r['http_429']:4d} × 429  up to {r['at_once']} at once{end}  "
            f"(rounds: {', '.join(map(str, r['walls']))} s)"
        )
    share = default["dialogues_per_min"] / best["dialogues_per_min"]
    mine, theirs = (
        default.get("http_429_all", default["http_429"]),
        same_start.get("http_429_all", same_start["http_429"]),
    )
    lines.append(
        f"  default: {mine} × 429 in all its rounds against {theirs} at a fixed 16 "
        f"({'ok' if mine <= theirs else 'MORE'}); throughput {share:.2f} of the best "
        f"fixed setting ({'ok' if share >= THROUGHPUT_SHARE else 'BELOW'} ≥ {THROUGHPUT_SHARE})"
    )
    return lines
