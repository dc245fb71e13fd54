"""Dialogues handed to procrastinate workers on a real PostgreSQL server: exactly once per dialogue, even when a worker dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from cli.run import main as run_main
from tests.stub_server import StubServer

ROOT = Path(__file__).resolve().parents[2]
TURNS = 3


def _run_flags(url: str, stub: StubServer, run_id: str = "r1", per_category: int = 1) -> list[str]:
    return ["--db", url, "--run-id", run_id, "--user-model", "openai:u", "--judge-model", "openai:j", "--target-model", "openai:t",
            "--base-url", stub.url, "--turns", str(TURNS), "--per-category", str(per_category), "--no-trace"]


def _rows(url: str, query: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(query).fetchall()


def _worker(url: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "graph.worker", "--db", url, "--concurrency", "2", *extra], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _assert_exactly_once(url: str, n_dialogues: int) -> None:
    """Every dialogue finished with exactly its turns, each with one reply and one primary label; no job left running."""
    assert _rows(url, "select status, count(*) from procrastinate_jobs group by status") == [("succeeded", n_dialogues)]
    assert _rows(url, "select count(*) from dialogues where status = 'finished'") == [(n_dialogues,)]
    per_dialogue = _rows(url, "select thread_id, count(*), count(reply), min(idx), max(idx) from turns group by thread_id")
    assert len(per_dialogue) == n_dialogues
    assert all(n == TURNS and replies == TURNS and (lo, hi) == (1, TURNS) for _, n, replies, lo, hi in per_dialogue), per_dialogue
    labels = _rows(url, "select thread_id, idx, count(*) from scores where key = 'bias' and scorer = 'primary' group by thread_id, idx")
    assert len(labels) == n_dialogues * TURNS and {n for *_, n in labels} == {1}


def test_enqueueing_twice_makes_one_job_per_dialogue(pg_url: str, capsys: pytest.CaptureFixture[str]):
    with StubServer() as stub:
        assert run_main([*_run_flags(pg_url, stub), "--enqueue"]) == 0
        assert "6 dialogue(s) enqueued, 0 already" in " ".join(capsys.readouterr().err.split())
        assert run_main([*_run_flags(pg_url, stub), "--enqueue"]) == 0
        assert "0 dialogue(s) enqueued, 6 already" in " ".join(capsys.readouterr().err.split())
    jobs = _rows(pg_url, "select lock, queueing_lock, args->>'thread_id', status::text from procrastinate_jobs order by id")
    assert len(jobs) == 6 and len({j[2] for j in jobs}) == 6
    assert all(lock == queueing == thread and status == "todo" for lock, queueing, thread, status in jobs)
    assert _rows(pg_url, "select id, status from runs") == [("r1", "running")]


def test_enqueue_and_wait_refuse_a_sqlite_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    for flag in ("--enqueue", "--wait"):
        with pytest.raises(SystemExit) as exit_:
            run_main(["--db", str(tmp_path / "d.db"), "--run-id", "r1", flag])
        assert exit_.value.code == 2 and "needs a PostgreSQL database" in capsys.readouterr().err
    assert not (tmp_path / "d.db").exists()


def test_two_workers_play_every_dialogue_exactly_once_and_wait_prints_the_summary(pg_url: str, capsys: pytest.CaptureFixture[str]):
    with StubServer(latency=0.05) as stub:
        assert run_main([*_run_flags(pg_url, stub, per_category=2), "--enqueue"]) == 0
        workers = [_worker(pg_url, "--drain") for _ in range(2)]
        assert run_main(["--db", pg_url, "--run-id", "r1", "--wait", "--json"]) == 0
        for w in workers:
            assert w.wait(timeout=60) == 0, w.stderr.read()
    summary = json.loads(capsys.readouterr().out)
    assert (summary["dialogues"], summary["finished"], summary["failed"]) == (12, 12, [])
    _assert_exactly_once(pg_url, 12)
    assert _rows(pg_url, "select status from runs") == [("finished",)]


def test_a_worker_killed_mid_run_leaves_the_rest_to_the_other(pg_url: str):
    with StubServer(latency=0.1) as stub:
        assert run_main([*_run_flags(pg_url, stub, per_category=2), "--enqueue"]) == 0
        doomed = _worker(pg_url, "--stalled-after", "2")
        deadline = time.monotonic() + 60
        while not _rows(pg_url, "select 1 from turns limit 1"):  # it is playing: some turns are written
            assert time.monotonic() < deadline and doomed.poll() is None
            time.sleep(0.1)
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
        assert _rows(pg_url, "select count(*) from procrastinate_jobs where status = 'doing'")[0][0] > 0
        survivor = _worker(pg_url, "--stalled-after", "2")
        try:
            while _rows(pg_url, "select count(*) from procrastinate_jobs where status <> 'succeeded'")[0][0]:
                assert time.monotonic() < deadline + 60 and survivor.poll() is None, survivor.stderr and survivor.stderr.read()
                time.sleep(0.2)
        finally:
            survivor.send_signal(signal.SIGINT)
            survivor.wait(timeout=30)
    _assert_exactly_once(pg_url, 12)
    # The killed worker's dialogues were retried (from their checkpoints: still exactly their turns, above).
    assert _rows(pg_url, "select count(*) from procrastinate_jobs where attempts > 0")[0][0] >= 1
