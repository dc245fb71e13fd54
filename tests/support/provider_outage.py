"""A real OpenAI-compatible stub server process that can go away and come back on its port, and a run against it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from tests.conftest import REPO
from tests.support import forked


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StubProcess:
    """``python -m tests.support.stub_server`` on a fixed port, logging each answered request to ``log``."""

    def __init__(
        self,
        log: Path,
        *,
        port: int | None = None,
        latency: float = 0.05,
        faults: dict[str, float] | None = None,
        only: str | None = None,
        seed: int = 0,
    ) -> None:
        self.log, self.port, self.latency = log, port or free_port(), latency
        self.faults, self.only, self.seed = dict(faults or {}), only, seed  # Faults' rates by field name
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> StubProcess:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.stub_server",
                "--port",
                str(self.port),
                "--latency",
                str(self.latency),
                "--log",
                str(self.log),
                "--seed",
                str(self.seed),
                *self._fault_flags(),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline()
        assert line.strip() == self.url, line
        return self

    def _fault_flags(self) -> list[str]:
        flags = [part for name, rate in self.faults.items() for part in (f"--{name.replace('_', '-')}", str(rate))]
        return flags + (["--only", self.only] if self.only else [])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def answered(self) -> list[str]:
        """The body hash of every request answered so far (a provider would bill each)."""
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        return [line["body_sha256"] for line in lines if "body_sha256" in line]

    def faults_served(self) -> Counter[str]:
        """How many requests were answered with each fault (or non-reply) so far (the stub logs them beside the
        answers)."""
        if not self.log.exists():
            return Counter()
        return Counter(
            line["outcome"] for line in map(json.loads, self.log.read_text().splitlines()) if "outcome" in line
        )

    def wait_answered(self, n: int, run: subprocess.Popen, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.answered()) < n:
            if run.poll() is not None:
                raise AssertionError(f"the run ended ({run.returncode}) before {n} calls: {run.stderr.read()[-3000:]}")
            assert time.monotonic() < deadline, f"the run made fewer than {n} calls in {timeout} s"
            time.sleep(0.1)


def start_run(*args: str) -> forked.ForkedRun:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))}
    env["PYTHONPATH"] = str(REPO)
    return forked.popen("graph.run", *args, cwd=REPO, env=env)


def run_flags(url: str, db: Path, run_id: str, *, turns: int, per_category: int, concurrency: int) -> list[str]:
    return [
        "--user-model",
        "openai:stub",
        "--target-model",
        "openai:stub",
        "--judge-model",
        "openai:stub",
        "--base-url",
        url,
        "--db",
        str(db),
        "--run-id",
        run_id,
        "--per-category",
        str(per_category),
        "--turns",
        str(turns),
        "--max-concurrency",
        str(concurrency),
        "--json",
        "--no-trace",
    ]


def stored_turns(db: Path, run_id: str) -> dict[str, list[tuple[int, bool, bool]]]:
    """Per dialogue of the run: (turn index, has a reply, has a label) of every stored turn, through the store's
    reader."""
    from checkpoints.store import open_writer

    store = open_writer(db, create=False)
    try:
        return {
            d["thread_id"]: [(t["idx"], bool(t["reply"]), t["label"] is not None) for t in store.turns(d["thread_id"])]
            for d in store.dialogues(run_id)
        }
    finally:
        store.close()


def paid_twice(hashes: list[str]) -> int:
    """Requests answered more than once with the very same body (the same call paid again)."""
    return sum(n - 1 for n in Counter(hashes).values() if n > 1)
