"""Backend-neutral test access to a store: the same SQLite-flavoured SQL on a SQLite file or a PostgreSQL URL.

Tests that read or corrupt rows directly use these instead of ``sqlite3.connect(db)``, so they run on both
backends. A URL goes through :class:`checkpoints.postgres.db.PgDatabase` (``?`` placeholders translated, autocommit).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from checkpoints.location import is_postgres_url, parse_postgres_url

Db = Path | str  # a SQLite file, or a postgresql:// URL (tests/conftest.py's ``backend_db``)

# LangGraph's own tables for one thread's checkpoints: the SQLite saver keeps two, the PostgreSQL saver three.
SQLITE_CHECKPOINT_TABLES = ("checkpoints", "writes")
POSTGRES_CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def is_postgres(db: Db) -> bool:
    """Whether ``db`` names a PostgreSQL database rather than a SQLite file."""
    return isinstance(db, str) and is_postgres_url(db)


@contextlib.contextmanager
def connect(db: Db) -> Iterator[Any]:
    """A connection with ``execute(sql, params)`` (SQLite syntax) that ``checkpoints.scores.labels_source`` accepts."""
    if is_postgres(db):
        from checkpoints.postgres.db import PgDatabase

        pg = PgDatabase(parse_postgres_url(str(db)))
        try:
            yield pg
        finally:
            pg.close()
        return
    con = sqlite3.connect(db)
    try:
        with con:  # commits what a test changed
            yield con
    finally:
        con.close()


def rows(db: Db, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
    """All rows of one query, as tuples."""
    with connect(db) as con:
        return [tuple(r) for r in con.execute(sql, list(params)).fetchall()]


def execute(db: Db, sql: str, params: Sequence[Any] = ()) -> int:
    """Run one statement (committed); the number of rows it changed."""
    with connect(db) as con:
        return con.execute(sql, list(params)).rowcount


def tables(db: Db) -> list[str]:
    """The store's table names, sorted."""
    if is_postgres(db):
        with connect(db) as con:
            return sorted(con.table_names())
    return [r[0] for r in rows(db, "select name from sqlite_master where type = 'table' order by name")]


def checkpoint_tables(db: Db) -> tuple[str, ...]:
    """The tables LangGraph's saver keeps a thread's checkpoints in, on this backend."""
    return POSTGRES_CHECKPOINT_TABLES if is_postgres(db) else SQLITE_CHECKPOINT_TABLES


def written(db: Db) -> bool:
    """Whether anything was written: the SQLite file exists, or the PostgreSQL database holds any table."""
    if is_postgres(db):
        return bool(tables(db))
    return Path(db).exists()


def dump_all(db: Db) -> dict[str, list[str]]:
    """Every row of every table (rows as sorted reprs), to show a command changed nothing."""
    with connect(db) as con:
        names = (
            sorted(con.table_names())
            if is_postgres(db)
            else [r[0] for r in con.execute("select name from sqlite_master where type = 'table' order by name")]
        )
        return {t: sorted(map(repr, con.execute(f"select * from {t}").fetchall())) for t in names}
