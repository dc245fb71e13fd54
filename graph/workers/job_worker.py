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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import psycopg
from langgraph.graph.state import CompiledStateGraph
from procrastinate import App, BaseRetryStrategy, JobContext, RetryDecision
from procrastinate.exceptions import JobAborted
from procrastinate.worker import Worker

from checkpoints.cache import ResponseCache
from checkpoints.location import PostgresURL
from checkpoints.outages import OutageError
from checkpoints.postgres.claims import DialogueBusy, DialogueClaims, RunDeleted, assert_playing, writer_application
from checkpoints.postgres.db import is_postgres
from checkpoints.samples import sample_seed
from checkpoints.store import Writer, now, open_writer
from checkpoints.store_outage import DEFAULT_BUDGET_S, StoreOutage, play_through_outages
from graph.config.run_config import RunConfig
from graph.config.stored import stored_run_config
from graph.running.gc_settings import playing_collector
from graph.running.playing import DialogueOutcome, RunDialogue, StoreWriter, open_graph, play_dialogue
from graph.workers.dialogue_jobs import (
    QUEUE,
    TASK,
    DialogueJob,
    ensure_queue_schema,
    live_workers,
    queue_app,
    waiting_jobs,
)
from graph.workers.queue_outages import OutageRidingConnector
from graph.workers.stalled_jobs import retry_stalled_jobs
from models.call_policy import CallPolicy
from nodes.context import RunContext

log = logging.getLogger(__name__)
_BUDGET_POLL_S = 1.0
DEFAULT_GRACE_S = 20.0  # --grace: inside a Kubernetes pod's 30 s, with room to hand the rest back and unregister
LOCK_WAIT_S = 10.0  # how long a slot waits for a dialogue another session holds before it moves on
BUSY_RETRY_S = 3  # ... and how soon that dialogue's job comes up again
RETRY_WAIT_S = 5  # a failed dialogue's job is tried again after this long
FAILED_PLAYS = 3  # failed plays of one job before it stays failed (enqueue the run again to go on)


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
    grace_s: float = DEFAULT_GRACE_S  # asked to stop: dialogues in play get this long, the rest go back to the queue
    lock_wait_s: float = LOCK_WAIT_S  # a dialogue another session holds is waited for this long, then handed back


class DialogueFailed(Exception):
    """A dialogue ended failed (a model kept failing): its job fails, and is tried again while it has tries left."""

    def __init__(self, message: str, *, failed_plays: int) -> None:
        super().__init__(message)
        self.failed_plays = failed_plays


class DialogueRetry(BaseRetryStrategy):
    """When a dialogue's job is tried again, and after how long.

    A dialogue another session holds (:class:`DialogueBusy`) goes back to the queue for a moment, however often:
    the slot moves on to other work. A play stopped because the worker stops (its grace ran out, or a second
    signal) goes back at once, for another worker to play on from its last checkpoint. A dialogue that failed is
    tried again until :data:`FAILED_PLAYS` plays of its job failed (counted in ``dialogue_plays``, so neither of the
    above spends its tries); any other error, twice.
    """

    def get_retry_decision(self, *, exception: BaseException, job: Any) -> RetryDecision | None:
        if isinstance(exception, DialogueBusy):
            return RetryDecision(retry_in={"seconds": BUSY_RETRY_S})
        if isinstance(exception, (asyncio.CancelledError, JobAborted)):
            return RetryDecision(retry_in={"seconds": 0})
        if isinstance(exception, DialogueFailed):
            return RetryDecision(retry_in={"seconds": RETRY_WAIT_S}) if exception.failed_plays < FAILED_PLAYS else None
        return RetryDecision(retry_in={"seconds": RETRY_WAIT_S}) if job.attempts < 2 else None


