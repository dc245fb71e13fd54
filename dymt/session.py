"""One invocation playing a prepared run: here on the event loop, or in N processes on one SQLite file; how many
dialogues at once; the run's live status and its provider outages as events; the result it sums up to."""

from __future__ import annotations

import asyncio
import dataclasses
import shlex
import threading
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from checkpoints.cache import ResponseCache
from checkpoints.checkpointer import open_checkpointer
from checkpoints.location import DbLocation
from checkpoints.readers import open_reader
from checkpoints.run_record import RunRecord
from checkpoints.store_outage import DEFAULT_BUDGET_S
from dymt.events import DialogueProgress, EventSink, OutageBegan, OutageEnded, Paused, RunStarted
from dymt.preparing import Prepared
from dymt.results import EXIT_OK, EXIT_OUTAGE, OutagePastBudget, RunResult, exit_status
from evals.cost import CostCap
from evals.report.summary import run_summary
from graph.config.run_config import RunConfig
from graph.running.endpoints import stop_on_wrong_setting
from graph.running.pausing import PauseOptions, settle_run
from graph.running.playing import DialogueOutcome, DialogueSlots, execute_run
from models.call_policy import CallPolicy
from models.circuit import OutageStatus
from nodes.builder import build_graph

START_CONCURRENCY, MAX_CONCURRENCY = 16, 64  # dialogues at once when every model is served (models/concurrency.py)


Review = Callable[
    ..., Any
]  # graph/running/pausing.py settle_run's review: a person accepts or edits a simulated message


@dataclasses.dataclass(frozen=True)
class PlayOptions:
    """How this invocation plays (not stored with the run): processes, tracing, pauses, the store's outage budget."""

    processes: int | None = None
    trace: bool = True
    pause_after: int | None = None
    review: Review | None = None
    store_outage_budget: float = DEFAULT_BUDGET_S
    command: str | None = None  # the command line that resumes the run (the CLI's own, with --run-id); else a short one

    @property
    def pauses(self) -> PauseOptions:
        return PauseOptions(interactive=self.review is not None, pause_after=self.pause_after)


