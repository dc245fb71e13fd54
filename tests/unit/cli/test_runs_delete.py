"""Deleting a run removes every trace of its dialogues from the file, branches included."""

from __future__ import annotations

import sqlite3
import time

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


# --- a run deleted while it plays --------------------------------------------------------------------------------

MARKER = "Qwzx-reply-marker"
SEED_MARKER = "Qwzx-seed-marker"


def _reply(body: dict, n: int) -> str:
    """The stub's answers, with a marker in every answer to the doomed run's models."""
    from tests.support.stub_server import default_reply

    text = default_reply(body, n)
    return f"{text} {MARKER}" if "doomed" in str(body.get("model")) else text


def _seeds(tmp_path) -> str:
    path = tmp_path / "seeds.jsonl"
    path.write_text(
        "".join(
            f'{{"id": "s{i}", "category": "gender", "statement": "Group {i} is said to be {SEED_MARKER}."}}\n'
            for i in range(6)
        )
    )
    return str(path)


def _flags(db, stub, run_id: str, model: str) -> list[str]:
    return [
        "--db",
        str(db),
        "--run-id",
        run_id,
        "--base-url",
        stub.url,
        "--user-model",
        f"openai:{model}",
        "--target-model",
        f"openai:{model}",
        "--judge-model",
        f"openai:{model}",
    ]


def play_and_delete_mid_run(db, tmp_path) -> tuple:
    """Play run "doomed-run" in its own process, delete it while it plays (refused, then --force); what each said."""
    from cli.run import main as run_main
    from tests.support import forked
    from tests.support.backends import rows
    from tests.support.stub_server import StubServer

    with StubServer(latency=0.2, reply=_reply) as stub:
        assert run_main([*_flags(db, stub, "kept", "plain"), "--turns", "2", "--limit", "2", "--quiet"]) == 0
        doomed = forked.popen(
            "graph.run",
            *_flags(db, stub, "doomed-run", "doomed"),
            "--seeds",
            _seeds(tmp_path),
            "--turns",
            "4",
            "--max-concurrency",
            "3",
            "--processes",
            "1",
            "--quiet",
        )
        deadline = time.monotonic() + 60
        while not rows(db, "select 1 from turns where thread_id like 'doomed-run:%' limit 1"):
            assert time.monotonic() < deadline and doomed.poll() is None, doomed.stderr.read()
            time.sleep(0.05)
        refused = forked.run("graph.runs", "--db", str(db), "delete", "doomed-run", "--yes", timeout=60)
        forced = forked.run("graph.runs", "--db", str(db), "delete", "doomed-run", "--yes", "--force", timeout=120)
        code = doomed.wait(timeout=60)
    return refused, forced, code, doomed.stderr.read(), doomed.pid


def test_a_run_deleted_while_it_plays_is_refused_then_forced_and_leaves_nothing_of_it_anywhere(backend_db, tmp_path):
    """On SQLite and PostgreSQL: every table (compressed values opened) and the file's bytes hold nothing of it."""
    from tests.support.backends import rows
    from tests.support.store_scan import find

    db = backend_db
    refused, forced, code, stopped_said, pid = play_and_delete_mid_run(db, tmp_path)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert f"run doomed-run is playing (graph.run (pid {pid}" in refused.stderr and "--force" in refused.stderr
    assert forced.returncode == 0, forced.stderr
    assert f"stopped graph.run pid {pid}" in forced.stdout and "deleted run doomed-run" in forced.stdout
    assert code == 143 and "Stopped by SIGTERM" in stopped_said and "Traceback" not in stopped_said
    assert find(db, ["doomed-run", MARKER, SEED_MARKER]) == []
    assert rows(db, "select count(*) from dialogues where run_id = 'kept'") == [(2,)]
    assert rows(db, "select count(*) from turns where thread_id like 'kept:%'") == [(4,)]
    assert runs.main(["--db", str(db), "check"]) == 0


def test_orphans_an_older_version_left_are_found_and_deleted(db, capsys):
    from tests.support.backends import execute, rows

    play(db, default_models(target=scripted(lambda m, n: f"{MARKER} {n}", spec="fake:target")), turns=2, run_id="old")
    play(db, default_models(), turns=2, run_id="kept")
    execute(db, "delete from runs where id = 'old'")  # as a delete that ran while the run played left it
    execute(db, "update dialogues set run_id = null, seed_id = null, category = null where thread_id like 'old:s-age%'")
    assert runs.main(["--db", str(db), "check"]) == 1
    said = " ".join(capsys.readouterr().out.split())
    assert "rows no run owns (" in said and "dialogues 2" in said and "delete --orphans" in said
    assert runs.main(["--db", str(db), "delete", "--orphans", "--yes"]) == 0
    assert "deleted rows no run owns" in capsys.readouterr().out
    assert rows(db, "select count(*) from dialogues") == [(2,)]
    from tests.support.store_scan import find

    assert find(db, ["old:", MARKER]) == []
    assert runs.main(["--db", str(db), "check"]) == 0
