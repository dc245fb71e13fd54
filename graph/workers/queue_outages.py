"""procrastinate's connector riding out store outages: its queries wait for the store instead of failing the worker.

procrastinate 3's worker stops when a side task fails (the heartbeat's update, the listener's reconnection) and its
job loop raises when fetching a job fails; its psycopg pool replaces dropped connections (``check``) and its listener
reconnects only if the server answers at once. Through this connector every query (fetch a job, finish or retry one,
the heartbeat) and the listener wait for the store with backoff while it is away (checkpoints/store_outage.py), so a
restart or crash of the server is a pause, not a stopped worker or a failed job; past the outage budget they raise
:class:`checkpoints.store_outage.StoreOutageError` and the worker exits (cli/worker.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from procrastinate import PsycopgConnector, sql

from checkpoints.store_outage import StoreOutage, is_store_outage

log = logging.getLogger(__name__)
FETCH_JOB = sql.queries["fetch_job"]
DONE_WITH_JOB = (sql.queries["finish_job"], sql.queries["retry_job"])
# A job that a fetch interrupted by an outage took (committed) although its reply never came: it is 'doing' for this
# worker, which does not know it; handed out by the next fetch instead of left 'doing' for ever. Same columns as
# fetch_job.
TAKEN_UNSEEN = (
    "SELECT id, status, task_name, priority, lock, queueing_lock, args, scheduled_at, queue_name, attempts, "
    "worker_id FROM procrastinate_jobs WHERE status = 'doing' AND worker_id = %(worker_id)s "
    "AND NOT (id = ANY(%(known)s)) ORDER BY id LIMIT 1"
)


_HANDING_ON: ContextVar[bool] = ContextVar("handing_on", default=False)


@contextmanager
def handing_on() -> Iterator[None]:
    """Around putting back another worker's stalled job (graph/workers/stalled_jobs.py): the retry is not this
    worker's outcome of a job it fetched, so it is neither checked against nor counted as one. A job this worker
    fetched once and lost to another that stalled in turn stays this worker's to check when its own play ends."""
    token = _HANDING_ON.set(True)
    try:
        yield
    finally:
        _HANDING_ON.reset(token)


class OutageRidingConnector(PsycopgConnector):
    """A :class:`procrastinate.PsycopgConnector` whose queries and listener wait through store outages."""

    def __init__(self, *, outage: StoreOutage, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.outage = outage
        # Jobs fetched by this worker and not yet finished or retried: the attempts each had when fetched (handing a
        # job on, procrastinate's retry, counts an attempt, so a job fetched again by another worker has more).
        self._handed: dict[int, int] = {}
        self._me: set[int] = set()  # this process's worker ids (a new one each time it registers again)

    async def execute_query_async(self, query: Any, **arguments: Any) -> None:
        # Only this worker's own outcome of a job it fetched is checked and counted: putting back a stalled worker's
        # job (handing_on) is neither.
        own_outcome = query in DONE_WITH_JOB and not _HANDING_ON.get()
        if own_outcome and arguments["job_id"] in self._handed and not await self.still_mine(arguments["job_id"]):
            self._handed.pop(arguments["job_id"], None)
            return
        await self.outage.ride_out(lambda: super(OutageRidingConnector, self).execute_query_async(query, **arguments))
        if own_outcome:
            self._handed.pop(arguments["job_id"], None)

    async def still_mine(self, job_id: Any, *, say: bool = True) -> bool:
        """Whether this worker may still play, finish or retry ``job_id``: it is running, no other worker has it, and
        it was not handed on since this worker fetched it.

        A worker that was stalled (SIGSTOP, a hung machine) wakes up to find its job handed on: the other worker's
        job (or one already put back, or gone with its run) is left alone, with one line (``say``), not a traceback.
        A job whose worker was taken for dead has no worker (its row was pruned): it is this worker's only if its
        attempts are those it was fetched with, since handing it on to another worker counted one.
        """
        row = await self.outage.ride_out(
            lambda: super(OutageRidingConnector, self).execute_query_one_async(
                "SELECT worker_id, status::text AS status, attempts FROM procrastinate_jobs WHERE id = %(job_id)s",
                job_id=job_id,
            )
        )
        fetched = self._handed.get(job_id)
        if (
            row
            and row["status"] == "doing"
            and (fetched is None or row["attempts"] == fetched)
            and (row["worker_id"] is None or row["worker_id"] in self._me)
        ):
            return True
        if say:
            why = (
                "is gone (its run was deleted)"
                if not row
                else "was handed to another worker while this one was stalled"
            )
            log.warning("job %s %s: its outcome here is left out", job_id, why)
        return False

    async def execute_query_one_async(self, query: Any, **arguments: Any) -> dict[str, Any]:
        if query != FETCH_JOB:
            return await self.outage.ride_out(
                lambda: super(OutageRidingConnector, self).execute_query_one_async(query, **arguments)
            )
        interrupted = False

        async def fetch() -> dict[str, Any]:
            nonlocal interrupted
            if interrupted:
                taken = await super(OutageRidingConnector, self).execute_query_all_async(
                    TAKEN_UNSEEN, worker_id=arguments["worker_id"], known=sorted(self._handed)
                )
                if taken:
                    return taken[0]
            try:
                return await super(OutageRidingConnector, self).execute_query_one_async(query, **arguments)
            except Exception as exc:
                interrupted = interrupted or is_store_outage(exc)
                raise

        self._me.add(arguments["worker_id"])
        row = await self.outage.ride_out(fetch)
        if row.get("id") is not None:
            self._handed[row["id"]] = row["attempts"]
        return row

    async def execute_query_all_async(self, query: Any, **arguments: Any) -> list[dict[str, Any]]:
        return await self.outage.ride_out(
            lambda: super(OutageRidingConnector, self).execute_query_all_async(query, **arguments)
        )

    async def listen_notify(self, on_notification: Any, channels: Iterable[str]) -> None:
        """Listen for new jobs; when the server is away, wait for it and listen again (jobs deferred meanwhile are
        found by the worker's polling, every few seconds)."""
        while True:
            try:
                await super().listen_notify(on_notification, channels)
            except Exception as exc:
                if not is_store_outage(exc):
                    raise
                await self.outage.wait_until_back(exc)
