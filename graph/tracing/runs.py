"""The tracer's record of one open run and where it sits in the dialogue (node, turn, role), made from callbacks.

A :class:`_Run` holds the fields a stored row needs, as LangChain's ``BaseTracer`` would set them, without a
pydantic ``RunTree`` per run; :class:`_RunPlace` is its depth, node, turn and role; the helpers derive a run's
name, dict key, turn and model the way graph.tracing.tracer stores them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

# Dialogue roles of the model nodes; other nodes (termination, routers) have no role.
NODE_ROLES = {"user_simulator": "user", "scripted_user": "user", "target": "target", "judge": "judge"}


class _RunPlace:
    """Where an open run sits in the dialogue: depth under the graph root, node, turn, role (never changed once
    made)."""

    __slots__ = ("depth", "node", "turn", "role", "is_node")

    def __init__(self, depth: int, node: str | None, turn: int | None, role: str | None, is_node: bool = False) -> None:
        self.depth = depth
        self.node = node
        self.turn = turn
        self.role = role
        self.is_node = is_node  # the node's own run (its inputs are the dialogue state, its outputs the update)


class _Run:
    """One open run: the fields a stored row needs (a pydantic ``RunTree`` costs ~50 µs, nine times a turn)."""

    __slots__ = (
        "id",
        "trace_id",
        "parent_run_id",
        "dotted_order",
        "run_type",
        "name",
        "start_time",
        "end_time",
        "inputs",
        "outputs",
        "error",
        "tags",
        "extra",
        "sid",
        "trace_sid",
        "parent_sid",
        "key",
        "parent_key",
    )

    def __init__(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        run_type: str,
        name: str | None,
        serialized: Mapping[str, Any] | None,
        inputs: dict[str, Any],
        tags: list[str] | None,
        metadata: dict[str, Any] | None,
        extra: dict[str, Any],
    ) -> None:
        self.id = run_id
        self.parent_run_id = parent_run_id
        # the tracer's dicts are keyed by the ids' integers: a UUID hashes in Python, fourteen times a run
        self.key = _key(run_id)
        self.parent_key = None if parent_run_id is None else _key(parent_run_id)
        self.run_type = run_type
        self.name = name or _name_of(serialized)
        self.start_time = datetime.now(UTC)
        self.end_time: datetime | None = None
        self.inputs = inputs
        self.outputs: dict[str, Any] = {}
        self.error: str | None = None
        self.tags = tags or []
        if metadata:
            extra["metadata"] = metadata
        self.extra = extra
        self.trace_id: UUID = run_id
        self.dotted_order = ""
        # the ids as text, made once (the row and its children's rows need them)
        self.sid = self.trace_sid = ""
        self.parent_sid: str | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        return self.extra.setdefault("metadata", {})


def _name_of(serialized: Mapping[str, Any] | None) -> str:
    """A run's name when the callback gives none, as LangSmith's ``RunTree`` infers it."""
    if serialized:
        if "name" in serialized:
            return serialized["name"]
        if "id" in serialized:
            return serialized["id"][-1]
    return "Unnamed"


def _key(run_id: Any) -> Any:
    """A run id as the tracer's dicts key it: a UUID's integer (hashed in C), anything else as it is."""
    return run_id.int if isinstance(run_id, UUID) else run_id


def _turn_of(node: str, inputs: Any) -> int | None:
    """The turn a node works on, from its input state: K user messages in turn K (K-1 before the simulator)."""
    messages = inputs.get("messages") if isinstance(inputs, Mapping) else None
    if not isinstance(messages, list):
        return None
    users = 0
    for m in messages:  # a plain loop, dicts first: this runs for every node of every turn
        if (type(m) is dict or isinstance(m, Mapping)) and m.get("role") == "user":
            users += 1
    return users + 1 if NODE_ROLES.get(node) == "user" else users


def _model_of(run: _Run, metadata: Mapping[str, Any]) -> str | None:
    if run.run_type not in ("llm", "chat_model"):
        return None
    params = run.extra.get("invocation_params") or {}
    for value in (metadata.get("ls_model_name"), params.get("model"), params.get("model_name"), params.get("_type")):
        if value:
            return str(value)
    return run.name
