"""A trace as a tree (thread → graph → turn → node → model call), and as LangSmith runs and feedback."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# --- the tree: graph → turn → node → model call ---------------------------------------------


@dataclass
class TraceNode:
    """One line of a trace tree: a stored run, or a synthetic thread / turn grouping."""

    kind: str  # thread | graph | turn | node | model | run
    name: str
    run: dict[str, Any] | None = None
    turn: int | None = None
    children: list[TraceNode] = field(default_factory=list)
    feedback: list[dict[str, Any]] = field(default_factory=list)

    @property
    def start(self) -> datetime | None:
        if self.run is not None:
            return _time(self.run["start_time"])
        starts = [c.start for c in self.children if c.start is not None]
        return min(starts) if starts else None

    @property
    def end(self) -> datetime | None:
        if self.run is not None:
            return _time(self.run["end_time"])
        ends = [c.end for c in self.children if c.end is not None]
        return max(ends) if ends else None

    @property
    def latency(self) -> float | None:
        if self.run is not None:
            return self.run["latency"]
        start, end = self.start, self.end
        return (end - start).total_seconds() if start and end else None

    def tokens(self) -> tuple[int, int]:
        """(prompt, completion) tokens of this model call, or summed over the calls below."""
        if self.kind == "model" and self.run is not None:
            return self.run["prompt_tokens"] or 0, self.run["completion_tokens"] or 0
        pairs = [c.tokens() for c in self.children]
        return sum(p for p, _ in pairs), sum(c for _, c in pairs)

    def walk(self) -> Iterable[TraceNode]:
        yield self
        for child in self.children:
            yield from child.walk()


def build_tree(
    runs: Sequence[dict[str, Any]],
    feedback: dict[str, list[dict[str, Any]]] | None = None,
    *,
    thread_id: str | None = None,
) -> TraceNode:
    """The tree of one trace, or with ``thread_id`` of all traces of that thread under one thread node.

    A graph's node runs are grouped under one synthetic "turn K" node per turn. A trace
    whose root never ended (a killed process) gets a placeholder graph node.
    """
    feedback = feedback or {}
    nodes: dict[str, TraceNode] = {}
    for run in runs:
        nodes[run["id"]] = TraceNode(
            kind=_kind(run), name=run["name"], run=run, turn=run["turn"], feedback=feedback.get(run["id"], [])
        )
    graphs: dict[str, TraceNode] = {}
    turns: dict[tuple[str, int], TraceNode] = {}
    for run in runs:  # dotted order: a parent comes before its children
        node = nodes[run["id"]]
        if run["id"] == run["trace_id"]:
            graphs[run["trace_id"]] = node
            continue
        parent = nodes.get(run["parent_run_id"] or "")
        if parent is None or parent.kind == "graph":
            graph = graphs.get(run["trace_id"])
            if graph is None:
                graph = graphs[run["trace_id"]] = TraceNode(kind="graph", name="(invocation did not finish)")
            if run["turn"] is not None and node.kind == "node":
                key = (run["trace_id"], run["turn"])
                if key not in turns:
                    turns[key] = TraceNode(kind="turn", name=f"turn {run['turn']}", turn=run["turn"])
                    graph.children.append(turns[key])
                turns[key].children.append(node)
            else:
                graph.children.append(node)
        else:
            parent.children.append(node)
    ordered = sorted(graphs.values(), key=lambda g: g.start or datetime.min)
    if thread_id is not None:
        return TraceNode(kind="thread", name=thread_id, children=ordered)
    if len(ordered) != 1:
        raise ValueError(f"expected the runs of one trace, got {len(ordered)} traces: pass thread_id")
    return ordered[0]


def only_turn(tree: TraceNode, turn: int) -> TraceNode:
    """A copy of ``tree`` keeping, under each graph, only the group of ``turn``."""
    if tree.kind == "thread":
        graphs = [only_turn(g, turn) for g in tree.children]
        return TraceNode(kind="thread", name=tree.name, children=[g for g in graphs if g.children])
    kept = [c for c in tree.children if c.kind == "turn" and c.turn == turn]
    return TraceNode(
        kind=tree.kind, name=tree.name, run=tree.run, turn=tree.turn, children=kept, feedback=tree.feedback
    )


def _kind(run: dict[str, Any]) -> str:
    if run["id"] == run["trace_id"]:
        return "graph"
    if run["run_type"] == "llm":
        return "model"
    if run["node"] and run["name"] == run["node"] and (run.get("metadata") or {}).get("langgraph_node") == run["node"]:
        return "node"
    return "run"


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


# --- export: LangSmith's run format -------------------------------------------------------------


def langsmith_runs(
    runs: Sequence[dict[str, Any]], feedback: dict[str, list[dict[str, Any]]], *, project: str
) -> list[dict[str, Any]]:
    """Runs as LangSmith run records (the fields of ``langsmith.schemas.Run`` plus ``session_name``)."""
    children: dict[str, list[str]] = {}
    for run in runs:
        if run["parent_run_id"]:
            children.setdefault(run["parent_run_id"], []).append(run["id"])
    records = []
    for run in runs:
        on_run = feedback.get(run["id"], [])
        stats: dict[str, Any] = {}
        for f in on_run:
            entry = stats.setdefault(f["key"], {"n": 0, "avg": None, "values": {}})
            entry["n"] += 1
            if f["score"] is not None:
                scored = [g["score"] for g in on_run if g["key"] == f["key"] and g["score"] is not None]
                entry["avg"] = sum(scored) / len(scored)
            entry["values"][f["value"]] = entry["values"].get(f["value"], 0) + 1
        records.append(
            {
                "id": run["id"],
                "name": run["name"],
                "run_type": run["run_type"],
                "start_time": run["start_time"],
                "end_time": run["end_time"],
                "inputs": run["inputs"] or {},
                "outputs": run["outputs"],
                "error": run["error"],
                "extra": {**(run["extra"] or {}), "metadata": _metadata(run)},
                "tags": run["tags"] or [],
                "parent_run_id": run["parent_run_id"],
                "trace_id": run["trace_id"],
                "dotted_order": run["dotted_order"],
                "session_name": project,
                "status": run["status"],
                "prompt_tokens": run["prompt_tokens"],
                "completion_tokens": run["completion_tokens"],
                "total_tokens": run["total_tokens"],
                "child_run_ids": children.get(run["id"], []),
                "feedback_stats": stats or None,
                "reference_example_id": None,
            }
        )
    return records


def _metadata(run: dict[str, Any]) -> dict[str, Any]:
    """The run's metadata with the columns filled in after it was recorded (the checkpoint id)."""
    metadata = dict(run["metadata"] or {})
    if run["checkpoint_id"]:
        metadata["checkpoint_id"] = run["checkpoint_id"]
    return metadata


def langsmith_feedback(feedback: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Feedback as LangSmith feedback records (model-sourced, as ``Client.create_feedback`` takes them)."""
    return [
        {
            "id": f["id"],
            "run_id": f["trace_run_id"],
            "trace_id": f["trace_id"],
            "key": f["key"],
            "score": f["score"],
            "value": f["value"],
            "comment": f["comment"],
            "created_at": f["created_at"],
            "modified_at": f["created_at"],
            "feedback_source": {
                "type": "model",
                "metadata": {**f["extra"], "judge_run_id": f["source_run_id"], "turn": f["turn"]},
            },
        }
        for on_run in feedback.values()
        for f in on_run
    ]