class Session:
    """One invocation playing a prepared run: here on the event loop, or in N processes on one SQLite file."""

    def __init__(
        self,
        prepared: Prepared,
        play: PlayOptions,
        config: RunConfig,
        store,
        built,
        record: RunRecord,
        policy: CallPolicy,
        outage,
        cap: CostCap | None,
        on_event: EventSink,
        resume: str,
        single: bool,
    ) -> None:
        self.prepared, self.play_options, self.config, self.store = prepared, play, config, store
        self.built, self.record, self.policy, self.outage, self.cap = built, record, policy, outage, cap
        self.on_event, self.resume, self.single = on_event, resume, single
        self.run_id: str = config.run_id or ""

    async def play(self):
        from graph.workers.processes import process_count

        start, ceiling = concurrency(self.config, self.built, self.policy)
        self.config = self.config.model_copy(update={"max_concurrency": ceiling})
        plan = self.prepared.plan
        models = [self.built.models.user, self.built.models.judge, *self.built.targets]
        processes = process_count(
            self.play_options.processes,
            dialogues=plan.n_dialogues,
            concurrency=start,
            models=models,
            single=self.single,
        )
        status = _LiveStatus(self.policy, self.prepared.location, self.run_id, self.prepared.pricing)
        self.on_event(RunStarted(self.run_id, plan.n_dialogues, self.config.turns, self.resume, status))
        with _watching_outages(self.policy, self.run_id, self.on_event):
            if processes > 1:
                # The players are forked from this thread, which waits for them: forking from a helper thread of a
                # process whose event loop runs here would copy a loop mid-flight into every child.
                return self._play_in_processes(processes)
            slots = DialogueSlots(ceiling, self.policy.concurrency_allowed if self.policy.adapting else None)
            try:
                return await stop_on_wrong_setting(self._play_here(slots), self.policy.setting_failures)
            finally:
                self.policy.stats.dialogues_at_once = slots.reached

    def _progress(self, event: str, thread_id: str, done: int) -> None:
        self.on_event(DialogueProgress(self.run_id, thread_id, event, done))

    def _scripts(self):
        plan = self.prepared.plan
        return plan.scripts_by_mode[self.config.mode] if len(self.config.modes) == 1 else None

    async def _play_here(self, slots: DialogueSlots):
        config, policy, templates = self.config, self.policy, self.prepared.templates
        pauses = self.play_options.pauses

        def reseed(seed: int):
            """The run's models drawing with another sampling seed (repeated samples)."""
            again = config.build_models(policy, seed=seed, templates=templates)
            return again.models, again.targets

        budget = self.cap
        async with open_checkpointer(self.store.path, outage=self.outage) as saver:
            graph = build_graph(saver)
            graph = pauses.configure(graph) if pauses else graph
            result = await execute_run(
                config,
                self.prepared.plan.seeds,
                graph=graph,
                store=self.store,
                models=self.built.models,
                on_progress=self._progress,
                scripts=self._scripts(),
                trace=self.play_options.trace,
                targets=self.built.targets,
                reseed=reseed,
                budget=budget,
                outage=self.outage,
                slots=slots,
            )
            if pauses:  # dialogues stopped at an interrupt are paused; a review callback goes over them here
                result = await settle_run(
                    graph,
                    self.store,
                    result,
                    models=self.built.models,
                    sampling_seed=config.sampling_seed,
                    review=self.play_options.review,
                    leakage=config.leakage,
                    judge_reasoning=config.judge_reasoning,
                )
            return result

    def _play_in_processes(self, processes: int):
        from graph.workers.processes import merge_call_stats, play_in_processes

        config, policy = self.config, self.policy
        location, templates = self.prepared.location, self.prepared.templates
        return play_in_processes(
            config,
            self.prepared.plan.seeds,
            record=self.record,
            store=self.store,
            processes=processes,
            setup=lambda: child_models(
                config, templates, location, answered_before=policy.endpoints_answered_before, adapt=policy.adapting
            ),
            targets=list(config.models.targets),
            on_progress=self._progress,
            scripts=self._scripts(),
            trace=self.play_options.trace,
            merge_stats=lambda counts: merge_call_stats(policy.stats, counts),
            mirror_outages=policy.mirror_outages,
            stopping=_cancelling,
        )

    def result(self, outcomes: list[DialogueOutcome]) -> RunResult:
        """The run's summary and how this invocation ended (0 all finished, 1 some not, 75 an outage past budget)."""
        policy, cap, run_id = self.policy, self.cap, self.run_id
        calls = {
            "cache": policy.stats.cache_summary(enabled=policy.cache is not None),
            "retries": policy.stats.retry_summary(),
            "outages": policy.outage_summary(),
            "concurrency": {
                "dialogues_at_once": policy.stats.dialogues_at_once,
                "endpoints": policy.concurrency_summary(),
            },
        }
        budget = cap.as_dict(held=sum(1 for o in outcomes if o.status == "held")) if cap is not None else None
        summary = run_summary(
            self.store, run_id, outcomes=outcomes, calls=calls, pricing=self.prepared.pricing, budget=budget
        )
        past = tuple(OutagePastBudget(c.endpoint, c.down_words(), c.budget) for c in policy.outages_past_budget())
        status = EXIT_OUTAGE if past else exit_status(summary)
        if status != EXIT_OK:
            summary["resume"] = self.resume + (
                f" --max-cost {2 * budget['max_usd']:g}" if budget and budget["held"] else ""
            )
        paused = tuple(o.thread_id for o in outcomes if o.status == "paused")
        if paused:
            self.on_event(Paused(run_id, paused, paused_command(self.store.path, paused, run_id)))
        return RunResult(
            run_id=run_id,
            status=status,
            summary=summary,
            outcomes=tuple(outcomes),
            outages_past_budget=past,
            paused=paused,
        )


