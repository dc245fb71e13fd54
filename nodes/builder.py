"""Build and compile the dialogue StateGraph: user_simulator → target → judge → termination ↺.

Baselines swap the simulated user for ``scripted_user``, which replays a script held in the state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from nodes.context import RunContext
from nodes.state import DialogueState
from nodes.judge import judge
from nodes.scripted_user import scripted_user
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


def _next_or_stop(next_node: str):
    """Router after a user node: go on to ``next_node`` unless it recorded an error (--interactive's review
    breakpoint is before the target, so a failed user turn must not reach it)."""

    def route(state: DialogueState) -> Literal["target", "termination"]:
        return "termination" if state.get("error") else next_node  # type: ignore[return-value]

    route.__name__ = route.__qualname__ = f"after_{next_node}"
    return on_loop(route)


def build_graph(checkpointer: BaseCheckpointSaver | None = None, *, context_schema: type = RunContext) -> CompiledStateGraph:
    """The compiled dialogue graph; with a checkpointer every node step is saved.

    ``context_schema`` is what nodes find in ``runtime.context`` (anything with ``models`` and
    ``sampling_seed``): LangGraph Studio's entry (graph/studio.py) passes one built from the environment.
    """
    builder = StateGraph(DialogueState, context_schema=context_schema)
    builder.add_node("user_simulator", user_simulator)
    builder.add_node("target", target)
    builder.add_node("judge", judge)
    builder.add_node("termination", on_loop(termination))
    builder.add_node("scripted_user", scripted_user)
    builder.add_conditional_edges(START, on_loop(route_user), ["user_simulator", "scripted_user"])
    builder.add_conditional_edges("user_simulator", _next_or_stop("target"), ["target", "termination"])
    builder.add_conditional_edges("scripted_user", _next_or_stop("target"), ["target", "termination"])
    # Plain edges where no choice is needed (a router is a run of its own, with its trace row, every turn):
    # the judge returns at once after a failed target, and termination ends the dialogue with the error.
    builder.add_edge("target", "judge")
    builder.add_edge("judge", "termination")
    builder.add_conditional_edges("termination", on_loop(route_after_termination), ["user_simulator", "scripted_user", END])
    return builder.compile(checkpointer=checkpointer, name="dymt_dialogue")
