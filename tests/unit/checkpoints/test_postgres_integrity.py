"""``graph.runs check`` on a real PostgreSQL store: a store broken on purpose (a dropped table, column and index, an
index left invalid by a CREATE INDEX CONCURRENTLY that was cancelled or failed, a lost migration record) gives one line
per finding and its fix, exit 2; ``--repair`` and the printed statements, run as printed, leave a store that checks
clean and still plays. With the server's amcheck installed, every B-tree index and table is verified too."""

from __future__ import annotations

import shlex
import subprocess
import sys

import psycopg
import pytest

from cli import runs
from cli.run import main as run_main
from tests.unit.cli.test_run_cli import _register_fake_provider

FAKES = ["--user-model", "fake:u", "--target-model", "fake:t", "--judge-model", "fake:j", "--no-trace"]


def _played(url: str, providers, run_id: str = "r1") -> None:
    _register_fake_provider(providers)
    assert run_main([*FAKES, "--db", url, "--run-id", run_id, "--turns", "2", "--limit", "3", "--json"]) == 0


def _sql(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _check(url: str, capsys, *extra: str) -> tuple[int, list[str], str]:
    status = runs.main(["check", "--db", url, *extra])
    captured = capsys.readouterr()
    return status, captured.err.strip().splitlines(), captured.out


def _cancelled_concurrent_index(url: str) -> None:
    """dialogues_run_id dropped and made again CONCURRENTLY, cancelled (statement_timeout) while it waits for a
    transaction that writes the table: PostgreSQL leaves the index behind, invalid."""
    _sql(url, "drop index dialogues_run_id")
    with psycopg.connect(url) as writer, psycopg.connect(url, autocommit=True) as builder:
        writer.execute("update dialogues set error = error where thread_id = (select min(thread_id) from dialogues)")
        builder.execute("set statement_timeout = 1000")
        with pytest.raises(psycopg.errors.QueryCanceled):
            builder.execute("create index concurrently dialogues_run_id on dialogues (run_id)")
        writer.rollback()


def test_a_sound_store_checks_clean_and_says_what_amcheck_would_add(pg_url, providers, capsys):
    _played(pg_url, providers)
    capsys.readouterr()
    status, err, out = _check(pg_url, capsys)
    assert (status, err) == (0, []), err
    assert "B-tree indexes and tables not verified: the server has amcheck; create extension amcheck" in out
    _sql(pg_url, "create extension amcheck")
    status, err, out = _check(pg_url, capsys)
    assert (status, err) == (0, []) and "not verified" not in out, (err, out)


def test_a_broken_store_gives_one_line_per_finding_and_repair_puts_it_right(pg_url, providers, capsys):
    _played(pg_url, providers)
    _cancelled_concurrent_index(pg_url)
    _sql(
        pg_url,
        "drop table trace_feedback",
        "drop table checkpoint_writes",
        "alter table turns drop column non_reply",
        "drop index scores_key_scorer",
        "create table scratch (n integer)",
        "insert into scratch values (1), (1)",
    )
    with pytest.raises(psycopg.errors.UniqueViolation):  # someone else's index, failed: left invalid too
        _sql(pg_url, "create unique index concurrently scratch_n on scratch (n)")
    capsys.readouterr()
    status, err, _ = _check(pg_url, capsys)
    assert status == 2
    fix = f"python -m graph.runs check --repair --db {pg_url}"
    assert err == [
        f"error: table checkpoint_writes is missing: {fix} recreates it (empty)",
        f"error: table trace_feedback is missing: {fix} recreates it (empty)",
        f"error: column turns.non_reply is missing: {fix} recreates it (empty)",
        f"error: index scores_key_scorer on scores is missing: {fix} recreates it",
        "error: index dialogues_run_id on dialogues is invalid (a CREATE INDEX CONCURRENTLY or REINDEX that did not "
        f"finish): {fix} builds it again",
        "error: index scratch_n on scratch is invalid (a CREATE INDEX CONCURRENTLY or REINDEX that did not finish): "
        "drop index concurrently scratch_n (it is not DyMT-ESB's; recreate it after)",
    ], err

    status, err, out = _check(pg_url, capsys, "--repair")
    assert "put back table trace_feedback" in out and "built index dialogues_run_id again" in out, out
    assert status == 2 and len(err) == 1 and "scratch_n" in err[0], err  # not ours: only named, with its statement
    statement = err[0].split(": ", 2)[2].split(" (")[0]
    _sql(pg_url, statement)  # as printed
    status, err, _ = _check(pg_url, capsys)
    assert (status, err) == (0, []), err
    with psycopg.connect(pg_url) as conn:
        valid = conn.execute(
            "select i.indisvalid from pg_index i join pg_class c on c.oid = i.indexrelid "
            "where c.relname = 'dialogues_run_id'"
        ).fetchall()
        assert valid == [(True,)]
    _played(pg_url, providers, run_id="r2")  # the store plays on: checkpoints written, turns with their columns
    assert runs.main(["list", "--db", pg_url]) == 0


def test_lost_and_newer_migration_records_are_findings(pg_url, providers, capsys):
    _played(pg_url, providers)
    _sql(pg_url, "delete from _migrations where name = 'pg007_run_players'")
    capsys.readouterr()
    status, err, _ = _check(pg_url, capsys)
    assert status == 2 and err == [
        f"error: schema migration pg007_run_players not applied: python -m graph.runs check --repair --db {pg_url}"
    ], err
    assert _check(pg_url, capsys, "--repair")[0] == 0
    _sql(pg_url, "insert into _migrations values ('pg999_future', 'later')")
    status, err, _ = _check(pg_url, capsys)
    assert status == 2 and err == [
        "error: schema migration pg999_future is newer than this DyMT-ESB: upgrade DyMT-ESB before checking (or "
        "writing to) this store"
    ], err
    with pytest.raises(SystemExit) as refused:
        runs.main(["check", "--repair", "--db", pg_url])
    assert refused.value.code == 2 and "newer than this DyMT-ESB" in capsys.readouterr().err


def test_the_printed_repair_command_works_as_printed(pg_url, providers, capsys):
    _played(pg_url, providers)
    _sql(pg_url, "drop table trace_feedback")
    capsys.readouterr()
    _, err, _ = _check(pg_url, capsys)
    command = err[0].split(": ", 2)[2].removesuffix(" recreates it (empty)")
    done = subprocess.run([sys.executable, *shlex.split(command)[1:]], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "put back table trace_feedback" in done.stdout, done.stderr


@pytest.mark.parametrize("command", ["graph.replay --list", "graph.runs status", "evals.report"])
def test_a_command_on_a_store_missing_a_table_or_column_says_so_in_one_line(
    pg_url, providers, capsys, tmp_path, command
):
    from cli import replay, report

    _played(pg_url, providers)
    _sql(pg_url, "drop table turns", "alter table dialogues drop column category")
    capsys.readouterr()
    main, argv = {
        "graph.replay --list": (replay.main, ["--list"]),
        "graph.runs status": (runs.main, ["status", "r1"]),
        "evals.report": (report.main, ["--run-id", "r1", "--out", str(tmp_path / "report")]),
    }[command]
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--db", pg_url])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1, err
    assert f"error: the PostgreSQL store at {pg_url} lacks part of its schema (" in err, err
    assert err.rstrip().endswith(
        f"python -m graph.runs check --db {pg_url} names what is missing and how to put it back"
    ), err


def _older(url: str) -> None:
    """The store as a DyMT-ESB two migrations older left it (their records gone; their columns and tables stay, as
    each migration adds them only if absent)."""
    _sql(url, "delete from _migrations where name in ('pg006_turn_reasoning', 'pg007_run_players')")


def _counts(url: str, schema: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("select tablename from pg_tables where schemaname = %s", [schema])]
        return {t: conn.execute(f'select count(*) from "{schema}"."{t}"').fetchone()[0] for t in tables}


def test_an_older_postgresql_store_is_upgraded_after_one_line_and_a_copy_of_its_tables(
    pg_url, providers, caplog, capsys
):
    import logging

    from checkpoints.location import PostgresURL
    from checkpoints.store import open_writer

    _played(pg_url, providers)
    _older(pg_url)
    before = _counts(pg_url, "public")
    with caplog.at_level(logging.WARNING, logger="checkpoints.migrations"):
        open_writer(PostgresURL(pg_url)).close()
        open_writer(PostgresURL(pg_url)).close()  # up to date now: no line
    schema = "dymt_pre_pg006_turn_reasoning"
    assert [r.getMessage() for r in caplog.records] == [
        f"Upgrading the PostgreSQL store at {pg_url} for this DyMT-ESB: 2 schema migrations (pg006_turn_reasoning to "
        f"pg007_run_players), columns and tables added only; a copy of its {len(before)} tables as they were is kept "
        f"in schema {schema} (once no older DyMT-ESB needs it: drop schema {schema} cascade; --no-backup or "
        "DYMT_ESB_NO_BACKUP=1 skips the copy)"
    ]
    copied = _counts(pg_url, schema)
    assert copied == before and copied["turns"] > 0  # every table, every row
    status, lines, _ = _check(pg_url, capsys)
    assert status == 0, lines  # the copy is beside the store, not part of it
    _older(pg_url)
    open_writer(PostgresURL(pg_url)).close()
    assert _counts(pg_url, f"{schema}_2") == _counts(pg_url, schema)  # a second copy never overwrites the first


def test_no_backup_upgrades_a_postgresql_store_without_a_copy(pg_url, providers, caplog, monkeypatch):
    import logging

    from checkpoints.location import PostgresURL
    from checkpoints.store import open_writer

    _played(pg_url, providers)
    _older(pg_url)
    monkeypatch.setenv("DYMT_ESB_NO_BACKUP", "1")
    with caplog.at_level(logging.WARNING, logger="checkpoints.migrations"):
        open_writer(PostgresURL(pg_url)).close()
    assert (
        caplog.records[0]
        .getMessage()
        .endswith("columns and tables added only; no copy is kept (--no-backup or DYMT_ESB_NO_BACKUP=1)")
    )
    assert _counts(pg_url, "dymt_pre_pg006_turn_reasoning") == {}
