"""Build and compile the dialogue StateGraph: user_simulator → target → judge → termination ↺.

Baselines swap the simulated user for ``scripted_user``, which replays a script held in the state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, cast

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from nodes.context import RunContext
from nodes.judge import judge
from nodes.scripted_user import scripted_user
from nodes.state import DialogueState
from nodes.target import target
from nodes.termination import route_after_termination, route_user, termination
from nodes.user_simulator import user_simulator


def on_loop(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A plain function as a coroutine function, so LangGraph runs it on the event loop.

    LangGraph runs a synchronous node or router in a worker thread (a thread hop, a context
    copy and a GIL hand-over each time: five per turn); these are a few dictionary lookups.
    """

    @functools.wraps(fn)
    async def run(state: Any) -> Any:
        return fn(state)

    return run


class Router(Runnable[Any, Any]):
    """A conditional edge's function, run by LangGraph's branch without a LangChain run of its own.

    A traced router is a callback run (start and end events, a run record) for a few dictionary
    lookups, twice a turn. Here the decision is handed to whichever callback handler of the node
    has a ``record_route(parent_run_id, name, inputs, choice, started, tags, error)`` method (the
    dialogue's tracer, graph/tracing/tracer.py): the stored trace keeps one run per routing decision,
    recorded inside its node's record. Runs on the event loop, as ``on_loop`` functions do.
    """

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.name = fn.__name__

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:  # noqa: A002 - Runnable's name
        return self._choose(input, config)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:  # noqa: A002 - Runnable's name
        return self._choose(input, config)

    def _choose(self, state: Any, config: RunnableConfig | None) -> Any:
        manager = config.get("callbacks") if config else None
        recorders = [r for h in getattr(manager, "handlers", None) or () if (r := getattr(h, "record_route", None))]
        if not recorders:
            return self.fn(state)
        started = datetime.now(UTC)
        try:
            choice = self.fn(state)
        except Exception as exc:
            for record in recorders:
                record(manager.parent_run_id, self.name, state, None, started, manager.tags, exc)  # type: ignore[union-attr]
            raise
        for record in recorders:
            record(manager.parent_run_id, self.name, state, choice, started, manager.tags, None)  # type: ignore[union-attr]
        return choice


def _router(fn: Callable[[Any], Any], traced: bool) -> Any:
    """``fn`` as a conditional edge: a run of its own when LangSmith traces (so its tree has it), else a Router."""
    return on_loop(fn) if traced else Router(fn)


def _next_or_stop(next_node: str, traced: bool):
    """Router after a user node: go on to ``next_node`` unless it recorded an error (--interactive's review
    breakpoint is before the target, so a failed user turn must not reach it)."""

    def route(state: DialogueState) -> Literal["target", "termination"]:
        return "termination" if state.get("error") else next_node  # type: ignore[return-value]

    route.__name__ = route.__qualname__ = f"after_{next_node}"
    return _router(route, traced)


def build_graph(
    checkpointer: BaseCheckpointSaver | None = None,
    *,
    context_schema: type = RunContext,
    traced_routers: bool | None = None,
) -> CompiledStateGraph:
    """The compiled dialogue graph; with a checkpointer every node step is saved.

    ``context_schema`` is what nodes find in ``runtime.context`` (anything with ``models`` and
    ``sampling_seed``): LangGraph Studio's entry (graph/studio.py) passes one built from the environment.
    Routers are LangChain runs of their own only when LangSmith traces (``traced_routers``, by default
    from the environment); otherwise the dialogue's tracer records them through :class:`Router`.
    """
    if traced_routers is None:
        from langsmith.utils import tracing_is_enabled

        traced_routers = bool(tracing_is_enabled())
    traced = traced_routers
    builder = StateGraph(DialogueState, context_schema=context_schema)
    # langgraph's add_node overloads do not take a node typed with Runtime[...] (it is called with one): Any here
    builder.add_node("user_simulator", cast(Any, user_simulator))
    builder.add_node("target", cast(Any, target))
    builder.add_node("judge", cast(Any, judge))
    builder.add_node("termination", cast(Any, on_loop(termination)))
    builder.add_node("scripted_user", scripted_user)
    builder.add_conditional_edges(START, _router(route_user, traced), ["user_simulator", "scripted_user"])
    builder.add_conditional_edges("user_simulator", _next_or_stop("target", traced), ["target", "termination"])
    builder.add_conditional_edges("scripted_user", _next_or_stop("target", traced), ["target", "termination"])
    # Plain edges where no choice is needed (a router is a run of its own, with its trace row, every turn):
    # the judge returns at once after a failed target, and termination ends the dialogue with the error.
    builder.add_edge("target", "judge")
    builder.add_edge("judge", "termination")
    builder.add_conditional_edges(
        "termination", _router(route_after_termination, traced), ["user_simulator", "scripted_user", END]
    )
    return builder.compile(checkpointer=checkpointer, name="dymt_dialogue")
