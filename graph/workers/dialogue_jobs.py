"""Dialogues handed to workers as procrastinate jobs in the run's PostgreSQL database: one job per dialogue.

Exactly once per dialogue: a job's ``lock`` is its thread id (procrastinate never runs two jobs with one lock
at once) and so is its ``queueing_lock`` (a second waiting job for it is refused, so enqueuing twice is
harmless); a dialogue already finished, or with a job waiting or running, is not enqueued again. The worker
also holds the dialogue's advisory lock while playing it (checkpoints/postgres/claims.py), which covers a stalled job
handed on while its first worker still lives. procrastinate's schema is applied once, under an advisory lock,
and stamped with its version: a database whose queue schema another procrastinate version made is refused
with what to do, not half-used.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from procrastinate import App, PsycopgConnector
from procrastinate.exceptions import AlreadyEnqueued

from checkpoints.location import CONNECT_TIMEOUT_S, PostgresURL, unreachable
from checkpoints.paths import StoreError
from checkpoints.postgres.saver import RECONNECT_TIMEOUT_S
from checkpoints.run_record import RunRecord
from checkpoints.store import Writer
from checkpoints.store_outage import StoreOutage
from graph.config.run_config import RunConfig
from graph.running.playing import dialogue_thread_id, plan_dialogues
from graph.running.run_records import record_run
from nodes.modes import ModeScripts
from seeds import Seed

QUEUE = "dymt-dialogues"
TASK = "dymt.play_dialogue"
# pg_advisory_xact_lock key for procrastinate's schema: 'dymt' 'proc' (the others: 'cksv', 'schm').
QUEUE_SCHEMA_LOCK = (0x64796D74, 0x70726F63)
# Job statuses that mean "someone will play it" (a failed or cancelled job may be enqueued again).
PENDING = ("todo", "doing")


@dataclass(frozen=True)
class DialogueJob:
    """One dialogue of a run, as a job's JSON arguments: enough for a worker to play it from the stored run."""

    run_id: str
    thread_id: str
    seed: dict[str, str]
    mode: str
    target: str
    sample: int = 0
    script: list[str] | None = None
    budget: dict[str, Any] | None = None
    """--max-cost of the run (evals.cost.budget_record): no new dialogue once the run's total reaches it."""

    def seed_record(self) -> Seed:
        return Seed(id=self.seed["id"], category=self.seed["category"], statement=self.seed["statement"])


@dataclass(frozen=True)
class EnqueueResult:
    enqueued: int
    already: int  # waiting, running or finished already
    run_id: str = ""


def queue_app(url: PostgresURL, *, outage: StoreOutage | None = None) -> App:
    """A procrastinate app on the run's database (its own small pool); the task is registered by the worker.

    With ``outage`` (workers) its queries and listener wait through store outages (graph/workers/queue_outages.py).
    """
    if outage is None:
        return App(connector=PsycopgConnector(conninfo=url.url, min_size=1, max_size=4, timeout=CONNECT_TIMEOUT_S))
    from graph.workers.queue_outages import OutageRidingConnector

    return App(
        connector=OutageRidingConnector(
            outage=outage,
            conninfo=url.url,
            min_size=1,
            max_size=4,
            timeout=CONNECT_TIMEOUT_S,
            reconnect_timeout=RECONNECT_TIMEOUT_S,
        )
    )


def queue_schema_version() -> str:
    """The version of procrastinate's schema this installation applies: its newest migration's number."""
    from importlib.resources import files

    names = [p.name for p in files("procrastinate.sql.migrations").iterdir() if p.name.endswith(".sql")]
    return max(name.split("_", 1)[0] for name in names)


