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
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator

import psycopg

from checkpoints.location import CONNECT_TIMEOUT_S, PostgresURL, unreachable


def dialogue_lock_key(thread_id: str) -> int:
    """The dialogue's advisory-lock key: 64 bits of its thread id's SHA-256, signed (PostgreSQL's bigint).

    Single-bigint keys and the (int, int) keys of the schema locks are separate spaces in PostgreSQL.
    """
    return int.from_bytes(hashlib.sha256(thread_id.encode()).digest()[:8], "big", signed=True)


@dataclass
class Play:
    """One play of a dialogue while its lock is held; set ``outcome`` before the block ends."""

    id: int
    thread_id: str
    outcome: str | None = None


class DialogueClaims:
    """A worker process's dialogue locks, all held on one connection of its own (not one per dialogue in play:
    ``--concurrency 64`` on many machines would exhaust the server's connections).

    A busy lock is polled (``pg_try_advisory_lock``), so one waiting dialogue never blocks the connection for the
    others; session-level locks are re-entrant, so dialogues held by this process are also tracked here.
    """

    def __init__(self, url: PostgresURL, *, worker: str, poll_s: float = 0.5) -> None:
        self.url = url
        self.worker = worker
        self.poll_s = poll_s
        self._conn: psycopg.AsyncConnection | None = None
        self._use = asyncio.Lock()
        self._held: set[str] = set()

    @asynccontextmanager
    async def claim(self, thread_id: str, *, run_id: str, job_id: int | None = None) -> AsyncIterator[Play]:
        """Hold the dialogue's lock (waiting while any player holds it) and record the play from start to end."""
        key = dialogue_lock_key(thread_id)
        while thread_id in self._held or not await self._one("select pg_try_advisory_lock(%s)", [key]):
            await asyncio.sleep(self.poll_s)
        self._held.add(thread_id)
        try:
            play = Play(id=await self._one(
                "insert into dialogue_plays (thread_id, run_id, worker, job_id, started_at) "
                "values (%s, %s, %s, %s, clock_timestamp()) returning id", [thread_id, run_id, self.worker, job_id]),
                thread_id=thread_id)
            try:
                yield play
            except BaseException as exc:
                stopped = isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt))
                play.outcome = play.outcome or ("stopped" if stopped else "error")
                raise
            finally:
                await self._one("update dialogue_plays set ended_at = clock_timestamp(), outcome = %s where id = %s "
                                "returning id", [play.outcome or "unknown", play.id])
        finally:
            self._held.discard(thread_id)
            await self._one("select pg_advisory_unlock(%s)", [key])

    async def _one(self, query: str, params: list[Any]) -> Any:
        """The first column of the query's one row, on the claims connection (opened on first use)."""
        async with self._use:
            if self._conn is None:
                try:
                    self._conn = await psycopg.AsyncConnection.connect(self.url.url, autocommit=True,
                                                                       connect_timeout=CONNECT_TIMEOUT_S)
                except psycopg.OperationalError:
                    raise unreachable(self.url) from None
            row = await (await self._conn.execute(query, params)).fetchone()
            return row[0]

    async def close(self) -> None:
        """Close the connection: the server frees every lock still held (as it does when the process dies)."""
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

