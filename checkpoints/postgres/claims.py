"""Who plays a dialogue: a PostgreSQL advisory lock per dialogue, held while it is played, and a row per play.

procrastinate's job lock keeps two jobs of one dialogue from running together, but a job whose worker only
stalled (a suspended laptop, a lost network) is handed to another worker after ``--stalled-after``; were the
first one to wake up, both would play it. A session advisory lock on the worker's own claims connection closes
that gap: the server holds it while the worker's process and that connection live, and frees it the moment
either dies, so the next player waits for it rather than playing alongside. ``dialogue_plays`` records every play
(worker, job, start, end, outcome): an open row is a play whose worker died.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from checkpoints.location import CONNECT_TIMEOUT_S, PostgresURL, unreachable
from checkpoints.store_outage import HandedOn, LockLost, is_store_outage


def dialogue_lock_key(thread_id: str) -> int:
    """The dialogue's advisory-lock key: 64 bits of its thread id's SHA-256, signed (PostgreSQL's bigint).

    Single-bigint keys and the (int, int) keys of the schema locks are separate spaces in PostgreSQL.
    """
    return int.from_bytes(hashlib.sha256(thread_id.encode()).digest()[:8], "big", signed=True)


def run_lock_key(run_id: str) -> int:
    """The run's advisory-lock key: every play holds it shared, deleting the run takes it alone
    (checkpoints/deletion.py), so a run is never deleted under a play, nor played once deleted."""
    return int.from_bytes(hashlib.sha256(f"dymt-run:{run_id}".encode()).digest()[:8], "big", signed=True)


def claims_application(worker: str) -> str:
    """The ``application_name`` of a worker's claims connection: who holds a dialogue's lock, as the server shows it
    (``pg_stat_activity``), so a stalled worker's locks can be freed by ending that one session (:func:`fence`)."""
    return f"dymt-esb claims {worker}"[:63]  # PostgreSQL keeps 63 bytes of it


def writer_application(worker: str) -> str:
    """The ``application_name`` of a worker's store connection (its dialogues' rows): ended with its claims session
    by :func:`fence`, so a write the stalled worker had in flight is rolled back rather than landing once it wakes."""
    return f"dymt-esb writer {worker}"[:63]


def assert_playing(db: Any, worker: str, thread_id: str) -> None:
    """Inside the store's write transaction: raise :class:`HandedOn` unless ``worker``'s play of ``thread_id`` is still
    open.

    Checking the lock before the write (:meth:`DialogueClaims.confirm`) leaves a gap: a worker paused between the check
    and the write would write, once woken, over what the dialogue's next player wrote. Here check and write are one
    transaction, and :func:`fence` ends the worker's store sessions before it closes its plays: a write in flight is
    rolled back, and one made after finds the play closed."""
    rows = db.execute(
        "select id from dialogue_plays where worker = ? and thread_id = ? and ended_at is null",
        [worker, thread_id],
    ).fetchall()
    if not rows:
        raise HandedOn(f"{thread_id} was handed on: this worker no longer plays it")


# Both locks or neither: the dialogue's, then a share of its run's (held alone while the run is deleted). CASE evaluates
# in order (AND and OR need not): the dialogue's lock is freed again when the run's cannot be shared now.
_TAKE = (
    "select case when pg_try_advisory_lock(%s) then case when pg_try_advisory_lock_shared(%s) then true "
    "else not pg_advisory_unlock(%s) end else false end"
)


class DialogueBusy(Exception):
    """Another session held the dialogue's lock for longer than the claim waits: its job goes back to the queue."""


class RunDeleted(Exception):
    """The dialogue's run is no longer in the store (deleted while its job waited): nothing to play."""


@dataclass
class Play:
    """One play of a dialogue while its lock is held; set ``outcome`` before the block ends.

    ``connection`` is the claims connection the lock was taken on (a new connection means the lock went with the
    old one); ``held_at`` is the server's time when the lock was last confirmed held (:meth:`DialogueClaims.confirm`).
    """

    id: int
    thread_id: str
    outcome: str | None = None
    connection: int = 0
    held_at: datetime | None = None
    run_id: str = ""


class DialogueClaims:
    """A worker process's dialogue locks, all held on one connection of its own (not one per dialogue in play:
    ``--concurrency 64`` on many machines would exhaust the server's connections).

    A busy lock is polled (``pg_try_advisory_lock``), so one waiting dialogue never blocks the connection for the
    others; session-level locks are re-entrant, so dialogues held by this process are also tracked here.

    When that connection is lost (a server restart or crash, a dropped connection) every lock on it is gone:
    :meth:`confirm` (run before each checkpoint write) then raises :class:`LockLost`, the play stops and is
    played on once the lock is taken again on a new connection. A lost play's row is closed when the store is
    back, ended at the last moment its lock was confirmed held, so ``dialogue_plays`` never shows two at once.
    """

    def __init__(self, url: PostgresURL, *, worker: str, poll_s: float = 0.5, wait_s: float | None = None) -> None:
        self.url = url
        self.worker = worker
        self.poll_s = poll_s
        self.wait_s = wait_s  # how long a claim waits for a lock another session holds (None: as long as it takes)
        self._conn: psycopg.AsyncConnection | None = None
        self._connection = 0  # how many connections were opened: each one's locks die with it
        self._use = asyncio.Lock()
        self._plays: dict[str, Play] = {}
        self._lost: list[tuple[int, str, datetime | None]] = []  # (play id, outcome, held at) to close once back

    @asynccontextmanager
    async def claim(self, thread_id: str, *, run_id: str, job_id: int | None = None) -> AsyncIterator[Play]:
        """Hold the dialogue's lock and its run's (shared), and record the play from start to end.

        A lock another session holds is waited for up to ``wait_s``, then :class:`DialogueBusy` is raised (the slot
        goes to other work); a run no longer in the store raises :class:`RunDeleted`, nothing recorded.
        """
        key = dialogue_lock_key(thread_id)
        deadline = None if self.wait_s is None else time.monotonic() + self.wait_s
        while True:
            if thread_id not in self._plays:
                (got,), connection = await self._one(_TAKE, [key, run_lock_key(run_id), key])
                if got:
                    break
            if deadline is not None and time.monotonic() >= deadline:
                raise DialogueBusy(f"{thread_id} is held by another player (waited {self.wait_s:g} s)")
            await asyncio.sleep(self.poll_s)
        play = Play(id=0, thread_id=thread_id, connection=connection, run_id=run_id)
        self._plays[thread_id] = play
        try:
            (present,), _ = await self._one("select exists (select 1 from runs where id = %s)", [run_id])
            if not present:
                await self._unlock(play)
                raise RunDeleted(f"run {run_id} is no longer in the store: nothing to play for {thread_id}")
            (play.id, play.held_at), now_on = await self._one(
                "insert into dialogue_plays (thread_id, run_id, worker, job_id, started_at) "
                "values (%s, %s, %s, %s, clock_timestamp()) returning id, started_at",
                [thread_id, run_id, self.worker, job_id],
            )
            if now_on != connection:  # lost between taking the lock and recording the play
                self._lost.append((play.id, "lock lost", play.held_at))
                raise LockLost(f"the lock of {thread_id} went with its connection")
            try:
                yield play
            except BaseException as exc:
                stopped = isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt))
                play.outcome = play.outcome or (
                    "stopped" if stopped else "lock lost" if is_store_outage(exc) else "error"
                )
                raise
            finally:
                await self._end(play)
        finally:
            self._plays.pop(thread_id, None)

    async def failed_plays(self, job_id: int | None, thread_id: str) -> int:
        """How many plays of job ``job_id`` (of ``thread_id``) ended failed: what its retries count."""
        (n,), _ = await self._one(
            "select count(*) from dialogue_plays where job_id is not distinct from %s and thread_id = %s "
            "and outcome = 'failed'",
            [job_id, thread_id],
        )
        return int(n)

    async def confirm(self, thread_id: str) -> None:
        """Raise :class:`LockLost` unless this process holds the lock of ``thread_id`` (a worker writes only under
        one)."""
        play = self._plays.get(thread_id)
        if play is None or not play.id:
            raise LockLost(f"{thread_id} is not claimed by this worker")
        try:
            (held_at,), connection = await self._one("select clock_timestamp()", [], reconnect=False)
        except psycopg.Error as exc:
            raise LockLost(f"the lock of {thread_id} went with its connection") from exc
        if connection != play.connection:
            raise LockLost(f"the lock of {thread_id} went with its connection")
        play.held_at = held_at

    async def _end(self, play: Play) -> None:
        """Record the end of the play and free its lock; if the lock went with its connection, close the row later."""
        if play.connection == self._connection and self._conn is not None and not self._conn.broken:
            try:
                _, connection = await self._one(
                    "update dialogue_plays set ended_at = clock_timestamp(), outcome = %s where id = %s returning id",
                    [play.outcome or "unknown", play.id],
                    reconnect=False,
                )
                if connection == play.connection:
                    await self._unlock(play)
                    return
            except psycopg.Error:
                pass
        self._lost.append((play.id, play.outcome or "lock lost", play.held_at))

    async def _unlock(self, play: Play) -> None:
        """Free the play's dialogue lock and its share of the run's (on the connection that took them)."""
        await self._one(
            "select pg_advisory_unlock(%s), pg_advisory_unlock_shared(%s)",
            [dialogue_lock_key(play.thread_id), run_lock_key(play.run_id)],
            reconnect=False,
        )

    async def _one(self, query: str, params: list[Any], *, reconnect: bool = True) -> tuple[tuple[Any, ...], int]:
        """The query's one row on the claims connection, and which connection that was.

        A lost connection is replaced (``reconnect``) only outside a play's checks: the new one holds none of the
        old locks, which their plays find out in :meth:`confirm`.
        """
        async with self._use:
            if self._conn is None or self._conn.broken or self._conn.closed:
                if not reconnect and self._conn is not None:
                    raise psycopg.OperationalError("the claims connection was lost")
                try:
                    self._conn = await psycopg.AsyncConnection.connect(
                        self.url.url,
                        autocommit=True,
                        connect_timeout=CONNECT_TIMEOUT_S,
                        application_name=claims_application(self.worker),
                    )
                except psycopg.OperationalError:
                    if self._connection == 0:
                        raise unreachable(self.url) from None
                    raise  # the store went away: the caller waits for it (checkpoints/store_outage.py)
                self._connection += 1
                if self._connection > 1:
                    await self._close_orphans()
            if self._lost:
                await self._close_lost()
            row = await (await self._conn.execute(query, params)).fetchone()
            return tuple(row), self._connection  # type: ignore[arg-type]

    async def _close_orphans(self) -> None:
        """Close this worker's open rows that no play of it owns: a row recorded just as the connection died (its
        id never came back, and the lock went with the connection), so nothing was played under it."""
        owned = [p.id for p in self._plays.values() if p.id] + [play_id for play_id, *_ in self._lost]
        await self._conn.execute(  # type: ignore[union-attr]
            "update dialogue_plays set ended_at = started_at, outcome = 'lock lost' "
            "where worker = %s and ended_at is null and not (id = any(%s))",
            [self.worker, owned],
        )

    async def _close_lost(self) -> None:
        """Close the rows of plays whose lock went with a lost connection (on the new connection, lock held)."""
        while self._lost:
            play_id, outcome, held_at = self._lost[0]
            await self._conn.execute(  # type: ignore[union-attr]
                "update dialogue_plays set ended_at = coalesce(%s, started_at), outcome = %s where id = %s and "
                "ended_at is null",
                [held_at, outcome, play_id],
            )
            self._lost.pop(0)

    async def close(self, *, settle: bool = True) -> None:
        """Close the connection: the server frees every lock still held (as it does when the process dies).

        With ``settle``, the rows of plays cut by a lost connection are closed first, on a new one if the store
        answers: a worker that got no other dialogue after the loss would otherwise leave them open, as a dead
        worker's are. Without it (the store is known to be away), or when the store does not answer, they stay open.
        """
        if settle and (self._lost or (self._conn is not None and self._conn.broken)):
            try:
                await self._one("select 1", [])  # a new connection closes the lost plays and orphaned rows
            except psycopg.Error:
                pass
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