def ensure_queue_schema(url: PostgresURL) -> None:
    """Apply procrastinate's schema unless it is there, once across processes (its DDL is not idempotent).

    The applied schema is stamped with its version (a comment on the jobs table); a queue made by another
    procrastinate version is refused with what to do. One made before stamps existed is stamped as it is.
    """
    from procrastinate.schema import SchemaManager

    version = queue_schema_version()
    try:
        with psycopg.connect(url.url, connect_timeout=CONNECT_TIMEOUT_S) as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", QUEUE_SCHEMA_LOCK)
            if conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()[0] is None:  # type: ignore[index]  # a query that always returns a row
                conn.execute(SchemaManager.get_schema())  # no parameters: '%' in it is literal
                stamp = None
            else:
                stamp = conn.execute("SELECT obj_description('procrastinate_jobs'::regclass, 'pg_class')").fetchone()[0]  # type: ignore[index]
            if stamp is None or not stamp.startswith(SCHEMA_STAMP):
                conn.execute(f"COMMENT ON TABLE procrastinate_jobs IS '{SCHEMA_STAMP}{version}'")
            elif stamp != SCHEMA_STAMP + version:
                raise StoreError(
                    f"the job queue in {url} has procrastinate schema {stamp.removeprefix(SCHEMA_STAMP)}, this "
                    "installation "
                    f"needs {version}: stop every worker, apply procrastinate's migrations between them "
                    "(procrastinate.readthedocs.io, 'Migrate the schema'), then set the stamp with "
                    f"COMMENT ON TABLE procrastinate_jobs IS '{SCHEMA_STAMP}{version}'"
                )
    except psycopg.OperationalError:
        raise unreachable(url) from None


SCHEMA_STAMP = "dymt-esb: procrastinate schema "


async def waiting_jobs(app: App) -> int:
    """Dialogue jobs still to play: waiting now or due for a retry later."""
    row = await app.connector.execute_query_one_async(
        "SELECT count(*) AS n FROM procrastinate_jobs WHERE queue_name = %(queue)s AND status = 'todo'", queue=QUEUE
    )
    return int(row["n"])


async def live_workers(app: App, *, seen_within_s: float) -> int:
    """How many workers (of any machine) sent a heartbeat in the last ``seen_within_s`` seconds."""
    row = await app.connector.execute_query_one_async(
        "SELECT count(*) AS n FROM procrastinate_workers WHERE last_heartbeat > now() - make_interval(secs => %(s)s)",
        s=seen_within_s,
    )
    return int(row["n"])


def dialogue_jobs(
    config: RunConfig,
    seeds: Sequence[Seed],
    by_mode: Mapping[str, ModeScripts],
    targets: Sequence[str],
    budget: dict[str, Any] | None = None,
) -> list[DialogueJob]:
    """The run's dialogues as jobs, in the order :func:`graph.running.playing.execute_run` plays them (``budget``: its
    cost cap)."""
    run_id = config.run_id
    if run_id is None:  # the caller gives the run its id before planning its jobs (dymt.queueing.enqueue)
        raise ValueError("dialogue_jobs needs a config with its run_id")
    return [
        DialogueJob(
            run_id=run_id,
            thread_id=dialogue_thread_id(config, seed, mode, target, sample),
            seed={"id": seed.id, "category": seed.category, "statement": seed.statement},
            mode=mode,
            target=target,
            sample=sample,
            script=by_mode[mode].script(seed.id),
            budget=budget,
        )
        for seed, mode, target, sample in plan_dialogues(config, seeds, by_mode, targets)
    ]


def enqueue_run(
    url: PostgresURL,
    store: Writer,
    record: RunRecord | Mapping[str, Any],
    jobs: Sequence[DialogueJob],
    by_mode: Mapping[str, ModeScripts],
) -> EnqueueResult:
    """Record the run and defer a job per dialogue not finished and not already waiting or running."""
    ensure_queue_schema(url)
    record_run(store, record, by_mode, planned=len(jobs))
    return asyncio.run(_defer(url, store, jobs))


async def _defer(url: PostgresURL, store: Writer, jobs: Sequence[DialogueJob]) -> EnqueueResult:
    finished = {d["thread_id"] for d in store.dialogues(jobs[0].run_id) if d["status"] == "finished"} if jobs else set()
    app = queue_app(url)
    enqueued = already = 0
    async with app.open_async():
        pending = {row["thread_id"] for row in await _job_rows(app, jobs[0].run_id if jobs else "", statuses=PENDING)}
        for job in jobs:
            if job.thread_id in finished or job.thread_id in pending:
                already += 1
                continue
            try:
                await app.configure_task(
                    TASK, queue=QUEUE, lock=job.thread_id, queueing_lock=job.thread_id
                ).defer_async(**asdict(job))
            except AlreadyEnqueued:  # another enqueuer got there first
                already += 1
                continue
            enqueued += 1
    return EnqueueResult(enqueued, already)


