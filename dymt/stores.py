"""Where the library's functions find the store: ``db`` is a SQLite file, a ``postgresql://`` URL or None.

None is ``$DYMT_ESB_DB``, else the default file, as for the commands' ``--db``. A store that cannot be opened
raises :class:`DymtError` with the store's one-line message.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from checkpoints.location import DbLocation, PostgresURL, locate_db, parse_db
from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError
from checkpoints.readers import Reader, open_reader
from checkpoints.store import Writer, open_writer
from dymt.errors import DymtError

Db = str | os.PathLike[str] | DbLocation | None


def location(db: Db, *, source: str = "db") -> DbLocation:
    """The store ``db`` names (a checked URL or a path), else ``$DYMT_ESB_DB``, else the default file."""
    try:
        if db is None or isinstance(db, PostgresURL):
            return locate_db(db)
        return parse_db(db if isinstance(db, Path) else str(db), source=source)
    except StoreError as exc:
        raise DymtError(str(exc)) from None


def reader(db: Db) -> Reader:
    """The store a run wrote, read-only: reading never writes (nor migrates) it."""
    try:
        return open_reader(location(db))
    except StoreError as exc:
        raise DymtError(str(exc)) from None


def writer(db: Db) -> Writer:
    """The store a run wrote, opened for writing (it must exist)."""
    try:
        return open_writer(location(db), create=False)
    except (StoreError, SchemaTooNewError) as exc:
        raise DymtError(str(exc)) from None


def run_ids(ids: str | Sequence[str]) -> list[str]:
    """One run id or several, as a list (anything else: one DymtError line)."""
    from dymt.arguments import strings

    return strings(ids, "ids")
