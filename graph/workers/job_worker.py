"""A procrastinate worker that plays dialogues of runs stored in PostgreSQL, one job per dialogue, resumably.

Each job names one dialogue (graph/workers/dialogue_jobs.py); the worker rebuilds its run's models from the stored run
configuration (its retries and rate limits included; once per run, target and sample) and plays it with
:func:`graph.running.playing.play_dialogue`, which continues from the last checkpoint when a job is retried after its
worker died. The dialogue's advisory lock (checkpoints/postgres/claims.py) is held while it plays, so no two workers
ever play one dialogue at once, and each play is recorded. A dialogue that ends failed fails its job, which
procrastinate retries from the failure's checkpoint. A side task retries the jobs of workers whose heartbeat stopped (a
SIGKILLed process), so any live worker finishes them, and gives this worker its share of the runs' rate limits: a run's
``--rate-limit`` is the total of all live workers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from langgraph.graph.state import CompiledStateGraph
from procrastinate import App, JobContext
from procrastinate.exceptions import ConnectorException

from checkpoints.cache import ResponseCache
from checkpoints.location import PostgresURL
from checkpoints.outages import OutageError
from checkpoints.postgres.claims import DialogueClaims, RunDeleted
from checkpoints.postgres.db import is_postgres
from checkpoints.postgres.saver import open_postgres_saver
from checkpoints.samples import sample_seed
from checkpoints.store import Writer, now, open_writer
from checkpoints.store_outage import DEFAULT_BUDGET_S, StoreOutage, play_through_outages
from graph.config.run_config import RunConfig
from graph.config.stored import stored_run_config
from graph.running.gc_settings import playing_collector
from graph.running.playing import DialogueOutcome, StoreWriter, play_dialogue
from graph.workers.dialogue_jobs import (
    QUEUE,
    RETRY,
    TASK,
    DialogueJob,
    ensure_queue_schema,
    live_workers,
    queue_app,
    waiting_jobs,
)
from models.call_policy import CallPolicy
from nodes.builder import build_graph
from nodes.context import RunContext

log = logging.getLogger(__name__)
_BUDGET_POLL_S = 1.0


def lock_run(store: Writer, run_id: str) -> None:
    """Inside a transaction: wait for the other workers' transactions on ``run_id``'s cost cap (PostgreSQL; a SQLite
    writer's transaction already excludes the others)."""
    if is_postgres(store.db):
        store.db.execute("select pg_advisory_xact_lock(hashtext(?))", [f"dymt-cost-cap:{run_id}"])


@dataclass(frozen=True)
class WorkerSettings:
    """How one worker process runs: jobs at once, heartbeat timing, the response cache, a base URL override."""

    concurrency: int = 1
    heartbeat_s: float = 10.0
    stalled_after_s: float = 30.0  # a worker silent this long is dead: its jobs are retried
    cache: bool = True
    base_url: str | None = None
    rate_limits: dict[str, float] | None = (
        None  # this worker's own requests per minute, instead of its share of the run's
    )
    wait: bool = True  # False: stop once the queue is empty (tests, one-off draining)
    store_outage_budget_s: float = DEFAULT_BUDGET_S  # the store away this long: exit (75), leaving the jobs to others
    budget: Callable[[Writer, str, dict[str, Any], str], bool | None] | None = None
    """May a new dialogue of a run with a cost cap start (evals.cost.budget_allows)? A capped job without it fails."""
    name: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")


class DialogueFailed(Exception):
    """A dialogue ended failed (a model kept failing): its job fails, so procrastinate retries it."""


class DialoguePlayer:
    """What a worker's jobs share: the store writer, the checkpointer's graph, built models per run."""

    def __init__(
        self,
        store: Writer,
        graph: CompiledStateGraph,
        settings: WorkerSettings,
        cache: ResponseCache | None,
        claims: DialogueClaims,
        outage: StoreOutage | None = None,
    ) -> None:
        self.write = StoreWriter(store, outage=outage)
        self.outage = outage
        self.claims = claims
        self.graph = graph
        self.settings = settings
        self.cache = cache
        self._configs: dict[str, RunConfig] = {}
        self._contexts: dict[tuple[str, str, int], RunContext] = {}
        self._policies: dict[str, CallPolicy] = {}
        self._sharers = 1

    async def play(self, job: DialogueJob, *, job_id: int | None = None) -> DialogueOutcome:
        """Play the job's dialogue on from its last checkpoint, holding its lock; raise :class:`DialogueFailed` if it
        fails.

        A store outage midway (its lock may have gone with its connection) waits for the store, takes the lock
        again and plays on from the last checkpoint: it never fails the job (checkpoints/store_outage.py).
        """

        async def once() -> DialogueOutcome:
            try:
                stored = await self._run_config(job.run_id)
            except LookupError:  # the run was deleted before its job came up: nothing to play
                return DialogueOutcome(job.thread_id, "deleted")
            if job.budget is not None and not await self._within_budget(job):
                return DialogueOutcome(
                    job.thread_id, "held"
                )  # the job succeeds; enqueue again with a higher --max-cost
            context = self._context(job, stored)
            try:
                async with self.claims.claim(job.thread_id, run_id=job.run_id, job_id=job_id) as claim:
                    outcome = await play_dialogue(
                        stored,
                        job.seed_record(),
                        graph=self.graph,
                        write=self.write,
                        context=context,
                        notify=lambda *_: None,
                        script=job.script,
                        mode=job.mode,
                        target=job.target,
                        sample=job.sample,
                    )
                    claim.outcome = outcome.status
            except RunDeleted:  # deleted while its job waited: the job is done, nothing was played
                return DialogueOutcome(job.thread_id, "deleted")
            return outcome

        outcome = await play_through_outages(self.outage, once)
        if outcome.status == "failed":
            raise DialogueFailed(f"dialogue {job.thread_id} failed: {outcome.error or 'see its error in the store'}")
        return outcome

    async def _within_budget(self, job: DialogueJob) -> bool:
        """A dialogue already started plays on; a new one starts only if the run's spend, what its dialogues in flight
        on every worker reserve, and its own expected cost stay within the cap (evals.cost.budget_allows).

        The check and the dialogue's row (which reserves its expected cost for the others) are one transaction
        under a lock per run, so two workers never both take the last room under the cap."""
        if self.settings.budget is None:
            raise RuntimeError(f"run {job.run_id} has a --max-cost but this worker cannot check it: update the worker")
        check = self.settings.budget

        def allowed(store: Writer) -> bool | None:
            if store.get_dialogue(job.thread_id) is not None:
                return True
            with store.transaction():
                lock_run(store, job.run_id)
                if store.get_dialogue(job.thread_id) is None:
                    verdict = check(store, job.run_id, job.budget, job.thread_id)  # type: ignore[arg-type]
                    if not verdict:
                        return verdict
                    store.upsert_dialogue(
                        job.thread_id,
                        run_id=job.run_id,
                        seed_id=job.seed["id"],
                        mode=job.mode,
                        target=job.target,
                        status="running",
                        started_at=now(),
                    )
            return True

        while (verdict := await asyncio.wrap_future(self.write.submit(allowed))) is None:
            await asyncio.sleep(_BUDGET_POLL_S)  # dialogues in flight (on any worker) may leave room when they end
        return verdict

    def share_rate_limits(self, sharers: int) -> None:
        """Use 1/``sharers`` of each run's rate limits (unless this worker was given its own)."""
        self._sharers = max(1, sharers)
        if self.settings.rate_limits is None:
            for policy in self._policies.values():
                policy.share_among(self._sharers)

    async def _run_config(self, run_id: str) -> RunConfig:
        if run_id not in self._configs:
            run = await asyncio.wrap_future(self.write.submit(lambda store: store.get_run(run_id)))
            if run is None:
                raise LookupError(f"run {run_id!r} is not in the database")
            self._configs[run_id] = stored_run_config(run["config"], run_id=run_id)
        return self._configs[run_id]

    def _context(self, job: DialogueJob, stored: RunConfig) -> RunContext:
        if (policy := self._policies.get(job.run_id)) is not None:
            policy.reset_outages_past_budget()  # each job gets the provider a fresh --outage-budget
        key = (job.run_id, job.target, job.sample)
        if key not in self._contexts:
            seed = sample_seed(stored.sampling_seed, job.sample) if job.sample else None
            config = stored.for_dialogue(target=job.target, sampling_seed=seed, base_url=self.settings.base_url)
            built = config.build_models(self._policy(job.run_id, config))
            self._contexts[key] = RunContext(
                models=replace(built.models, target=built.targets[0]),
                sampling_seed=config.sampling_seed,
                leakage=config.leakage,
            )
        return self._contexts[key]

    def _policy(self, run_id: str, config: RunConfig) -> CallPolicy:
        """One call policy per run in this worker: its dialogues share retries and rate gates, as in one graph.run."""
        if run_id not in self._policies:
            if self.settings.rate_limits is not None:
                config = config.model_copy(update={"rate_limits": dict(self.settings.rate_limits)})
            policy = config.call_policy(self.cache)
            if self.settings.rate_limits is None:
                policy.share_among(self._sharers)
            self._policies[run_id] = policy
        return self._policies[run_id]

    def close(self) -> None:
        self.write.close()


def worker_app(url: PostgresURL, outage: StoreOutage | None = None) -> App:
    """The queue's app with the dialogue task registered."""
    app = queue_app(url, outage=outage)

    @app.task(name=TASK, queue=QUEUE, pass_context=True, retry=RETRY)
    async def play(context: JobContext, **args: Any) -> str:
        player: DialoguePlayer = context.additional_context["player"]
        outcome = await player.play(DialogueJob(**args), job_id=context.job.id)
        return outcome.status

    return app


async def retry_stalled_jobs(app: App, *, stalled_after_s: float) -> int:
    """Put back to 'todo' every dialogue job whose worker stopped sending heartbeats; how many.

    Every worker looks for stalled jobs, at start and every few seconds, so another may put a job back between
    this one finding it and retrying it: the queue then refuses the second retry (the job is no longer running),
    which leaves the job as it should be and is skipped.
    """
    stalled = list(await app.job_manager.get_stalled_jobs(queue=QUEUE, seconds_since_heartbeat=stalled_after_s))
    retried = 0
    for job in stalled:
        try:
            await app.job_manager.retry_job(job)
        except ConnectorException as exc:
            if not isinstance(exc.__cause__, psycopg.errors.RaiseException):
                raise  # the database itself, not the queue's refusal
            log.info("job %s (%s) was already put back by another worker", job.id, job.lock)
            continue
        log.warning("retried job %s (%s): its worker stopped", job.id, job.lock)
        retried += 1
    await app.job_manager.prune_stalled_workers(seconds_since_heartbeat=stalled_after_s)
    return retried


async def _watch(app: App, player: DialoguePlayer, stalled_after_s: float) -> None:
    """Every few seconds: retry stalled workers' jobs, and take this worker's share of the rate limits.

    Not while the store is away or just back: every worker's heartbeat stopped with it, and they need
    ``stalled_after_s`` to show they live again before any is taken for dead.
    """
    while True:
        try:
            if player.outage is None or not player.outage.recently_down(
                within_s=stalled_after_s + player.outage.max_pause_s
            ):
                await retry_stalled_jobs(app, stalled_after_s=stalled_after_s)
            player.share_rate_limits(await live_workers(app, seen_within_s=stalled_after_s))
        except OutageError:
            return  # past the budget: the worker is stopping
        except Exception:
            log.exception("checking for stalled jobs failed")
        await asyncio.sleep(max(1.0, stalled_after_s / 3))


async def run_worker(url: PostgresURL, settings: WorkerSettings) -> None:
    """Play dialogue jobs from ``url`` until stopped (SIGINT/SIGTERM) or, with ``wait=False``, the queue is empty."""
    ensure_queue_schema(url)
    store = open_writer(url)
    outage = StoreOutage(url, budget_s=settings.store_outage_budget_s)
    cache = ResponseCache(url) if settings.cache else None
    if cache is not None:
        cache.outage = outage
    app = worker_app(url, outage)
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()  # set when an outage outlasts the budget

    def stop(exc: BaseException) -> None:
        logging.disable(logging.CRITICAL)  # what fails while stopping is no news: the one line is the CLI's
        loop.call_soon_threadsafe(lambda: gone.done() or gone.set_exception(exc))  # type: ignore[func-returns-value]

    outage.on_exceeded(stop)
    try:
        async with open_postgres_saver(url, outage=outage) as saver, app.open_async():
            claims = DialogueClaims(url, worker=settings.name)
            saver.fence = claims.confirm  # no checkpoint from a play whose lock went with its connection
            player = DialoguePlayer(store, build_graph(saver), settings, cache, claims, outage)
            await retry_stalled_jobs(app, stalled_after_s=settings.stalled_after_s)
            player.share_rate_limits(await live_workers(app, seen_within_s=settings.stalled_after_s) + 1)
            watcher = asyncio.create_task(_watch(app, player, settings.stalled_after_s))
            with playing_collector():  # for the worker's life: its start-up objects are not scanned again
                try:
                    while True:  # draining: a job due for a retry later still waits, so come back for it
                        worker = asyncio.create_task(
                            app.run_worker_async(
                                queues=[QUEUE],
                                concurrency=settings.concurrency,
                                wait=settings.wait,
                                update_heartbeat_interval=settings.heartbeat_s,
                                stalled_worker_timeout=settings.stalled_after_s,
                                additional_context={"player": player},
                                install_signal_handlers=settings.wait,
                            )
                        )
                        await asyncio.wait([worker, gone], return_when=asyncio.FIRST_COMPLETED)
                        if gone.done():  # the store is away past the budget: stop now, its jobs go to the next worker
                            worker.cancel()
                            raise gone.exception()  # type: ignore[misc]
                        try:
                            worker.result()
                        except (
                            Exception
                        ) as exc:  # taken for dead and pruned by another worker (its loop stalled): register again
                            if not _pruned(exc):
                                raise
                            log.warning(
                                "this worker was taken for dead (no heartbeat for %g s) and its jobs handed on: "
                                "registering again",
                                settings.stalled_after_s,
                            )
                            continue
                        if settings.wait or not await waiting_jobs(app):
                            break
                        await asyncio.sleep(1.0)
                finally:
                    watcher.cancel()
                    player.close()
                    await claims.close(settle=not gone.done())  # the store away: no waiting for it
    finally:
        if cache is not None:
            cache.close()
        store.close()


def _pruned(exc: BaseException) -> bool:
    """Whether procrastinate failed because this worker's row is gone (another worker pruned it as stalled)."""
    import psycopg

    cause = exc.__cause__
    return isinstance(cause, psycopg.errors.ForeignKeyViolation) and "worker_id" in str(cause)
