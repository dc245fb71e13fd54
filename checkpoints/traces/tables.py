"""The trace tables (``trace_index`` / ``trace_chunks``, and the older ``trace_runs`` / ``trace_feedback``): writing
tracer batches, and reading them back.

The writer runs on the store's worker thread (see ``graph.tracing.tracer``); the readers
need only a database and never import the engine. Stored runs are exactly
LangChain/LangGraph's runs (graph → node → model call), so an export is a faithful
LangSmith trace. The "turn K" level between graph and node is synthetic: it is added
when a tree is built here, by grouping a graph's node runs on their ``turn`` column.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import sqlite_utils

from checkpoints.clock import now
from checkpoints.location import PostgresURL
from checkpoints.paths import StoreError
from checkpoints.reducers import apply_update
from checkpoints.traces.decoder import TraceDecoder, decode_stream
from checkpoints.traces.encoder import TraceEncoder


class TraceStore(Protocol):
    """What writing a trace batch needs of the store's writer (:class:`checkpoints.store.Writer`)."""

    db: Any

    def transaction(self) -> Any: ...


# ("start", fields) | ("run", row, is_node) | ("feedback", fields): what a tracer hands to the writer thread.
TraceItem = tuple[Any, ...]
# The columns of trace_runs (migration m010); the tracer's rows have exactly these keys, JSON ones as text.
RUN_COLUMNS = (
    "id",
    "trace_id",
    "parent_run_id",
    "dotted_order",
    "run_type",
    "name",
    "status",
    "start_time",
    "end_time",
    "latency",
    "inputs",
    "outputs",
    "error",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "model",
    "run_id",
    "thread_id",
    "checkpoint_id",
    "checkpoint_ns",
    "branch_id",
    "turn",
    "role",
    "node",
    "step",
    "metadata",
    "tags",
    "extra",
)
RUN_JSON_COLUMNS = ("inputs", "outputs", "metadata", "tags", "extra")
_FEEDBACK_NAMESPACE = uuid.UUID("6f1d0b53-2f6c-4b1e-9a43-3c3c7e0f6a10")


class TraceNotFoundError(LookupError):
    """An id that names no stored trace, thread or run."""


# --- writing (on the store's worker thread) ----------------------------------------------

INDEX_COLUMNS = (
    "trace_id",
    "run_id",
    "thread_id",
    "branch_id",
    "name",
    "start_time",
    "end_time",
    "latency",
    "status",
    "model_calls",
    "prompt_tokens",
    "completion_tokens",
    "errors",
    "first_turn",
    "last_turn",
)
# Upserts both SQLite and PostgreSQL read: a retried batch rewrites its chunk and the trace's summary.
_UPSERT_INDEX = (
    f"insert into trace_index ({', '.join(INDEX_COLUMNS)}) values ({', '.join('?' for _ in INDEX_COLUMNS)}) "
    "on conflict (trace_id) do update set " + ", ".join(f"{c} = excluded.{c}" for c in INDEX_COLUMNS[1:])
)
_UPSERT_CHUNK = (
    "insert into trace_chunks (trace_id, seq, data) values (?, ?, ?) on conflict (trace_id, seq) do update set data = "
    "excluded.data"
)


