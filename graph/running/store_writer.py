"""The store's writer for a running dialogue: its methods awaited on one worker thread, tracer batches included."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from checkpoints.redaction import Redactor
from checkpoints.store import Writer
from checkpoints.store_outage import StoreOutage
from checkpoints.traces.encoder import TraceEncoder
from checkpoints.traces.tables import TraceItem

T = TypeVar("T")


class StoreWriter:
    """The :class:`Writer`'s methods, awaited on one worker thread, so the event loop never blocks on SQLite.

    The checkpointer shares the database file through its own async connection; a
    blocking write on the loop while it holds the write lock would wait forever. Every
    call runs in order on the one thread, tracer batches included.
    """

    def __init__(self, store: Writer, *, trace: bool = True, outage: StoreOutage | None = None) -> None:
        self.store = store
        self.trace = trace  # dialogues driven through this writer record their runs (graph.tracing.tracer)
        self.outage = outage  # PostgreSQL: a write that meets an outage waits for the store and is made again
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")
        self._queued: list[tuple[Callable[[], Any], Future]] = []  # writes queued, not yet run
        self._queued_lock = threading.Lock()
        self._drain_waiting = False  # a job that runs every queued write is waiting on the thread
        self._closed = False
        self._redactor: Redactor | None = None
        # Workers: raises unless this process still holds the dialogue's lock (checkpoints/postgres/claims.py), before
        # any row of it is written, as before any checkpoint: a player taken for dead writes nothing once it wakes.
        self.fence: Callable[[str], Awaitable[None]] | None = None
        # Workers: run on the writer's thread inside each write of a dialogue's rows, in its transaction: raises unless
        # the play is still this worker's (checkpoints/postgres/claims.py assert_playing), so a worker paused between
        # the fence and the write writes nothing once woken.
        self.guard: Callable[[Writer, str], None] | None = None

    @property
    def redactor(self) -> Redactor:
        """The redactor of the run's traces: the credential env vars as they were when its first dialogue started
        (made once: reading the environment took about 0.2 ms a dialogue)."""
        if self._redactor is None:
            self._redactor = Redactor.from_environ()
        return self._redactor

    def through_outages(self, call: Callable[[], T]) -> T:
        """``call()``, waiting through a store outage and calling again (within the outage's budget)."""
        return call() if self.outage is None else self.outage.ride_out_sync(call)

    async def _run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        call = functools.partial(self.through_outages, functools.partial(fn, *args, **kwargs))
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    # --- the writer's methods, typed -------------------------------------------------
    async def start_run(
        self, run_id: str, *, config: dict[str, Any], prompt_hashes: dict[str, str], versions: dict[str, str]
    ) -> None:
        await self._run(self.store.start_run, run_id, config=config, prompt_hashes=prompt_hashes, versions=versions)

    async def finish_run(self, run_id: str, status: str) -> None:
        await self._run(self.store.finish_run, run_id, status)

    async def refresh_run_status(self, run_id: str) -> str:
        return await self._run(self.store.refresh_run_status, run_id)

    async def upsert_dialogue(self, thread_id: str, **fields: Any) -> None:
        await self.fenced(thread_id)
        await self._run(self._guarded, thread_id, self.store.upsert_dialogue, thread_id, **fields)

    def _guarded(self, thread_id: str, write: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``write(*args, **kwargs)`` in one transaction with :attr:`guard`'s check of ``thread_id``."""
        if self.guard is None:
            return write(*args, **kwargs)
        with self.store.transaction():
            self.guard(self.store, thread_id)
            return write(*args, **kwargs)

    async def fenced(self, thread_id: str) -> None:
        """Raise if this process may no longer write ``thread_id`` (:attr:`fence`); nothing without a fence."""
        if self.fence is not None:
            await self.fence(thread_id)

    async def get_dialogue(self, thread_id: str) -> dict[str, Any] | None:
        return await self._run(self.store.get_dialogue, thread_id)

    async def record_turns(self, thread_id: str, turns: list[dict[str, Any]]) -> None:
        await self.fenced(thread_id)
        await self._run(self._guarded, thread_id, self.store.record_turns, thread_id, turns)

    async def add_set(
        self, name: str, *, run_id: str, parent_run_id: str | None, fork_turn: int, change: dict[str, Any]
    ) -> None:
        await self._run(
            self.store.add_set, name, run_id=run_id, parent_run_id=parent_run_id, fork_turn=fork_turn, change=change
        )

    async def add_set_member(self, set_name: str, thread_id: str, parent_thread_id: str) -> None:
        await self._run(self.store.add_set_member, set_name, thread_id, parent_thread_id)

    def queue_trace_batch(self, encoder: TraceEncoder, items: Sequence[TraceItem], final: bool = False) -> Future:
        """Queue a tracer batch without waiting: safe from any thread (tracer callbacks use it)."""
        return self._queue(
            functools.partial(self.store.write_trace_batch, encoder, items, final, through=self.through_outages)
        )

    def queue_turns(self, thread_id: str, turns: list[dict[str, Any]]) -> Future:
        """Queue the upsert of a dialogue's changed turn records without waiting (the future tells its outcome)."""
        return self._queue(
            functools.partial(
                self.through_outages,
                functools.partial(self._guarded, thread_id, self.store.record_turns, thread_id, turns),
            )
        )

    def _queue(self, write: Callable[[], Any]) -> Future:
        """Writes queued while the thread is busy run together, in order, in one transaction (each its own
        savepoint); a write queued later never runs before one queued or awaited earlier."""
        future: Future = Future()
        with self._queued_lock:
            if self._closed:
                raise RuntimeError("the store writer is closed")
            self._queued.append((write, future))
            if self._drain_waiting:
                return future  # the waiting job takes this one too
            self._drain_waiting = True
        self._executor.submit(self._drain)
        return future

    def _drain(self) -> None:
        with self._queued_lock:
            batch, self._queued = self._queued, []
            self._drain_waiting = False
        try:
            outcomes = self.store.write_together([write for write, _ in batch])
        except Exception as exc:  # noqa: BLE001 - the commit failed: every write of it is lost, each caller told
            outcomes = [exc] * len(batch)
        for (_, future), outcome in zip(batch, outcomes):
            if outcome is None:
                future.set_result(None)
            else:
                future.set_exception(outcome)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Queue ``fn(store, *args)`` without waiting (the cost cap's checks run on the writer's thread)."""
        return self._executor.submit(self.through_outages, functools.partial(fn, self.store, *args))

    def close(self) -> None:
        with self._queued_lock:
            self._closed = True
        self._executor.shutdown(wait=True)
