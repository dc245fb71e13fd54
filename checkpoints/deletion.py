"""Delete a run for good: its dialogues, their branches, checkpoints, labels, scores and traces.

Generated dialogues may hold harmful text, so deletion also vacuums the file: the
freed pages are rewritten, not merely marked free. On PostgreSQL the rows go from the
same tables and from LangGraph's (``checkpoints``, ``checkpoint_blobs``, ``checkpoint_writes``).
With ``full`` the tables they left are rewritten (VACUUM FULL: the deleted text leaves the disk pages, but each
table is locked exclusively meanwhile, so other runs' workers wait); without it, plain VACUUM only marks the
space free, and the deleted text stays in those pages until PostgreSQL writes over them.
"""

from __future__ import annotations

from langgraph.checkpoint.sqlite import SqliteSaver

from checkpoints.postgres.db import is_postgres
from checkpoints.serde import StrictSerializer
from checkpoints.store import Writer

# LangGraph's PostgreSQL saver's tables, keyed by thread id (langgraph-checkpoint-postgres 3).
_PG_CHECKPOINT_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
# Tables of ours keyed by thread id (created by migrations; some may be absent in old files).
_THREAD_TABLES = (
    "turns",
    "scores",
    "labels",
    "refusals",
    "coherence",
    "guard_scores",
    "trace_runs",
    "trace_feedback",
    "trace_index",
    "counterfactual_members",
    "dialogue_plays",
)
# procrastinate's jobs carry a dialogue's seed in their arguments; those no worker holds any more go with the run.
_ENDED_JOBS = "delete from procrastinate_jobs where args->>'run_id' = ? and status not in ('todo', 'doing')"


def delete_run(store: Writer, run_id: str, *, full: bool = True) -> dict[str, int]:
    """Remove everything a run wrote; returns rows deleted per table (``full``: VACUUM FULL on PostgreSQL)."""
    threads = store.threads_of_run(run_id)
    tables = set(store.db.table_names())
    counts: dict[str, int] = {}
    saver = SqliteSaver(store.db.conn, serde=StrictSerializer())  # type: ignore[arg-type]
    with store.transaction():
        if "trace_chunks" in tables:  # compact traces: their chunks hang off trace_index's rows
            n = 0
            for thread_id in threads:
                n += store.db.execute(
                    "delete from trace_chunks where trace_id in (select trace_id from trace_index where thread_id = ?)",
                    [thread_id],
                ).rowcount
            counts["trace_chunks"] = n
        for table in (*_THREAD_TABLES, "dialogues"):
            if table not in tables:
                continue
            n = 0
            for thread_id in threads:
                n += store.db.execute(f"delete from [{table}] where thread_id = ?", [thread_id]).rowcount
            counts[table] = n
        for table, column in (("label_sets", "run_id"), ("counterfactual_sets", "run_id"), ("runs", "id")):
            if table in tables:
                counts[table] = store.db.execute(f"delete from [{table}] where [{column}] = ?", [run_id]).rowcount
    if is_postgres(store.db):
        return _finish_postgres(store, run_id, threads, tables, counts, full=full)
    if "checkpoints" in tables:
        for thread_id in threads:
            saver.delete_thread(thread_id)
        counts["checkpoint threads"] = len(threads)
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.db.execute("VACUUM")
    return counts


def _finish_postgres(
    store: Writer, run_id: str, threads: list[str], tables: set[str], counts: dict[str, int], *, full: bool
) -> dict[str, int]:
    """LangGraph's checkpoints of the threads and the run's ended queue jobs go too; then every table rows left is
    vacuumed (rewritten with ``full``)."""
    present = [t for t in _PG_CHECKPOINT_TABLES if t in tables]
    emptied = {t for t, n in counts.items() if n and t in tables}
    with store.transaction():
        for table in present:
            n = sum(
                store.db.execute(f"delete from [{table}] where thread_id = ?", [thread_id]).rowcount
                for thread_id in threads
            )
            if n:
                emptied.add(table)
        if "procrastinate_jobs" in tables:
            counts["procrastinate_jobs"] = store.db.execute(_ENDED_JOBS, [run_id]).rowcount
            if counts["procrastinate_jobs"]:
                emptied |= {"procrastinate_jobs", "procrastinate_events"}
    if present:
        counts["checkpoint threads"] = len(threads)
    for table in sorted(emptied):
        store.db.execute(f"VACUUM {'FULL ' if full else ''}[{table}]")
    return counts


def clear_cache(store: Writer) -> int:
    """Empty the response cache (it holds model replies too) and vacuum."""
    if "response_cache" not in store.db.table_names():
        return 0
    n = store.db.execute("delete from response_cache").rowcount
    store.db.execute("VACUUM response_cache" if is_postgres(store.db) else "VACUUM")
    return n
