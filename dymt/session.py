"""One invocation of a run, from its configuration to its result (:class:`Invocation`): here on the event loop, or
in N processes on one SQLite file; how many dialogues at once; the run's live status and its provider outages as
events; the result it sums up to."""

from __future__ import annotations

import asyncio
import dataclasses
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from checkpoints.cache import ResponseCache
from checkpoints.ids import RUN_ID_ALPHABET, is_safe_run_id, new_run_id
from checkpoints.location import DbLocation, PostgresURL
from checkpoints.migrations import SchemaTooNewError
from checkpoints.outages import OutageError
from checkpoints.paths import StoreError
from checkpoints.players import playing
from checkpoints.readers import open_reader
from checkpoints.run_record import RunRecord
from checkpoints.serde import UnsafeCheckpointError
from checkpoints.store import open_writer
from checkpoints.store_outage import DEFAULT_BUDGET_S
from dymt.errors import DymtError, RunStopped
from dymt.events import DialogueProgress, EventSink, Paused, RunStarted, ignore
from dymt.live import LiveStatus, watching_outages
from dymt.preparing import (
    check_priced,
    config_of,
    dialogue_estimate,
    estimate,
    planned_estimate,
    prepare,
    store_outage,
)
from dymt.results import OutagePastBudget, RunResult, ended_as
from evals.cost import CostCap
from evals.report.summary import run_summary
from graph.config.experiment import model_given_as
from graph.config.run_config import ConfigError, ModelBuildError, RunConfig
from graph.running.endpoints import stopping_on_wrong_setting
from graph.running.pausing import PauseOptions, settle_run
from graph.running.playing import DialogueOutcome, DialogueSlots, PlayedRun, execute_run, open_graph
from graph.running.run_records import RunConflictError, check_run_compatible
from models.call_policy import CallPolicy
from models.circuit import EndpointSettingError
from nodes.context import RunContext

START_CONCURRENCY, MAX_CONCURRENCY = 16, 64  # dialogues at once when every model is served (models/concurrency.py)


Review = Callable[
    ..., Any
]  # graph/running/pausing.py settle_run's review: a person accepts or edits a simulated message


@dataclasses.dataclass
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


