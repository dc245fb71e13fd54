"""Upgrading a store to this code's schema: the migrations (checkpoints/migrations.py) applied in one transaction,
a store newer than this code refused, and an older store announced in one line and copied before it is changed."""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import sqlite_utils

ENV_NO_BACKUP = "DYMT_ESB_NO_BACKUP"  # "1": upgrade an older store in place without keeping a copy first (--no-backup)
log = logging.getLogger("checkpoints.migrations")  # the name users filter on


class SchemaTooNewError(RuntimeError):
    """The database was written by a newer version of the tool."""


Migration = Callable[[sqlite_utils.Database], None]


def _pending_on_older_store(db: sqlite_utils.Database, migrations: list[Migration]) -> list[str]:
    """The migrations a store made by an older DyMT-ESB lacks (none for a new file, or one up to date)."""
    if "_migrations" not in db.table_names():
        return []
    applied = {row["name"] for row in db["_migrations"].rows}
    return [fn.__name__ for fn in migrations if fn.__name__ not in applied] if applied else []


def _announce_upgrade(conn: sqlite3.Connection, pending: list[str]) -> None:
    """One line before an older store is upgraded, and a copy of it as it is now beside it (``<file>.pre-<first
    migration>.bak``), unless ``$DYMT_ESB_NO_BACKUP`` is 1. The copy is SQLite's online backup, one consistent
    snapshot taken before the upgrade's transaction begins (SQLite refuses a backup from a connection that writes)."""
    file = conn.execute("PRAGMA database_list").fetchone()[2]
    if not file:  # an in-memory copy (a reader's): nothing on disk changes
        return
    path = Path(file)
    steps = f"{len(pending)} schema migration{'s' if len(pending) != 1 else ''} ({pending[0]}"
    steps += f" to {pending[-1]})" if len(pending) > 1 else ")"
    if os.environ.get(ENV_NO_BACKUP) == "1":
        log.warning("Upgrading %s for this DyMT-ESB: %s, in place (%s=1: no copy kept)", path, steps, ENV_NO_BACKUP)
        return
    copy = path.with_name(f"{path.name}.pre-{pending[0].split('_', 1)[0]}.bak")
    if not copy.exists():
        fd = os.open(copy, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)  # owner-only, as the store: it holds replies
        os.close(fd)
        try:
            with sqlite3.connect(copy) as target:
                conn.backup(target)
            target.close()
        except BaseException:
            copy.unlink(missing_ok=True)
            raise
    log.warning(
        "Upgrading %s for this DyMT-ESB: %s; the store as it was is kept in %s (delete it once you no longer need an "
        "older DyMT-ESB; --no-backup or %s=1 skips the copy)",
        path,
        steps,
        copy,
        ENV_NO_BACKUP,
    )


def upgrade(db: sqlite_utils.Database, migrations: list[Migration], *, announce: bool = True) -> None:
    """Bring the schema up to date, or refuse a schema newer than this code; an older store is announced and copied
    first (``announce=False``: a reader's private copy, which nobody else sees)."""
    if announce and (
        pending := _pending_on_older_store(db, migrations)
    ):  # say so, and keep a copy of the store as it was
        _announce_upgrade(db.conn, pending)
    db.execute("BEGIN IMMEDIATE")  # two processes opening one new file migrate one after the other
    try:
        _apply(db, migrations)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _apply(db: sqlite_utils.Database, migrations: list[Migration]) -> None:
    if "_migrations" not in db.table_names():
        db.table("_migrations").create({"name": str, "applied_at": str}, pk="name")
    applied = {row["name"] for row in db["_migrations"].rows}
    known = {fn.__name__ for fn in migrations}
    unknown = sorted(applied - known)
    if unknown:
        raise SchemaTooNewError(
            f"database {db.conn.execute('PRAGMA database_list').fetchone()[2]} has schema migration "
            f"{unknown[-1]}, newer than this DyMT-ESB: upgrade DyMT-ESB or use another --db"
        )
    for fn in migrations:
        if fn.__name__ not in applied:
            fn(db)
            db.table("_migrations").insert({"name": fn.__name__, "applied_at": datetime.now(UTC).isoformat()})