# The sessions holding a dialogue's lock (pg_locks keys a bigint advisory lock as (classid, objid): high, low 32 bits).
_HOLDERS = (
    "select l.pid, a.application_name from pg_locks l join pg_stat_activity a on a.pid = l.pid "
    "where l.locktype = 'advisory' and l.granted and l.objsubid = 1 and l.classid = %(classid)s::oid "
    "and l.objid = %(objid)s::oid and l.database = (select oid from pg_database where datname = current_database())"
)


def lock_parts(thread_id: str) -> dict[str, int]:
    """The dialogue lock's key as pg_locks shows it."""
    key = dialogue_lock_key(thread_id) % 2**64
    return {"classid": key >> 32, "objid": key & 0xFFFFFFFF}


async def fence(execute: Any, thread_id: str, *, job_id: int, own: str | None = None) -> bool | None:
    """Free the lock of ``thread_id`` held by the stalled worker whose play of job ``job_id`` is open: end that
    worker's claims session, and close the play there (from then on the worker can write nothing of it: its
    checkpoints are fenced by :meth:`DialogueClaims.confirm`).

    ``execute(query, **params)`` returns rows as dicts (procrastinate's connector). True: freed; None: the lock was
    free already; False: it is held by a session that is not that worker's claims (left alone). ``own`` is the
    fencing worker's name: its own sessions are never ended (it plays the dialogue itself, under a job that was
    handed on while it took the lock, or one whose row lost its worker when it was taken for dead and registered
    again), so a worker never fences itself.
    """
    holders = await execute(_HOLDERS, **lock_parts(thread_id))
    if not holders:
        return None
    plays = await execute(
        "select id, worker from dialogue_plays where job_id = %(job_id)s and thread_id = %(thread_id)s "
        "and ended_at is null",
        job_id=job_id,
        thread_id=thread_id,
    )
    stalled = {claims_application(p["worker"]): p["worker"] for p in plays if p["worker"] != own}
    if not all(h["application_name"] in stalled for h in holders):
        return False
    for holder in holders:
        # The plays end when their session is ended, not when they are closed below: the lock is free from then on,
        # and the dialogue's next play may start at once (a worker that already had its job), so the row must not
        # say it lasted until after that start.
        (ended,) = await execute(
            "select clock_timestamp() as at, pg_terminate_backend(%(pid)s) as ended", pid=holder["pid"]
        )
        # Its store sessions too: a write it had in flight is rolled back (the next ones find its plays closed).
        await execute(
            "select pg_terminate_backend(pid) as ended from pg_stat_activity where application_name = %(app)s "
            "and datname = current_database()",
            app=writer_application(stalled[holder["application_name"]]),
        )
        # Every play of that worker ended with its session (its other dialogues' locks went too).
        await execute(
            "update dialogue_plays set ended_at = %(at)s, outcome = 'fenced' where worker = %(worker)s "
            "and ended_at is null returning id",
            at=ended["at"],
            worker=stalled[holder["application_name"]],
        )
    return True
