"""Handing a run to workers: ``dymt.enqueue(config)`` records the run in its PostgreSQL store and queues one job per
dialogue for ``python -m graph.worker``; a cost cap travels with every job."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError
from checkpoints.store import open_writer
from dymt.errors import DymtError
from dymt.preparing import dialogue_estimate
from dymt.session import Invocation
from evals.cost import budget_record
from graph.config.run_config import RunConfig
from graph.running.run_records import RunConflictError, check_run_compatible

if TYPE_CHECKING:  # procrastinate loads only when a run is enqueued
    from graph.workers.dialogue_jobs import EnqueueResult


def enqueue(
    config: RunConfig | Invocation | None = None, /, *, given: Iterable[str] | None = None, **options: Any
) -> EnqueueResult:
    """Record the run (``db`` a ``postgresql://`` URL) and queue its dialogues for workers; returns how many were
    queued and how many were queued or finished already. A run id given again queues only what is left. ``config``
    may be an :class:`Invocation` already made (its run id, plan and checks kept: what the command asks about first)."""
    from graph.workers.dialogue_jobs import dialogue_jobs, enqueue_run

    invocation = config if isinstance(config, Invocation) else Invocation(config, given=given, **options)
    prepared, run_config = invocation.prepared, invocation.config
    server = prepared.server
    if server is None:
        raise DymtError("enqueue needs a PostgreSQL database: db='postgresql://USER@HOST/DB' or DYMT_ESB_DB")
    pricing = prepared.pricing
    built, record = invocation.built_record()
    chosen = run_config.models
    budget = None
    if run_config.max_cost is not None and pricing is not None:
        budget = budget_record(
            run_config.max_cost,
            pricing,
            [chosen.user, chosen.judge, *chosen.targets],
            estimate=dialogue_estimate(prepared.plan, server, pricing),
        )
    try:
        store = open_writer(server)
        try:
            check_run_compatible(store, run_config, record)
            jobs = dialogue_jobs(
                run_config, prepared.plan.seeds, prepared.plan.scripts_by_mode, list(chosen.targets), budget=budget
            )
            queued = enqueue_run(server, store, record, jobs, prepared.plan.scripts_by_mode)
            return dataclasses.replace(queued, run_id=invocation.run_id)
        finally:
            store.close()
    except (StoreError, SchemaTooNewError, RunConflictError) as exc:
        raise DymtError(str(exc)) from None


__all__ = ["enqueue"]
