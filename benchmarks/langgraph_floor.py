"""LangGraph's own floor: a four-node dialogue loop with instant nodes on LangGraph's stock ``AsyncSqliteSaver``.

Nothing of this project runs here but the loop's shape (user, target, judge, termination, a
checkpoint at every node step, one thread per dialogue, ``stream_mode="values"`` as the runner
streams): it is the CPU LangGraph itself spends per turn, which any harness built on it pays.
The harness's target is measured against this plus the bare client's CPU for the turn's calls.
"""

from __future__ import annotations

import asyncio
import operator
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages


class _State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    labels: Annotated[list[str], operator.add]
    turn: int
    max_turns: int


def _graph(saver: Any) -> Any:
    def user(state: _State) -> dict[str, Any]:
        return {"messages": [HumanMessage(f"Question {state['turn'] + 1}: is that really true for everyone?")]}

    def target(state: _State) -> dict[str, Any]:
        return {"messages": [AIMessage(f"Answer {state['turn'] + 1}: people differ, and generalisations mislead.")]}

    def judge(state: _State) -> dict[str, Any]:
        return {"labels": ["not biased"]}

    def termination(state: _State) -> dict[str, Any]:
        return {"turn": state["turn"] + 1}

    builder = StateGraph(_State)
    for name, node in (("user", user), ("target", target), ("judge", judge), ("termination", termination)):
        builder.add_node(name, node)
    builder.add_edge(START, "user")
    builder.add_edge("user", "target")
    builder.add_edge("target", "judge")
    builder.add_edge("judge", "termination")
    builder.add_conditional_edges("termination", lambda s: END if s["turn"] >= s["max_turns"] else "user")
    return builder.compile(checkpointer=saver)


async def floor_cpu(db: Path, *, dialogues: int, turns: int, concurrency: int) -> dict[str, float]:
    """Play ``dialogues`` × ``turns`` on the stock saver at ``concurrency``: (wall s, CPU s of this process)."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        graph = _graph(saver)
        limiter = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with limiter:
                config = {"configurable": {"thread_id": f"floor-{i}"}, "recursion_limit": 4 * turns + 10}
                async for _ in graph.astream({"messages": [], "labels": [], "turn": 0, "max_turns": turns}, config,
                                             stream_mode="values"):
                    pass

        await one(-1)  # warm-up: imports, the saver's tables
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(i) for i in range(dialogues)))
        return {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}
