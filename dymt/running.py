"""Playing a run: ``dymt.run(config)`` and ``await dymt.arun(config)`` return a :class:`dymt.RunResult`.

The command ``python -m graph.run`` is this function with flags in and the result rendered. What the run says while
it plays (progress, provider outages, pauses) goes to ``on_event`` as events (dymt/events.py); nothing is printed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import shlex
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from checkpoints.cache import ResponseCache
from checkpoints.checkpointer import open_checkpointer
from checkpoints.location import DbLocation, PostgresURL
from checkpoints.migrations import SchemaTooNewError
from checkpoints.outages import OutageError
from checkpoints.paths import StoreError
from checkpoints.readers import open_reader
from checkpoints.serde import UnsafeCheckpointError
from checkpoints.store import open_writer
from checkpoints.store_outage import DEFAULT_BUDGET_S
from dymt.errors import DymtError, RunStopped
from dymt.events import (
    DialogueProgress,
    Event,
    EventSink,
    OutageBegan,
    OutageEnded,
    Paused,
    RunEnded,
    RunStarted,
    ignore,
)
from dymt.preparing import Prepared, check_priced, config_of, dialogue_estimate, prepare, store_outage
from dymt.results import OutagePastBudget, RunResult
from evals.cost import CostCap
from evals.report.summary import run_summary
from graph.config.run_config import ModelBuildError, RunConfig
from graph.running.endpoints import ModelCheck, check_models, stop_on_wrong_setting
from graph.running.pausing import PauseOptions, settle_run
from graph.running.playing import DialogueOutcome, DialogueSlots, RunConflictError, check_run_compatible, execute_run
from models.call_policy import CallPolicy
from models.circuit import OutageStatus
from models.circuit import EndpointSettingError
from nodes.builder import build_graph

START_CONCURRENCY, MAX_CONCURRENCY = 16, 64  # dialogues at once when every model is served (models/concurrency.py)
EXIT_OK, EXIT_SOME_FAILED, EXIT_OUTAGE = 0, 1, 75

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


def run(
    config: RunConfig | None = None,
    /,
    *,
    on_event: EventSink = ignore,
    given: Iterable[str] | None = None,
    processes: int | None = None,
    trace: bool = True,
    pause_after: int | None = None,
    review: Review | None = None,
    store_outage_budget: float = DEFAULT_BUDGET_S,
    **options: Any,
) -> RunResult:
    """Play a run (or resume the one ``run_id`` names) and return its result; see :func:`arun`.

    In a thread with an event loop running (a notebook cell), the run plays on a thread of its own.
    """
    coroutine = arun(
        config,
        on_event=on_event,
        given=given,
        processes=processes,
        trace=trace,
        pause_after=pause_after,
        review=review,
        store_outage_budget=store_outage_budget,
        **options,
    )
    return run_coroutine(coroutine)


async def arun(
    config: RunConfig | None = None,
    /,
    *,
    on_event: EventSink = ignore,
    given: Iterable[str] | None = None,
    processes: int | None = None,
    trace: bool = True,
    pause_after: int | None = None,
    review: Review | None = None,
    store_outage_budget: float = DEFAULT_BUDGET_S,
    command: str | None = None,
    **options: Any,
) -> RunResult:
    """Play a run on the running event loop and return its :class:`RunResult`.

    ``config`` is a :class:`RunConfig`, or keyword options named as the command's flags (``mode=["implicit"]``,
    ``target_model=["openai:gpt-4o-mini"]``, ``turns=10``, ``db="runs.db"``, ``run_id="r1"``). A ``run_id`` the store
    holds resumes that run: options not given come from it, and one given that contradicts it raises. Bad input
    raises :class:`DymtError` and writes nothing; an outage of the store or disk past its budget raises
    :class:`RunStopped` (nothing lost). Two runs may play at once in one process, each with its own events.
    """
    config, named = config_of(config, options, given)
    play = PlayOptions(
        processes=processes,
        trace=trace,
        pause_after=pause_after,
        review=review,
        store_outage_budget=store_outage_budget,
        command=command,
    )
    prepared = prepare(config, given=named, pauses=play.pauses)
    single_process(prepared, play)
    if prepared.stored is not None and prepared.stored.finished(prepared.plan):
        return reshow(prepared)
    return await play_prepared(prepared, play, on_event)


async def astream(config: RunConfig | None = None, /, **options: Any) -> AsyncIterator[Event]:
    """:func:`arun` as an async iterator of its events, ending with :class:`RunEnded` (the result); stopping the loop
    early cancels the run (what it stored stays: resume it by its id). Errors are raised as :func:`arun` raises them."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    def sink(event: Event) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, event)

    task = asyncio.ensure_future(arun(config, on_event=sink, **options))
    task.add_done_callback(lambda _: loop.call_soon_threadsafe(queue.put_nowait, done))
    try:
        while (item := await queue.get()) is not done:
            yield item
        result = task.result()
        yield RunEnded(result.run_id, result)
    finally:
        if not task.done():
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task


