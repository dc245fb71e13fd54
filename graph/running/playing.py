"""Run a set of dialogues through the graph, resumably, recording every step in the store.

This is the library behind ``python -m graph.run``: no printing here, only
progress callbacks. A dialogue's thread id is stable (run id, seed id, mode), so
running the same run id again skips finished dialogues, continues unfinished ones
from their last checkpoint, and re-runs a failed node from the checkpoint before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from checkpoints.cache import caching_for
from checkpoints.checkpointer import open_checkpointer
from checkpoints.ids import dialogue_thread_id as thread_id_of
from checkpoints.location import DbLocation
from checkpoints.outages import OutageError, store_fault
from checkpoints.reasons import failure_reason
from checkpoints.samples import sample_seed
from checkpoints.store import Writer, now
from checkpoints.store_outage import ReplayedTooOften, StoreOutage, is_store_outage, play_through_outages
from graph.config.run_config import RunConfig
from graph.running.budget import BudgetCheck, BudgetGate, DialogueBudget, DialogueEnded, as_budget
from graph.running.gc_settings import playing_collector
from graph.running.run_records import record_run
from graph.running.store_writer import StoreWriter
from graph.tracing.tracer import traced
from models.registry import RoleModel
from nodes.builder import build_graph
from nodes.context import Models, RunContext
from nodes.modes import ModeScripts, is_scripted, scripts_for
from nodes.state import DialogueState
from seeds import Seed

T = TypeVar("T")
ProgressCallback = Callable[[str, str, int], None]  # (event, thread_id, turns done)


class DialogueSlots:
    """How many dialogues play at once: never more than ``ceiling``, and no more than ``allowed()`` says now (the
    lowest adaptive limit of the run's provider endpoints, models/concurrency.py; None: the ceiling)."""

    def __init__(self, ceiling: int, allowed: Callable[[], int | None] | None = None) -> None:
        self.ceiling = max(1, ceiling)
        self.allowed = allowed
        self.playing = 0
        self.reached = 0
        self._gate: asyncio.Semaphore | None = None

    async def __aenter__(self) -> None:
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.ceiling)
        await self._gate.acquire()
        # Only the ceiling's holders poll here: the others wait on the semaphore.
        while self.allowed is not None and self.playing >= max(1, self.allowed() or self.ceiling):
            await asyncio.sleep(_SLOT_POLL_S)
        self.playing += 1
        self.reached = max(self.reached, self.playing)

    async def __aexit__(self, *_: Any) -> None:
        self.playing -= 1
        if self._gate is not None:
            self._gate.release()


_SLOT_POLL_S = 0.05


@dataclass
class DialogueOutcome:
    thread_id: str
    status: str  # finished | failed | skipped | paused | held (not started: the cost cap was reached)
    error: str | None = None


@dataclass
class PlayedRun:
    """What one invocation's dialogues ended as (the library sums it up into ``dymt.RunResult``)."""

    run_id: str
    outcomes: list[DialogueOutcome] = field(default_factory=list)


@asynccontextmanager
async def open_graph(location: DbLocation, *, outage: StoreOutage | None = None) -> AsyncIterator[CompiledStateGraph]:
    """The dialogue graph on the store's LangGraph saver (``graph.checkpointer``): how every player opens it (a run
    here, its ``--processes`` children, queue workers, branches and resumes)."""
    async with open_checkpointer(location, outage=outage) as saver:
        yield build_graph(saver)


