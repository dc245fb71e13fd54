"""Delete a run for good: every row it owns, in one transaction, on SQLite and PostgreSQL; or what older versions left.

A run owns its ``runs`` row; its dialogues and every branch descending from them (their turns, scores — judge, human
and post-hoc labels, refusals, coherence, guard scores —, traces and feedback, branch-set memberships, plays and
claims, and LangGraph's checkpoints and writes); its label sets, branch sets, players, the replies it stored in the
response cache (``response_cache.run_id``; a reply another run stored first stays that run's) and, on PostgreSQL,
its jobs in the queue (their arguments hold the seeds). All of it goes in one transaction, so a failure deletes
nothing. A run that plays is refused (:class:`RunPlaying`, checked inside that transaction): stop its players first
(graph/running/stopping.py).

Generated dialogues may hold harmful text, so deletion also vacuums: on SQLite the file is rewritten (freed pages are
not merely marked free). On PostgreSQL, with ``full`` the tables rows left are rewritten (VACUUM FULL: the deleted
text leaves the disk pages, but each table is locked exclusively meanwhile, so other runs' workers wait; it first
waits, up to a minute, for other sessions that hold a snapshot from before the deletion, since the rows they can still
see would be copied into the rewritten table, and rewrites again while the server says it kept any); without it,
plain VACUUM only marks the space free, and the deleted text stays in those pages until PostgreSQL writes over them.

Orphans (:func:`find_orphans`) are rows no run owns any more: dialogues of no run, rows of threads that are no
dialogue's, traces, label sets, branch sets and cached replies of runs that are gone — what a run deleted while it
played, by a version of DyMT-ESB without these checks, left behind.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from checkpoints.players import Activity, activity
from checkpoints.postgres.claims import run_lock_key
from checkpoints.postgres.db import is_postgres
from checkpoints.process_claims import Owner
from checkpoints.store import Writer

log = logging.getLogger(__name__)
SNAPSHOT_WAIT_S = 60.0  # how long VACUUM FULL waits for sessions that can still see the deleted rows (PostgreSQL)
# LangGraph's own tables of a thread's checkpoints: the SQLite saver's two (its delete_thread deletes these rows),
# the PostgreSQL saver's three (langgraph-checkpoint-postgres 3).
_SQLITE_CHECKPOINTS = ("checkpoints", "writes")
_PG_CHECKPOINTS = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
# Our tables with a row per thread (some absent in old files: labels, refusals, coherence and guard_scores became
# scores in m065; dialogue_claims appears with --processes, dialogue_plays with workers).
_THREAD_TABLES = (
    "turns",
    "scores",
    "labels",
    "refusals",
    "coherence",
    "guard_scores",
    "trace_feedback",
    "counterfactual_members",
    "dialogue_plays",
    "dialogue_claims",
)
# Our tables with a row per run, and the column that names it.
_RUN_TABLES = (
    ("label_sets", "run_id"),
    ("response_cache", "run_id"),
    ("run_players", "run_id"),
    ("dialogue_plays", "run_id"),
)
_CHUNK = 500  # thread ids per statement (SQLite's default limit on parameters is 32766; PostgreSQL's 65535)


class RunPlaying(RuntimeError):
    """The run is playing now: deleting it would leave its players writing rows no run owns."""

    def __init__(self, run_id: str, who: Activity) -> None:
        self.run_id, self.who = run_id, who
        super().__init__(f"run {run_id} is playing ({who.who()})")


@dataclass(frozen=True)
class Orphans:
    """Rows no run owns, by table (what :func:`delete_orphans` removes)."""

    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def words(self) -> str:
        return ", ".join(f"{table} {n}" for table, n in self.counts.items() if n) or "none"


def delete_run(store: Writer, run_id: str, *, full: bool = True) -> dict[str, int]:
    """Remove everything ``run_id`` owns in one transaction and vacuum; rows deleted per table.

    Raises :class:`RunPlaying` (nothing deleted) while a process other than this one plays the run, or a worker
    holds one of its dialogues. ``full``: VACUUM FULL on PostgreSQL.
    """
    tables = set(store.db.table_names())
    postgres = is_postgres(store.db)
    with store.transaction():
        if postgres and "procrastinate_jobs" in tables:
            # Its jobs are locked until the transaction ends: no worker fetches one meanwhile (fetching skips locked
            # rows), nor finishes one (it waits, then finds it gone).
            store.db.execute("select id from procrastinate_jobs where args->>'run_id' = ? for update", [run_id])
        who = activity(store.db, run_id)
        others = tuple(p for p in who.players if (p.host, p.pid, p.started) != _me())
        # Every worker's play holds the run's lock shared (checkpoints/postgres/claims.py): held alone here until the
        # transaction ends, no play starts meanwhile, and one that starts after finds the run gone.
        shared = (
            postgres
            and not store.db.execute("select pg_try_advisory_xact_lock(?)", [run_lock_key(run_id)]).fetchone()[0]
        )
        if others or who.plays or shared or (postgres and _busy_jobs(store, run_id, tables)):
            raise RunPlaying(run_id, Activity(others, who.plays or (("a worker",) if shared else ()), who.queued))
        threads = store.threads_of_run(run_id)
        counts = _delete(store, tables, threads=threads, runs=[run_id], postgres=postgres)
    _vacuum(store, counts, postgres=postgres, full=full)
    return counts


def find_orphans(db: Any) -> Orphans:
    """Rows no run owns, counted (``db``: a writer's or a reader's database; nothing is written)."""
    tables = set(db.table_names())
    counts: dict[str, int] = {}
    for table, where in _orphan_clauses(tables, postgres=is_postgres(db)):
        counts[table] = int(db.execute(f"select count(*) from [{table}] where {where}").fetchone()[0])
    return Orphans({t: n for t, n in counts.items() if n})


def unowned_cache_entries(db: Any) -> int:
    """Cached replies stored before replies were recorded with their run: no deletion of a run removes them."""
    if "response_cache" not in db.table_names():
        return 0
    try:
        return int(db.execute("select count(*) from response_cache where run_id is null").fetchone()[0])
    except Exception:  # noqa: BLE001 - a file from before the column (read as it is): every reply is unowned
        return int(db.execute("select count(*) from response_cache").fetchone()[0])


def delete_orphans(store: Writer, *, full: bool = True) -> Orphans:
    """Delete every row no run owns, in one transaction, and vacuum; what was deleted."""
    tables = set(store.db.table_names())
    postgres = is_postgres(store.db)
    counts: dict[str, int] = {}
    with store.transaction():
        for table, where in _orphan_clauses(tables, postgres=postgres):
            counts[table] = store.db.execute(f"delete from [{table}] where {where}").rowcount
    counts = {t: n for t, n in counts.items() if n}
    _vacuum(store, counts, postgres=postgres, full=full)
    return Orphans(counts)


def clear_cache(store: Writer) -> int:
    """Empty the response cache (it holds model replies too) and vacuum."""
    if "response_cache" not in store.db.table_names():
        return 0
    n = store.db.execute("delete from response_cache").rowcount
    if is_postgres(store.db):
        store.db.execute("VACUUM response_cache")
    else:
        _vacuum(store, {}, postgres=False, full=True)
    return n


# --- the rows -----------------------------------------------------------------------------------------------------


def _delete(
    store: Writer, tables: set[str], *, threads: Sequence[str], runs: Sequence[str], postgres: bool
) -> dict[str, int]:
    """Delete the rows of ``threads`` and of ``runs`` (inside the caller's transaction); rows per table."""
    counts: dict[str, int] = {}

    def run(table: str, sql: str, params: Sequence[object]) -> None:
        counts[table] = counts.get(table, 0) + store.db.execute(sql, list(params)).rowcount

    for chunk in _chunks(threads):
        marks = ", ".join("?" * len(chunk))
        if "trace_chunks" in tables:  # compact traces: their chunks hang off trace_index's rows
            run(
                "trace_chunks",
                f"delete from trace_chunks where trace_id in (select trace_id from trace_index where thread_id in "
                f"({marks}))",
                chunk,
            )
        for table in ("trace_index", "trace_runs", *_THREAD_TABLES):
            if table in tables:
                run(table, f"delete from [{table}] where thread_id in ({marks})", chunk)
        for table in _PG_CHECKPOINTS if postgres else _SQLITE_CHECKPOINTS:
            if table in tables:
                run(table, f"delete from [{table}] where thread_id in ({marks})", chunk)
    for run_id in runs:
        if "trace_chunks" in tables:  # traces recorded under the run without a thread
            run(
                "trace_chunks",
                "delete from trace_chunks where trace_id in (select trace_id from trace_index where run_id = ?)",
                [run_id],
            )
        for table in ("trace_index", "trace_runs"):
            if table in tables:
                run(table, f"delete from [{table}] where run_id = ?", [run_id])
        if "counterfactual_sets" in tables:
            run(
                "counterfactual_members",
                "delete from counterfactual_members where set_name in "
                "(select name from counterfactual_sets where run_id = ?)",
                [run_id],
            )
            run("counterfactual_sets", "delete from counterfactual_sets where run_id = ?", [run_id])
        for table, column in _RUN_TABLES:
            if table in tables and column in _columns(store, table):
                run(table, f"delete from [{table}] where [{column}] = ?", [run_id])
        if postgres and "procrastinate_jobs" in tables:
            run("procrastinate_jobs", "delete from procrastinate_jobs where args->>'run_id' = ?", [run_id])
    for chunk in _chunks(threads):  # the dialogues last: a failure above leaves them to find the rest by
        run("dialogues", f"delete from dialogues where thread_id in ({', '.join('?' * len(chunk))})", chunk)
    for run_id in runs:
        run("runs", "delete from runs where id = ?", [run_id])
    if threads:
        counts["checkpoint threads"] = len(threads)
    return {t: n for t, n in counts.items() if n}


def _orphan_clauses(tables: set[str], *, postgres: bool) -> list[tuple[str, str]]:
    """(table, WHERE clause) of the rows no run owns; the dialogues come last, as every other clause asks for them."""
    known_run = "run_id in (select id from runs)"
    known_thread = f"thread_id in (select thread_id from dialogues where {known_run})"
    clauses: list[tuple[str, str]] = []
    if "trace_chunks" in tables:
        clauses.append(
            (
                "trace_chunks",
                "trace_id not in (select trace_id from trace_index where "
                f"(thread_id is null and {known_run}) or {known_thread})",
            )
        )
    for table in ("trace_index", "trace_runs"):
        clauses.append((table, f"not ((thread_id is null and {known_run}) or {known_thread})"))
    for table in _THREAD_TABLES + (_PG_CHECKPOINTS if postgres else _SQLITE_CHECKPOINTS):
        if table != "dialogue_plays":
            clauses.append((table, f"not ({known_thread})"))
    clauses += [
        ("dialogue_plays", f"ended_at is not null and not ({known_thread})"),
        ("label_sets", f"not ({known_run})"),
        ("counterfactual_sets", f"not ({known_run}) and name not in (select set_name from counterfactual_members)"),
        ("response_cache", f"run_id is not null and not ({known_run})"),
        ("run_players", f"not ({known_run})"),
    ]
    if postgres:
        clauses.append(
            (
                "procrastinate_jobs",
                "status not in ('todo', 'doing') and args->>'run_id' is not null and "
                "args->>'run_id' not in (select id from runs)",
            )
        )
    clauses.append(("dialogues", f"run_id is null or not ({known_run})"))
    return [(table, where) for table, where in clauses if table in tables]


def _busy_jobs(store: Writer, run_id: str, tables: set[str]) -> int:
    """Jobs of the run a worker with a recent heartbeat is playing (its play may not be recorded yet)."""
    if "procrastinate_workers" not in tables:
        return 0
    return int(
        store.db.execute(
            "select count(*) from procrastinate_jobs j join procrastinate_workers w on w.id = j.worker_id "
            "where j.args->>'run_id' = ? and j.status = 'doing' and w.last_heartbeat > now() - interval '60 seconds'",
            [run_id],
        ).fetchone()[0]
    )


def _vacuum(store: Writer, counts: dict[str, int], *, postgres: bool, full: bool) -> None:
    if not postgres:
        # VACUUM writes the rebuilt file through the WAL: the checkpoint after it puts it in place of every old page.
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        store.db.execute("VACUUM")
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return
    emptied = {t for t in counts if t in set(store.db.table_names())}
    if "procrastinate_jobs" in emptied:
        emptied.add("procrastinate_events")
    if not full:
        for table in sorted(emptied):
            store.db.execute(f"VACUUM [{table}]")
        return
    deadline = time.monotonic() + SNAPSHOT_WAIT_S
    _wait_for_older_snapshots(store.db, bound_s=SNAPSHOT_WAIT_S)
    kept = {table: _vacuum_full(store.db, table, deadline) for table in sorted(emptied)}
    if held := {table: n for table, n in kept.items() if n}:
        log.warning(
            "VACUUM FULL kept %s dead row version(s) that another session could still see (%s): some deleted text "
            "stays on disk until it ends; then rewrite the tables again with VACUUM FULL",
            sum(held.values()),
            ", ".join(f"{t} {n}" for t, n in held.items()),
        )


_KEPT = re.compile(r"(\d+) dead row versions cannot be removed yet")


def _vacuum_full(db: Any, table: str, deadline: float) -> int:
    """VACUUM FULL ``table``, again (after a pause) while the server says it kept dead rows some session could still
    see, until ``deadline``; how many it kept the last time (0: the deleted rows are gone from the new file)."""
    pause = 0.05
    while True:
        with db.notices() as notices:
            db.execute(f"VACUUM (FULL, VERBOSE) [{table}]")
        kept = sum(int(m.group(1)) for notice in notices if (m := _KEPT.search(notice)))
        if not kept or time.monotonic() > deadline:
            return kept
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def _wait_for_older_snapshots(db: Any, *, bound_s: float = SNAPSHOT_WAIT_S) -> int:
    """Wait (up to ``bound_s``) until no other session of the database holds a snapshot, or a transaction that
    writes, from before the deletion committed: a row deleted under it is still "recently dead", and VACUUM FULL copies
    it into the rewritten table, text and all. The sessions still holding one when the bound passes (0: none)."""
    # An xid taken now is newer than the deletion's: a session whose xmin is older may still see the deleted rows.
    now = db.execute_native("select pg_current_xact_id()::text").fetchone()[0]
    deadline, pause = time.monotonic() + bound_s, 0.01
    while True:
        older = int(
            db.execute_native(
                "select count(*) from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid() "
                "and (age(backend_xmin) > age(%s::xid) or age(backend_xid) > age(%s::xid))",  # a snapshot, or a write
                [str(int(now) % 2**32)] * 2,
            ).fetchone()[0]
        )
        if not older or time.monotonic() > deadline:
            return older
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def _columns(store: Writer, table: str) -> list[str]:
    if is_postgres(store.db):
        return store.db.columns(table)  # type: ignore[union-attr]
    return [r[1] for r in store.db.execute(f"pragma table_info([{table}])").fetchall()]


def _chunks(items: Sequence[str]) -> Iterable[list[str]]:
    for start in range(0, len(items), _CHUNK):
        yield list(items[start : start + _CHUNK])


def _me() -> tuple[str, int, str]:
    me = Owner.me()
    return (me.host, me.pid, me.started)
