"""An outage that outlasted its budget: the run stops cleanly, nothing lost, and the same command resumes it."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path
from urllib.parse import quote


class OutageError(Exception):
    """A provider, the store or the disk stayed unavailable past its budget; the CLI prints one line and exits 75."""


_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str | float | int) -> float:
    """Seconds from ``600``, ``90s``, ``10m``, ``10min`` or ``1h`` (a number alone is seconds); ValueError if not
    one."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        raw = str(text).strip().lower()
        unit = next((u for u in ("min", "s", "m", "h") if raw.endswith(u)), "")
        try:
            value = float(raw[: len(raw) - len(unit)].strip()) * _UNITS.get(unit, 1.0)
        except ValueError:
            raise ValueError(f"{text!r} is not a duration: give seconds (600) or 90s, 10m, 1h") from None
    if not value > 0:
        raise ValueError(f"{text!r} must be a duration of more than 0 seconds")
    return value


class StoreUnwritable(OutageError):
    """The SQLite store cannot be written (its disk is full, or it or its folder is read-only); nothing was lost."""

    def __init__(self, path: Path, kind: str, detail: str) -> None:
        self.path, self.kind, self.detail = Path(path), kind, detail
        where = f"the dialogue database {self.path}"
        super().__init__(
            f"{where} is on a full disk ({detail})" if kind == "full" else f"{where} is read-only ({detail})"
        )

    def advice(self, *, dialogues: int | None = None, run_id: str | None = None) -> str:
        """What to do: how much to free on its filesystem, or how to make it writable."""
        if self.kind == "full":
            need = space_needed(self.path, run_id=run_id, dialogues=dialogues)
            free = shutil.disk_usage(self.path.parent).free
            return f"free at least {format_bytes(need)} on its filesystem ({format_bytes(free)} free now)"
        return f"make it and its folder writable (chmod u+w {self.path} {self.path.parent}, or remount read-write)"


def store_fault(exc: BaseException, path: Path | None = None) -> StoreUnwritable | None:
    """``exc`` (or what it was raised from) as a full or read-only SQLite store, else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, StoreUnwritable):
            return current
        if isinstance(current, sqlite3.Error) and path is not None:
            name = getattr(current, "sqlite_errorname", "") or ""
            text = str(current)
            if name.startswith("SQLITE_FULL") or "database or disk is full" in text:
                return StoreUnwritable(path, "full", text)
            if name.startswith("SQLITE_READONLY") or "readonly database" in text:
                return StoreUnwritable(path, "read-only", text)
            if name.startswith("SQLITE_IOERR") and _nearly_full(path):
                return StoreUnwritable(path, "full", text)
            if (name.startswith(("SQLITE_CANTOPEN", "SQLITE_IOERR")) or "unable to open" in text) and not _writable(
                path
            ):
                return StoreUnwritable(path, "read-only", text)
        current = current.__cause__ or current.__context__
    return None


_AUTOCHECKPOINT_PAGES = 1000


def space_needed(path: Path, *, run_id: str | None = None, dialogues: int | None = None) -> int:
    """Bytes to free so the run can finish: stored bytes per turn × turns left, the WAL's room, room to fold it
    in, 1 MiB.

    Sizes are the database's own (pages in use, read through the WAL), not the WAL file's, which repeats pages.
    """
    db_size = path.stat().st_size if path.exists() else 0
    wal = path.with_name(path.name + "-wal")
    wal_size = wal.stat().st_size if wal.exists() else 0
    logical, per_turn, left, page = db_size, 0.0, 0, 4096
    try:
        conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        try:
            page = conn.execute("PRAGMA page_size").fetchone()[0]
            logical = conn.execute("PRAGMA page_count").fetchone()[0] * page
            stored = conn.execute("SELECT count(*) FROM turns").fetchone()[0]
            per_turn = logical / max(1, stored)
            if run_id is not None and dialogues is not None:
                turns, done = conn.execute(
                    "SELECT coalesce(max(d.max_turns), 0), (SELECT count(*) FROM turns t JOIN dialogues e ON "
                    "e.thread_id = t.thread_id "
                    "WHERE e.run_id = ?) FROM dialogues d WHERE d.run_id = ?",
                    (run_id, run_id),
                ).fetchone()
                left = max(0, dialogues * int(turns) - int(done))
        finally:
            conn.close()
    except sqlite3.Error:
        pass  # the estimate then counts the WAL's folding and the spare only
    # The WAL grows to about SQLite's autocheckpoint size (1000 pages) before it is folded in and reused.
    wal_room = max(0, _AUTOCHECKPOINT_PAGES * page - wal_size)
    return int(per_turn * left) + wal_room + max(0, logical - db_size) + 2**20


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _writable(path: Path) -> bool:
    """Whether the file (or, if new, its folder) can be written: not on a read-only mount, with write permission."""
    folder = path.parent
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        return True  # cannot tell: let the original error speak
    return os.access(folder, os.W_OK) and (not path.exists() or os.access(path, os.W_OK))


def _nearly_full(path: Path) -> bool:
    try:
        return shutil.disk_usage(path.parent).free < 256 * 1024
    except OSError:
        return False