async def execute_run(
    config: RunConfig,
    seeds: Sequence[Seed],
    *,
    graph: CompiledStateGraph,
    store: Writer,
    models: Models,
    on_progress: ProgressCallback | None = None,
    scripts: ModeScripts | None = None,
    trace: bool = True,
    targets: Sequence[RoleModel] | None = None,
    reseed: Callable[[int], tuple[Models, Sequence[RoleModel]]] | None = None,
    budget: DialogueBudget | tuple[BudgetCheck, DialogueEnded] | None = None,
    outage: StoreOutage | None = None,
    slots: DialogueSlots | None = None,
) -> PlayedRun:
    """Play (or resume) every dialogue of a run; failures are recorded per dialogue, others go on.

    A grid run (``config.modes`` / ``config.targets``, with one built model per target in
    ``targets``) plays every seed in every mode against every target, each its own thread.
    With ``config.samples`` K > 1 each is played K times: sample k draws with its own sampling
    seed (``reseed(seed)`` rebuilds the models with it) in thread ``THREAD#k``.
    ``budget`` (graph/running/budget.py, e.g. evals.cost.CostCap; the pair ``(allows, ended)`` still works) holds
    back dialogues not yet started once it says no: they stay unplayed (status "held"), and the same run id plays
    them later.
    ``outage`` (PostgreSQL): a dialogue that meets a store outage waits for the store and plays on from its last
    checkpoint, within the outage's budget (checkpoints/store_outage.py). ``slots``: how many dialogues play at once
    (default ``config.max_concurrency``, fixed).
    """
    by_mode = scripts_by_mode(config, seeds, scripts)
    jobs = plan_dialogues(config, seeds, by_mode, list(dict.fromkeys(t.spec for t in (targets or [models.target]))))
    record_run(store, config.stored_record(models, targets), by_mode, planned=len(jobs))
    contexts = run_contexts(config, models, targets, reseed)
    limiter = slots or DialogueSlots(config.max_concurrency or 1)
    notify = on_progress or (lambda *_: None)
    write = StoreWriter(store, trace=trace, outage=outage)
    gate = BudgetGate(capped, write) if (capped := as_budget(budget)) is not None else None

    async def one(seed: Seed, mode: str, target: str, sample: int) -> DialogueOutcome:
        async with limiter:
            thread_id = dialogue_thread_id(config, seed, mode, target, sample)
            if gate is not None and not await gate.admits(thread_id):
                return await _held_back(write, thread_id, notify)
            try:
                outcome = await play_through_outages(
                    outage,
                    lambda: play_dialogue(
                        graph,
                        RunDialogue(config, seed, mode, target, sample, script=by_mode[mode].script(seed.id)),
                        write=write,
                        context=contexts[(sample, target)],
                        notify=notify,
                    ),
                )
            except ReplayedTooOften as exc:  # the store answers but this dialogue cannot be played on: it failed
                await write.upsert_dialogue(
                    thread_id, status="failed", stop_reason="error", error=str(exc), ended_at=now()
                )
                notify("failed", thread_id, 0)
                outcome = DialogueOutcome(thread_id, "failed", str(exc))
            if gate is not None:
                await gate.ended(outcome.thread_id)
            return outcome

    tasks = [asyncio.ensure_future(one(*job)) for job in jobs]
    try:
        with playing_collector():
            outcomes = list(await asyncio.gather(*tasks))
    except BaseException as exc:
        threads = [dialogue_thread_id(config, *job) for job in jobs]
        await _stop_interrupted(tasks, write, store, run_id_of(config), exc, threads=threads)
        raise
    write.close()
    _finish(write, store, run_id_of(config), outcomes)
    return PlayedRun(run_id=run_id_of(config), outcomes=outcomes)


def scripts_by_mode(
    config: RunConfig,
    seeds: Sequence[Seed],
    scripts: ModeScripts | None = None,
) -> dict[str, ModeScripts]:
    """The scripts of each of the run's modes: ``scripts`` for a run of one mode (as planned), else read for each."""
    modes = config.modes
    return {
        mode: scripts
        if scripts is not None and len(modes) == 1
        else scripts_for(mode, seeds, fairmt_dir=config.fairmt_source)
        for mode in modes
    }


async def _held_back(write: StoreWriter, thread_id: str, notify: ProgressCallback) -> DialogueOutcome:
    """A dialogue the budget holds back: "held", or "skipped" if it had finished (nothing left to spend on it)."""
    stored = await write.get_dialogue(thread_id)
    status = "skipped" if stored is not None and stored.get("status") == "finished" else "held"
    notify(status, thread_id, 0)
    return DialogueOutcome(thread_id, status)


