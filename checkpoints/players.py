"""Who plays a run now: a run that plays is told from one whose player is gone (interrupted) and one that failed.

Each ``graph.run`` records itself in ``run_players`` while it plays a run (host, pid and the process's start time, as
:mod:`checkpoints.process_claims` names a process; the command that resumes it) and removes its row when it stops; a
row whose process is dead (SIGKILL, a crash, a reboot) is a player that is gone. A process on another host cannot be
looked up: it counts as alive while it renews ``seen_at`` (every :data:`RENEW_S`). On PostgreSQL, workers play
dialogues rather than runs: a play in ``dialogue_plays`` still open whose dialogue's advisory lock is held
(checkpoints/postgres/claims.py) is a live one; jobs waiting in the queue make a run queued.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from checkpoints.process_claims import Owner

TABLE = "run_players"
RENEW_S = 15.0  # a player on another host renews its row this often
_STALE_S = 4 * RENEW_S  # ... and counts as gone once it has not for this long


@dataclass(frozen=True)
class Player:
    """A process recorded as playing a run; ``alive`` is None for one on another host that renews its row."""

    host: str
    pid: int
    started: str
    command: str | None
    since: str | None
    alive: bool

    def words(self, *, short: bool = False) -> str:
        where = "" if self.host == socket.gethostname() else f" on {self.host}"
        since = "" if short or not self.since else f", since {self.since[:19].replace('T', ' ')} UTC"
        return f"graph.run (pid {self.pid}{where}{since})"


@dataclass(frozen=True)
class Activity:
    """Who plays a run now: live ``graph.run`` processes, open worker plays, and jobs waiting for a worker."""

    players: tuple[Player, ...] = ()
    plays: tuple[str, ...] = ()  # workers ("host:pid") with a play of the run open and its lock held
    queued: int = 0  # jobs of the run waiting for a worker (PostgreSQL)
    gone: tuple[Player, ...] = field(default=())  # recorded players whose process is dead

    @property
    def playing(self) -> bool:
        return bool(self.players or self.plays)

    def who(self, *, short: bool = False) -> str:
        """Who plays it, in words: "graph.run (pid 4121, since 2026-12-01 10:02:11 UTC)", "2 workers (h:1, h:2)"."""
        parts = [p.words(short=short) for p in self.players]
        if self.plays:
            workers = sorted(set(self.plays))
            parts.append(f"{len(workers)} worker{'s' if len(workers) != 1 else ''} ({', '.join(workers)})")
        return " and ".join(parts)


STATES = ("playing", "queued", "interrupted", "failed", "paused", "stopped", "finished")


def state_of(stored: str | None, who: Activity, statuses: Mapping[str, int], planned: int) -> str:
    """What a run is doing now (one of :data:`STATES`), from its stored status, who plays it and its dialogues'
    statuses: nothing plays a run stored as running whose player is gone, so it is interrupted, to resume."""
    if who.playing:
        return "playing"
    if who.queued:
        return "queued"
    if statuses.get("finished", 0) >= planned and not statuses.get("failed"):
        return "finished"
    if statuses.get("paused"):
        return "paused"
    if stored == "stopped":
        return "stopped"
    if stored in ("running", "interrupted") or statuses.get("running") or statuses.get("interrupted"):
        return "interrupted"
    if statuses.get("failed") or stored == "failed":
        return "failed"
    return "interrupted" if statuses.get("finished", 0) < planned else "finished"


def register(db: Any, run_id: str, owner: Owner, *, command: str | None) -> None:
    """Record ``owner`` as playing ``run_id`` (``db``: a sqlite-utils or PostgreSQL database of the store)."""
    db.execute(
        f"insert into {TABLE} (run_id, host, pid, started, command, since, seen_at) values (?, ?, ?, ?, ?, ?, ?) "
        "on conflict (run_id, host, pid, started) do update set command = excluded.command, since = excluded.since, "
        "seen_at = excluded.seen_at",
        [run_id, owner.host, owner.pid, owner.started, command, datetime.now(UTC).isoformat(), time.time()],
    )


def unregister(db: Any, run_id: str, owner: Owner) -> None:
    db.execute(
        f"delete from {TABLE} where run_id = ? and host = ? and pid = ? and started = ?",
        [run_id, owner.host, owner.pid, owner.started],
    )


def renew(db: Any, run_id: str, owner: Owner) -> None:
    db.execute(
        f"update {TABLE} set seen_at = ? where run_id = ? and host = ? and pid = ? and started = ?",
        [time.time(), run_id, owner.host, owner.pid, owner.started],
    )


def activity(db: Any, run_id: str) -> Activity:
    """Who plays ``run_id`` now, read only (a reader's connection will do)."""
    tables = set(_tables(db))
    players: list[Player] = []
    gone: list[Player] = []
    if TABLE in tables:
        for host, pid, started, command, since, seen_at in _rows(
            db, f"select host, pid, started, command, since, seen_at from {TABLE} where run_id = ?", [run_id]
        ):
            owner = Owner(host, int(pid), started)
            here = host == socket.gethostname()
            alive = owner.alive() if here else time.time() - float(seen_at or 0) < _STALE_S
            (players if alive else gone).append(Player(host, int(pid), started, command, since, alive))
    plays = live_plays(db, run_id) if "dialogue_plays" in tables else []
    queued = _queued(db, run_id) if "procrastinate_jobs" in tables else 0
    return Activity(tuple(players), tuple(plays), queued, tuple(gone))


def live_plays(db: Any, run_id: str | None = None, thread_ids: Sequence[str] | None = None) -> list[str]:
    """The workers ("host:pid") with an open play of ``run_id`` (or of ``thread_ids``) whose dialogue lock is held:
    PostgreSQL frees a session's advisory locks when the worker or its connection dies, so these are alive."""
    from checkpoints.postgres.claims import dialogue_lock_key

    where, params = ("run_id = ?", [run_id]) if thread_ids is None else (None, list(thread_ids))
    if thread_ids is not None:
        if not thread_ids:
            return []
        where = f"thread_id in ({', '.join('?' * len(thread_ids))})"
    rows = _rows(db, f"select thread_id, worker from dialogue_plays where ended_at is null and {where}", params)
    if not rows:
        return []
    held = {
        ((int(classid) << 32) | int(objid))
        for classid, objid in _rows(
            db,
            "select classid, objid from pg_locks where locktype = 'advisory' and granted and objsubid = 1 and "
            "database = (select oid from pg_database where datname = current_database())",
            [],
        )
    }
    return [worker for thread_id, worker in rows if dialogue_lock_key(thread_id) % 2**64 in held]


def _queued(db: Any, run_id: str) -> int:
    rows = _rows(db, "select count(*) from procrastinate_jobs where args->>'run_id' = ? and status = 'todo'", [run_id])
    return int(rows[0][0]) if rows else 0


@contextmanager
def playing(location: Any, db: Any, run_id: str, *, command: str | None) -> Iterator[None]:
    """While the block runs, this process is recorded as playing ``run_id``; a thread of its own renews the row.

    ``db`` is the store's database for the row itself (written before the block's writers start and after they
    stop); the renewals go through a connection of their own to ``location``.
    """
    owner = Owner.me()
    register(db, run_id, owner, command=command)
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(location, run_id, owner, stop), name="dymt-player", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join(5)
        try:
            unregister(db, run_id, owner)
        except Exception:  # noqa: BLE001 - a store that cannot be written now: the row reads as gone once we are
            pass


def _renew(location: Any, run_id: str, owner: Owner, stop: threading.Event) -> None:
    """Renew the player's row every :data:`RENEW_S` until ``stop``, on a connection of its own (a store that does not
    answer now is tried again at the next renewal)."""
    conn: Any = None
    try:
        while not stop.wait(RENEW_S):
            try:
                conn = conn or _connect(location)
                renew(conn, run_id, owner)
            except Exception:  # noqa: BLE001 - a store away or busy now: the next renewal tries again
                _closed(conn)
                conn = None
    finally:
        _closed(conn)


def _connect(location: Any) -> Any:
    from checkpoints.location import PostgresURL

    if isinstance(location, PostgresURL):
        from checkpoints.postgres.db import PgDatabase

        return PgDatabase(location)
    from checkpoints.paths import connect

    return connect(location)


def _closed(conn: Any) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - closing a connection that already failed
            pass


def _tables(db: Any) -> list[str]:
    return list(db.table_names())


def _rows(db: Any, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in db.execute(sql, params).fetchall()]
