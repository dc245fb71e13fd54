"""The trace tables (``trace_runs``, ``trace_feedback``): writing tracer batches, and readers for the trace CLI.

The writer runs on the store's worker thread (see ``graph.tracing``); the readers
need only a database and never import the engine. Stored runs are exactly
LangChain/LangGraph's runs (graph → node → model call), so an export is a faithful
LangSmith trace. The "turn K" level between graph and node is synthetic: it is added
when a tree is built here, by grouping a graph's node runs on their ``turn`` column.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import sqlite_utils

from checkpoints.paths import BUSY_TIMEOUT_MS, StoreError, check_db_path

if TYPE_CHECKING:
    from checkpoints.store import Store

# ("run" | "feedback" | "checkpoints", fields): what a tracer hands to the writer thread.
TraceItem = tuple[str, dict[str, Any]]
# The columns of trace_runs (migration m010); the tracer's rows have exactly these keys, JSON ones as text.
RUN_COLUMNS = (
    "id", "trace_id", "parent_run_id", "dotted_order", "run_type", "name", "status", "start_time", "end_time",
    "latency", "inputs", "outputs", "error", "prompt_tokens", "completion_tokens", "total_tokens", "model",
    "run_id", "thread_id", "checkpoint_id", "checkpoint_ns", "branch_id", "turn", "role", "node", "step",
    "metadata", "tags", "extra",
)
RUN_JSON_COLUMNS = ("inputs", "outputs", "metadata", "tags", "extra")
_INSERT_RUN = f"insert or replace into trace_runs ({', '.join(RUN_COLUMNS)}) values ({', '.join('?' for _ in RUN_COLUMNS)})"
_FEEDBACK_NAMESPACE = uuid.UUID("6f1d0b53-2f6c-4b1e-9a43-3c3c7e0f6a10")


class TraceNotFoundError(LookupError):
    """An id that names no stored trace, thread or run."""


# --- writing (on the store's worker thread) ----------------------------------------------


def write_trace_items(store: Store, items: Sequence[TraceItem]) -> None:
    """Store one tracer batch in one transaction: runs, then feedback, then checkpoint ids."""
    from checkpoints.store import now

    db = store.db
    runs = [tuple(fields[c] for c in RUN_COLUMNS) for kind, fields in items if kind == "run"]
    with store.transaction():
        if runs:
            db.conn.executemany(_INSERT_RUN, runs)
        for kind, fields in items:
            if kind == "feedback":
                db["trace_feedback"].upsert(_feedback_row(db, fields, now()), pk="id")
            elif kind == "checkpoints":
                _fill_checkpoint_ids(db, fields["trace_id"])


def _feedback_row(db: sqlite_utils.Database, fields: dict[str, Any], created_at: str) -> dict[str, Any]:
    row = dict(fields)
    if row["trace_run_id"] is None:
        # The target ran in an earlier invocation (a resumed dialogue): its newest model call of that turn.
        found = db.execute(
            "select id from trace_runs where thread_id = ? and turn = ? and role = 'target' and run_type = 'llm' "
            "order by start_time desc limit 1",
            [row["thread_id"], row["turn"]],
        ).fetchone()
        row["trace_run_id"] = found[0] if found else None
    trace = db.execute("select trace_id from trace_runs where id = ?", [row["trace_run_id"]]).fetchone()
    row["trace_id"] = trace[0] if trace else None
    row["id"] = str(uuid.uuid5(_FEEDBACK_NAMESPACE, f"{row['source_run_id']}:{row['turn']}:{row['key']}"))
    row["extra"] = row.get("extra") or "{}"
    row["created_at"] = created_at
    return row


def _fill_checkpoint_ids(db: sqlite_utils.Database, trace_id: str) -> None:
    """Give each node run (and its children) the checkpoint it started from, via LangGraph's ``writes``.

    LangGraph's metadata names a node's task (``node:task_id``), not its checkpoint; the
    saver stores the task's writes under the checkpoint the step started from. Read only.
    """
    if not db["writes"].exists():
        return
    db.execute(
        """
        update trace_runs set checkpoint_id = (
            select w.checkpoint_id from writes w
            where w.thread_id = trace_runs.thread_id and w.checkpoint_ns = ''
              and w.task_id = substr(trace_runs.checkpoint_ns, instr(trace_runs.checkpoint_ns, ':') + 1)
            limit 1)
        where trace_id = ? and checkpoint_id is null and instr(checkpoint_ns, ':') > 0
        """,
        [trace_id],
    )


# --- reading ------------------------------------------------------------------------------


def open_traces(path: Path) -> sqlite_utils.Database:
    """An existing dialogue database, opened read-only (never migrated), that has trace tables."""
    path = check_db_path(Path(path), must_exist=True)
    uri = f"file:{quote(str(path.resolve()))}"
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.execute("select count(*) from sqlite_master").fetchone()
    except sqlite3.OperationalError:
        # A WAL database in a read-only folder cannot get its -shm file: read it as a fixed file.
        try:
            conn = sqlite3.connect(f"{uri}?immutable=1", uri=True)
            conn.execute("select count(*) from sqlite_master").fetchone()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot read {path} ({exc}): check its permissions or pass --db with another copy") from None
    db = sqlite_utils.Database(conn)
    if not db["trace_runs"].exists():
        has_dialogues = db["dialogues"].exists()
        conn.close()
        if not has_dialogues:
            raise StoreError(f"{path} holds no DyMT-ESB dialogues: pass --db with the file python -m graph.run wrote")
        raise StoreError(
            f"{path} has no traces: it predates tracing or its runs used --no-trace; run dialogues without --no-trace"
        )
    return db



def list_traces(db: sqlite_utils.Database, *, run_id: str | None = None, thread_id: str | None = None) -> list[dict[str, Any]]:
    """One row per trace (graph invocation): thread, times, status, model calls, tokens, errors, turns."""
    where, params = [], []
    if run_id is not None:
        where.append("t.run_id = ?")
        params.append(run_id)
    if thread_id is not None:
        where.append("t.thread_id = ?")
        params.append(thread_id)
    return list(
        db.query(
            f"""
            select t.trace_id, max(t.run_id) as run_id, max(t.thread_id) as thread_id,
                   max(t.branch_id) as branch_id, min(t.start_time) as start_time,
                   root.end_time as end_time, root.latency as latency, root.name as name,
                   coalesce(root.status, 'unfinished') as status,
                   sum(t.run_type = 'llm') as model_calls,
                   sum(t.prompt_tokens) as prompt_tokens, sum(t.completion_tokens) as completion_tokens,
                   sum(t.error is not null) as errors, min(t.turn) as first_turn, max(t.turn) as last_turn
            from trace_runs t left join trace_runs root on root.id = t.trace_id
            {"where " + " and ".join(where) if where else ""}
            group by t.trace_id order by min(t.start_time)
            """,
            params,
        )
    )


def resolve(db: sqlite_utils.Database, ident: str) -> tuple[str, list[str]]:
    """``("thread", trace ids)`` for a thread id, ``("trace", [trace id])`` for a trace id or a unique prefix of one."""
    ident = ident.strip()
    traces = [r["trace_id"] for r in db.query(
        "select trace_id from trace_runs where thread_id = ? group by trace_id order by min(start_time)", [ident]
    )]
    if traces:
        return "thread", traces
    matches = [r["trace_id"] for r in db.query(
        "select distinct trace_id from trace_runs where trace_id >= ? and trace_id < ? || '~'", [ident.lower(), ident.lower()]
    )]
    if len(matches) == 1:
        return "trace", matches
    if len(matches) > 1:
        raise TraceNotFoundError(
            f"{ident!r} is the start of {len(matches)} trace ids ({', '.join(m[:13] for m in matches[:3])}, ...): give more characters"
        )
    run = db.execute("select trace_id from trace_runs where id = ?", [ident.lower()]).fetchone()
    if run:
        return "trace", [run[0]]
    raise TraceNotFoundError(
        f"no trace or thread {ident!r} in {_db_file(db)}: list them with python -m graph.trace list"
    )


def load_runs(db: sqlite_utils.Database, trace_ids: Iterable[str]) -> list[dict[str, Any]]:
    """The stored runs of these traces, JSON columns decoded, in start order (dotted order)."""
    ids = list(trace_ids)
    if not ids:
        return []
    marks = ",".join("?" for _ in ids)
    rows = list(db.query(f"select * from trace_runs where trace_id in ({marks}) order by dotted_order", ids))
    for row in rows:
        for column in RUN_JSON_COLUMNS:
            row[column] = json.loads(row[column]) if row[column] is not None else None
    return rows


def load_feedback(db: sqlite_utils.Database, trace_ids: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """Feedback on the runs of these traces, by the id of the run it is on."""
    ids = list(trace_ids)
    if not ids:
        return {}
    marks = ",".join("?" for _ in ids)
    found: dict[str, list[dict[str, Any]]] = {}
    for row in db.query(f"select * from trace_feedback where trace_id in ({marks}) order by turn, created_at", ids):
        row["extra"] = json.loads(row["extra"] or "{}")
        found.setdefault(row["trace_run_id"], []).append(row)
    return found


def _db_file(db: sqlite_utils.Database) -> str:
    return db.conn.execute("PRAGMA database_list").fetchone()[2] or "the database"


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
    return TraceNode(kind=tree.kind, name=tree.name, run=tree.run, turn=tree.turn, children=kept, feedback=tree.feedback)


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
            "feedback_source": {"type": "model", "metadata": {**f["extra"], "judge_run_id": f["source_run_id"], "turn": f["turn"]}},
        }
        for on_run in feedback.values()
        for f in on_run
    ]
