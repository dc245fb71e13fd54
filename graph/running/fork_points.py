"""Where a stored dialogue can be forked: the checkpoint just before each turn's user message, on its thread's path.

A thread resumed after a failure or edited at a pause holds abandoned checkpoints too, so its lineage is walked from
the newest checkpoint back through its parents; a turn boundary is a checkpoint waiting for the user node in a
dialogue that has neither failed nor ended. graph.running.forking builds and plays a branch from the fork point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langgraph.graph.state import CompiledStateGraph
from langgraph.types import StateSnapshot

from nodes.state import current_turn

# The nodes that write a user message; a checkpoint waiting for one of them is a turn boundary.
USER_NODES = frozenset({"user_simulator", "scripted_user"})


class ForkError(ValueError):
    """A branch that cannot be made as asked; the message names the value and the fix."""


@dataclass(frozen=True)
class ForkPoint:
    """The state of a dialogue just before turn ``turn``'s user message, and where it is stored."""

    thread_id: str
    turn: int
    checkpoint_id: str
    values: dict[str, Any]
    # The user message the dialogue went on to send at this turn (None if it never got that far).
    turn_message: str | None


@dataclass(frozen=True)
class Lineage:
    """A thread's newest checkpoint and, for each turn, the checkpoint just before its user message."""

    thread_id: str
    head: StateSnapshot
    before_turn: dict[int, StateSnapshot]

    @property
    def fork_turns(self) -> list[int]:
        return sorted(self.before_turn)

    def fork_point(self, turn: int) -> ForkPoint:
        if turn not in self.before_turn:
            raise ForkError(f"thread {self.thread_id} cannot be forked at turn {turn}: {self.describe_turns()}")
        snapshot = self.before_turn[turn]
        sent = next(
            (t.get("user_message") for t in self.head.values.get("turns", []) if t.get("index") == turn),
            None,
        )
        return ForkPoint(
            thread_id=self.thread_id,
            turn=turn,
            checkpoint_id=snapshot.config["configurable"]["checkpoint_id"],
            values=dict(snapshot.values),
            turn_message=sent,
        )

    def describe_turns(self) -> str:
        turns = self.fork_turns
        if not turns:
            return "it has no checkpoint before a user turn"
        if turns == list(range(turns[0], turns[-1] + 1)):
            return f"--turn must be between {turns[0]} and {turns[-1]}"
        return f"--turn must be one of {', '.join(map(str, turns))}"


def is_turn_boundary(snapshot: StateSnapshot) -> bool:
    """A checkpoint waiting for the user node, in a dialogue that has neither failed nor ended."""
    values = snapshot.values or {}
    return (
        bool(snapshot.next)
        and set(snapshot.next) <= USER_NODES
        and not values.get("error")
        and not values.get("stop_reason")
    )


async def read_lineage(graph: CompiledStateGraph, thread_id: str) -> Lineage:
    """The checkpoints on the path to a thread's newest one (abandoned retries and edits are skipped)."""
    by_id: dict[str, StateSnapshot] = {}
    head: StateSnapshot | None = None
    async for snapshot in graph.aget_state_history({"configurable": {"thread_id": thread_id}}):
        by_id[snapshot.config["configurable"]["checkpoint_id"]] = snapshot
        head = head or snapshot  # newest first
    if head is None:
        raise ForkError(f"thread {thread_id} has no checkpoints: it was never played in this database")
    before: dict[int, StateSnapshot] = {}
    snapshot: StateSnapshot | None = head  # type: ignore[no-redef]
    while snapshot is not None:
        if is_turn_boundary(snapshot):
            before.setdefault(current_turn(snapshot.values) + 1, snapshot)  # type: ignore[arg-type]  # the newest wins
        parent = snapshot.parent_config
        snapshot = by_id.get(parent["configurable"].get("checkpoint_id")) if parent else None  # type: ignore[assignment,arg-type]
    return Lineage(thread_id=thread_id, head=head, before_turn=before)