def play(
    prepared: Prepared,
    *,
    on_event: EventSink = ignore,
    processes: int | None = None,
    trace: bool = True,
    pause_after: int | None = None,
    review: Review | None = None,
    store_outage_budget: float = DEFAULT_BUDGET_S,
    command: str | None = None,
) -> RunResult:
    """Play a prepared run (:func:`dymt.prepare`): what :func:`run` does once the configuration is resolved."""
    options = PlayOptions(
        processes=processes,
        trace=trace,
        pause_after=pause_after,
        review=review,
        store_outage_budget=store_outage_budget,
        command=command,
    )
    single_process(prepared, options)
    if prepared.stored is not None and prepared.stored.finished(prepared.plan):
        return reshow(prepared)
    return run_coroutine(play_prepared(prepared, options, on_event))


def run_coroutine(coroutine: Any) -> Any:
    """Await ``coroutine`` from synchronous code: here, or on a thread of its own if this thread runs a loop already."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coroutine)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="dymt-run")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def reshow(prepared: Prepared) -> RunResult:
    """A finished run given again: its summary from the store (every dialogue skipped this time), no model built."""
    run_id = prepared.config.run_id or ""
    try:
        reader = open_reader(prepared.location)
    except StoreError as exc:
        raise DymtError(str(exc)) from None
    outcomes = tuple(DialogueOutcome(t, "skipped") for t in prepared.stored.statuses) if prepared.stored else ()
    with reader:
        summary = run_summary(reader, run_id, pricing=prepared.pricing, outcomes=outcomes)
    return RunResult(
        run_id=run_id,
        status=exit_status(summary),
        summary=summary,
        outcomes=outcomes,
        paused=tuple(summary.get("paused") or ()),
    )


async def play_prepared(prepared: Prepared, play: PlayOptions, on_event: EventSink) -> RunResult:
    """Build the models, open the store, play, and sum up; the store is left as the run left it."""
    config = prepared.config
    check_priced(config, prepared.pricing)
    single = single_process(prepared, play)
    policy = config.call_policy(None if not config.cache else ResponseCache(prepared.location))
    outage = store_outage(prepared.server, play.store_outage_budget, policy)
    try:
        built = config.build_models(policy, templates=prepared.templates)
    except ModelBuildError as exc:
        raise DymtError(f"--{exc.role}-model: {exc.reason}") from None
    run_id: str = config.run_id or new_run_id()
    run_config = prepared.plan.config.model_copy(update={"run_id": run_id})
    record = run_config.run_record(built.models, built.targets)
    resume = play.command or resume_line(run_config)
    fresh_file = not isinstance(prepared.location, PostgresURL) and not Path(prepared.location).exists()
    try:
        store = open_writer(prepared.location)
        check_run_compatible(store, run_config, record)
        new_run = store.get_run(run_id) is None
        if not new_run and answered_before(store, run_id):
            policy.answered_before()  # a resume: its endpoints answered once, so their failures are outages
    except (StoreError, SchemaTooNewError, RunConflictError) as exc:
        raise DymtError(str(exc)) from None
    except OutageError as exc:  # a read-only or full disk under the store
        raise RunStopped(exc, run_id=run_id, resume=resume, dialogues=prepared.plan.n_dialogues) from None
    cap = None
    if config.max_cost is not None and prepared.pricing is not None:  # prepare() refused a cap without pricing
        cap = CostCap(
            config.max_cost,
            prepared.pricing,
            run_id,
            record["resolved"]["models"],
            estimate=dialogue_estimate(prepared.plan, prepared.location, prepared.pricing),
        )
    session = _Session(prepared, play, run_config, store, built, record, policy, outage, cap, on_event, resume, single)
    try:
        result = await session.play()
    except UnsafeCheckpointError as exc:
        store.close()
        raise DymtError(str(exc)) from None
    except EndpointSettingError as exc:
        wrong_setting(str(exc), store, run_id, new_run=new_run, fresh_file=fresh_file, resume=resume)
    except OutageError as exc:  # past its budget: a provider or the store away, a full or read-only disk
        store.close()
        raise RunStopped(exc, run_id=run_id, resume=resume, dialogues=prepared.plan.n_dialogues) from None
    finally:
        if policy.cache is not None:
            policy.cache.close()
    if wrong := policy.setting_failures():  # every dialogue failed fast before the watch stopped the run
        wrong_setting(wrong[0], store, run_id, new_run=new_run, fresh_file=fresh_file, resume=resume)
    try:
        return session.result(result.outcomes)
    finally:
        store.close()


class _Session:
    """One invocation playing a prepared run: here on the event loop, or in N processes on one SQLite file."""

    def __init__(
        self,
        prepared: Prepared,
        play: PlayOptions,
        config: RunConfig,
        store,
        built,
        record: dict,
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

        budget = (self.cap.allows, self.cap.ended) if self.cap else None
        async with open_checkpointer(self.store.path) as saver:
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


def new_run_id() -> str:
    return f"run-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def single_process(prepared: Prepared, play: PlayOptions) -> bool:
    """Runs only one process can play: on PostgreSQL (workers do that there), paused or under a cost cap."""
    single = prepared.server is not None or bool(play.pauses) or prepared.config.max_cost is not None
    if play.processes is not None and play.processes > 1 and single:
        raise DymtError(
            "--processes plays on one SQLite file without pauses or a cost cap: drop --interactive, "
            "--pause-after and --max-cost (or the experiment file's max_cost), or use a PostgreSQL --db "
            "with python -m graph.worker"
        )
    return single


def exit_status(summary: dict[str, Any]) -> int:
    """1 if some dialogue failed or was held back by the cost cap; else 0 (all finished or paused as asked)."""
    unfinished = len(summary.get("failed") or []) + int((summary.get("budget") or {}).get("held") or 0)
    return EXIT_SOME_FAILED if unfinished else EXIT_OK


def paused_command(location: DbLocation, threads: tuple[str, ...], run_id: str) -> str:
    """The command that continues paused dialogues."""
    where = f" --db {shlex.quote(str(location))}"
    if len(threads) > 1:
        return f"python -m graph.resume --run-id {run_id}{where}"
    return f"python -m graph.resume {threads[0]}{where} [--message TEXT]"


def resume_line(config: RunConfig) -> str:
    """The shortest command that resumes a run: its id and its store (flags not given come from the stored run)."""
    parts = ["python", "-m", "graph.run", "--run-id", config.run_id or ""]
    if config.db is not None:
        parts += ["--db", str(config.db)]
    if config.base_url and config.base_url_wins:
        parts += ["--base-url", config.base_url]
    return shlex.join(parts)


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


def check(config: RunConfig | None = None, /, **options: Any) -> list[ModelCheck]:
    """One tiny call to each distinct model of the run (no cache, one retry): how each answered. Writes nothing."""
    config, _ = config_of(config, options, None)
    try:
        templates = config.load_prompts()
    except Exception as exc:  # noqa: BLE001 - ConfigError: one line
        raise DymtError(str(exc)) from None
    policy = config.call_policy(None)
    policy.retry = dataclasses.replace(policy.retry, attempts=2)
    try:
        built = config.build_models(policy, templates=templates)
    except ModelBuildError as exc:
        raise DymtError(f"--{exc.role}-model: {exc.reason}") from None
    roles = [("user", built.models.user), ("judge", built.models.judge), *(("target", t) for t in built.targets)]
    return run_coroutine(check_models(roles))


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
