"""Who plays a dialogue: a PostgreSQL advisory lock per dialogue, held while it is played, and a row per play.

procrastinate's job lock keeps two jobs of one dialogue from running together, but a job whose worker only
stalled (a suspended laptop, a lost network) is handed to another worker after ``--stalled-after``; were the
first one to wake up, both would play it. A session advisory lock on a connection of the player's own closes
that gap: the server holds it while the player's process and connection live, and frees it the moment either
dies, so the next player waits for it rather than playing alongside. ``dialogue_plays`` records every play
(worker, job, start, end, outcome): an open row is a play whose worker died.
"""

from __future__ import annotations

import asyncio
import hashlib
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator

import psycopg

from checkpoints.location import PostgresURL
from checkpoints.paths import StoreError

CONNECT_TIMEOUT_S = 10


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


@asynccontextmanager
async def claim_dialogue(url: PostgresURL, thread_id: str, *, run_id: str, worker: str, job_id: int | None = None) -> AsyncIterator[Play]:
    """Hold the dialogue's lock (waiting while another player holds it) and record the play from start to end."""
    try:
        conn = await psycopg.AsyncConnection.connect(url.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.OperationalError:
        raise StoreError(f"cannot connect to PostgreSQL at {url}: check the server, the URL and ~/.pgpass or PGPASSWORD") from None
    async with conn:
        key = dialogue_lock_key(thread_id)
        await conn.execute("select pg_advisory_lock(%s)", [key])
        row = await (await conn.execute(
            "insert into dialogue_plays (thread_id, run_id, worker, job_id, started_at) values (%s, %s, %s, %s, clock_timestamp()) "
            "returning id", [thread_id, run_id, worker, job_id])).fetchone()
        play = Play(id=row[0], thread_id=thread_id)
        try:
            yield play
        except BaseException as exc:
            stopped = isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt))
            play.outcome = play.outcome or ("stopped" if stopped else "error")
            raise
        finally:
            await conn.execute("update dialogue_plays set ended_at = clock_timestamp(), outcome = %s where id = %s",
                               [play.outcome or "unknown", play.id])
            await conn.execute("select pg_advisory_unlock(%s)", [key])


def dialogue_plays(url: PostgresURL, run_id: str | None = None) -> list[dict[str, Any]]:
    """Every recorded play (of one run, or all), oldest first: thread, worker, job, start, end (None: it died), outcome."""
    with psycopg.connect(url.url, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        cur = conn.execute(
            "select thread_id, run_id, worker, job_id, started_at, ended_at, outcome from dialogue_plays "
            "where %(run)s::text is null or run_id = %(run)s order by started_at, id", {"run": run_id})
        names = [c.name for c in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]