def write_trace_batch(
    store: TraceStore,
    encoder: TraceEncoder,
    items: Sequence[TraceItem],
    final: bool = False,
    *,
    through: Callable[[Callable[[], None]], None] | None = None,
) -> None:
    """Encode one tracer batch as the trace's next chunk and store it with the trace's summary, in one transaction.

    ``through(save)`` runs the transaction (a store outage waits and saves again); the batch is encoded once, as the
    encoder's compression state moves on with every chunk.

    Runs are encoded in start order (a node before the runs inside it), so a router's input
    state is known when it is encoded; the reader decodes in the same order.
    """
    records = []
    for kind, fields, *_rest in items:
        if kind == "start":
            records.append(encoder.start(**fields))
    # The graph's own run last: its outputs are the state after every node of the batch.
    runs = sorted(
        (item for item in items if item[0] == "run"),
        key=lambda item: (item[1]["id"] == item[1]["trace_id"], item[1]["dotted_order"]),
    )
    for _, row, is_node in runs:
        records.append(encoder.run(row, is_node=is_node))
        if row["id"] == row["trace_id"]:
            encoder.finish_root(row)
    created = now()
    for kind, fields, *_ in items:
        if kind == "feedback":
            records.append(encoder.feedback(fields, created))
    seq = encoder.seq
    chunk = encoder.encode(records, final=final)
    summary = encoder.summary_row()

    def save() -> None:
        with store.transaction():
            store.db.conn.execute(_UPSERT_CHUNK, [encoder.trace_id, seq, chunk])
            store.db.conn.execute(_UPSERT_INDEX, [summary.get(c) for c in INDEX_COLUMNS])

    (through or (lambda call: call()))(save)


# --- reading ------------------------------------------------------------------------------


def require_traces(file_tables: Iterable[str], path: Path | PostgresURL) -> None:
    """Refuse a database file without trace tables (a reader's ``file_tables``), saying why."""
    if "trace_runs" not in set(file_tables):
        raise StoreError(
            f"{path} has no traces: it predates tracing or its runs used --no-trace; run dialogues without --no-trace"
        )


def _has_streams(db: sqlite_utils.Database) -> bool:
    return db["trace_index"].exists()


def list_traces(
    db: sqlite_utils.Database, *, run_id: str | None = None, thread_id: str | None = None
) -> list[dict[str, Any]]:
    """One row per trace (graph invocation): thread, times, status, model calls, tokens, errors, turns."""
    where, params = [], []
    if run_id is not None:
        where.append("t.run_id = ?")
        params.append(run_id)
    if thread_id is not None:
        where.append("t.thread_id = ?")
        params.append(thread_id)
    clause = "where " + " and ".join(where) if where else ""
    found = list(
        db.query(
            f"""
            select t.trace_id, max(t.run_id) as run_id, max(t.thread_id) as thread_id,
                   max(t.branch_id) as branch_id, min(t.start_time) as start_time,
                   root.end_time as end_time, root.latency as latency, root.name as name,
                   coalesce(root.status, 'unfinished') as status,
                   sum(case when t.run_type = 'llm' then 1 else 0 end) as model_calls,
                   sum(t.prompt_tokens) as prompt_tokens, sum(t.completion_tokens) as completion_tokens,
                   sum(case when t.error is not null then 1 else 0 end) as errors, min(t.turn) as first_turn,
                   max(t.turn) as last_turn
            from trace_runs t left join trace_runs root on root.id = t.trace_id
            {clause}
            group by t.trace_id, root.end_time, root.latency, root.name, root.status
            """,
            params,
        )
    )
    if _has_streams(db):
        columns = ", ".join(f"t.{c}" for c in INDEX_COLUMNS)
        found += list(db.query(f"select {columns} from trace_index t {clause}", params))
    return sorted(found, key=lambda row: row["start_time"] or "")


def _thread_traces(db: sqlite_utils.Database, thread_id: str) -> list[str]:
    rows = list(
        db.query(
            "select trace_id, min(start_time) as start from trace_runs where thread_id = ? group by trace_id",
            [thread_id],
        )
    )
    if _has_streams(db):
        rows += list(db.query("select trace_id, start_time as start from trace_index where thread_id = ?", [thread_id]))
    return [r["trace_id"] for r in sorted(rows, key=lambda r: r["start"] or "")]