class WorkerControl:
    """Stops a running worker from outside (the command's signal handlers): :meth:`drain`, then :meth:`stop_now`."""

    def __init__(self) -> None:
        self.stopping = 0  # 0 playing, 1 draining, 2 stopping now
        self.worker: Worker | None = None
        self.player: DialoguePlayer | None = None

    def drain(self) -> None:
        """Take no new dialogue; those in play finish within the grace, the rest go back to the queue."""
        self.stopping = max(self.stopping, 1)
        if self.worker is not None:
            self.worker.stop()

    def stop_now(self) -> None:
        """Stop the dialogues in play now: each goes back to the queue at its last checkpoint, its play row closed."""
        self.stopping = 2
        if self.worker is not None:
            self.worker.stop()
        if self.player is not None:
            self.player.stop_plays()

    @property
    def handed_back(self) -> int:
        return self.player.handed_back if self.player is not None else 0


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
        self._playing: set[asyncio.Task[Any]] = set()  # the job tasks playing a dialogue now
        self.handed_back = 0  # plays stopped because the worker stops: their jobs went back to the queue
        # Whether a job is still this worker's (graph/workers/queue_outages.py): asked before a play is taken up again
        # after its lock was lost, since a worker taken for stalled finds its job handed on when it wakes.
        self.still_mine: Callable[..., Awaitable[bool]] | None = None

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
                    # Handed on before this worker took the lock (it stalled between fetching the job and playing
                    # it, or a store outage cut its play): the job's new worker plays it. Asked under the lock: a job
                    # is handed on only with its lock free or its holder fenced, so its next player waits for this one.
                    mine = self.still_mine
                    if job_id is not None and mine is not None and not await mine(job_id, say=False):
                        claim.outcome = "handed on"
                        return DialogueOutcome(job.thread_id, "handed on")
                    outcome = await play_dialogue(
                        self.graph,
                        RunDialogue(stored, job.seed_record(), job.mode, job.target, job.sample, script=job.script),
                        write=self.write,
                        context=context,
                        notify=lambda *_: None,
                    )
                    claim.outcome = outcome.status
            except RunDeleted:  # deleted while its job waited: the job is done, nothing was played
                return DialogueOutcome(job.thread_id, "deleted")
            return outcome

        task = asyncio.current_task()
        if task is not None:
            self._playing.add(task)
        try:
            outcome = await play_through_outages(self.outage, once)
        except asyncio.CancelledError:
            self.handed_back += 1  # the worker stops: the job goes back to the queue (DialogueRetry)
            raise
        finally:
            if task is not None:
                self._playing.discard(task)
        if outcome.status == "failed":
            raise DialogueFailed(
                f"dialogue {job.thread_id} failed: {outcome.error or 'see its error in the store'}",
                failed_plays=await self.claims.failed_plays(job_id, job.thread_id),
            )
        return outcome

    def stop_plays(self) -> None:
        """Stop every dialogue in play now (each at its last checkpoint; its job goes back to the queue)."""
        for task in list(self._playing):
            task.cancel()

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
                judge_reasoning=config.judge_reasoning,
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

    @app.task(name=TASK, queue=QUEUE, pass_context=True, retry=DialogueRetry())
    async def play(context: JobContext, **args: Any) -> str:
        player: DialoguePlayer = context.additional_context["player"]
        outcome = await player.play(DialogueJob(**args), job_id=context.job.id)
        return outcome.status

    return app


async def _watch(app: App, player: DialoguePlayer, stalled_after_s: float, control: WorkerControl) -> None:
    """Every few seconds: retry stalled workers' jobs, and take this worker's share of the rate limits.

    Not while the store is away or just back: every worker's heartbeat stopped with it, and they need
    ``stalled_after_s`` to show they live again before any is taken for dead.
    """
    while True:
        try:
            if player.outage is None or not player.outage.recently_down(
                within_s=stalled_after_s + player.outage.max_pause_s
            ):
                me = control.worker.worker_id if control.worker is not None else None
                await retry_stalled_jobs(app, stalled_after_s=stalled_after_s, me=me, worker=player.claims.worker)
            player.share_rate_limits(await live_workers(app, seen_within_s=stalled_after_s))
        except OutageError:
            return  # past the budget: the worker is stopping
        except Exception as exc:  # noqa: BLE001 - one line; the next round tries again
            log.warning("checking for stalled jobs failed: %s", " ".join(str(exc).split())[:300])
        await asyncio.sleep(max(1.0, stalled_after_s / 3))


async def _renew(app: App, control: WorkerControl, every_s: float) -> None:
    """This worker's heartbeat, renewed for as long as it is registered, its drain included (procrastinate stops its
    own when it starts stopping): a draining worker is never taken for stalled, its jobs never handed on under it."""
    while True:
        await asyncio.sleep(every_s)
        worker_id = control.worker.worker_id if control.worker is not None else None
        if worker_id is None:
            continue
        try:
            await app.job_manager.update_heartbeat(worker_id)
        except OutageError:
            return
        except Exception as exc:  # noqa: BLE001 - the next renewal tries again
            log.debug("renewing the heartbeat failed: %s", exc)


