"""Where the store lives: a SQLite file (the default) or a PostgreSQL server named by a ``postgresql://`` URL.

A URL never carries a password: libpq reads it from ``~/.pgpass`` or ``PGPASSWORD`` when it connects, so no
password is ever printed, logged or stored with a run. A URL that carries one is refused before anything
connects, and the error does not repeat the URL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from checkpoints.paths import ENV_DB, StoreError, default_db_path

CONNECT_TIMEOUT_S = 10  # seconds to reach a PostgreSQL server before saying it cannot be reached


def unreachable(url: PostgresURL) -> StoreError:
    """The one-line error for a server that cannot be reached (psycopg's own message may quote the URL: never repeat
    it)."""
    return StoreError(f"cannot connect to PostgreSQL at {url}: check the server, the URL and ~/.pgpass or PGPASSWORD")


URL_SCHEMES = ("postgresql://", "postgres://")


@dataclass(frozen=True)
class PostgresURL:
    """A PostgreSQL connection URL without a password (libpq finds it in ~/.pgpass or PGPASSWORD)."""

    url: str

    def __str__(self) -> str:
        return self.url


DbLocation = Path | PostgresURL


def is_postgres_url(text: str | os.PathLike[str]) -> bool:
    """Whether ``text`` names a PostgreSQL server rather than a SQLite file."""
    return isinstance(text, str) and text.strip().lower().startswith(URL_SCHEMES)


def parse_postgres_url(text: str, *, source: str = "--db") -> PostgresURL:
    """``text`` as a :class:`PostgresURL`; :class:`StoreError` if it is malformed or carries a password."""
    from psycopg import conninfo

    text = text.strip()
    try:
        params = conninfo.conninfo_to_dict(text)
    except Exception:  # noqa: BLE001 - psycopg.ProgrammingError and friends: the message may quote the URL, password included
        raise StoreError(
            f"{source} is not a valid postgresql:// URL: use postgresql://USER@HOST[:PORT]/DATABASE"
        ) from None
    if params.get("password") is not None:
        raise StoreError(
            f"{source} carries a password: remove it from the URL and put it in ~/.pgpass or PGPASSWORD (it is "
            "never stored)"
        )
    if not params.get("dbname"):
        raise StoreError(f"{source} names no database: use postgresql://USER@HOST[:PORT]/DATABASE")
    return PostgresURL(text)


def parse_db(text: str | os.PathLike[str], *, source: str = "--db") -> DbLocation:
    """A ``--db`` value: a PostgreSQL URL (checked) or a SQLite file path (checked later, where it is opened)."""
    if is_postgres_url(text):
        return parse_postgres_url(str(text), source=source)
    return Path(text).expanduser()


def default_db() -> DbLocation:
    """``$DYMT_ESB_DB`` (a path or a URL), else the default SQLite file: the one place the variable is read."""
    value = os.environ.get(ENV_DB)
    return parse_db(value, source=ENV_DB) if value else default_db_path()


def locate_db(given: DbLocation | None = None, *, configured: DbLocation | None = None) -> DbLocation:
    """The store a command uses: ``--db`` (``given``), else an experiment file's ``db``, else ``$DYMT_ESB_DB``, else the
    default file."""
    if given is not None:
        return given
    return configured if configured is not None else default_db()
