"""Benchmark 1, harness overhead: time per turn in our code, with an instant fake model.

Reference: the same dialogue loop (the same node functions, prompts and parsing) called
directly, without LangGraph. Then LangGraph without a checkpointer, then the real runner
with the SQLite checkpointer and the store mirror, then with tracing, then with the
retry/cache wrapper and its SQLite response cache (the default of ``python -m graph.run``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from benchmarks.common import Timing, instant_models, play_run, run_async, scratch_dir, synthetic_seeds, timed
from checkpoints.cache import ResponseCache
from checkpoints.reducers import apply_update
from graph.running.playing import dialogue_config, initial_state
from models.call_policy import CallPolicy
from nodes.builder import build_graph
from nodes.context import Models, RunContext
from nodes.judge import judge
from nodes.target import target
from nodes.termination import termination
from nodes.user_simulator import user_simulator

DIALOGUES = 20
TURNS = 5
REPEATS = 3


def _merge(state: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    return apply_update(state, update)  # as the graph's channels apply a node's update


async def plain_loop(models: Models) -> Timing:
    """The dialogue loop without LangGraph: node functions called in order, state merged by hand."""
    runtime = SimpleNamespace(context=RunContext(models=models))
    with timed() as timing:
        for seed in synthetic_seeds(DIALOGUES):
            state: dict[str, Any] = dict(initial_state(seed, "implicit", TURNS))
            while not state.get("stop_reason"):
                for node in (user_simulator, target, judge):
                    state = _merge(state, await node(state, runtime))  # type: ignore[arg-type]
                    if state.get("error"):
                        break
                state = _merge(state, termination(state))  # type: ignore[arg-type]
            assert len(state["turns"]) == TURNS and not state.get("error"), state.get("error")
    return timing


async def graph_in_memory(models: Models) -> Timing:
    """LangGraph alone: the compiled graph with no checkpointer."""
    graph = build_graph(None)
    context = RunContext(models=models)
    with timed() as timing:
        for seed in synthetic_seeds(DIALOGUES):
            config = dialogue_config(f"mem:{seed.id}", turns=TURNS)
            final = await graph.ainvoke(initial_state(seed, "implicit", TURNS), config, context=context)  # type: ignore[call-overload]
            assert len(final["turns"]) == TURNS
    return timing


async def graph_runner(models: Models, *, trace: bool, cache: bool) -> Timing:
    with scratch_dir() as tmp:
        db = tmp / "bench.db"
        if cache:
            policy = CallPolicy(cache=ResponseCache(db))
            models = Models(**{role: _wrapped(getattr(models, role), policy) for role in ("user", "target", "judge")})
        result, timing = await play_run(db, models, synthetic_seeds(DIALOGUES), turns=TURNS, trace=trace)
        if cache:
            policy.cache.close()  # type: ignore[union-attr]
        assert all(o.status == "finished" for o in result.outcomes), result.outcomes
        return timing


def _wrapped(role_model, policy: CallPolicy):
    from dataclasses import replace

    from models.registry import cache_params

    chat = policy.wrap(
        role_model.chat,
        spec=role_model.spec,
        provider="fake",
        role=role_model.spec.split(":")[1],
        cache_params=cache_params(role_model.spec, role_model.sampling, role_model.chat),
    )
    return replace(role_model, chat=chat)


VARIANTS = {
    "plain loop, no LangGraph (reference)": lambda: plain_loop(instant_models()),
    "LangGraph, no checkpointer": lambda: graph_in_memory(instant_models()),
    "runner: SQLite checkpoints + store": lambda: graph_runner(instant_models(), trace=False, cache=False),
    "  + retry/cache wrapper (SQLite response cache)": lambda: graph_runner(instant_models(), trace=False, cache=True),
    "  + tracing": lambda: graph_runner(instant_models(), trace=True, cache=False),
    "  + wrapper + tracing (graph.run default)": lambda: graph_runner(instant_models(), trace=True, cache=True),
}


def run() -> dict[str, Any]:
    turns = DIALOGUES * TURNS
    rows = []
    for name, make in VARIANTS.items():
        timings = [run_async(make()) for _ in range(REPEATS)]
        rows.append(
            {
                "variant": name,
                "ms_per_turn": 1000 * min(t.wall for t in timings) / turns,
                "cpu_ms_per_turn": 1000 * min(t.cpu for t in timings) / turns,
            }
        )
    reference = rows[0]
    for row in rows:
        row["overhead_ms_per_turn"] = row["ms_per_turn"] - reference["ms_per_turn"]
        row["ratio_to_plain"] = row["ms_per_turn"] / reference["ms_per_turn"]
    return {"dialogues": DIALOGUES, "turns": TURNS, "model_calls_per_turn": 3, "rows": rows}


def report(result: dict[str, Any]) -> list[str]:
    lines = [
        f"{result['dialogues']} dialogues × {result['turns']} turns (3 model calls a turn), instant fake model, "
        f"best of {REPEATS}; wall ms/turn (CPU ms/turn)"
    ]
    for row in result["rows"]:
        lines.append(
            f"  {row['variant']:<48} {row['ms_per_turn']:6.2f} ({row['cpu_ms_per_turn']:6.2f})  "
            f"+{row['overhead_ms_per_turn']:6.2f} ms/turn over the plain loop, ×{row['ratio_to_plain']:.1f}"
        )
    return lines
