"""``graph.run --processes N``: one run in N processes on one SQLite file, exactly once, through SIGKILLs.

Scripted fake models (tests/support/fake_cli.py) behind the real CLI, store, checkpointer and child processes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_crash_safety import check_complete, wait_for_turns
from tests.integration.test_crash_safety import start as run_on_fakes
from tests.support import forked

pytestmark = pytest.mark.integration
TURNS = 3


def start(db: Path, run_id: str, *extra: str, delay: float = 0.01) -> forked.ForkedRun:
    return run_on_fakes(db, run_id, "--processes", "4", *extra, delay=delay, turns=TURNS, concurrency=8)


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def wait_for_children(proc: forked.ForkedRun, n: int, timeout: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        found = children(proc.pid)
        if len(found) >= n:
            return found
        time.sleep(0.02)
    raise AssertionError(f"the run did not start {n} player processes")


def no_claims_left(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("select count(*) from dialogue_claims").fetchone()[0] == 0
    finally:
        conn.close()


def test_four_processes_play_every_dialogue_once_through_sigkills(tmp_path: Path) -> None:
    """20 trials: a player process (or, every fifth trial, the parent) is SIGKILLed mid-run.

    A killed player's dialogues go to another player, which plays them on from their checkpoints, and the
    run ends complete in the same command; a killed parent takes its players with it, and rerunning the run
    id finishes it. Each time: every dialogue has exactly its turns and labels, no "database is locked".
    """
    rng = random.Random(int(os.environ.get("DYMT_ESB_CRASH_SEED", "20261201")))
    mid_run = 0
    for trial in range(20):
        db = tmp_path / f"p{trial}.db"
        proc = start(db, "multi", delay=0.05)
        players = wait_for_children(proc, 4)
        wait_for_turns(db, proc, at_least=1)
        time.sleep(rng.uniform(0.0, 0.4))
        kill_parent = trial % 5 == 4
        alive = [p for p in children(proc.pid) if p in players]
        if not alive:  # every player has already finished its share
            kill_parent = True
        victim = proc.pid if kill_parent else rng.choice(alive)
        os.kill(victim, signal.SIGKILL)
        mid_run += 0 < _turns(db) < 6 * TURNS
        if kill_parent:
            proc.wait()
            deadline = time.monotonic() + 10
            while (
                any(Path(f"/proc/{p}").exists() and _state(p) != "Z" for p in players) and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            assert not [p for p in players if Path(f"/proc/{p}").exists() and _state(p) != "Z"], (
                "players outlived the parent"
            )
            proc = start(db, "multi", delay=0.0)
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        assert "locked" not in err
        summary = json.loads(out)
        assert summary["finished"] == 6 and not summary["failed"], (
            trial,
            kill_parent,
            {k: summary[k] for k in ("dialogues", "finished", "failed")},
        )
        check_complete(db, "multi", turns=TURNS)
        no_claims_left(db)
    assert mid_run >= 10


def test_a_dialogue_claimed_by_a_live_process_is_not_played_twice(tmp_path: Path) -> None:
    from checkpoints import process_claims
    from checkpoints.paths import connect

    db = tmp_path / "claims.db"
    conn = connect(db)
    process_claims.ensure_table(conn)
    me = process_claims.Owner.me()
    assert process_claims.claim(conn, "t1", me) is None
    assert process_claims.claim(conn, "t1", me) is None  # its own claim again
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        other = process_claims.Owner(me.host, sleeper.pid, process_claims.process_start(sleeper.pid))
        assert process_claims.claim(conn, "t2", other) is None
        assert process_claims.claim(conn, "t2", me) == other  # held by a live process
        reused = process_claims.Owner(me.host, sleeper.pid, "1")  # the pid, but another process's start time
        assert process_claims.claim(conn, "t3", reused) is None and process_claims.claim(conn, "t3", me) is None
    finally:
        sleeper.kill()
        sleeper.wait()
    assert process_claims.claim(conn, "t2", me) is None  # its holder died: taken over
    process_claims.release(conn, "t2", other)  # another owner's release leaves the claim alone
    assert ("t2", me.pid) in process_claims.holders(conn)
    conn.close()


def _turns(db: Path) -> int:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute("select count(*) from turns").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_run_on_the_embedded_model_plays_in_one_process_by_default(tmp_path: Path) -> None:
    """No model flag (the embedded model in every role, its llama.cpp threads on every core): no player process."""
    from tests.support.provider_outage import start_run
    from tests.unit.graph.test_processes_option import claims_table

    config = tmp_path / "short.toml"
    config.write_text("[sampling.user]\nmax_tokens = 12\n[sampling.target]\nmax_tokens = 12\n")
    db = tmp_path / "embedded.db"
    run = start_run(
        "--config", str(config), "--db", str(db), "--limit", "3", "--turns", "1", "--max-concurrency", "3", "--json"
    )
    most = 0
    while run.poll() is None:
        most = max(most, len(children(run.pid)))
        time.sleep(0.02)
    out, err = run.communicate()
    assert run.returncode == 0, err[-3000:]
    assert json.loads(out)["finished"] == 3
    assert most == 0 and not claims_table(db)