async def _stop_interrupted(
    tasks: Sequence[asyncio.Future],
    write: StoreWriter,
    store: Writer,
    run_id: str,
    exc: BaseException,
    *,
    threads: Sequence[str] = (),
) -> None:
    """The run stopped on ``exc``: the other dialogues stop, the writer closes, the run and its dialogues still
    marked running (``threads``: those of this invocation; one stopped before its first step too) are marked
    interrupted.

    Raises the store's fault (one line for the command: which file, what to do; nothing lost) if the store failed;
    returns for the caller to raise ``exc`` otherwise.
    """
    # Stop the other dialogues before closing the writer: none may write to a closed (or full) store.
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    write.close()
    fault = store_fault(exc, _sqlite_path(store))
    if isinstance(exc, OutageError) and fault is None:
        return  # past its budget the store is away: nothing to mark
    try:
        store.mark_interrupted(threads)
        store.finish_run(run_id, "interrupted")
    except Exception as again:
        fault = fault or store_fault(again, _sqlite_path(store))
        if fault is None:
            raise
    if fault is not None:
        raise fault from None


def _finish(write: StoreWriter, store: Writer, run_id: str, outcomes: Sequence[DialogueOutcome]) -> None:
    """Mark the run failed (a dialogue failed), stopped (the budget held some back) or finished."""
    failed = any(o.status == "failed" for o in outcomes)
    held = any(o.status == "held" for o in outcomes)
    status = "failed" if failed else "stopped" if held else "finished"
    try:
        write.through_outages(lambda: store.finish_run(run_id, status))
    except Exception as exc:
        if (fault := store_fault(exc, _sqlite_path(store))) is not None:
            raise fault from None
        raise


def _sqlite_path(store: Writer) -> Path | None:
    """The store's SQLite file (None on PostgreSQL): where a full disk or a read-only file is reported."""
    return store.path if isinstance(store.path, Path) else None


def run_contexts(
    config: RunConfig,
    models: Models,
    targets: Sequence[RoleModel] | None,
    reseed: Callable[[int], tuple[Models, Sequence[RoleModel]]] | None,
) -> dict[tuple[int, str], RunContext]:
    """The run context of every (sample, target spec): the nodes read the target model from it."""
    by_target = {t.spec: t for t in (targets or [models.target])}
    contexts = {
        (0, spec_text): RunContext(
            models=replace(models, target=model),
            sampling_seed=config.sampling_seed,
            leakage=config.leakage,
            judge_reasoning=config.judge_reasoning,
        )
        for spec_text, model in by_target.items()
    }
    for sample in range(1, max(1, config.samples)):
        seed_k = sample_seed(config.sampling_seed, sample)
        models_k, targets_k = reseed(seed_k) if reseed is not None else (models, list(by_target.values()))
        for model in targets_k:
            contexts[(sample, model.spec)] = RunContext(
                models=replace(models_k, target=model),
                sampling_seed=seed_k,
                leakage=config.leakage,
                judge_reasoning=config.judge_reasoning,
            )
    return contexts


def plan_dialogues(
    config: RunConfig,
    seeds: Sequence[Seed],
    by_mode: Mapping[str, ModeScripts],
    targets: Sequence[str],
) -> list[tuple[Seed, str, str, int]]:
    """Every (seed, mode, target, sample) of a run, seed-major: dialogues running together spread over the targets'
    providers."""
    modes = config.modes
    return [
        (seed, mode, target, sample)
        for seed in seeds
        for sample in range(max(1, config.samples))
        for mode in modes
        if not is_scripted(mode) or by_mode[mode].plays(seed.id)
        for target in targets
    ]


def run_id_of(config: RunConfig) -> str:
    """The id of the run being played: set before any dialogue plays (graph.run and the library name every run)."""
    if config.run_id is None:
        raise ValueError("a run plays with its run_id set")
    return config.run_id