def _cancelling() -> bool:
    """Whether the task playing the run was asked to stop (Ctrl-C, SIGTERM, a cancelled ``arun``)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def single_process_refusal(processes: int | None, *, single: bool) -> str | None:
    """Why ``processes`` cannot play a run that only one process can play (None: it can)."""
    if processes is not None and processes > 1 and single:
        return (
            "--processes plays on one SQLite file without pauses or a cost cap: drop --interactive, --pause-after and "
            "--max-cost (or the experiment file's max_cost), or use a PostgreSQL --db with python -m graph.worker"
        )
    return None


def paused_command(location: DbLocation, threads: tuple[str, ...], run_id: str) -> str:
    """The command that continues paused dialogues."""
    where = f" --db {shlex.quote(str(location))}"
    if len(threads) > 1:
        return f"python -m graph.resume --run-id {run_id}{where}"
    return f"python -m graph.resume {threads[0]}{where} [--message TEXT]"


def concurrency(config: RunConfig, built, policy: CallPolicy) -> tuple[int, int]:
    """(start, ceiling) of the dialogues played at once: max_concurrency N (N, adapting only below it), else 16 up
    to 64 when every model is served, else 1 (the embedded model computes here: one at a time); served endpoints
    adapt (models/concurrency.py)."""
    from models.registry import computes_here

    models = [built.models.user, built.models.judge, *built.targets]
    served = not any(computes_here(m.spec, m.sampling) for m in models)
    if config.max_concurrency is not None:
        start = ceiling = config.max_concurrency
    else:
        start, ceiling = (START_CONCURRENCY, MAX_CONCURRENCY) if served else (1, 1)
    if served:
        policy.adapt_concurrency(start, ceiling)
    return start, ceiling


def answered_before(store, run_id: str) -> bool:
    """Whether an earlier invocation of the run stored a turn (its endpoints answered then)."""
    rows = store.query(
        "select 1 from turns t join dialogues d on d.thread_id = t.thread_id where d.run_id = ? limit 1", [run_id]
    )
    return bool(rows)


def _stored_a_turn(location: DbLocation, run_id: str) -> bool:
    """In a player process: whether any process of the run stored a turn yet (its endpoints answered), read afresh."""
    try:
        with open_reader(location) as reader:
            return answered_before(reader, run_id)
    except Exception:  # noqa: BLE001 - the store unreadable now: nothing says the endpoint answered
        return False


def child_models(config: RunConfig, templates, location: DbLocation, *, answered_before: bool = False, adapt=None):
    """In a child process: the run's models, built afresh (their own HTTP clients, cache connection, rate gates)."""
    from graph.workers.processes import ChildModels

    policy = config.call_policy(None if not config.cache else ResponseCache(location))
    if answered_before:
        policy.answered_before()
    policy.answered_elsewhere(lambda: _stored_a_turn(location, config.run_id or ""))
    if adapt is not None:
        policy.adapt_concurrency(*adapt)  # the child takes its share (graph/workers/processes.py)
    built = config.build_models(policy, templates=templates)

    def reseed(seed: int):
        again = config.build_models(policy, seed=seed, templates=templates)
        return again.models, again.targets

    return ChildModels(models=built.models, targets=built.targets, policy=policy, reseed=reseed)


class _LiveStatus:
    """The playing run, read live (dymt.events.RunStatus): calls so far, outages now, cost so far."""

    def __init__(self, policy: CallPolicy, location: DbLocation, run_id: str, pricing) -> None:
        self._policy, self._location, self._run_id, self._pricing = policy, location, run_id, pricing

    def calls(self) -> int:
        return sum(self._policy.stats.calls.values())

    def outages(self) -> list[OutageStatus]:
        return self._policy.outages()

    def muted(self) -> bool:
        """A wrong setting was seen: the run is about to stop with one line, so progress has nothing to add."""
        return bool(self._policy.setting_failures())

    def cost(self) -> float | None:
        """The run's cost so far, read on a connection of its own (None without pricing or if it cannot be read now)."""
        if self._pricing is None:
            return None
        from evals.cost import run_usage

        try:
            with open_reader(self._location) as reader:
                return run_usage(reader, self._run_id).known_cost(self._pricing)
        except Exception:  # noqa: BLE001 - a busy or absent store: no figure now
            return None


@contextmanager
def _watching_outages(policy: CallPolicy, run_id: str, on_event: EventSink, every_s: float = 0.5):
    """While the run plays, a thread turns the provider circuits' state into OutageBegan / OutageEnded events."""
    stop = threading.Event()

    def watch() -> None:
        down: dict[str, OutageStatus] = {}
        while not stop.wait(every_s):
            try:
                now = {status.endpoint: status for status in policy.outages()}
                for endpoint, status in now.items():
                    if endpoint not in down:
                        on_event(OutageBegan(run_id, status))
                for endpoint, was in down.items():
                    if endpoint not in now:
                        on_event(OutageEnded(run_id, endpoint, was.down_s))
                down = now
            except Exception:  # noqa: BLE001 - an event sink's error must never stop the run
                continue

    thread = threading.Thread(target=watch, name=f"dymt-outages-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(2)
