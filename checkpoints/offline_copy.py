"""Copy one run out of any store (a SQLite file or PostgreSQL) into a new SQLite file, for offline replay and reports.

The copy holds the run's ``runs`` row, its dialogues (and the dialogues they branched from, so a branch run
replays whole), their turns (token counts included), scores (bias labels of every label set, refusals, coherence,
guard scores) and traces, the run's label sets and counterfactual sets, the ``evals.judge`` validations of its
judges (so summaries cite them), the response-cache entries whose reply is a text the run stores (a user message,
a reply, a scorer's raw output: a re-judge or rerun on the copy answers from them), and LangGraph's
checkpoints of those threads. Checkpoints go through the savers' own APIs (``alist`` on the source, ``aput`` and
``aput_writes`` on the copy), so the file holds them in the SQLite saver's format whatever the source was.
The file is built beside its destination and renamed into place at the end: it appears whole or not at all.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections import defaultdict
from pathlib import Path
from typing import Any

from checkpoints.cache_format import TABLE as CACHE_TABLE
from checkpoints.cache_format import decompress
from checkpoints.location import DbLocation, PostgresURL
from checkpoints.paths import StoreError, check_db_path
from checkpoints.readers import open_reader
from checkpoints.run_record import role_specs
from checkpoints.store import open_writer

# Our tables keyed by thread id, copied row for row (the layout the reader presents, old files included).
THREAD_TABLES = ("turns", "scores", "trace_index", "trace_runs", "trace_feedback")


def copy_run(source: DbLocation, run_id: str, target: Path) -> dict[str, int]:
    """Copy run ``run_id`` from ``source`` into the new SQLite file ``target``; rows copied per table."""
    target = check_db_path(Path(target).expanduser())
    if target.exists():
        raise StoreError(f"--to {target} exists: give the path of a new file (the copy never overwrites one)")
    partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
    try:
        with open_reader(source) as reader:
            if reader.get_run(run_id) is None:
                raise StoreError(f"no run {run_id!r} in {reader.path}: see python -m graph.runs list")
            rows = _rows_of_run(reader, run_id)
        counts = _write_rows(partial, rows)
        counts["checkpoints"] = asyncio.run(
            _copy_checkpoints(source, partial, [r["thread_id"] for r in rows["dialogues"]])
        )
        os.replace(partial, target)
    finally:
        for leftover in (partial, partial.with_name(partial.name + "-wal"), partial.with_name(partial.name + "-shm")):
            leftover.unlink(missing_ok=True)
    return counts


def _rows_of_run(reader: Any, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of ours the copy holds, by table."""
    dialogues = reader._query("select * from dialogues where run_id = ?", [run_id])
    have = {d["thread_id"] for d in dialogues}
    parents = {d["parent_thread_id"] for d in dialogues} - have - {None}
    while parents:  # the dialogues a branch run forked from: replay shows a branch with its parent's turns
        found = _where_in(reader, "dialogues", "thread_id", sorted(parents))
        dialogues += found
        have |= {d["thread_id"] for d in found}
        parents = {d["parent_thread_id"] for d in found} - have - {None}
    threads = [d["thread_id"] for d in dialogues]
    run_ids = sorted({run_id, *(d["run_id"] for d in dialogues if d["run_id"])})
    rows: dict[str, list[dict[str, Any]]] = {
        "runs": _where_in(reader, "runs", "id", run_ids),
        "dialogues": dialogues,
        "label_sets": reader._query("select * from label_sets where run_id = ?", [run_id]),
        "counterfactual_sets": reader._query("select * from counterfactual_sets where run_id = ?", [run_id]),
    }
    sets = [s["name"] for s in rows["counterfactual_sets"]]
    rows["counterfactual_members"] = [
        m for m in _where_in(reader, "counterfactual_members", "set_name", sets) if m["thread_id"] in have
    ]
    for table in THREAD_TABLES:
        rows[table] = _where_in(reader, table, "thread_id", threads) if reader.has_table(table) else []
    for table in ("trace_index", "trace_runs"):  # traces of the run not tied to one of its dialogues
        if reader.has_table(table) and "run_id" in reader.columns(table):
            key = "trace_id" if table == "trace_index" else "id"
            seen = {r[key] for r in rows[table]}
            rows[table] += [
                r for r in reader._query(f"select * from {table} where run_id = ?", [run_id]) if r[key] not in seen
            ]
    traces = [t["trace_id"] for t in rows["trace_index"]]
    rows["trace_chunks"] = (
        _where_in(reader, "trace_chunks", "trace_id", traces) if reader.has_table("trace_chunks") else []
    )
    rows["judge_validations"] = _validations(reader, rows)
    rows[CACHE_TABLE] = _cache_entries(reader, rows)
    return rows


