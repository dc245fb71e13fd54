"""``graph.runs delete`` on PostgreSQL: VACUUM FULL rewrites the tables, so the deleted text leaves the disk pages.

The run's jobs go with it (their arguments hold its seeds). A real server (``pg_url``) is needed.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import psycopg
import pytest

from cli import run as run_cli
from cli import runs as runs_cli
from tests.conftest import ScriptedChatModel

MARKER = "ZQXMARKERQZX"


def _register(providers) -> None:
    def factory(name, role, sampling):
        replies = {
            "user": lambda m, n: f"Question {n}?",
            "target": lambda m, n: f"{MARKER} answer {n}." if name == "marked" else f"Plain answer {n}.",
            "judge": lambda m, n: "Rationale: r.\nLabel: not biased",
        }
        return ScriptedChatModel(respond=replies[role], calls=[]), f"dfake:{name}", "chat"

    providers("dfake", factory)


def _play(pg_url: str, run_id: str, target: str) -> None:
    assert (
        run_cli.main(
            [
                "--user-model",
                "dfake:u",
                "--judge-model",
                "dfake:j",
                "--target-model",
                target,
                "--turns",
                "3",
                "--categories",
                "age",
                "gender",
                "race",
                "religion",
                "--run-id",
                run_id,
                "--no-trace",
                "--no-cache",
                "--db",
                pg_url,
            ]
        )
        == 0
    )


def _on_disk(conn: psycopg.Connection, table: str) -> bytes | None:
    """The bytes of a table's heap file (its 1 GB segments too: FILE, FILE.1, ...), or None when the server's files
    cannot be read from here. Only the table's own: a file whose name merely begins with the same digits is another
    relation's (the old file a VACUUM FULL replaced, not yet unlinked, among them)."""
    conn.execute("CHECKPOINT")  # shared buffers to disk
    directory = conn.execute("show data_directory").fetchone()[0]
    path = Path(directory) / conn.execute("select pg_relation_filepath(%s)", [table]).fetchone()[0]
    own = re.compile(re.escape(path.name) + r"(\.\d+)?")
    try:
        return b"".join(p.read_bytes() for p in sorted(path.parent.iterdir()) if own.fullmatch(p.name))
    except OSError:
        return None


def _count(conn: psycopg.Connection, sql: str) -> int:
    return conn.execute(sql).fetchone()[0]


def test_delete_rewrites_the_tables_so_the_text_leaves_the_disk(pg_url: str, providers, capsys):
    _register(providers)
    _play(pg_url, "marked", "dfake:marked")
    _play(pg_url, "kept", "dfake:plain")  # written after: the deleted rows are not at the table's end
    with psycopg.connect(pg_url, autocommit=True) as conn:
        before = _count(conn, "select pg_relation_size('turns')")
        filenode = _count(conn, "select pg_relation_filenode('turns')")
        disk = _on_disk(conn, "turns")
        assert disk is None or MARKER.encode() in disk
    assert runs_cli.main(["--db", pg_url, "delete", "marked", "--yes"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "VACUUM FULL" in said and "wait" in said and "deleted run marked" in said
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert _count(conn, f"select count(*) from turns where reply like '%{MARKER}%'") == 0
        assert _count(conn, "select count(*) from turns") == 4 * 3  # the other run is untouched
        # rewritten (a new file: VACUUM FULL, not VACUUM), and no larger (smaller unless the rows left fill its pages)
        assert _count(conn, "select pg_relation_filenode('turns')") != filenode
        assert _count(conn, "select pg_relation_size('turns')") <= before
        for table in ("turns", "scores", "checkpoint_blobs", "checkpoint_writes"):
            disk = _on_disk(conn, table)
            assert disk is None or MARKER.encode() not in disk, table


def test_the_jobs_waiting_for_the_run_go_with_it_and_the_tables_are_still_rewritten(pg_url: str, providers, capsys):
    from checkpoints.location import PostgresURL
    from graph.workers.dialogue_jobs import QUEUE, TASK, ensure_queue_schema

    _register(providers)
    _play(pg_url, "marked", "dfake:marked")
    ensure_queue_schema(PostgresURL(pg_url))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "insert into procrastinate_jobs (queue_name, task_name, args, status) values (%s, %s, %s, 'todo')",
            [QUEUE, TASK, json.dumps({"run_id": "marked", "thread_id": "t", "seed": {"statement": MARKER}})],
        )
    assert runs_cli.main(["--db", pg_url, "delete", "marked", "--yes"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "VACUUM FULL" in said and "1 waiting job(s) cancelled" in said and "procrastinate_jobs 1" in said
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert _count(conn, "select count(*) from turns") == 0
        assert _count(conn, "select count(*) from procrastinate_jobs") == 0
        for table in ("procrastinate_jobs", "turns"):
            disk = _on_disk(conn, table)
            assert disk is None or MARKER.encode() not in disk, table


@pytest.mark.parametrize("holds", ["a snapshot", "a write"])
def test_a_session_holding_an_older_snapshot_is_waited_for_so_the_text_still_leaves_the_disk(
    pg_url: str, providers, capsys, holds
):
    """A transaction that began before the deletion can still see the deleted rows: VACUUM FULL would copy them into
    the rewritten table. The deletion waits for it to end, then rewrites: the text is gone from the disk all the
    same."""
    _register(providers)
    _play(pg_url, "marked", "dfake:marked")
    _play(pg_url, "kept", "dfake:plain")
    with psycopg.connect(pg_url) as holder:  # a snapshot, and no lock on any of the run's tables (none to wait on)
        if holds == "a snapshot":
            holder.execute("begin isolation level repeatable read")
            assert _count(holder, "select count(*) from pg_class") > 0
        else:  # read committed: no snapshot between statements, but its transaction id holds the rows back as well
            holder.execute("create table elsewhere (n integer)")
        done: list[int] = []
        deleting = threading.Thread(
            target=lambda: done.append(runs_cli.main(["--db", pg_url, "delete", "marked", "--yes"]))
        )
        started = time.monotonic()
        deleting.start()
        time.sleep(1.5)
        assert deleting.is_alive() and not done  # waiting for the snapshot, not vacuuming past it
        holder.rollback()
    deleting.join(timeout=60)
    assert done == [0] and time.monotonic() - started >= 1.5
    assert "deleted run marked" in " ".join(capsys.readouterr().out.split())
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert _count(conn, f"select count(*) from turns where reply like '%{MARKER}%'") == 0
        for table in ("turns", "scores", "checkpoint_blobs", "checkpoint_writes"):
            disk = _on_disk(conn, table)
            assert disk is None or MARKER.encode() not in disk, table
