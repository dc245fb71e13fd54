"""Jobs whose worker stopped (SIGSTOP, a hung machine, a crash) handed to live workers: the stalled worker's claims
session is ended first, so a job is handed on only when its dialogue's lock is free."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from procrastinate import App
from procrastinate.exceptions import ConnectorException

from checkpoints.postgres.claims import fence
from graph.workers.dialogue_jobs import QUEUE
from graph.workers.queue_outages import handing_on

log = logging.getLogger("graph.workers.job_worker")  # the name the worker's log lines have always had


async def retry_stalled_jobs(
    app: App, *, stalled_after_s: float, me: int | None = None, worker: str | None = None
) -> int:
    """Put back to 'todo' every dialogue job whose worker stopped sending heartbeats (never this worker's own,
    ``me``; nor one whose dialogue this worker plays itself, ``worker``: its name); how many.

    A stalled worker (SIGSTOP, a hung machine) may still hold its dialogues' locks on a connection that lives: its
    claims session is ended first (checkpoints/postgres/claims.py ``fence``), so the job is handed on only once its
    lock is free and nobody waits on it; a lock some other session holds leaves the job where it is. Every worker
    looks for stalled jobs, at start and every few seconds, so another may put a job back between this one finding it
    and retrying it: the queue then refuses the second retry (the job is no longer running), which is skipped.
    """
    stalled = [
        job
        for job in await app.job_manager.get_stalled_jobs(queue=QUEUE, seconds_since_heartbeat=stalled_after_s)
        if me is None or job.worker_id != me
    ]
    retried = 0
    for job in stalled:
        if job.id is None:  # a fetched job always has its id
            continue
        thread_id = str(job.task_kwargs.get("thread_id") or job.lock or "")
        try:
            freed = (
                await fence(app.connector.execute_query_all_async, thread_id, job_id=job.id, own=worker)
                if thread_id
                else None
            )
        except ConnectorException as exc:
            if not isinstance(exc.__cause__, psycopg.errors.InsufficientPrivilege):
                raise
            # Its next player waits for the lock LOCK_WAIT_S at a time, and takes other work meanwhile.
            _say_once(
                job.id,
                "job %s (%s): this worker's database role may not end the stalled worker's session (grant it "
                "pg_signal_backend): handed on with its lock still held",
                job.id,
                job.lock,
            )
            freed = None
        if freed is False:
            _say_once(
                job.id,
                "job %s (%s): its dialogue's lock is held by another session: left where it is",
                job.id,
                job.lock,
            )
            continue
        try:
            with handing_on():
                await app.job_manager.retry_job(job)
        except ConnectorException as exc:
            if not isinstance(exc.__cause__, psycopg.errors.RaiseException):
                raise  # the database itself, not the queue's refusal
            log.info("job %s (%s) was already put back by another worker", job.id, job.lock)
            continue
        log.warning(
            "retried job %s (%s): its worker stopped%s",
            job.id,
            job.lock,
            " (its session ended, freeing its lock)" if freed else "",
        )
        retried += 1
    await app.job_manager.prune_stalled_workers(seconds_since_heartbeat=stalled_after_s)
    return retried


_SAID: set[int] = set()  # stalled jobs whose hand-over met a lock it could not free, said once each


def _say_once(job_id: int, message: str, *args: Any) -> None:
    if job_id not in _SAID:
        _SAID.add(job_id)
        log.warning(message, *args)
