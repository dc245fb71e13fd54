"""Benchmark: peak RSS and wall time of ``python -m graph.run --mode implicit``, the embedded main job exactly as README
runs it, against the 1 GB target; and the same job with each call's sampler left to the garbage collector.

Now: the command itself, run in a scratch directory with ``$XDG_DATA_HOME`` pointing there, so that its default
database is a fresh file of that directory (6 dialogues × 5 turns, response cache and traces on, nothing read from
another run's cache). Before: the same job in a child process patched back to what llama-cpp-python does on its own,
each call's sampler chain (about 3 MB of native buffers here) and the judge's last logprob row left in reference
cycles until Python's full garbage collection. Peak RSS from ``wait4``'s rusage of each process; the two ways
alternate, so the machine's load falls on both alike, and both must write the same dialogue text (freeing the
samplers is meant to change no token). Target: peak RSS ≤ 1 GB, wall time no worse (ratio ≤ 1 within the noise of a
shared machine).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

from benchmarks.common import scratch_dir
from checkpoints.paths import default_db_path

REPO = Path(__file__).resolve().parents[1]
TARGET_MB = 1024
ARGS = ["--mode", "implicit"]  # README's main job: `python -m graph.run --mode implicit`
ROUNDS = 2
WAYS = ("now", "before")


def command(way: str, args: list[str]) -> list[str]:
    """The command line a way runs: the README's own for ``now``; the patched child for ``before``."""
    if way == "now":
        return [sys.executable, "-m", "graph.run", *args]
    return [sys.executable, "-m", "benchmarks.local_memory", way, *args]


def _play(way: str, home: Path, args: list[str]) -> dict[str, Any]:
    """Run one way in ``home`` (its cwd and ``$XDG_DATA_HOME``, so its default database is new) and measure it."""
    home.mkdir()
    env = {**os.environ, "XDG_DATA_HOME": str(home), "PYTHONPATH": os.pathsep.join([str(REPO), *_pythonpath()])}
    env.pop("DYMT_ESB_DB", None)  # the default database, as on a fresh machine
    started = time.perf_counter()
    proc = subprocess.Popen(command(way, args), cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")  # read to the end first: a full pipe would stall the child
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        last = err.strip().splitlines()[-1] if err.strip() else f"exit status {proc.returncode}"
        raise RuntimeError(f"graph.run ({way}) failed: {last}")
    with mock.patch.dict(os.environ, {"XDG_DATA_HOME": str(home)}):
        db = default_db_path()
    return {
        "wall_s": wall,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "text": _dialogue_text(db),
    }


def _pythonpath() -> list[str]:
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


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
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    with scratch_dir() as tmp:
        for r in range(rounds):
            for way in WAYS if r % 2 == 0 else WAYS[::-1]:  # interleaved, alternating who goes first
                runs[way].append(_play(way, tmp / f"{way}{r}", args))
    now, before = runs["now"], runs["before"]
    return {
        "command": "python -m graph.run " + " ".join(args),
        "rounds": rounds,
        "now_peak_rss_mb": [r["peak_rss_mb"] for r in now],
        "before_peak_rss_mb": [r["peak_rss_mb"] for r in before],
        "rss_ratio": max(r["peak_rss_mb"] for r in now) / max(r["peak_rss_mb"] for r in before),
        "now_wall_s": [r["wall_s"] for r in now],
        "before_wall_s": [r["wall_s"] for r in before],
        "wall_ratio": sum(r["wall_s"] for r in now) / sum(r["wall_s"] for r in before),
        "cpu_ratio": sum(r["cpu_s"] for r in now) / sum(r["cpu_s"] for r in before),
        "same_text": all(a["text"] == b["text"] for a, b in zip(now, before)),
        "turns": len(now[0]["text"]),
        "target_mb": TARGET_MB,
    }


def report(r: dict[str, Any]) -> list[str]:
    peak = max(r["now_peak_rss_mb"])
    verdict = "met" if peak <= r["target_mb"] else "ABOVE TARGET"
    mbs = lambda xs: " / ".join(f"{x:,.0f}" for x in xs)  # noqa: E731
    walls = lambda xs: " / ".join(f"{x:.0f}" for x in xs)  # noqa: E731
    return [
        f"{r['command']} (the main job as README runs it), {r['rounds']} runs, {r['turns']} turns a run:",
        f"  peak RSS {mbs(r['now_peak_rss_mb'])} MB: target ≤ {r['target_mb']:,} MB, {verdict}",
        f"  wall time {walls(r['now_wall_s'])} s",
        f"  against samplers left to the garbage collector ({mbs(r['before_peak_rss_mb'])} MB, "
        f"{walls(r['before_wall_s'])} s): peak RSS ÷ {r['rss_ratio']:.2f}, wall ÷ {r['wall_ratio']:.2f}, "
        f"CPU ÷ {r['cpu_ratio']:.2f}; same dialogue text both ways: {'yes' if r['same_text'] else 'NO'}",
    ]


def _before() -> None:
    """Leave each call's sampler chain and the judge's last logprob row to the garbage collector (this process only)."""
    from models.llama.instance import _Instance
    from models.llama.logprobs import _LogprobRecorder

    finish = _LogprobRecorder.finish

    def keep_row(self: _LogprobRecorder, llama: Any, text: bytes) -> list[dict[str, Any]]:
        pending = self._pending
        entries = finish(self, llama, text)
        self._pending = pending
        return entries

    _Instance.release_sampler = lambda self: None  # type: ignore[method-assign]
    _LogprobRecorder.finish = keep_row  # type: ignore[method-assign]


def play_as_child(argv: list[str]) -> int:
    """In the measured child process: graph.run with the ``before`` way patched in first (not a command)."""
    way, *args = argv
    if way == "before":
        _before()
    from cli.run import main as run_main

    return run_main(args)


if __name__ == "__main__":
    raise SystemExit(play_as_child(sys.argv[1:]))