def dialogue_thread_id(config: RunConfig, seed: Seed, mode: str, target: str, sample: int) -> str:
    """The thread id :func:`play_dialogue` gives one (seed, mode, target, sample) of a run (checkpoints/ids.py)."""
    return thread_id_of(
        run_id_of(config), seed.id, mode, target=target if config.several_targets else None, sample=sample
    )


@dataclass(frozen=True)
class RunDialogue:
    """One of a run's dialogues, by its (seed, mode, target, sample): :func:`play_dialogue` starts it, continues it from
    its last checkpoint, re-runs it from before its failed node, or skips it when it finished."""

    config: RunConfig
    seed: Seed
    mode: str | None = None  # default: the run's mode
    target: str | None = None  # default: the context's target model
    sample: int = 0
    script: list[str] | None = None


async def play_dialogue(
    graph: CompiledStateGraph,
    start: RunDialogue | RunnableConfig,
    *,
    write: StoreWriter,
    context: RunContext,
    notify: ProgressCallback,
    run_input: Any = None,
) -> DialogueOutcome:
    """Play one dialogue to its end, mirroring every step into the store: every player's one way to stream the graph.

    ``start`` is one of a run's dialogues (:class:`RunDialogue`: the run, its children and queue workers), or a thread
    config streamed from its checkpoint (a resume, a branch, a review), with ``run_input`` the initial state of a new
    thread (None: continue from the checkpoint).
    """
    values: dict[str, Any] = {}
    if isinstance(start, RunDialogue):
        begun = await _begin(
            graph, start, write=write, notify=notify, target=start.target or context.models.target.spec
        )
        if isinstance(begun, DialogueOutcome):  # finished already: skipped
            return begun
        config, run_input, values = begun
        notify("started", config["configurable"]["thread_id"], _done(values))
    else:
        config = start
    with caching_for((config.get("metadata") or {}).get("run_id")):  # its cached replies are the run's
        thread_id = config["configurable"]["thread_id"]
        tracer = None
        if write.trace:
            config, tracer = traced(config, write)
        final: dict[str, Any] = values
        written: dict[int, dict[str, Any]] = {}  # turn index -> the record last mirrored
        mirrored: list[Future] = []  # the queued turn writes, checked before the dialogue's status is written
        try:
            async for state in graph.astream(run_input, config, context=context, stream_mode="values"):  # type: ignore[call-overload]  # langgraph's overloads type stream_mode as a Literal list
                final = state
                # Only the turn records this step changed (upserts): one small write, none after termination,
                # none for a turn that holds only its user message so far (the store keeps replies and labels).
                # Queued, not awaited: the store's thread writes those of many dialogues in one transaction,
                # before any later write of this dialogue (its status below included).
                turns = state.get("turns", [])
                changed = [t for t in turns if written.get(t["index"]) != t]
                if changed:
                    written.update((t["index"], t) for t in changed)
                    if any("reply" in t or "label" in t for t in changed):
                        await write.fenced(thread_id)  # a worker taken for dead stops here, writing nothing
                        mirrored.append(write.queue_turns(thread_id, changed))
                notify("step", thread_id, _done(state))
            for future in mirrored:
                await asyncio.wrap_future(future)  # a failed mirror write fails the dialogue, as when it was awaited
        except asyncio.CancelledError as stop:
            if tracer is not None:
                tracer.close_open(stop)  # the calls cut in flight are traced too
            await write.upsert_dialogue(thread_id, status="interrupted")
            raise
        except Exception as exc:
            if is_store_outage(exc) or isinstance(exc, OutageError):
                raise  # the store, not the dialogue: the caller waits for it and plays on (checkpoints/store_outage.py)
            if (fault := store_fault(exc, _sqlite_path(write.store))) is not None:
                raise fault from None  # the store, not the dialogue, failed: the run stops, the dialogue resumes later
            message = failure_reason(exc)  # in words; the trace keeps the exception's class
            await write.upsert_dialogue(thread_id, status="failed", stop_reason="error", error=message, ended_at=now())
            notify("failed", thread_id, _done(final))
            return DialogueOutcome(thread_id, "failed", message)
        if final.get("stop_reason") == "error":
            await write.upsert_dialogue(
                thread_id, status="failed", stop_reason="error", error=final.get("error"), ended_at=now()
            )
            notify("failed", thread_id, _done(final))
            return DialogueOutcome(thread_id, "failed", final.get("error"))
        await write.upsert_dialogue(
            thread_id, status="finished", stop_reason=final.get("stop_reason"), error=None, ended_at=now()
        )
        # a stream ended without a stop reason stopped at an interrupt: the dialogue is paused (settle() says so)
        notify("finished" if final.get("stop_reason") else "paused", thread_id, _done(final))
        return DialogueOutcome(thread_id, "finished")


