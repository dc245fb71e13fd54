"""Benchmark: peak RSS and wall time of ``python -m graph.run --mode implicit`` on the embedded model, now ÷ the old
way.

Now: the three roles' llama.cpp contexts share one loaded copy of the GGUF weights, and each
context starts at 2,048 tokens and doubles only when a call needs more. The old way, replayed
in the same benchmark by patching :mod:`models.llama.instance` in the child process: a weights
load per role and a context of ``n_ctx`` (8,192) tokens from the start. Both play the same
seeds with the same sampling seed, without the response cache, each in its own process (peak
RSS from ``wait4``'s rusage of that process), alternately, so the machine's load falls on both
alike; and both must write the same dialogue text (the change is meant to change no token).
Target: peak RSS ≤ 1 GB, wall time no worse (ratio ≤ 1 within the noise of a shared machine).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import scratch_dir

REPO = Path(__file__).resolve().parents[1]
TARGET_MB = 1024
# The main job exactly as README runs it (6 dialogues × 5 turns, response cache and traces on), each run into a
# fresh database of its own so that no run reads another's cached replies. A 2-dialogue trial without the cache read
# 804 MB where the whole job peaked at 1,154 MB, so the trial is not the job.
ARGS = ["--mode", "implicit"]
ROUNDS = 2


def _play(way: str, db: Path, args: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.local_memory", way, "--db", str(db), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(
            f"graph.run ({way}) failed: {err.strip().splitlines()[-1] if err.strip() else proc.returncode}"
        )
    return {
        "wall_s": wall,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "text": _dialogue_text(db),
    }


def _dialogue_text(db: Path) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        # The thread id without its run id (each run gets its own): seed and mode, then the turn.
        return conn.execute(
            "select substr(thread_id, instr(thread_id, ':') + 1) as dialogue, idx, user_message, reply "
            "from turns order by 1, 2"
        ).fetchall()
    finally:
        conn.close()


def run(args: list[str] | None = None, rounds: int = ROUNDS) -> dict[str, Any]:
    args = args or ARGS
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "now": []}
    with scratch_dir() as tmp:
        for r in range(rounds):
            for way in ("old", "now") if r % 2 == 0 else ("now", "old"):  # interleaved, alternating who goes first
                runs[way].append(_play(way, tmp / f"{way}{r}.db", args))
    same = all(a["text"] == b["text"] for a, b in zip(runs["old"], runs["now"]))
    old_wall, now_wall = sum(r["wall_s"] for r in runs["old"]), sum(r["wall_s"] for r in runs["now"])
    return {
        "command": "python -m graph.run " + " ".join(args),
        "rounds": rounds,
        "old_peak_rss_mb": max(r["peak_rss_mb"] for r in runs["old"]),
        "now_peak_rss_mb": max(r["peak_rss_mb"] for r in runs["now"]),
        "old_wall_s": [r["wall_s"] for r in runs["old"]],
        "now_wall_s": [r["wall_s"] for r in runs["now"]],
        "wall_ratio": now_wall / old_wall,
        "cpu_ratio": sum(r["cpu_s"] for r in runs["now"]) / sum(r["cpu_s"] for r in runs["old"]),
        "same_text": same,
        "turns": len(runs["now"][0]["text"]),
        "target_mb": TARGET_MB,
    }


def report(r: dict[str, Any]) -> list[str]:
    verdict = "ok" if r["now_peak_rss_mb"] <= r["target_mb"] else "ABOVE TARGET"
    walls = lambda xs: " / ".join(f"{x:.0f}" for x in xs)  # noqa: E731
    return [
        f"{r['command']}, {r['rounds']} interleaved rounds each way, {r['turns']} turns a run:",
        f"  peak RSS now {r['now_peak_rss_mb']:.0f} MB (target ≤ {r['target_mb']}; {verdict}), "
        f"old way (a weights load and an 8k context per role) {r['old_peak_rss_mb']:.0f} MB",
        f"  wall time now ÷ old {r['wall_ratio']:.2f} (now {walls(r['now_wall_s'])} s, old {walls(r['old_wall_s'])} "
        "s); "
        f"CPU now ÷ old {r['cpu_ratio']:.2f}; same dialogue text both ways: {'yes' if r['same_text'] else 'NO'}",
    ]


def _old_way() -> None:
    """Patch the embedded model back to a weights load and a full ``n_ctx`` context per role (this process only)."""
    from models.llama import instance as llama_instance

    def new_llama(model_path: str, n_ctx: int):
        llama_instance._weights.pop(model_path, None)  # every context loads the file again
        return original(model_path, n_ctx)

    original = llama_instance._new_llama
    llama_instance._new_llama = new_llama
    llama_instance._FIRST_CTX = 1 << 30  # the context is n_ctx from the start


def play_as_child(argv: list[str]) -> int:
    """In the measured child process: graph.run with ARGS, the ``old`` way patched back in first (not a command)."""
    way, *args = argv
    if way == "old":
        _old_way()
    from cli.run import main as run_main

    return run_main(args)


if __name__ == "__main__":
    raise SystemExit(play_as_child(sys.argv[1:]))