def resolve(db: sqlite_utils.Database, ident: str) -> tuple[str, list[str]]:
    """``("thread", trace ids)`` for a thread id, ``("trace", [trace id])`` for a trace id or a unique prefix of one."""
    ident = ident.strip()
    traces = _thread_traces(db, ident)
    if traces:
        return "thread", traces
    low = ident.lower()
    matches = {
        r["trace_id"]
        for r in db.query(
            "select distinct trace_id from trace_runs where trace_id >= ? and trace_id < ? || '~'", [low, low]
        )
    }
    if _has_streams(db):
        matches |= {
            r["trace_id"]
            for r in db.query(
                "select trace_id from trace_index where trace_id >= ? and trace_id < ? || '~'", [low, low]
            )
        }
    if len(matches) == 1:
        return "trace", sorted(matches)
    if len(matches) > 1:
        ordered = sorted(matches)
        raise TraceNotFoundError(
            f"{ident!r} is the start of {len(matches)} trace ids ({', '.join(ordered[:3])}"
            f"{', ...' if len(ordered) > 3 else ''}): give more characters"
        )
    run = db.execute("select trace_id from trace_runs where id = ?", [low]).fetchone()
    if run:
        return "trace", [run[0]]
    found = _trace_of_run(db, low)
    if found:
        return "trace", [found]
    raise TraceNotFoundError(
        f"no trace or thread {ident!r} in {_db_file(db)}: list them with python -m graph.trace list"
    )


def _trace_of_run(db: sqlite_utils.Database, run_id: str) -> str | None:
    """The trace holding a run id, by scanning the compact streams (run ids have no index of their own)."""
    if not _has_streams(db) or len(run_id) < 8:
        return None
    compact, spaced = f'"id":"{run_id}"', f'"id": "{run_id}"'  # lines are compact; streams written before, spaced
    for (trace_id,) in db.execute("select trace_id from trace_index").fetchall():
        text = _stream_text(db, trace_id)
        if compact in text or spaced in text:
            return trace_id
    return None


def _chunks(db: sqlite_utils.Database, trace_id: str) -> list[bytes]:
    return [row[0] for row in db.execute("select data from trace_chunks where trace_id = ? order by seq", [trace_id])]


def _stream_text(db: sqlite_utils.Database, trace_id: str) -> str:
    import zlib

    out = bytearray()
    decompressor = zlib.decompressobj()
    for chunk in _chunks(db, trace_id):
        try:
            out += decompressor.decompress(chunk)
        except zlib.error:
            break
    return bytes(out).decode("utf-8", errors="replace")