async def _job_rows(app: App, run_id: str, *, statuses: Sequence[str] | None = None) -> list[dict[str, Any]]:
    rows = await app.connector.execute_query_all_async(
        "SELECT id, status::text AS status, args->>'thread_id' AS thread_id FROM procrastinate_jobs "
        "WHERE queue_name = %(queue)s AND task_name = %(task)s AND args->>'run_id' = %(run_id)s",
        queue=QUEUE,
        task=TASK,
        run_id=run_id,
    )
    return [r for r in rows if statuses is None or r["status"] in statuses]


async def abort_run_jobs(url: PostgresURL, run_id: str) -> tuple[int, int]:
    """Cancel a run's waiting jobs and ask the workers playing the others to abort them (the play stops at once, its
    job is not retried); (jobs asked to abort, waiting jobs cancelled)."""
    if not _run_jobs(url, "SELECT 1", ()):  # no queue in this database: nothing was ever enqueued
        return 0, 0
    app = queue_app(url)
    async with app.open_async():
        rows = await _job_rows(app, run_id, statuses=PENDING)
        waiting = [r["id"] for r in rows if r["status"] == "todo"]
        doing = [r["id"] for r in rows if r["status"] == "doing"]
        for job_id in waiting:  # cancelled, not deleted: their rows go with the run, and the tables are vacuumed
            await app.job_manager.cancel_job_by_id_async(job_id)
        for job_id in doing:
            await app.job_manager.cancel_job_by_id_async(job_id, abort=True)
    return len(doing), len(waiting)


def busy_jobs(url: PostgresURL, run_id: str, *, seen_within_s: float = 60.0) -> int:
    """A run's jobs that a worker with a recent heartbeat plays now (a dead worker's stay 'doing' until put back)."""
    rows = _run_jobs(
        url,
        "SELECT count(*) FROM procrastinate_jobs j JOIN procrastinate_workers w ON w.id = j.worker_id "
        "WHERE j.queue_name = %s AND j.task_name = %s AND j.args->>'run_id' = %s AND j.status = 'doing' "
        "AND w.last_heartbeat > now() - make_interval(secs => %s)",
        (QUEUE, TASK, run_id, seen_within_s),
    )
    return int(rows[0][0]) if rows else 0


def job_counts(url: PostgresURL, run_id: str) -> dict[str, int]:
    """How many of a run's jobs are in each procrastinate status (todo, doing, succeeded, failed, ...); {} if none."""
    rows = _run_jobs(
        url,
        "SELECT status::text, count(*) FROM procrastinate_jobs WHERE queue_name = %s AND task_name = %s "
        "AND args->>'run_id' = %s GROUP BY status",
        (QUEUE, TASK, run_id),
    )
    return {status: n for status, n in rows}


def run_budget(url: PostgresURL, run_id: str) -> dict[str, Any] | None:
    """The --max-cost its latest enqueue gave a run's jobs (evals.cost.budget_record), or None."""
    rows = _run_jobs(
        url,
        "SELECT args->'budget' FROM procrastinate_jobs WHERE queue_name = %s AND task_name = %s "
        "AND args->>'run_id' = %s AND args->'budget' IS NOT NULL AND jsonb_typeof(args->'budget') = 'object' "
        "ORDER BY id DESC LIMIT 1",
        (QUEUE, TASK, run_id),
    )
    return rows[0][0] if rows else None


def job_threads(url: PostgresURL, run_id: str, status: str = "failed") -> list[str]:
    """Thread ids of a run's jobs in ``status`` (failed: their last attempt raised; succeeded: played or held back)."""
    rows = _run_jobs(
        url,
        "SELECT DISTINCT args->>'thread_id' FROM procrastinate_jobs WHERE queue_name = %s AND task_name = %s "
        "AND args->>'run_id' = %s AND status = %s",
        (QUEUE, TASK, run_id, status),
    )
    return sorted(r[0] for r in rows)


def _run_jobs(url: PostgresURL, query: str, params: tuple) -> list[tuple]:
    """Rows of a query on the queue's jobs table (none before any run was enqueued); one line if the server is away."""
    try:
        conn = psycopg.connect(url.url, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.OperationalError:
        raise unreachable(url) from None
    with conn:
        if conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()[0] is None:  # type: ignore[index]
            return []
        return conn.execute(query, params).fetchall()