async def _begin(
    graph: CompiledStateGraph, dialogue: RunDialogue, *, write: StoreWriter, notify: ProgressCallback, target: str
) -> tuple[RunnableConfig, Any, dict[str, Any]] | DialogueOutcome:
    """Where one of a run's dialogues plays from, its row written: (thread config, initial state or None, the values
    it starts with); or its outcome "skipped" when its checkpoint says it ended."""
    config, seed = dialogue.config, dialogue.seed
    mode = dialogue.mode or config.mode
    thread_id = dialogue_thread_id(config, seed, mode, target, dialogue.sample)
    extra = {"sample": dialogue.sample} if dialogue.sample else {}
    graph_config = dialogue_config(
        thread_id, turns=config.turns, run_id=config.run_id, seed_id=seed.id, mode=mode, target=target, **extra
    )
    snapshot = await graph.aget_state(graph_config)
    values: dict[str, Any] = dict(snapshot.values or {})
    run_input: Any = None  # the first step's input (a new dialogue's initial state), None to resume
    if not values:
        run_input = initial_state(seed, mode, config.turns, script=dialogue.script)
        await write.upsert_dialogue(
            thread_id,
            run_id=config.run_id,
            seed_id=seed.id,
            category=seed.category,
            statement=seed.statement,
            mode=mode,
            target=target,
            max_turns=config.turns,
            status="running",
            started_at=now(),
        )
    elif values.get("stop_reason") == "max_turns":
        await write.record_turns(thread_id, values.get("turns", []))
        await write.upsert_dialogue(thread_id, status="finished", stop_reason="max_turns", error=None)
        notify("skipped", thread_id, len(values.get("turns", [])))
        return DialogueOutcome(thread_id, "skipped")
    elif values.get("stop_reason") == "error":
        graph_config = await checkpoint_before_failure(graph, graph_config)
        await write.upsert_dialogue(thread_id, status="running", stop_reason=None, error=None)
    else:
        await write.upsert_dialogue(thread_id, status="running")
    return graph_config, run_input, values


def dialogue_config(thread_id: str, *, turns: int, **metadata: Any) -> RunnableConfig:
    """The config of one dialogue thread: its id, a recursion limit for its turns, traceable metadata."""
    return {
        "configurable": {"thread_id": thread_id},
        "recursion_limit": 4 * turns + 10,
        "metadata": {"thread_id": thread_id, **metadata},
    }


def initial_state(seed: Seed, mode: str, turns: int, *, script: list[str] | None = None) -> DialogueState:
    return {
        "seed": {"id": seed.id, "category": seed.category, "statement": seed.statement},
        "mode": mode,
        "max_turns": turns,
        "messages": [],
        "turns": [],
        "stop_reason": None,
        "error": None,
        "failed_node": None,
        "script": script,
    }


async def checkpoint_before_failure(graph: CompiledStateGraph, config: RunnableConfig) -> RunnableConfig:
    """The config of the newest checkpoint before the node that failed, to re-run just that node."""
    async for snapshot in graph.aget_state_history(config):
        if not snapshot.values.get("error") and snapshot.next:
            return snapshot.config
    raise RuntimeError(f"no checkpoint before the failure in {config['configurable']['thread_id']}")


def _done(state: dict[str, Any]) -> int:
    return sum(1 for t in state.get("turns", []) if "label" in t)
