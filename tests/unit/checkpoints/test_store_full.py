"""A full or read-only SQLite store mid-run: SQLite's own error injected at the write paths (ours and LangGraph's
saver).

The run stops with :class:`StoreUnwritable` (the command prints one line and exits 75), nothing already stored is
lost, and the same run finishes once the store takes writes again. The real small filesystem is in
tests/integration/test_store_full_disk.py.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoints.outages import StoreUnwritable, space_needed, store_fault
from checkpoints.store import Writer, open_writer
from tests.conftest import REPO, SEEDS, default_models, play

FULL = "database or disk is full"
READ_ONLY = "attempt to write a readonly database"


def fail_after(monkeypatch: pytest.MonkeyPatch, owner: type, name: str, n: int, message: str) -> None:
    """Make ``owner.name`` raise SQLite's ``message`` from its ``n``-th call on (as the real error would, every
    time)."""
    original = getattr(owner, name)
    calls = [0]

    def failing(*args, **kwargs):
        calls[0] += 1
        if calls[0] >= n:
            raise sqlite3.OperationalError(message)
        return original(*args, **kwargs)

    async def afailing(*args, **kwargs):
        calls[0] += 1
        if calls[0] >= n:
            raise sqlite3.OperationalError(message)
        return await original(*args, **kwargs)

    monkeypatch.setattr(owner, name, afailing if inspect.iscoroutinefunction(original) else failing)


def finished_exactly(db: Path, run_id: str = "r1", turns: int = 5) -> None:
    """Every dialogue of the run finished with exactly its turns, each with a reply and a label; the file intact."""
    store = open_writer(db, create=False)
    try:
        dialogues = store.dialogues(run_id)
        assert len(dialogues) == len(SEEDS) and all(d["status"] == "finished" for d in dialogues)
        for d in dialogues:
            rows = store.turns(d["thread_id"])
            assert [r["idx"] for r in rows] == list(range(1, turns + 1))
            assert all(r["reply"] and r["label"] for r in rows)
    finally:
        store.close()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# LangGraph's saver meeting a full disk is covered by the real 2 MB filesystem
# (tests/integration/test_store_full_disk.py,
# a command per run): in one long-lived process a second run after it can find the file still write-locked.
@pytest.mark.slow
@pytest.mark.parametrize(("owner", "name"), [(Writer, "record_turns")], ids=["our-writer"])
def test_a_full_disk_mid_run_stops_it_in_one_error_and_the_same_run_then_finishes(db: Path, monkeypatch, owner, name):
    with monkeypatch.context() as patched:
        fail_after(patched, owner, name, 4, FULL)
        with pytest.raises(StoreUnwritable) as caught:
            play(db, default_models(), concurrency=2)
    assert caught.value.kind == "full" and caught.value.path == db
    assert str(caught.value) == f"the dialogue database {db} is on a full disk ({FULL})"
    assert "free at least" in caught.value.advice(dialogues=2, run_id="r1")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored_before = conn.execute("SELECT count(*) FROM turns").fetchone()[0]
    assert stored_before >= 1  # what was written before the fault is still there
    statuses = _play_again_in_a_new_process(db)  # space freed, the same run goes on, as the command run again does
    # Turn records are queued, not awaited (graph/running/store_writer.py): a dialogue whose graph reached its end
    # before the fault surfaced is recorded from its checkpoint ("skipped"), the others play on ("finished"); none
    # fails.
    assert set(statuses) <= {"finished", "skipped"} and len(statuses) == 2, statuses
    finished_exactly(db)


def _play_again_in_a_new_process(db: Path) -> list[str]:
    code = (
        "import json, sys; from tests.conftest import default_models, play; "
        "result, store = play(sys.argv[1], default_models(), concurrency=2); store.close(); "
        "print(json.dumps([o.status for o in result.outcomes]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(db)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_store_turned_read_only_mid_run_says_so(db: Path, monkeypatch):
    with monkeypatch.context() as patched:
        fail_after(patched, Writer, "upsert_dialogue", 3, READ_ONLY)
        with pytest.raises(StoreUnwritable) as caught:
            play(db, default_models(), concurrency=2)
    assert caught.value.kind == "read-only"
    assert "chmod u+w" in caught.value.advice()
    result, store = play(db, default_models(), concurrency=2)
    store.close()
    finished_exactly(db)


def test_other_sqlite_errors_are_not_store_faults(tmp_path: Path):
    assert store_fault(sqlite3.OperationalError("no such table: turns"), tmp_path / "x.db") is None
    assert store_fault(ValueError(FULL), tmp_path / "x.db") is None
    assert store_fault(sqlite3.OperationalError(FULL), None) is None  # PostgreSQL stores: not a SQLite file


def test_the_space_to_free_grows_with_the_dialogues_left(tmp_path: Path):
    db = tmp_path / "dialogues.db"
    play(db, default_models(), concurrency=2)[1].close()
    few, many = space_needed(db, run_id="r1", dialogues=4), space_needed(db, run_id="r1", dialogues=40)
    assert 2**20 < few < many


# graph.run with fake models and SQLite's full-disk error injected in our writer: in two processes, every child's
# 4th batch of turn records fails (the forked children inherit the patch); the real filesystem is in
# tests/integration/test_store_full_disk.py.
_FULL_IN_PROCESSES = f"""
import sqlite3, sys
from checkpoints.store import Writer
from tests.support import fake_cli
original, calls = Writer.record_turns, [0]
def failing(*args, **kwargs):
    calls[0] += 1
    if calls[0] >= 4:
        raise sqlite3.OperationalError({FULL!r})
    return original(*args, **kwargs)
if sys.argv[1] == "full":
    Writer.record_turns = failing
raise SystemExit(fake_cli.main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_a_full_disk_in_a_player_process_stops_every_process_in_one_line_and_the_run_then_finishes(tmp_path: Path):
    from tests.integration.test_crash_safety import FAKE, check_complete

    db = tmp_path / "dialogues.db"
    args = [
        "run",
        *FAKE,
        "--db",
        str(db),
        "--run-id",
        "multi",
        "--per-category",
        "1",
        "--turns",
        "4",
        "--max-concurrency",
        "4",
        "--processes",
        "2",
        "--json",
    ]

    def command(*mode: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", _FULL_IN_PROCESSES, *mode, *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO), "FAKE_DELAY": "0.01"},
        )

    full = command("full")
    assert full.returncode == 75, full.stderr[-3000:]
    lines = full.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in full.stderr, full.stderr[-3000:]
    assert lines[0].startswith(f"error: the dialogue database {db} is on a full disk ({FULL}): free at least ")
    assert "then resume with: python -m graph.run " in lines[0] and "--processes 2" in lines[0] and full.stdout == ""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] >= 1
        assert conn.execute("SELECT status FROM runs WHERE id = 'multi'").fetchone()[0] == "interrupted"
    again = command("freed")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["finished"] == 6
    check_complete(db, "multi", dialogues=6, turns=4)