class Invocation:
    """One invocation of a run, from its configuration to its result: the library (``dymt.run``), the command
    (``python -m graph.run``) and ``dymt.enqueue`` all go through it.

    Made from a :class:`RunConfig` (or keyword options), it mints the run id if none is given, resolves the
    configuration against the stored run, plans it and applies the single-process rule; all of that writes nothing and
    raises :class:`DymtError` on bad input. :meth:`play` then builds the models, opens the store and plays, here on the
    event loop or in N processes on one SQLite file (their children build their models with :func:`child_models`).
    """

    START_CONCURRENCY, MAX_CONCURRENCY = START_CONCURRENCY, MAX_CONCURRENCY

    def __init__(
        self,
        config: RunConfig | str | Path | None = None,
        /,
        *,
        given: Iterable[str] | None = None,
        turns_given: bool | None = None,
        processes: int | None = None,
        trace: bool = True,
        pause_after: int | None = None,
        review: Review | None = None,
        store_outage_budget: float = DEFAULT_BUDGET_S,
        command: str | None = None,
        on_event: EventSink = ignore,
        **options: Any,
    ) -> None:
        config, named = config_of(config, options, given)
        self.options = PlayOptions(
            processes=processes,
            trace=trace,
            pause_after=pause_after,
            review=review,
            store_outage_budget=store_outage_budget,
            command=command,
        )
        self.on_event = on_event
        self._single_process(config)  # as given, before the store is read: the first thing to say
        self.prepared = prepare(config, given=named, pauses=self.options.pauses, turns_given=turns_given)
        self.run_id: str = self.prepared.config.run_id or new_run_id()  # the one place a run id is made up
        if self.prepared.stored is None and not is_safe_run_id(self.run_id):  # a stored run keeps its own id
            raise DymtError(f"run_id={self.run_id!r}: a new run's id uses {RUN_ID_ALPHABET}")
        self.config = self.prepared.plan.config.model_copy(update={"run_id": self.run_id})
        self.single = self._single_process(self.prepared.config)  # as resolved: a stored run's cost cap too

    def _single_process(self, config: RunConfig) -> bool:
        """The single-process rule: only one process plays a run on PostgreSQL (workers do that there), paused or
        under a cost cap; ``processes`` > 1 for such a run raises."""
        try:
            server = isinstance(config.store_location(), PostgresURL)
        except (ConfigError, StoreError) as exc:
            raise DymtError(str(exc)) from None
        single = server or bool(self.options.pauses) or config.max_cost is not None
        if self.options.processes is not None and self.options.processes > 1 and single:
            raise DymtError(SINGLE_PROCESS)
        return single

    @property
    def resume(self) -> str:
        """The command that goes on with the run: the caller's own (``command=``), else the shortest one."""
        return self.options.command or self.resume_line

    @property
    def resume_line(self) -> str:
        """The shortest command that resumes the run: its id and its store (what is not given comes from the run)."""
        parts = ["python", "-m", "graph.run", "--run-id", self.run_id]
        if self.config.db is not None:
            parts += ["--db", str(self.config.db)]
        if self.config.base_url and self.config.base_url_wins:
            parts += ["--base-url", self.config.base_url]
        return shlex.join(parts)

    @property
    def stored(self) -> bool:
        """Whether the store holds the run already (it resumes, or shows its summary again)."""
        return self.prepared.stored is not None

    def estimate(self, *, check: bool = True) -> dict:
        """The expected calls, tokens and cost of the run, from the store's earlier runs where it has some (no key
        needed, nothing written); ``check``: every model spec and the store's path checked first (a run about to play
        leaves that to building its models and opening its store)."""
        if check:
            return estimate(self.prepared)
        return planned_estimate(self.prepared.plan, self.prepared.location, self.prepared.pricing)

    def built_record(self) -> tuple[Any, RunRecord]:
        """The run's models, built with no cache (for their resolved ids), and the record the store keeps of it."""
        check_priced(self.prepared.config, self.prepared.pricing)
        built = self._build(self.prepared.config.call_policy(None))
        return built, self.record_of(built)

    def record_of(self, built) -> RunRecord:
        return self.config.stored_record(built.models, built.targets)

    def _build(self, policy: CallPolicy):
        try:
            return self.prepared.config.build_models(policy, templates=self.prepared.templates)
        except ModelBuildError as exc:
            raise DymtError(
                f"{model_given_as(self.prepared.config.config_file, exc.role, exc.spec)}: {exc.reason}"
            ) from None

    async def play(self) -> RunResult:
        """Build the models, open the store, play, and sum up; the store is left as the run left it (a finished run:
        its summary again, no model built)."""
        prepared = self.prepared
        if prepared.stored is not None and prepared.stored.finished(prepared.plan):
            return self._reshow()
        processes = self._set_up()
        config, store, policy, slots = self.config, self.store, self.policy, self.slots
        run_id, resume, new_run, fresh_file = self.run_id, self.resume, self.new_run, self.fresh_file
        status = LiveStatus(policy, prepared.location, run_id, prepared.pricing)
        self.on_event(RunStarted(run_id, prepared.plan.n_dialogues, config.turns, resume, status))
        try:
            # status and deletion see who plays it; the providers' outages become events while it plays
            with (
                playing(prepared.location, store.db, run_id, command=resume),
                watching_outages(policy, run_id, self.on_event),
            ):
                if processes > 1:
                    # The players are forked from this thread, which waits for them: forking from a helper thread
                    # of a process whose event loop runs here would copy a loop mid-flight into every child.
                    result = self._play_in_processes(processes)
                else:  # a wrong setting (an endpoint that never answered refused a call) stops the run at once
                    pauses = self.options.pauses
                    async with (
                        stopping_on_wrong_setting(policy.setting_failures),
                        open_graph(store.path, outage=self.outage) as graph,
                    ):
                        graph = pauses.configure(graph) if pauses else graph
                        result = await execute_run(
                            config,
                            prepared.plan.seeds,
                            graph=graph,
                            store=store,
                            models=self.built.models,
                            on_progress=self._progress,
                            scripts=self._scripts(),
                            trace=self.options.trace,
                            targets=self.built.targets,
                            reseed=self._reseed,
                            budget=self.cap,
                            outage=self.outage,
                            slots=slots,
                        )
                        if pauses:  # dialogues stopped at an interrupt are paused; a review goes over them here
                            result = await settle_run(
                                graph, store, result, context=self._context(), review=self.options.review
                            )
        except UnsafeCheckpointError as exc:
            store.close()
            raise DymtError(str(exc)) from None
        except EndpointSettingError as exc:
            wrong_setting(str(exc), store, run_id, new_run=new_run, fresh_file=fresh_file, resume=resume)
        except OutageError as exc:  # past its budget: a provider or the store away, a full or read-only disk
            store.close()
            raise RunStopped(exc, run_id=run_id, resume=resume, dialogues=prepared.plan.n_dialogues) from None
        finally:
            if processes == 1:  # (the processes' own count is merged from theirs)
                policy.stats.dialogues_at_once = slots.reached
            if policy.cache is not None:
                policy.cache.close()
        if wrong := policy.setting_failures():  # every dialogue failed fast before the watch stopped the run
            wrong_setting(wrong[0], store, run_id, new_run=new_run, fresh_file=fresh_file, resume=resume)
        try:
            return self._result(result.outcomes)
        finally:
            store.close()

    def _set_up(self) -> int:
        """The call policy and the models built, the store opened, the cost capped, how many dialogues play at once:
        how many processes play the run."""
        from graph.workers.processes import process_count  # multiprocessing loads only when a run plays

        prepared = self.prepared
        given = prepared.config  # as resolved, before planning: what the models and the call policy are built from
        check_priced(given, prepared.pricing)
        self.policy = policy = given.call_policy(None if not given.cache else ResponseCache(prepared.location))
        self.outage = store_outage(prepared.server, self.options.store_outage_budget, policy)
        self.built = self._build(policy)
        self.record = self.record_of(self.built)
        self.fresh_file = not isinstance(prepared.location, PostgresURL) and not Path(prepared.location).exists()
        self.store = self._open_store()
        self.new_run = self.store.get_run(self.run_id) is None
        self.cap = self._cost_cap()
        start, ceiling = concurrency(self.config, self.built, policy)
        self.config = self.config.model_copy(update={"max_concurrency": ceiling})
        self.slots = DialogueSlots(ceiling, policy.concurrency_allowed if policy.adapting else None)
        models = [self.built.models.user, self.built.models.judge, *self.built.targets]
        return process_count(
            self.options.processes,
            dialogues=prepared.plan.n_dialogues,
            concurrency=start,
            models=models,
            single=self.single,
        )

    def _open_store(self):
        """The run's store, opened for writing and checked against the run (a stored run with other settings, a store
        too new, an unwritable disk: one line)."""
        prepared, run_id = self.prepared, self.run_id
        try:
            store = open_writer(prepared.location)
            check_run_compatible(store, self.config, self.record)
            if store.get_run(run_id) is not None and answered_before(store, run_id):
                self.policy.answered_before()  # a resume: its endpoints answered once, so their failures are outages
            return store
        except (StoreError, SchemaTooNewError, RunConflictError) as exc:
            raise DymtError(str(exc)) from None
        except OutageError as exc:  # a read-only or full disk under the store
            raise RunStopped(exc, run_id=run_id, resume=self.resume, dialogues=prepared.plan.n_dialogues) from None

    def _cost_cap(self) -> CostCap | None:
        """The run's cost cap (``max_cost``), priced from the store's earlier runs; None without one."""
        given, prepared = self.prepared.config, self.prepared
        if given.max_cost is None or prepared.pricing is None:  # prepare() refused a cap without pricing
            return None
        return CostCap(
            given.max_cost,
            prepared.pricing,
            self.run_id,
            self.record.resolved.models,
            estimate=dialogue_estimate(prepared.plan, prepared.location, prepared.pricing),
        )

    def _reseed(self, seed: int):
        """The run's models drawing with another sampling seed (repeated samples)."""
        again = self.config.build_models(self.policy, seed=seed, templates=self.prepared.templates)
        return again.models, again.targets

    def _context(self) -> RunContext:
        """What the nodes of a review after the run share (graph/running/pausing.py settle_run)."""
        config = self.config
        return RunContext(
            models=self.built.models,
            sampling_seed=config.sampling_seed,
            leakage=config.leakage,
            judge_reasoning=config.judge_reasoning,
        )

    def _reshow(self) -> RunResult:
        """A finished run given again: its summary from the store (every dialogue skipped this time)."""
        prepared = self.prepared
        try:
            reader = open_reader(prepared.location)
        except StoreError as exc:
            raise DymtError(str(exc)) from None
        outcomes = tuple(DialogueOutcome(t, "skipped") for t in prepared.stored.statuses) if prepared.stored else ()
        with reader:
            summary = run_summary(reader, self.run_id, pricing=prepared.pricing, outcomes=outcomes)
        return RunResult(
            run_id=self.run_id,
            ended=ended_as(summary),
            summary=summary,
            outcomes=outcomes,
            paused=tuple(summary.get("paused") or ()),
        )

    def _progress(self, event: str, thread_id: str, done: int) -> None:
        self.on_event(DialogueProgress(self.run_id, thread_id, event, done))

    def _scripts(self):
        plan = self.prepared.plan
        return plan.scripts_by_mode[self.config.mode] if len(self.config.modes) == 1 else None

    def _play_in_processes(self, processes: int) -> PlayedRun:
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
            trace=self.options.trace,
            merge_stats=lambda counts: merge_call_stats(policy.stats, counts),
            mirror_outages=policy.mirror_outages,
            stopping=_cancelling,
        )

    def _result(self, outcomes: list[DialogueOutcome]) -> RunResult:
        """The run's summary and how this invocation ended (all finished, some not, an outage past its budget)."""
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
        ended = ended_as(summary, outage=bool(past))
        if ended != "finished":
            summary["resume"] = self.resume + (
                f" --max-cost {2 * budget['max_usd']:g}" if budget and budget["held"] else ""
            )
        paused = tuple(o.thread_id for o in outcomes if o.status == "paused")
        if paused:
            self.on_event(Paused(run_id, paused, paused_command(self.store.path, paused, run_id)))
        return RunResult(
            run_id=run_id,
            ended=ended,
            summary=summary,
            outcomes=tuple(outcomes),
            outages_past_budget=past,
            paused=paused,
        )


