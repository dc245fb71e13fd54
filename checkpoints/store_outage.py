"""A PostgreSQL store that is briefly gone (a restart, a crash, dropped connections): wait for it, within a budget.

One :class:`StoreOutage` per process is shared by everything that talks to the store (the writer, the response
cache, the checkpointer's callers, the job queue): the outage starts at the first failure any of them sees and ends
at the first success, so one budget holds for the process whatever it was doing. While the store is away callers
wait with a growing pause (jittered, capped) and then try again; the store's writes are idempotent upserts and a
dialogue plays on from its last checkpoint, so trying again is safe. Past the budget, :class:`StoreOutageError`
(an :class:`checkpoints.outages.OutageError`: exit status 75) says so in one line. Nothing here counts against a
dialogue's retries or fails a job.

The budget is kept by the clock, not by whoever asks next: a timer says it is spent the moment it is (the
``on_exceeded`` callbacks run then), so callers blocked elsewhere (the checkpointer's pool:
checkpoints/postgres/saver.py) give up at once instead of each waiting out its own timeout first.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from checkpoints.location import CONNECT_TIMEOUT_S, PostgresURL
from checkpoints.outages import OutageError

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_BUDGET_S = 600.0  # --store-outage-budget: ten minutes, longer than a managed server's restart or failover
FIRST_PAUSE_S = 0.2
MAX_PAUSE_S = 2.0
REPLAYS_WHILE_UP = 3  # a play failing "as if disconnected" this often in a row while the store answers is failed


class StoreOutageError(OutageError):
    """The store stayed unreachable past ``--store-outage-budget``."""


class LockLost(Exception):
    """A dialogue's advisory lock went with the connection that held it: take it again before playing on."""


class ReplayedTooOften(Exception):
    """A play failed :data:`REPLAYS_WHILE_UP` times in a row with what looks like a lost connection while the store
    answered each time: not an outage (nothing to wait for), so the play fails instead of being played again for
    ever."""


class HandedOn(LockLost):
    """A write found its dialogue's play closed (handed to another worker): not tried again on the writer's thread;
    the play, like one whose lock was lost, asks whether its job is still its own."""


# Errors the server sends that mean it is going away or cannot take a connection now: shutting down or crashed,
# starting up, an idle session closed, too many clients; and every connection exception (class 08). Other server
# errors of psycopg's OperationalError family (a query cancelled, a lock not available, a database dropped, a disk
# full) come from a server that is up: the work that met them fails as it would anywhere else.
_AWAY = ("57P01", "57P02", "57P03", "57P05", "53300")


