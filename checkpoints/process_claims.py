"""Who plays a dialogue of a SQLite store: a claim row per dialogue in play, owned by a live process on this host.

``graph.run --processes N`` plays one run in N processes on one file. Its parent hands each dialogue to one
child, and a child claims the dialogue here before playing it: the claim is taken in one ``BEGIN IMMEDIATE``
transaction, so two processes never both hold it, and a claim whose process has died (SIGKILL, a crash) is
taken over, as the owner is recorded by host, pid and the process's start time (a reused pid is not its
owner). A claim is released when its play ends; a dead process's claim just waits for the next player.
The table is created on first use (``create table if not exists``), outside the numbered migrations.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

TABLE = "dialogue_claims"
_SCHEMA = (
    f"create table if not exists {TABLE} (thread_id text primary key, host text not null, pid integer not null, "
    "started text not null, claimed_at real not null) without rowid"
)


@dataclass(frozen=True)
class Owner:
    """A process: its host, pid and start time (from /proc where there is one, so a reused pid differs)."""

    host: str
    pid: int
    started: str

    @classmethod
    def me(cls) -> Owner:
        return cls(socket.gethostname(), os.getpid(), process_start(os.getpid()))

    def alive(self) -> bool:
        """Is this process still running? A process on another host counts as alive (it cannot be checked)."""
        if self.host != socket.gethostname():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # another user's process with this pid: it exists
        if _state(self.pid) in ("Z", "X"):
            return False  # dead, not yet reaped (a container's init may never reap it)
        return process_start(self.pid) == self.started


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or "" where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]  # fields after the command name; the 22nd overall


def _state(pid: int) -> str:
    """The process's state letter (field 3 of /proc/PID/stat: R, S, D, Z...), or "" where unknown."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def ensure_table(conn: sqlite3.Connection) -> None:
    conn.execute(_SCHEMA)


def claim(conn: sqlite3.Connection, thread_id: str, owner: Owner) -> Owner | None:
    """Claim a dialogue for ``owner``: None if claimed, else the live process that holds it.

    ``conn`` is in autocommit mode (``isolation_level=None``) with a busy timeout, as
    :func:`checkpoints.paths.connect` opens it.
    """
    conn.execute("begin immediate")
    try:
        row = conn.execute(f"select host, pid, started from {TABLE} where thread_id = ?", [thread_id]).fetchone()
        if row is not None:
            holder = Owner(row[0], int(row[1]), row[2])
            if holder != owner and holder.alive():
                conn.execute("rollback")
                return holder
        conn.execute(
            f"insert or replace into {TABLE} (thread_id, host, pid, started, claimed_at) values (?, ?, ?, ?, ?)",
            [thread_id, owner.host, owner.pid, owner.started, time.time()],
        )
        conn.execute("commit")
    except BaseException:
        if conn.in_transaction:
            conn.execute("rollback")
        raise
    return None


def release(conn: sqlite3.Connection, thread_id: str, owner: Owner) -> None:
    """End ``owner``'s claim of a dialogue (a claim someone else took over is left alone)."""
    conn.execute(
        f"delete from {TABLE} where thread_id = ? and host = ? and pid = ? and started = ?",
        [thread_id, owner.host, owner.pid, owner.started],
    )


def holders(conn: sqlite3.Connection) -> list[tuple[str, int]]:
    """(thread id, pid) of every claim now recorded (tests and diagnostics)."""
    return [(r[0], int(r[1])) for r in conn.execute(f"select thread_id, pid from {TABLE} order by thread_id")]