def _decoded(db: sqlite_utils.Database, trace_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return TraceDecoder(trace_id, fold=apply_update).decode(decode_stream(_chunks(db, trace_id)))  # type: ignore[arg-type]


def _stream_ids(db: sqlite_utils.Database, trace_ids: Sequence[str]) -> list[str]:
    if not _has_streams(db) or not trace_ids:
        return []
    marks = ",".join("?" for _ in trace_ids)
    return [r[0] for r in db.execute(f"select trace_id from trace_index where trace_id in ({marks})", list(trace_ids))]


def load_runs(db: sqlite_utils.Database, trace_ids: Iterable[str]) -> list[dict[str, Any]]:
    """The stored runs of these traces, JSON columns decoded, in start order (dotted order)."""
    ids = list(trace_ids)
    if not ids:
        return []
    marks = ",".join("?" for _ in ids)
    rows = list(db.query(f"select * from trace_runs where trace_id in ({marks})", ids))
    for row in rows:
        for column in RUN_JSON_COLUMNS:
            row[column] = json.loads(row[column]) if row[column] is not None else None
    compact = [run for trace_id in _stream_ids(db, ids) for run in _decoded(db, trace_id)[0]]
    _fill_checkpoints(db, compact)
    rows += compact
    rows.sort(key=lambda row: row["dotted_order"] or "")
    return rows


def stored_runs(db: sqlite_utils.Database, *, thread_id: str | None = None) -> list[dict[str, Any]]:
    """Every stored run (of one thread), whichever layout holds it."""
    if thread_id is not None:
        return load_runs(db, _thread_traces(db, thread_id))
    ids = [r[0] for r in db.execute("select distinct trace_id from trace_runs")]
    if _has_streams(db):
        ids += [r[0] for r in db.execute("select trace_id from trace_index")]
    return load_runs(db, ids)


def _fill_checkpoints(db: sqlite_utils.Database, runs: list[dict[str, Any]]) -> None:
    """Each run inside a node gets the checkpoint its node started from, via LangGraph's ``writes`` (read only)."""
    if not runs or not db["writes"].exists():
        return
    by_task: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        ns = run["checkpoint_ns"] or ""
        if run["parent_run_id"] is not None and ":" in ns and run["thread_id"]:
            by_task.setdefault((run["thread_id"], ns.split(":", 1)[1]), []).append(run)
    for thread_id in {thread for thread, _ in by_task}:
        tasks = [task for thread, task in by_task if thread == thread_id]
        for start in range(0, len(tasks), 500):
            part = tasks[start : start + 500]
            marks = ",".join("?" for _ in part)
            for task_id, checkpoint_id in db.execute(
                f"select task_id, min(checkpoint_id) from writes where thread_id = ? and checkpoint_ns = '' "
                f"and task_id in ({marks}) group by task_id",
                [thread_id, *part],
            ):
                for run in by_task[(thread_id, task_id)]:
                    run["checkpoint_id"] = checkpoint_id


def load_feedback(db: sqlite_utils.Database, trace_ids: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """Feedback on the runs of these traces, by the id of the run it is on."""
    ids = list(trace_ids)
    if not ids:
        return {}
    marks = ",".join("?" for _ in ids)
    found: dict[str, list[dict[str, Any]]] = {}
    rows = list(db.query(f"select * from trace_feedback where trace_id in ({marks})", ids))
    for row in rows:
        row["extra"] = json.loads(row["extra"] or "{}")
    rows += _stream_feedback(db, ids)
    for row in sorted(rows, key=lambda r: (r["turn"] if r["turn"] is not None else -1, r["created_at"] or "")):
        found.setdefault(row["trace_run_id"], []).append(row)
    return found


def _stream_feedback(db: sqlite_utils.Database, trace_ids: list[str]) -> list[dict[str, Any]]:
    """Feedback items of the compact streams that land on runs of ``trace_ids``.

    A verdict is stored in the judge's trace; it lands on the target's model call of its
    turn, which may sit in an earlier trace of the thread (a resumed dialogue).
    """
    if not _has_streams(db):
        return []
    marks = ",".join("?" for _ in trace_ids)
    threads = [
        r[0]
        for r in db.execute(
            f"select distinct thread_id from trace_index where trace_id in ({marks}) "
            f"union select distinct thread_id from trace_runs where trace_id in ({marks})",
            [*trace_ids, *trace_ids],
        )
    ]
    wanted = set(trace_ids)
    out = []
    for thread_id in threads:
        thread_traces = _thread_traces(db, thread_id)
        runs = stored_runs(db, thread_id=thread_id)
        trace_of = {run["id"]: run["trace_id"] for run in runs}
        target_calls: dict[int, str] = {}
        for run in sorted(runs, key=lambda r: r["start_time"] or ""):
            if run["role"] == "target" and run["run_type"] == "llm" and run["turn"] is not None:
                target_calls[run["turn"]] = run["id"]  # the newest call of each turn wins
        for trace_id in _stream_ids(db, thread_traces):
            for item in _decoded(db, trace_id)[1]:
                row = dict(item)
                if row.get("trace_run_id") is None:
                    row["trace_run_id"] = target_calls.get(row.get("turn"))  # type: ignore[arg-type]
                row["trace_id"] = trace_of.get(row["trace_run_id"])
                if row["trace_id"] not in wanted:
                    continue
                row["id"] = str(uuid.uuid5(_FEEDBACK_NAMESPACE, f"{row['source_run_id']}:{row['turn']}:{row['key']}"))
                row["created_at"] = row.pop("at", None)
                extra = row.get("extra")
                row["extra"] = json.loads(extra) if isinstance(extra, str) else (extra or {})
                out.append(row)
    return out


def _db_file(db: sqlite_utils.Database) -> str:
    return db.conn.execute("PRAGMA database_list").fetchone()[2] or "the database"
