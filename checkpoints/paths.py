"""Where dialogue databases live by default, and how they are opened safely."""

from __future__ import annotations

import os
import shlex
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

ENV_DB = "DYMT_ESB_DB"
BUSY_TIMEOUT_MS = 30_000
_WAL_TRIES = 15  # about 4 s of pauses in all
_LOCKED_RETRIES = 20
T = TypeVar("T")


class StoreError(ValueError):
    """A database path that cannot be used, with what to do about it."""


class StoreDamaged(StoreError):
    """A SQLite store whose file is damaged (truncated, partly overwritten): SQLite cannot read all of it."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path, self.detail = Path(path), detail
        recovered = self.path.with_name(f"{self.path.stem}-recovered{self.path.suffix or '.db'}")
        where, into = shlex.quote(str(self.path)), shlex.quote(str(recovered))
        super().__init__(
            f"{self.path} is damaged ({detail}): copy what SQLite can still read into a new file with "
            f"sqlite3 {where} .dump | sed {_KEEP_WHAT_WAS_READ} | sqlite3 {into} and pass --db {into}, "
            "or restore a copy"
        )


# sqlite3's .dump of a damaged file ends in ROLLBACK, which would drop every row it could read: commit them instead.
_KEEP_WHAT_WAS_READ = shlex.quote("s/^ROLLBACK; -- due to errors$/COMMIT;/")
_DAMAGE_CODES = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
_DAMAGE_WORDS = ("malformed", "file is not a database", "database corrupt")


def is_damage(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite saying the file is damaged (corrupt or not a database), not busy or unwritable."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(_DAMAGE_CODES) or any(word in str(exc) for word in _DAMAGE_WORDS)


def damage_of(exc: BaseException, path: Path | str) -> StoreDamaged | None:
    """``exc`` (or what it was raised from) as a damaged store at ``path``, else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, StoreDamaged):
            return current
        if is_damage(current):
            return StoreDamaged(Path(path), str(current))
        current = current.__cause__ or current.__context__
    return None


def default_db_path() -> Path:
    """The default SQLite file, ``$XDG_DATA_HOME/dymt-esb/dialogues.db`` (``~/.local/share/...``); ``$DYMT_ESB_DB`` is
    read by :func:`checkpoints.location.default_db` only."""
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "dymt-esb" / "dialogues.db"


def check_db_path(path: Path, *, must_exist: bool = False) -> Path:
    """Validate a database path before anything is written; errors say what to fix."""
    if str(path).strip().lower().startswith(("postgresql:", "postgres:")):
        # argparse's Path turns postgresql://h/db into postgresql:/h/db; never echo it (it may carry a password).
        raise StoreError(
            "--db (or DYMT_ESB_DB) is a PostgreSQL URL: this command reads and writes SQLite files only so far; "
            "pass the path of a dialogue database"
        )
    path = path.expanduser()
    if path.is_dir():
        raise StoreError(f"--db {path} is a directory: give a file path such as {path / 'dialogues.db'}")
    if must_exist and not path.exists():
        raise StoreError(f"no database at {path}: pass --db with the file a run wrote")
    if path.exists():
        with path.open("rb") as handle:
            header = handle.read(16)
        if header and header != b"SQLite format 3\x00":
            raise StoreError(f"{path} is not a SQLite database: pass --db with a dialogue database or a new path")
    return path


def prepare_new_file(path: Path) -> None:
    """Create the parent folder and an owner-only database file (it will hold generated harmful text)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)


def connect(path: Path) -> sqlite3.Connection:
    """A sqlite3 connection in WAL mode with a busy timeout, for the project's own tables."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        for pause in wal_retry_pauses():
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if pause is None or not is_busy(exc):
                    raise
                time.sleep(pause)
        conn.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.DatabaseError as exc:
        conn.close()
        if is_damage(exc):
            raise StoreDamaged(Path(path), str(exc)) from None
        from checkpoints.outages import store_fault

        if (fault := store_fault(exc, Path(path))) is not None:
            raise fault from None  # a read-only or full disk: one line and exit 75 from the command
        raise
    return conn


def wal_retry_pauses() -> Iterator[float | None]:
    """Pauses between tries of ``PRAGMA journal_mode=WAL`` (None: the last try).

    Switching a new file to WAL takes an exclusive lock, and SQLite answers "database is locked" at once, without
    its busy handler, to a second process doing the same at the same moment: two commands started together on a
    new file. The other's switch takes milliseconds; after it the pragma is a no-op.
    """
    for attempt in range(_WAL_TRIES - 1):
        yield min(0.5, 0.005 * 2**attempt)
    yield None


def is_busy(exc: BaseException) -> bool:
    """SQLite's "database is locked" or "busy"."""
    text = str(exc)
    return "locked" in text or "busy" in text


def verify_intact(conn: sqlite3.Connection, path: Path) -> None:
    """SQLite's ``quick_check`` of the whole file (it reads every page: seconds per GB); :class:`StoreDamaged` with
    its first finding if the file is damaged."""
    try:
        found = [row[0] for row in conn.execute("PRAGMA quick_check(5)")]
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise StoreDamaged(path, str(exc)) from None
        raise
    if found != ["ok"]:
        problems = [line for row in found for line in str(row).splitlines() if line and not line.startswith("***")]
        more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
        raise StoreDamaged(path, f"{(problems or found)[0]}{more}")


def connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only sqlite3 connection (``mode=ro``; ``immutable`` when a WAL file cannot get its -shm)."""
    uri = f"file:{quote(str(path.resolve()))}"
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        conn.execute("select count(*) from sqlite_master").fetchone()
        return conn
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise StoreDamaged(path, str(exc)) from None
        # A WAL database in a read-only folder cannot get its -shm file: read it as a fixed file.
    try:
        conn = sqlite3.connect(f"{uri}?immutable=1", uri=True, check_same_thread=False)
        conn.execute("select count(*) from sqlite_master").fetchone()
        return conn
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise StoreDamaged(path, str(exc)) from None
        raise StoreError(f"cannot read {path} ({exc}): check its permissions or pass --db with another copy") from None


def retry_locked(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args)``, tried again (with a growing pause) while SQLite says the database is locked or busy.

    The busy timeout already waits for the writer; SQLite still returns SQLITE_BUSY at once when
    waiting could deadlock (a read transaction that wants to write after another process wrote).
    """
    for attempt in range(_LOCKED_RETRIES):
        try:
            return fn(*args, **kwargs)
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or attempt == _LOCKED_RETRIES - 1:
                raise
            time.sleep(min(1.0, 0.01 * 2**attempt))
    raise AssertionError("unreachable")
