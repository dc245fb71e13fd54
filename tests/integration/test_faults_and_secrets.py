"""Faults from a misbehaving OpenAI-compatible server, and no secret on disk after run, branch, export, report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.stub_server import Faults, StubServer

CANARY = "sk-canary-7f3a9c1e5b2d4e6f8a0b"


def run_module(module: str, *args: str, env_extra: dict[str, str] | None = None, timeout: float = 300):
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))}
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def openai_flags(url: str) -> list[str]:
    return [
        "--user-model",
        "openai:stub",
        "--target-model",
        "openai:stub",
        "--judge-model",
        "openai:stub",
        "--base-url",
        url,
    ]


@pytest.mark.integration
def test_run_against_a_faulty_server_completes_and_a_rerun_finishes_the_failed(tmp_path: Path):
    db = tmp_path / "faults.db"
    faults = Faults(
        error_500=0.08,
        rate_limit_429=0.05,
        retry_after=0.1,
        hang=0.03,
        hang_seconds=3.0,
        drop=0.04,
        empty=0.04,
        malformed=0.04,
        seed=7,
    )
    common = [
        *openai_flags("PLACEHOLDER"),
        "--db",
        str(db),
        "--run-id",
        "faulty",
        "--per-category",
        "1",
        "--turns",
        "3",
        "--max-concurrency",
        "6",
        "--request-timeout",
        "1",
        "--json",
    ]
    with StubServer(latency=0.0, faults=faults) as stub:
        args = [stub.url if a == "PLACEHOLDER" else a for a in common]
        # Few retries, so some dialogues exhaust them and fail while the others go on.
        first = run_module("graph.run", *args, "--retries", "1")
        assert first.returncode == 1, first.stderr  # some dialogues failed: exit 1, and the line says how to resume
        summary = json.loads(first.stdout)
        assert summary["finished"] + len(summary["failed"]) == summary["dialogues"] == 6
        # With one retry and ~30% faulty requests some dialogues exhaust their retries; the others go on.
        assert summary["failed"] and summary["finished"]
        for failure in summary["failed"]:
            assert failure["error"]  # the reason is recorded
        assert (
            f"{len(summary['failed'])} of 6 dialogue(s) did not finish. Resume with: python -m graph.run "
            in first.stderr
        )
        outcomes = dict(stub.outcomes)
    assert sum(v for k, v in outcomes.items() if k != "ok") > 0  # faults really happened
    with StubServer(latency=0.0, faults=Faults(error_500=0.05, retry_after=0.1, seed=8)) as stub:
        args = [stub.url if a == "PLACEHOLDER" else a for a in common]
        rerun = run_module("graph.run", *args, "--retries", "6")
    assert rerun.returncode == 0, rerun.stderr
    final = json.loads(rerun.stdout)
    assert final["finished"] == 6 and final["failed"] == []
    assert all(t["labelled"] + t["unparsed"] == 6 for t in final["per_turn"])


@pytest.mark.integration
def test_no_secret_reaches_disk(tmp_path: Path):
    db = tmp_path / "secret.db"
    out = tmp_path / "out"
    out.mkdir()
    env = {"OPENAI_API_KEY": CANARY}
    with StubServer(latency=0.0) as stub:
        url = stub.url.replace("http://", f"http://user:{CANARY}@")
        run = run_module(
            "graph.run",
            *openai_flags(url),
            "--db",
            str(db),
            "--run-id",
            "sec",
            "--limit",
            "2",
            "--turns",
            "2",
            "--json",
            env_extra=env,
        )
        assert run.returncode == 0, run.stderr
        thread = json.loads(run.stdout)["run_id"] and _first_thread(db)
        branch = run_module(
            "graph.branch", thread, "--turn", "2", "--rerun", "--db", str(db), "--base-url", url, env_extra=env
        )
        assert branch.returncode == 0, branch.stderr
    export = run_module(
        "graph.trace",
        "export",
        thread,
        "--format",
        "jsonl",
        "--out",
        str(out / "runs.jsonl"),
        "--db",
        str(db),
        env_extra=env,
    )
    assert export.returncode == 0, export.stderr
    report = run_module("evals.report", "--run-id", "sec", "--out", str(out / "report"), "--db", str(db), env_extra=env)
    assert report.returncode == 0, report.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "runs.jsonl" for p in written) and any(p.suffix == ".png" for p in written)
    for path in written:
        assert CANARY.encode() not in path.read_bytes(), path
    for stream in (run.stdout, run.stderr, branch.stdout, export.stdout, report.stdout):
        assert CANARY not in stream


def _first_thread(db: Path) -> str:
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return conn.execute("select thread_id from dialogues where run_id = 'sec' order by thread_id").fetchone()[0]
    finally:
        conn.close()