async def run_worker(url: PostgresURL, settings: WorkerSettings, control: WorkerControl | None = None) -> None:
    """Play dialogue jobs from ``url`` until ``control`` stops it (the command's SIGINT/SIGTERM) or, with
    ``wait=False``, the queue is empty.

    Asked to drain, the worker takes no new dialogue and gives those in play ``settings.grace_s``; what has not
    finished by then stops at its last checkpoint and goes back to the queue for another worker. Its heartbeat is
    renewed all the while, so no other worker takes it for stalled.
    """
    control = control or WorkerControl()
    ensure_queue_schema(url)
    store = open_writer(url, application_name=writer_application(settings.name))  # fenced with its claims
    outage = StoreOutage(url, budget_s=settings.store_outage_budget_s)
    cache = ResponseCache(url) if settings.cache else None
    if cache is not None:
        cache.outage = outage
    app = worker_app(url, outage)
    app.perform_import_paths()
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()  # set when an outage outlasts the budget

    def stop(exc: BaseException) -> None:
        logging.disable(logging.CRITICAL)  # what fails while stopping is no news: the one line is the CLI's
        loop.call_soon_threadsafe(lambda: gone.done() or gone.set_exception(exc))  # type: ignore[func-returns-value]

    outage.on_exceeded(stop)
    try:
        async with open_graph(url, outage=outage) as graph, app.open_async():
            claims = DialogueClaims(url, worker=settings.name, wait_s=settings.lock_wait_s)
            cast(
                Any, graph.checkpointer
            ).fence = claims.confirm  # no checkpoint from a play whose lock went with its connection
            player = DialoguePlayer(store, graph, settings, cache, claims, outage)
            player.write.fence = claims.confirm  # ... nor any row of its dialogue
            player.write.guard = lambda store, thread_id: assert_playing(store.db, settings.name, thread_id)
            if isinstance(app.connector, OutageRidingConnector):
                player.still_mine = app.connector.still_mine
            control.player = player
            await retry_stalled_jobs(app, stalled_after_s=settings.stalled_after_s, worker=settings.name)
            player.share_rate_limits(await live_workers(app, seen_within_s=settings.stalled_after_s) + 1)
            side = [
                asyncio.create_task(_watch(app, player, settings.stalled_after_s, control)),
                asyncio.create_task(_renew(app, control, settings.heartbeat_s)),
            ]
            with playing_collector():  # for the worker's life: its start-up objects are not scanned again
                try:
                    while not control.stopping:  # draining: a job due for a retry later still waits: come back for it
                        control.worker = _queue_worker(app, settings, player)
                        worker = asyncio.create_task(control.worker.run())
                        await asyncio.wait([worker, gone], return_when=asyncio.FIRST_COMPLETED)
                        if gone.done():  # the store is away past the budget: stop now, its jobs go to the next worker
                            worker.cancel()
                            raise gone.exception()  # type: ignore[misc]
                        try:
                            worker.result()
                        except Exception as exc:  # taken for dead and pruned by another worker (its loop stalled)
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
                    for task in side:
                        task.cancel()
                    player.close()
                    await claims.close(settle=not gone.done())  # the store away: no waiting for it
    finally:
        if cache is not None:
            cache.close()
        store.close()


def log_tasks() -> None:
    """Log what every task of this worker is doing now (each slot's play, the heartbeat, the queue's loop): the
    chain of calls each one waits in, outermost first. For a worker that seems stuck: ``kill -USR1 <pid>``
    (cli/worker.py)."""
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    lines = [f"{len(tasks)} task(s) now:"]
    for task in tasks:
        where = " > ".join(
            f"{frame.f_code.co_name} ({Path(frame.f_code.co_filename).name}:{frame.f_lineno})"
            for frame in _awaiting(task.get_coro())
        )
        lines.append(f"  {task.get_name()}: {where or 'not started'}")
    log.warning("\n".join(lines))


def _awaiting(coro: Any) -> list[Any]:
    """The frames of a suspended coroutine and of what it awaits, down to the innermost one (at most 40)."""
    frames: list[Any] = []
    while coro is not None and len(frames) < 40:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(coro, "ag_frame", None)
        if frame is not None:
            frames.append(frame)
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None) or getattr(coro, "ag_await", None)
    return frames


def _queue_worker(app: App, settings: WorkerSettings, player: DialoguePlayer) -> Worker:
    """procrastinate's worker of the dialogue queue, with this worker's settings."""
    return Worker(
        app,
        queues=[QUEUE],
        concurrency=settings.concurrency,
        wait=settings.wait,
        update_heartbeat_interval=settings.heartbeat_s,
        stalled_worker_timeout=settings.stalled_after_s,
        shutdown_graceful_timeout=settings.grace_s,
        additional_context={"player": player},
        install_signal_handlers=False,  # the command's handlers (cli/worker.py) drive control
    )


def _pruned(exc: BaseException) -> bool:
    """Whether procrastinate failed because this worker's row is gone (another worker pruned it as stalled)."""

    cause = exc.__cause__
    return isinstance(cause, psycopg.errors.ForeignKeyViolation) and "worker_id" in str(cause)