def wrong_setting(line: str, store, run_id: str, *, new_run: bool, fresh_file: bool, resume: str):
    """An endpoint that never answered and refused as a wrong setting would: the run this call began is removed (and
    the file it created), so nothing is half-written; raises DymtError with the line."""
    if new_run:
        from checkpoints.deletion import delete_run

        delete_run(store, run_id, full=False)
        tail = "nothing was written"
    else:
        tail = f"the run is as it was; once corrected, resume with: {resume}"
    path = store.path
    store.close()
    if new_run and fresh_file and isinstance(path, Path):
        for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            leftover.unlink(missing_ok=True)
    raise DymtError(f"{line}; {tail}")


def _cancelling() -> bool:
    """Whether the task playing the run was asked to stop (Ctrl-C, SIGTERM, a cancelled ``arun``)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


SINGLE_PROCESS = (
    "processes= plays on one SQLite file without pauses or a cost cap: drop review=, pause_after= and "
    "max_cost= (or the experiment file's max_cost), or use a PostgreSQL db= with python -m graph.worker"
)


def paused_command(location: DbLocation, threads: tuple[str, ...], run_id: str) -> str:
    """The command that continues paused dialogues."""
    where = f" --db {shlex.quote(str(location))}"
    if len(threads) > 1:
        return f"python -m graph.resume --run-id {shlex.quote(run_id)}{where}"
    return f"python -m graph.resume {shlex.quote(threads[0])}{where} [--message TEXT]"


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
