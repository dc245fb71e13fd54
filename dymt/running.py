"""Playing a run: ``dymt.run(config)`` and ``await dymt.arun(config)`` return a :class:`dymt.RunResult`.

The command ``python -m graph.run`` is this function with flags in and the result rendered. What the run says while
it plays (progress, provider outages, pauses) goes to ``on_event`` as events (dymt/events.py); nothing is printed.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import shlex
import threading
from collections.abc import AsyncIterator, Iterable
from contextlib import suppress
from pathlib import Path
from typing import Any

from checkpoints.cache import ResponseCache
from checkpoints.ids import new_run_id
from checkpoints.location import PostgresURL
from checkpoints.migrations import SchemaTooNewError
from checkpoints.outages import OutageError
from checkpoints.paths import StoreError
from checkpoints.players import playing
from checkpoints.readers import open_reader
from checkpoints.serde import UnsafeCheckpointError
from checkpoints.store import open_writer
from checkpoints.store_outage import DEFAULT_BUDGET_S
from dymt.errors import DymtError, RunStopped
from dymt.events import (
    Event,
    EventSink,
    RunEnded,
    ignore,
)
from dymt.preparing import Prepared, check_priced, config_of, dialogue_estimate, prepare, store_outage
from dymt.results import RunResult, exit_status
from dymt.session import PlayOptions, Review, Session, answered_before, single_process_refusal
from evals.cost import CostCap
from evals.report.summary import run_summary
from graph.config.run_config import ModelBuildError, RunConfig
from graph.running.endpoints import ModelCheck, check_models
from graph.running.playing import DialogueOutcome
from graph.running.run_records import RunConflictError, check_run_compatible
from models.circuit import EndpointSettingError


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
    return run_coroutine(
        aplay(
            prepared,
            on_event=on_event,
            processes=processes,
            trace=trace,
            pause_after=pause_after,
            review=review,
            store_outage_budget=store_outage_budget,
            command=command,
        )
    )


async def aplay(
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
    """:func:`play` on the running event loop: cancelling it stops the run as Ctrl-C does (each dialogue kept at its
    last checkpoint, the traces written, the run marked interrupted)."""
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
    return await play_prepared(prepared, options, on_event)


def run_coroutine(coroutine: Any) -> Any:
    """Await ``coroutine`` from synchronous code: here, or on a thread of its own if this thread runs a loop already."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    box: dict[str, Any] = {}
    context = contextvars.copy_context()  # the caller's context variables (the run a cached reply belongs to)

    def target() -> None:
        try:
            box["value"] = context.run(asyncio.run, coroutine)
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
    record = run_config.stored_record(built.models, built.targets)
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
            record.resolved.models,
            estimate=dialogue_estimate(prepared.plan, prepared.location, prepared.pricing),
        )
    session = Session(prepared, play, run_config, store, built, record, policy, outage, cap, on_event, resume, single)
    try:
        with playing(prepared.location, store.db, run_id, command=resume):  # status and deletion see who plays it
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


def single_process(prepared: Prepared, play: PlayOptions) -> bool:
    """Runs only one process can play: on PostgreSQL (workers do that there), paused or under a cost cap."""
    single = prepared.server is not None or bool(play.pauses) or prepared.config.max_cost is not None
    if refusal := single_process_refusal(play.processes, single=single):
        raise DymtError(refusal)
    return single


def resume_line(config: RunConfig) -> str:
    """The shortest command that resumes a run: its id and its store (flags not given come from the stored run)."""
    parts = ["python", "-m", "graph.run", "--run-id", config.run_id or ""]
    if config.db is not None:
        parts += ["--db", str(config.db)]
    if config.base_url and config.base_url_wins:
        parts += ["--base-url", config.base_url]
    return shlex.join(parts)


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
