"""The LangGraph PostgreSQL checkpointer, opened safely: its own pool, the strict serializer, setup() once.

LangGraph's ``AsyncPostgresSaver`` wants connections with ``autocommit=True`` (its migrations include
``CREATE INDEX CONCURRENTLY``) and ``row_factory=dict_row``; ``prepare_threshold=0`` keeps it working behind
a transaction-mode pooler such as PgBouncer; and it gets no pipeline (a pipeline is only for one connection,
and the saver serialises its queries with one lock anyway: scale out with processes, not a bigger pool).

The pool (:class:`OutagePool`) keeps the store-outage budget: LangGraph's saver queues every dialogue's checkpoint
writes behind one lock, and a dialogue being stopped waits for its queued writes, so with the store away each write
would otherwise wait out the pool's whole timeout in turn (minutes with many dialogues at once). While the store is
away a wait lasts at most what is left of the budget; once it is spent every wait, queued or new, fails at once.

``setup()`` is not safe to run twice at once (two processes both see no migration row and both run it), so
it runs under a PostgreSQL advisory lock held on a connection of its own. Checkpoints get the same short
channel versions and metadata as on SQLite (checkpoints/saver.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from checkpoints.location import CONNECT_TIMEOUT_S, PostgresURL
from checkpoints.paths import StoreError
from checkpoints.saver import LeanCheckpoints
from checkpoints.serde import StrictSerializer
from checkpoints.store_outage import StoreOutage, StoreOutageError

# pg_advisory_lock key for the saver's setup(): 'dymt' 'cksv' as two int32s, so no other lock collides by chance.
SETUP_LOCK = (0x64796D74, 0x636B7376)
SETUP_WAIT_S = 300.0
# How long a pool keeps trying to replace a lost connection in the background (psycopg_pool's default is 300 s);
# getconn() tries again anyway, and callers wait within --store-outage-budget (checkpoints/store_outage.py).
RECONNECT_TIMEOUT_S = 3600.0
CONNECTION_KWARGS: dict[str, Any] = {"autocommit": True, "row_factory": dict_row, "prepare_threshold": 0}


class OutagePool(AsyncConnectionPool):
    """The checkpointer's pool, bounded by the store-outage budget (``outage``, when set).

    While the store is away a connection is waited for at most the budget's remainder, and a wait that times out starts
    the outage; past the budget every request fails at once with :class:`StoreOutageError`, and those already waiting
    are woken (the pool closes: the process is stopping).
    """

    outage: StoreOutage | None = None

    async def getconn(self, timeout: float | None = None) -> Any:
        outage = self.outage
        if outage is None:
            return await super().getconn(timeout)
        outage.check()
        timeout = self.timeout if timeout is None else timeout
        if (left := outage.left_s()) is not None:
            timeout = max(0.05, min(timeout, left + 0.05))
        try:
            return await super().getconn(timeout)
        except PoolTimeout as exc:
            outage.went_down(exc)
            outage.check()
            raise
        except PoolClosed:
            outage.check()  # closed because the budget is spent: say that
            raise

    def close_when_exceeded(self, outage: StoreOutage) -> None:
        """Bound waits by ``outage``'s budget, and close the pool (failing its waiters) the moment it is spent."""
        self.outage = outage
        loop = asyncio.get_running_loop()

        def spent(_: StoreOutageError) -> None:  # any thread: the outage's timer, or a caller that saw it spent
            if not self.closed:
                loop.call_soon_threadsafe(self._close_now)

        outage.on_exceeded(spent)

    def _close_now(self) -> None:
        self._closing = asyncio.get_running_loop().create_task(self.close(timeout=1))  # kept: a task must be referenced


class PostgresDialogueSaver(LeanCheckpoints, AsyncPostgresSaver):
    """LangGraph's Postgres saver with the SQLite saver's short channel versions and lean metadata.

    ``fence(thread_id)``, when set (workers: checkpoints/postgres/claims.py), runs before every write of a thread and
    raises if this process no longer holds the dialogue's lock (it went with a lost connection): a checkpoint is
    never written by a player that lost its claim.
    """

    fence: Callable[[str], Awaitable[None]] | None = None

    async def aput(self, config: RunnableConfig, checkpoint: Any, metadata: Any, new_versions: Any) -> RunnableConfig:
        if self.fence is not None:
            await self.fence(config["configurable"]["thread_id"])
        return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Any, task_id: str, task_path: str = "") -> None:
        if self.fence is not None:
            await self.fence(config["configurable"]["thread_id"])
        return await super().aput_writes(config, writes, task_id, task_path)


async def setup_once(saver: AsyncPostgresSaver, url: PostgresURL) -> None:
    """Run ``saver.setup()`` under an advisory lock, so concurrent processes migrate one after another.

    The lock is polled with ``pg_try_advisory_lock``, never awaited inside a statement: setup() runs
    ``CREATE INDEX CONCURRENTLY``, which waits for every open transaction, and a waiting
    ``pg_advisory_lock`` is one, so the two would wait for each other for ever.
    """
    async with await psycopg.AsyncConnection.connect(
        url.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
    ) as lock:
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + SETUP_WAIT_S, 0.01
        while not (await (await lock.execute("SELECT pg_try_advisory_lock(%s, %s)", SETUP_LOCK)).fetchone())[0]:  # type: ignore[index]
            if loop.time() > deadline:
                raise StoreError(
                    f"PostgreSQL at {url}: another process has been setting up the checkpoint tables "
                    f"for over {SETUP_WAIT_S:g} s: check for a stuck process"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)
        try:
            await saver.setup()
        finally:
            await lock.execute("SELECT pg_advisory_unlock(%s, %s)", SETUP_LOCK)


@asynccontextmanager
async def open_postgres_saver(
    url: PostgresURL, *, max_connections: int = 2, outage: StoreOutage | None = None
) -> AsyncIterator[PostgresDialogueSaver]:
    """A :class:`PostgresDialogueSaver` on ``url`` with a pool of its own, set up; the pool closes on exit.
    ``outage``: the process's store outage, whose budget bounds every wait for a connection (:class:`OutagePool`)."""
    # check: a connection the server dropped (a restart) is replaced before use, not handed to the saver.
    pool = OutagePool(
        url.url,
        min_size=1,
        max_size=max_connections,
        kwargs=dict(CONNECTION_KWARGS),
        open=False,
        timeout=CONNECT_TIMEOUT_S,
        name="dymt-checkpoints",
        check=AsyncConnectionPool.check_connection,
        reconnect_timeout=RECONNECT_TIMEOUT_S,
    )
    try:
        await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
    except PoolTimeout:
        await pool.close()
        raise StoreError(
            f"cannot connect to PostgreSQL at {url} within {CONNECT_TIMEOUT_S:g} s: "
            "check the server, the URL and ~/.pgpass or PGPASSWORD"
        ) from None
    if outage is not None:
        pool.close_when_exceeded(outage)
    try:
        saver = PostgresDialogueSaver(pool, serde=StrictSerializer())  # type: ignore[arg-type]
        await setup_once(saver, url)
        yield saver
    finally:
        await pool.close()
