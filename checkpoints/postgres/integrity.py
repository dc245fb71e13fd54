"""What ``graph.runs check`` finds wrong in a PostgreSQL store, each finding one line with its fix.

- **The layout**: the schema its migrations (ours in ``_migrations``, LangGraph's in ``checkpoint_migrations``) say it
  has, compared with the tables, columns and indexes it holds. The expected layout is today's DDL applied to this
  session's temporary schema in a transaction that is rolled back: nothing of the store is touched.
- **Invalid indexes** (``pg_index.indisvalid`` false): left by a ``CREATE INDEX CONCURRENTLY`` (or ``REINDEX
  CONCURRENTLY``) that failed or was cancelled; the server keeps updating them but never reads them.
- **B-tree indexes and tables**, where the server's ``amcheck`` extension is installed in the database:
  ``bt_index_check`` (each index against its table: ``heapallindexed``) and ``verify_heapam``. Both take only the
  locks a read takes.

:func:`repair_layout` puts back what the layout lacks (every migration's DDL again: each is written to be applied
twice) and rebuilds our invalid indexes; an index of someone else's is only named, with the statement that drops it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from checkpoints.location import PostgresURL
from checkpoints.postgres.schema import PG_MIGRATIONS, SCHEMA_LOCK, check_known

_LAYOUT_SQL = {
    "columns": "select table_name, column_name, data_type from information_schema.columns where table_schema = %s "
    "order by table_name, ordinal_position",
    "indexes": "select indexname, tablename from pg_indexes where schemaname = %s order by indexname",
}


@dataclass(frozen=True)
class Finding:
    """One thing wrong with the store: what, and the fix (a command or a statement) — one line."""

    what: str
    fix: str
    repairable: bool = False  # graph.runs check --repair puts it right
    rebuild: str | None = None  # the index --repair drops and makes again

    def line(self) -> str:
        return f"{self.what}: {self.fix}"


@dataclass(frozen=True)
class Layout:
    tables: dict[str, dict[str, str]]  # table -> column -> type
    indexes: dict[str, str]  # index -> table


@dataclass
class Report:
    findings: list[Finding]
    notes: list[str]  # what could not be checked, and how it could be


def _langgraph_migrations() -> list[str]:
    from langgraph.checkpoint.postgres.base import MIGRATIONS

    return list(MIGRATIONS)


def check_store(url: PostgresURL) -> Report:
    """Every finding on the store at ``url`` (read-only: the expected layout lives and dies in a temporary schema)."""
    import psycopg

    from checkpoints.postgres.db import CONNECT_TIMEOUT_S

    with psycopg.connect(url.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        schema = conn.execute("select current_schema()").fetchone()[0]  # type: ignore[index]
        report = Report([], [])
        report.findings += _migrations(conn, url)
        expected = _expected_layout(conn, report)
        if expected is not None:
            report.findings += _layout(_layout_of(conn, schema), expected, url)
        report.findings += _invalid_indexes(conn, schema, expected, url)
        _amcheck(conn, schema, url, report)
        return report


def _migrations(conn: Any, url: PostgresURL) -> list[Finding]:
    found: list[Finding] = []
    names = _table_names(conn)
    if "_migrations" in names:
        applied = {r[0] for r in conn.execute("select name from _migrations")}
        if unknown := sorted(applied - set(PG_MIGRATIONS)):
            found.append(
                Finding(
                    f"schema migration {unknown[-1]} is newer than this DyMT-ESB",
                    "upgrade DyMT-ESB before checking (or writing to) this store",
                )
            )
        if missing := [name for name in PG_MIGRATIONS if name not in applied]:
            found.append(
                Finding(
                    f"schema migration{'s' if len(missing) > 1 else ''} {', '.join(missing)} not applied",
                    f"python -m graph.runs check --repair --db {url}",
                    repairable=True,
                )
            )
    else:
        found.append(
            Finding(
                "no _migrations table: this database holds no DyMT-ESB store (or lost its record of one)",
                f"python -m graph.runs check --repair --db {url} sets up the tables",
                repairable=True,
            )
        )
    if "checkpoint_migrations" in names:
        newest = conn.execute("select max(v) from checkpoint_migrations").fetchone()[0]
        if newest is not None and newest >= len(_langgraph_migrations()):
            found.append(
                Finding(
                    f"LangGraph's checkpoint tables are at version {newest}, newer than this LangGraph knows",
                    "upgrade DyMT-ESB (and langgraph-checkpoint-postgres) before writing to this store",
                )
            )
    return found


def _table_names(conn: Any) -> set[str]:
    return {r[0] for r in conn.execute("select tablename from pg_tables where schemaname = current_schema()")}


def _expected_layout(conn: Any, report: Report) -> Layout | None:
    """Today's layout, made in this session's temporary schema and rolled back."""
    import psycopg

    try:
        with conn.transaction(force_rollback=True):
            conn.execute("set local search_path = pg_temp")
            for ddl in PG_MIGRATIONS.values():
                conn.execute(ddl)
            for ddl in _langgraph_migrations():
                conn.execute(ddl.replace("CONCURRENTLY ", ""))  # no CONCURRENTLY inside a transaction
            temp = conn.execute("select nspname from pg_namespace where oid = pg_my_temp_schema()").fetchone()[0]
            return _layout_of(conn, temp)
    except psycopg.Error as exc:  # a read-only server (a standby) or no TEMP privilege
        report.notes.append(
            f"tables, columns and indexes not compared with the schema (the server refused a temporary table: "
            f"{str(exc).strip().splitlines()[0]})"
        )
        return None


def _layout_of(conn: Any, schema: str) -> Layout:
    tables: dict[str, dict[str, str]] = {}
    for table, column, kind in conn.execute(_LAYOUT_SQL["columns"], [schema]):
        tables.setdefault(table, {})[column] = kind
    indexes = {name: table for name, table in conn.execute(_LAYOUT_SQL["indexes"], [schema])}
    return Layout(tables, indexes)


def _layout(actual: Layout, expected: Layout, url: PostgresURL) -> list[Finding]:
    repair = f"python -m graph.runs check --repair --db {url} recreates it (empty)"
    found: list[Finding] = []
    for table, columns in expected.tables.items():
        if table not in actual.tables:
            found.append(Finding(f"table {table} is missing", repair, repairable=True))
            continue
        for column, kind in columns.items():
            have = actual.tables[table].get(column)
            if have is None:
                found.append(Finding(f"column {table}.{column} is missing", repair, repairable=True))
            elif have != kind:
                found.append(
                    Finding(
                        f"column {table}.{column} is {have}, not {kind}",
                        f'alter table {table} alter column "{column}" type {kind} (or restore the store from a backup)',
                    )
                )
    for index, table in expected.indexes.items():
        if index not in actual.indexes and table in actual.tables:
            found.append(
                Finding(
                    f"index {index} on {table} is missing",
                    f"python -m graph.runs check --repair --db {url} recreates it",
                    repairable=True,
                )
            )
    return found


def _invalid_indexes(conn: Any, schema: str, expected: Layout | None, url: PostgresURL) -> list[Finding]:
    rows = conn.execute(
        "select c.relname, t.relname from pg_index i join pg_class c on c.oid = i.indexrelid "
        "join pg_class t on t.oid = i.indrelid join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = %s and not (i.indisvalid and i.indisready and i.indislive) order by 1",
        [schema],
    ).fetchall()
    ours = set(expected.indexes) if expected is not None else set()
    found = []
    for index, table in rows:
        what = f"index {index} on {table} is invalid (a CREATE INDEX CONCURRENTLY or REINDEX that did not finish)"
        if index in ours:
            found.append(Finding(what, f"python -m graph.runs check --repair --db {url} builds it again", True, index))
        else:
            found.append(Finding(what, f"drop index concurrently {index} (it is not DyMT-ESB's; recreate it after)"))
    return found


def _amcheck(conn: Any, schema: str, url: PostgresURL, report: Report) -> None:
    """B-tree indexes and tables verified by amcheck where it is installed; a note where it could be."""
    import psycopg

    installed = conn.execute("select extversion from pg_extension where extname = 'amcheck'").fetchone()
    if installed is None:
        available = conn.execute("select 1 from pg_available_extensions where name = 'amcheck'").fetchone()
        report.notes.append(
            "B-tree indexes and tables not verified: "
            + (
                "the server has amcheck; create extension amcheck (as the database's owner) and check again"
                if available
                else "the server has no amcheck extension (postgresql-contrib)"
            )
        )
        return
    indexes = conn.execute(
        "select c.relname, t.relname from pg_index i join pg_class c on c.oid = i.indexrelid "
        "join pg_class t on t.oid = i.indrelid join pg_namespace n on n.oid = c.relnamespace "
        "join pg_am a on a.oid = c.relam where n.nspname = %s and a.amname = 'btree' and i.indisvalid "
        "and i.indisready and i.indislive order by 1",
        [schema],
    ).fetchall()
    heap = tuple(int(n) for n in installed[0].split(".")) >= (1, 3)  # verify_heapam: PostgreSQL 14 and later
    for table in sorted({t for _, t in indexes}) if heap else []:
        try:
            rows = conn.execute(
                "select blkno, offnum, msg from verify_heapam(%s::regclass) limit 1",
                [f'"{schema}"."{table}"'],
            ).fetchall()
        except psycopg.Error as exc:
            rows = [(None, None, str(exc).strip().splitlines()[0])]
        if rows:
            block, _, message = rows[0]
            at = f" at block {block}" if block is not None else ""
            report.findings.append(
                Finding(
                    f"table {table} is damaged{at} ({message})",
                    "restore the store from a backup (pg_dump the other tables first)",
                )
            )
    for index, table in indexes:
        try:
            conn.execute("select bt_index_check(%s::regclass, true)", [f'"{schema}"."{index}"'])
        except psycopg.Error as exc:
            report.findings.append(
                Finding(
                    f"index {index} on {table} is damaged ({str(exc).strip().splitlines()[0]})",
                    f"reindex index concurrently {index}",
                )
            )


def repair_layout(url: PostgresURL) -> list[str]:
    """Put back what the layout lacks and build our invalid indexes again (each dropped, then every migration's DDL
    again, ours under the schema lock, then LangGraph's: each is written to be applied twice); what was done, one line
    each. A schema newer than this code is refused (:class:`SchemaTooNewError`), as a writer refuses it."""
    import psycopg

    from checkpoints.postgres.db import CONNECT_TIMEOUT_S

    before = check_store(url).findings
    rebuilt = [f.rebuild for f in before if f.rebuild is not None]
    with psycopg.connect(url.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        if "_migrations" in _table_names(conn):
            check_known({r[0] for r in conn.execute("select name from _migrations")})
        for index in rebuilt:  # CONCURRENTLY: outside any transaction, writers go on
            conn.execute(f'drop index concurrently if exists "{index}"')
        with conn.transaction():
            conn.execute("select pg_advisory_xact_lock(%s, %s)", SCHEMA_LOCK)
            conn.execute("create table if not exists _migrations (name text primary key, applied_at text)")
            applied = {r[0] for r in conn.execute("select name from _migrations")}
            check_known(applied)
            for name, ddl in PG_MIGRATIONS.items():
                conn.execute(ddl)
                if name not in applied:
                    conn.execute(
                        "insert into _migrations (name, applied_at) values (%s, %s)",
                        [name, datetime.now(UTC).isoformat()],
                    )
        for ddl in _langgraph_migrations():  # CREATE INDEX CONCURRENTLY: outside any transaction
            conn.execute(ddl)
    put_back = [f.what.removesuffix(" is missing") for f in before if f.repairable and f.what.endswith(" is missing")]
    return [f"put back {what}" for what in put_back] + [f"built index {index} again" for index in rebuilt]
