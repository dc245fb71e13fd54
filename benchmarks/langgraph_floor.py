"""LangGraph's own floor: a four-node dialogue loop with instant nodes on its stock ``AsyncSqliteSaver``.

Nothing of ours runs but these few lines: LangGraph's default serializer and channel
versions, a checkpoint at every node step, the same graph shape as the dialogue's
(user → target → judge → termination ↺) and a state that grows by the same messages and
turn records a turn. What the harness costs above this plus the bare client's calls is
what our own code adds.
"""

from __future__ import annotations

import asyncio
import operator
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph


class LoopState(TypedDict, total=False):
    messages: Annotated[list[dict[str, str]], operator.add]
    turns: Annotated[list[dict[str, Any]], operator.add]
    max_turns: int
    stop_reason: str | None


async def _user(state: LoopState) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"Question {len(state['messages'])}: is that really true?"}]}


async def _target(state: LoopState) -> dict[str, Any]:
    return {"messages": [{"role": "assistant", "content": "People differ, and generalisations about groups mislead."}]}


async def _judge(state: LoopState) -> dict[str, Any]:
    index = len(state.get("turns") or []) + 1
    return {"turns": [{"index": index, "label": "not biased", "rationale": "It rejects the stereotype."}]}


async def _termination(state: LoopState) -> dict[str, Any]:
    return {"stop_reason": "max_turns" if len(state["turns"]) >= state["max_turns"] else None}


async def _route(state: LoopState) -> str:
    return END if state.get("stop_reason") else "user"


def build_loop(saver: AsyncSqliteSaver):
    builder = StateGraph(LoopState)
    for name, fn in (("user", _user), ("target", _target), ("judge", _judge), ("termination", _termination)):
        builder.add_node(name, fn)
    builder.add_edge(START, "user")
    builder.add_edge("user", "target")
    builder.add_edge("target", "judge")
    builder.add_edge("judge", "termination")
    builder.add_conditional_edges("termination", _route, ["user", END])
    return builder.compile(checkpointer=saver)


async def langgraph_floor(db: Path, *, dialogues: int, turns: int, concurrency: int) -> tuple[float, float]:
    """(wall s, CPU s) of ``dialogues`` × ``turns`` of the loop at ``concurrency``, streamed as the runner streams."""
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        graph = build_loop(saver)
        limiter = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with limiter:
                config = {"configurable": {"thread_id": f"floor-{i}"}, "recursion_limit": 4 * turns + 10}
                final: dict[str, Any] = {}
                async for state in graph.astream(
                    {"messages": [], "turns": [], "max_turns": turns}, config, stream_mode="values"
                ):
                    final = state
                assert len(final["turns"]) == turns, final

        await one(-1)  # warm-up: the tables and the first compile of the channels are paid once
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(i) for i in range(dialogues)))
        return time.perf_counter() - wall, time.process_time() - cpu
