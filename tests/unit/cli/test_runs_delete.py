"""Deleting a run removes every trace of its dialogues from the file, branches included."""

from __future__ import annotations

import sqlite3

import pytest

from cli import runs
from tests.conftest import default_models, play, scripted


def test_delete_removes_all_text_of_the_run_and_keeps_others(db, capsys):
    marker = "Zanzibar-marker-reply"
    play(db, default_models(target=scripted(lambda m, n: f"{marker} {n}", spec="fake:target")), turns=2, run_id="gone")
    play(db, default_models(), turns=2, run_id="kept")
    assert marker.encode() in db.read_bytes() + (
        db.with_name(db.name + "-wal").read_bytes() if db.with_name(db.name + "-wal").exists() else b""
    )

    assert runs.main(["--db", str(db), "delete", "gone", "--yes"]) == 0
    assert "deleted run gone" in capsys.readouterr().out
    wal = db.with_name(db.name + "-wal")
    assert marker.encode() not in db.read_bytes()
    assert not wal.exists() or marker.encode() not in wal.read_bytes()
    conn = sqlite3.connect(db)
    assert conn.execute("select count(*) from dialogues where run_id = 'gone'").fetchone()[0] == 0
    assert conn.execute("select count(*) from checkpoints where thread_id like 'gone:%'").fetchone()[0] == 0
    assert conn.execute("select count(*) from dialogues where run_id = 'kept'").fetchone()[0] == 2
    assert conn.execute("select count(*) from checkpoints where thread_id like 'kept:%'").fetchone()[0] > 0
    # Compressed stores hide text from a byte search: their rows are counted too.
    for run_id, expected in (("gone", 0), ("kept", 2)):
        assert conn.execute("select count(*) from trace_index where run_id = ?", [run_id]).fetchone()[0] == expected
    kept = conn.execute(
        "select count(*) from trace_chunks where trace_id in (select trace_id from trace_index)"
    ).fetchone()[0]
    assert kept == conn.execute("select count(*) from trace_chunks").fetchone()[0] > 0
    conn.close()

    assert runs.main(["--db", str(db), "list"]) == 0
    out = capsys.readouterr().out
    assert "kept" in out and "gone" not in out


def test_unknown_run_is_exit_2(db):
    play(db, default_models(), turns=1, run_id="a")
    with pytest.raises(SystemExit) as info:
        runs.main(["--db", str(db), "delete", "nope", "--yes"])
    assert info.value.code == 2