def is_store_outage(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) means the store is unreachable for now, not that a query is wrong.

    A refused or dropped connection, a server shutting down or starting up and the pool's timeout (``PoolTimeout``)
    are (psycopg raises them as OperationalError with no SQLSTATE, or one of :data:`_AWAY` / class 08);
    procrastinate wraps them as the cause of its own errors. A pipeline aborted by an earlier error of its own
    (``PipelineAborted``) is not: the server answered.
    """
    psycopg = sys.modules.get("psycopg")  # not loaded: no psycopg error can have been raised (a SQLite run)
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, (StoreOutageError, ReplayedTooOften)):
            return False  # past the budget, or not an outage after all: stop, do not wait again
        if isinstance(exc, LockLost):
            return True
        if psycopg is not None and isinstance(exc, psycopg.OperationalError):
            sqlstate = getattr(exc, "sqlstate", None)
            if isinstance(exc, psycopg.errors.PipelineAborted):
                pass  # what aborted it, if anything, is further down the chain
            elif sqlstate is None or sqlstate.startswith("08") or sqlstate in _AWAY:
                return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen += 1
    return False


def _what_failed(exc: BaseException) -> str:
    """The failure in a few words for the log: its class, its SQLSTATE if the server sent one, its first line."""
    sqlstate = getattr(exc, "sqlstate", None)
    first = next(iter(str(exc).splitlines()), "")[:160]
    return f"{type(exc).__name__}{f' {sqlstate}' if sqlstate else ''}: {first!r}" if first else type(exc).__name__


class StoreOutage:
    """When the store went away and how long this process waits for it (``budget_s``)."""

    def __init__(
        self,
        url: PostgresURL,
        *,
        budget_s: float = DEFAULT_BUDGET_S,
        first_pause_s: float = FIRST_PAUSE_S,
        max_pause_s: float = MAX_PAUSE_S,
    ) -> None:
        self.url = url
        self.budget_s = budget_s
        self.first_pause_s = first_pause_s
        self.max_pause_s = max_pause_s
        self.outages = 0  # how many times the store went away
        self.waited_s = 0.0  # seconds spent without it, all outages
        self.last_back: float | None = None  # time.monotonic() when it last came back
        self._down_since: float | None = None
        self._lock = threading.Lock()
        self._exceeded: StoreOutageError | None = None
        self._on_exceeded: list[Callable[[StoreOutageError], None]] = []
        self._deadline: threading.Timer | None = None  # fires when the current outage's budget is spent

    # --- state -----------------------------------------------------------------------------------------------
    @property
    def down(self) -> bool:
        return self._down_since is not None

    def went_down(self, exc: BaseException) -> None:
        """Note a failure that means the store is unreachable (the first one starts the outage)."""
        with self._lock:
            if self._down_since is None:
                self._down_since = time.monotonic()
                self.outages += 1
                log.warning(
                    "PostgreSQL at %s unreachable (%s): waiting for it, up to %g s",
                    self.url,
                    _what_failed(exc),
                    self.budget_s,
                )
                self._deadline = threading.Timer(self.budget_s, self._budget_spent, args=(self._down_since,))
                self._deadline.daemon = True
                self._deadline.start()

    def came_back(self) -> None:
        """Note a success: the outage, if any, is over."""
        if self._down_since is None:
            return
        with self._lock:
            if self._down_since is not None:
                gone = time.monotonic() - self._down_since
                self.waited_s += gone
                self._down_since = None
                if self._deadline is not None:
                    self._deadline.cancel()
                    self._deadline = None
                self.last_back = time.monotonic()
                log.warning("PostgreSQL at %s is back after %.1f s: playing on", self.url, gone)

    def left_s(self) -> float | None:
        """Seconds of the budget left in the current outage (0 once spent; None while the store is up)."""
        since = self._down_since
        if self._exceeded is not None:
            return 0.0
        return None if since is None else max(0.0, self.budget_s - (time.monotonic() - since))

    def _budget_spent(self, since: float) -> None:
        """The deadline timer: the outage that began at ``since`` has lasted its budget (unless it just ended): say
        so to everyone now."""
        while self._down_since == since and self._exceeded is None:
            try:
                self.check()
            except StoreOutageError:
                return
            time.sleep(0.01)  # the timer woke a hair early

    def recently_down(self, within_s: float) -> bool:
        """Whether the store is down now or came back less than ``within_s`` seconds ago."""
        return self.down or (self.last_back is not None and time.monotonic() - self.last_back < within_s)

    def on_exceeded(self, callback: Callable[[StoreOutageError], None]) -> None:
        """Call ``callback`` (from any thread) once, when an outage outlasts the budget."""
        self._on_exceeded.append(callback)

    def check(self) -> None:
        """Raise :class:`StoreOutageError` if the current outage has outlasted the budget (and ever after)."""
        if self._exceeded is not None:
            raise self._exceeded
        since = self._down_since
        if since is None or time.monotonic() - since <= self.budget_s:
            return
        with self._lock:
            if self._exceeded is None:
                self._exceeded = StoreOutageError(
                    f"PostgreSQL at {self.url} has been unreachable for over {self.budget_s:g} s "
                    "(--store-outage-budget): stopping; every dialogue is saved up to its last checkpoint and "
                    "another worker (or this command, run again) plays it on once the server is back"
                )
                callbacks = list(self._on_exceeded)
            else:
                callbacks = []
        for callback in callbacks:
            try:
                callback(self._exceeded)
            except Exception:
                log.debug("an on_exceeded callback failed", exc_info=True)
        raise self._exceeded

    def _pause(self, attempt: int) -> float:
        return min(self.max_pause_s, self.first_pause_s * 2 ** min(attempt, 16)) * random.uniform(0.5, 1.0)

    def _failed_while_up(self, exc: BaseException, seen_back: float | None, failed: int) -> tuple[float | None, int]:
        """Count a failure of one operation that rides out an outage, if the store came back (for another caller)
        since its last failure; past :data:`REPLAYS_WHILE_UP` such failures in a row raise
        :class:`ReplayedTooOften`: the operation fails on something of its own that waiting does not mend (a
        connection left unusable), and would otherwise be tried again for ever, each success elsewhere starting the
        budget anew."""
        if self.last_back == seen_back:
            return seen_back, failed
        failed += 1
        if failed > REPLAYS_WHILE_UP:
            raise ReplayedTooOften(
                f"failed {failed} times in a row while PostgreSQL at {self.url} answered other calls: "
                f"{_what_failed(exc)}"
            ) from exc
        return self.last_back, failed

    # --- riding it out ---------------------------------------------------------------------------------------
    async def ride_out(self, operation: Callable[[], Awaitable[T]]) -> T:
        """``await operation()``, called again after a pause while the store is unreachable (it must be safe to
        repeat)."""
        attempt, seen_back, failed_while_up = 0, self.last_back, 0
        while True:
            self.check()
            try:
                result = await operation()
            except Exception as exc:
                if not is_store_outage(exc):
                    raise
                seen_back, failed_while_up = self._failed_while_up(exc, seen_back, failed_while_up)
                self.went_down(exc)
                self.check()
                await asyncio.sleep(self._pause(attempt))
                attempt += 1
                continue
            self.came_back()
            return result

    def ride_out_sync(self, operation: Callable[[], T]) -> T:
        """:meth:`ride_out` for blocking code (the store writer's and the cache's threads)."""
        attempt, seen_back, failed_while_up = 0, self.last_back, 0
        while True:
            self.check()
            try:
                result = operation()
            except Exception as exc:
                if isinstance(exc, HandedOn) or not is_store_outage(exc):
                    raise
                seen_back, failed_while_up = self._failed_while_up(exc, seen_back, failed_while_up)
                self.went_down(exc)
                self.check()
                time.sleep(self._pause(attempt))
                attempt += 1
                continue
            self.came_back()
            return result

    async def wait_until_back(self, exc: BaseException) -> bool:
        """After ``exc`` (an outage): wait, with backoff, until a new connection to the store answers; whether the
        store was away.

        A store that answers at once was not away (a connection dropped by the server, a lock lost with one, ended by
        another worker that took this one for dead): no outage is noted, and it is said in one line unless a lock.
        """
        if not self.down and await self._answers():
            if not isinstance(exc, LockLost):
                log.warning(
                    "PostgreSQL at %s answers; a connection was lost (%s): playing on", self.url, _what_failed(exc)
                )
            return False
        self.went_down(exc)
        attempt = 0
        while True:
            self.check()
            await asyncio.sleep(self._pause(attempt))
            attempt += 1
            if await self._answers():
                self.came_back()
                return True

    async def _answers(self) -> bool:
        """Whether a new connection to the store answers now."""
        import psycopg

        try:
            conn = await psycopg.AsyncConnection.connect(
                self.url.url, autocommit=True, connect_timeout=min(CONNECT_TIMEOUT_S, 5)
            )
            async with conn:
                await conn.execute("select 1")
        except psycopg.OperationalError:
            return False
        return True


async def play_through_outages(outage: StoreOutage | None, play: Callable[[], Awaitable[T]]) -> T:
    """``await play()`` until it returns; a store outage midway waits for the store, then plays again (from the
    last checkpoint: ``play`` must resume, as playing a dialogue does). Without ``outage`` (SQLite) it plays once.

    A play that fails as if disconnected while the store answers each time is played again
    :data:`REPLAYS_WHILE_UP` times in a row at most, then :class:`ReplayedTooOften` is raised (from the last error):
    a connection of ours in a state no replay mends must fail the play, not keep its slot for ever.
    """
    replays_while_up = 0
    while True:
        try:
            return await play()
        except Exception as exc:
            if outage is None or not is_store_outage(exc):
                raise
            if await outage.wait_until_back(exc):
                replays_while_up = 0
                continue
            replays_while_up += 1
            if replays_while_up > REPLAYS_WHILE_UP:
                raise ReplayedTooOften(
                    f"failed {replays_while_up} times in a row while PostgreSQL at {outage.url} answered: "
                    f"{_what_failed(exc)}"
                ) from exc