def _validations(reader: Any, rows: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """``evals.judge`` scores of the judges the copied runs and label sets name (summaries cite them by spec and
    prompt)."""
    if not reader.has_table("judge_validations"):
        return []
    judges = {s["model"] for s in rows["label_sets"] if s.get("model")}
    for run in rows["runs"]:
        config = json.loads(run["config"]) if isinstance(run.get("config"), str) else (run.get("config") or {})
        judge = role_specs(config).get("judge")
        if judge:
            judges.add(judge)
    return _where_in(reader, "judge_validations", "judge_model", sorted(judges))


def _cache_entries(reader: Any, rows: dict[str, list[dict[str, Any]]], *, batch: int = 1000) -> list[dict[str, Any]]:
    """Cached replies whose text the run stores: the cache has no run column, so a reply is matched by its text.

    Matching on the text means the copy gains no generated text the run does not already hold.
    """
    if not reader.has_table(CACHE_TABLE):
        return []
    texts = {
        t.strip() for turn in rows["turns"] for t in (turn.get("user_message"), turn.get("reply")) if isinstance(t, str)
    }
    texts |= {s["raw"].strip() for s in rows["scores"] if isinstance(s.get("raw"), str)}
    texts.discard("")
    found: list[dict[str, Any]] = []
    last: Any = None
    while True:  # in key order, a batch at a time: the cache may hold far more than one run
        page = reader._query(
            f"select * from {CACHE_TABLE}"
            + ("" if last is None else " where key > ?")
            + f" order by key limit {batch}",
            [] if last is None else [last],
        )
        found += [r for r in page if _reply_text(r["value"]) in texts]
        if len(page) < batch:
            return found
        last = page[-1]["key"]


def _reply_text(value: Any) -> str | None:
    """The text of a stored reply's first generation, stripped; None for a row that does not decode."""
    try:
        content = json.loads(decompress(value))["generations"][0]["message"]["data"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if isinstance(content, list):
        content = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return content.strip() if isinstance(content, str) else None


def _where_in(reader: Any, table: str, column: str, values: list[Any], *, batch: int = 500) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for start in range(0, len(values), batch):
        chunk = values[start : start + batch]
        found += reader._query(f"select * from {table} where {column} in ({','.join('?' * len(chunk))})", chunk)
    return found


def _write_rows(path: Path, rows: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """Create the SQLite file with today's schema and insert the rows (columns the file lacks are refused)."""
    writer = open_writer(path)
    try:
        with writer.transaction():
            for table, records in rows.items():
                if not records:
                    continue
                columns = set(writer.db[table].columns_dict)  # type: ignore[union-attr]
                extra = set(records[0]) - columns
                if extra:
                    raise StoreError(f"the copy has no column {sorted(extra)[0]!r} in {table}: upgrade DyMT-ESB")
                writer.db[table].insert_all((_plain(r) for r in records), batch_size=500)  # type: ignore[union-attr]
    finally:
        writer.close()
    return {table: len(records) for table, records in rows.items() if records}


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: bytes(v) if isinstance(v, memoryview) else v for k, v in row.items()}


async def _copy_checkpoints(source: DbLocation, target: Path, threads: list[str]) -> int:
    """LangGraph's checkpoints and pending writes of ``threads``, read by the source's saver, put by the file's."""
    from checkpoints.saver import open_saver

    if isinstance(source, PostgresURL):
        from checkpoints.postgres.saver import open_postgres_saver

        opened = open_postgres_saver(source)
    else:
        opened = open_saver(Path(source))  # type: ignore[assignment]
    n = 0
    async with opened as src, open_saver(target) as dst:
        for thread_id in threads:
            found = [t async for t in src.alist({"configurable": {"thread_id": thread_id}})]
            for item in sorted(found, key=lambda t: (t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"])):
                conf = item.config["configurable"]
                parent = item.parent_config or {
                    "configurable": {"thread_id": thread_id, "checkpoint_ns": conf["checkpoint_ns"]}
                }
                saved = await dst.aput(
                    parent, item.checkpoint, item.metadata, dict(item.checkpoint["channel_versions"])
                )
                by_task: dict[str, list[tuple[str, Any]]] = defaultdict(list)
                for task_id, channel, value in item.pending_writes or ():
                    by_task[task_id].append((channel, value))
                for task_id, writes in by_task.items():
                    await dst.aput_writes(saved, writes, task_id)
                n += 1
    return n
