"""Crash safety: SIGKILL at random moments then resume; Ctrl+C; two processes on one database."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from checkpoints.scores import labels_source
from tests.support import forked

FAKE = ["--user-model", "fake:u", "--target-model", "fake:t", "--judge-model", "fake:j"]


def start(
    db: Path, run_id: str, *extra: str, delay: float = 0.01, turns: int = 4, concurrency: int = 3
) -> forked.ForkedRun:
    """``graph.run`` on the fake models, one dialogue per category, each call taking ``delay`` seconds."""
    flags = ["--db", str(db), "--run-id", run_id, "--per-category", "1", "--turns", str(turns)]
    return forked.popen(
        "tests.support.fake_cli",
        "run",
        *FAKE,
        *flags,
        "--max-concurrency",
        str(concurrency),
        "--json",
        *extra,
        env={**os.environ, "FAKE_DELAY": str(delay)},
    )


def check_complete(db: Path, run_id: str, *, dialogues: int = 6, turns: int = 4) -> None:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = conn.execute("select thread_id, status from dialogues where run_id = ?", [run_id]).fetchall()
        assert len(rows) == dialogues and {s for _, s in rows} == {"finished"}
        for thread_id, _ in rows:
            idx = [r[0] for r in conn.execute("select idx from turns where thread_id = ? order by idx", [thread_id])]
            assert idx == list(range(1, turns + 1)), (thread_id, idx)
            labels = conn.execute(
                f"select count(*) from {labels_source(conn)} where thread_id = ? and label_set = 'primary' and "
                "label is not null",
                [thread_id],
            ).fetchone()[0]
            assert labels == turns
            # No turn was generated twice: the checkpointed state has exactly `turns` user messages.
            users = conn.execute(
                "select count(*) from turns where thread_id = ? and user_message is not null", [thread_id]
            ).fetchone()[0]
            assert users == turns
    finally:
        conn.close()


@pytest.mark.integration
def test_sigkill_at_random_moments_then_resume(tmp_path: Path):
    rng = random.Random(20261130)
    interrupted_mid_run = 0
    for trial in range(20):
        db = tmp_path / f"kill{trial}.db"
        proc = start(db, "crash", delay=0.02)
        # Start-up time varies with load, so the moment is drawn from when the run starts writing:
        # sometimes at once (mid-migration or mid-first-turn), mostly somewhere during the dialogues.
        wait_for_turns(db, proc, at_least=0 if trial % 4 == 0 else 1)
        time.sleep(rng.uniform(0.0, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        interrupted_mid_run += _partly_done(db)
        resumed = start(db, "crash", delay=0.0)
        out, err = resumed.communicate(timeout=120)
        assert resumed.returncode == 0, err
        check_complete(db, "crash")
    # The moments must really fall inside runs, not only before or after them.
    assert interrupted_mid_run >= 5


def _count_turns(db: Path) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(db, timeout=30)
    try:
        if not conn.execute("select 1 from sqlite_master where name = 'turns'").fetchone():
            return 0
        return conn.execute("select count(*) from turns").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def wait_for_turns(
    db: Path, proc: forked.ForkedRun | subprocess.Popen, *, at_least: int, timeout: float = 60.0
) -> None:
    """Block until the run has stored ``at_least`` turns (0: until the database file exists)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if (db.exists() and at_least == 0) or (at_least and _count_turns(db) >= at_least):
            return
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be interrupted"


def _partly_done(db: Path) -> bool:
    if not db.exists():
        return False
    conn = sqlite3.connect(db)
    try:
        tables = {r[0] for r in conn.execute("select name from sqlite_master")}
        if "turns" not in tables:
            return False
        n = conn.execute("select count(*) from turns").fetchone()[0]
        return 0 < n < 24
    finally:
        conn.close()


@pytest.mark.integration
def test_ctrl_c_leaves_dialogues_resumable(tmp_path: Path):
    db = tmp_path / "int.db"
    proc = start(db, "ctrlc", delay=0.05)
    wait_for_turns(db, proc, at_least=1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    said = " ".join(err.split())
    assert "Resume with: python -m graph.run " in said and " --run-id ctrlc " in said  # the command as it was given
    resumed = start(db, "ctrlc", delay=0.0)
    _, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    check_complete(db, "ctrlc")


@pytest.mark.integration
def test_two_processes_on_one_database(tmp_path: Path):
    db = tmp_path / "shared.db"
    a = start(db, "run-a", delay=0.005)
    b = start(db, "run-b", delay=0.005)
    for proc in (a, b):
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        assert "locked" not in err
    check_complete(db, "run-a")
    check_complete(db, "run-b")
