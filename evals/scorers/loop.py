"""The scoring commands' one loop: run a scorer over jobs with bounded concurrency, record each verdict, tally."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from checkpoints import scores
from checkpoints.reasons import failure_reason
from checkpoints.store import Writer, now
from nodes.scorer import Item, Scored, Scorer

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Tally:
    """What a labelling pass did."""

    done: int = 0
    unparsed: int = 0
    skipped: int = 0
    failed: int = 0
    first_error: str | None = None


async def bounded(
    jobs: Sequence[T],
    work: Callable[[T], Awaitable[R]],
    on_result: Callable[[T, R | BaseException], None],
    *,
    concurrency: int = 1,
) -> None:
    """Run ``work`` on every job, at most ``concurrency`` at once; results (or errors) go to ``on_result``.

    ``on_result`` runs on the event loop, one at a time: the only SQLite connection it may
    write through is the store's own (no async connection shares this loop).
    """
    limiter = asyncio.Semaphore(max(1, concurrency))

    async def one(job: T) -> None:
        async with limiter:
            try:
                result: R | BaseException = await work(job)
            except Exception as exc:  # noqa: BLE001 - a failed call is counted, the others go on
                result = exc
        on_result(job, result)

    await asyncio.gather(*(one(job) for job in jobs))


async def label_jobs(
    jobs: Sequence[T],
    work: Callable[[T], Awaitable[R]],
    record: Callable[[T, R], bool],
    *,
    concurrency: int = 1,
    on_step: Callable[[], None] = lambda: None,
) -> Tally:
    """The labelling commands' one loop: ``work`` on every job, ``record`` each result, a tally of both.

    ``record`` stores one result (on the event loop, one at a time) and says whether it was
    unparsed; a failed call is counted, its first error kept, and nothing is stored for it.
    """
    tally = Tally()

    def on_result(job: T, result: R | BaseException) -> None:
        on_step()
        if isinstance(result, BaseException):
            tally.failed += 1
            tally.first_error = tally.first_error or error_line(result)
            return
        unparsed = record(job, result)
        tally.done += 1
        tally.unparsed += bool(unparsed)

    await bounded(jobs, work, on_result, concurrency=concurrency)
    return tally


@dataclass(frozen=True)
class ScoreJob(Generic[Item]):
    """One item to score and where its verdict goes in the ``scores`` table (turn 0 for a whole dialogue)."""

    thread_id: str
    idx: int
    item: Item
    subject: str = scores.REPLY


async def run_scorer(
    scorer: Scorer[Item],
    jobs: Sequence[T],
    record: Callable[[T, Scored], None],
    *,
    item: Callable[[T], Item] = operator.attrgetter("item"),
    concurrency: int = 1,
    on_step: Callable[[], None] = lambda: None,
) -> Tally:
    """The labelling commands' one loop over a scorer: score every job's item, ``record`` each verdict, tally.

    Unscored verdicts are recorded (raw output kept) and counted as unparsed; failed calls store nothing.
    """

    async def work(job: T) -> Scored:
        return await scorer.ascore(item(job))

    def recorded(job: T, result: Scored) -> bool:
        record(job, result)
        return not result.verdict.scored

    return await label_jobs(jobs, work, recorded, concurrency=concurrency, on_step=on_step)


def store_verdicts(store: Writer, *, scorer: str, model: str) -> Callable[[Any, Scored], None]:
    """A ``record`` for run_scorer that upserts each verdict into the ``scores`` table under ``scorer``.

    Jobs say where: ``thread_id``, ``idx`` and ``subject`` (as ScoreJob does).
    """

    def record(job: Any, result: Scored) -> None:
        row = result.verdict.row(
            thread_id=job.thread_id,
            idx=job.idx,
            scorer=scorer,
            subject=job.subject,
            model=model,
            latency=round(result.latency, 4),
            created_at=now(),
        )
        store.record_scores([row])

    return record


def error_line(exc: BaseException) -> str:
    """Why a scoring call failed, in words (checkpoints/reasons.py)."""
    return failure_reason(exc)[:300]
