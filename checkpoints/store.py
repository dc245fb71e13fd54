"""The one writer of the project's tables beside LangGraph's: runs, dialogues, turns, labels, branch sets, traces.

These rows are a readable copy of what the checkpoints hold, written by the
runner from the graph's stream (nodes never write here), so replaying or
forking a dialogue cannot write a turn twice: every write is an upsert keyed on
(thread, turn).
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlite_utils
from sqlite_utils.db import jsonify_if_needed

from checkpoints import scores
from checkpoints.clock import now
from checkpoints.location import PostgresURL, is_postgres_url, parse_postgres_url
from checkpoints.migrations import apply_migrations
from checkpoints.paths import check_db_path, connect, damage_of, prepare_new_file
from checkpoints.postgres.db import PgDatabase
from checkpoints.queries import StoreQueries
from checkpoints.text import valid_strings
from checkpoints.traces import tables as traces
from checkpoints.traces.encoder import TraceEncoder
from checkpoints.traces.tables import TraceItem
from checkpoints.vocabulary import PRIMARY_LABELS, REASONING_LABELS

__all__ = ["Writer", "now", "open_writer"]


@dataclass
class Writer(StoreQueries):
    """The one way to write a dialogue database: runs, dialogues, turns, branch sets, traces, deletion.

    Its reads (:class:`StoreQueries`) see its own writes; commands that only read open a
    :class:`checkpoints.readers.Reader` instead, which never writes.
    """

    path: Path | PostgresURL
    db: sqlite_utils.Database | PgDatabase  # type: ignore[assignment]

    # --- runs -----------------------------------------------------------------
    def start_run(
        self, run_id: str, *, config: dict[str, Any], prompt_hashes: dict[str, str], versions: dict[str, str]
    ) -> None:
        """Record a new run, or mark an existing one running again (one statement: a run deleted meanwhile by
        another process is recorded anew, never left without its row)."""
        self.db.execute(
            "insert into runs (id, created_at, status, config, prompt_hashes, versions) "
            "values (?, ?, 'running', ?, ?, ?) on conflict (id) do update set status = 'running', ended_at = null",
            [
                run_id,
                now(),
                json.dumps(config, sort_keys=True),
                json.dumps(prompt_hashes, sort_keys=True),
                json.dumps(versions, sort_keys=True),
            ],
        )

    def finish_run(self, run_id: str, status: str) -> None:
        """Mark a run ended with ``status`` (a run deleted meanwhile is left deleted)."""
        self.db.execute("update runs set status = ?, ended_at = ? where id = ?", [status, now(), run_id])

    def refresh_run_status(self, run_id: str) -> str:
        """Set a run's status from its dialogues': paused, failed, running or finished."""
        statuses = {r["status"] for r in self.db.query("select status from dialogues where run_id = ?", [run_id])}
        if "paused" in statuses:
            status = "paused"
        elif statuses & {"failed", "interrupted"}:
            status = "failed"
        elif "running" in statuses:
            status = "running"
        else:
            status = "finished"
        if self.get_run(run_id) is not None:
            self.db["runs"].update(  # type: ignore[union-attr]
                run_id, {"status": status, "ended_at": None if status in ("paused", "running") else now()}
            )
        return status

    # --- dialogues ------------------------------------------------------------
    def upsert_dialogue(self, thread_id: str, **fields: Any) -> None:
        """Insert or update a dialogue's row. Without ``run_id`` only an existing row is updated: a status change of
        a dialogue whose run was deleted meanwhile writes nothing (a row of no run would keep its text)."""
        fields = valid_strings(fields)  # an error text may quote a reply's lone surrogate
        if "run_id" in fields:
            _upsert(self.db.conn, "dialogues", [{"thread_id": thread_id, **fields}], ("thread_id",))
        elif fields:
            names = list(fields)
            self.db.execute(
                f"update dialogues set {', '.join(f'[{n}] = ?' for n in names)} where thread_id = ?",
                [*(jsonify_if_needed(fields[n]) for n in names), thread_id],
            )

    def mark_interrupted(self, thread_ids: Sequence[str]) -> None:
        """Dialogues of ``thread_ids`` still marked running when their player stopped: interrupted (resumable)."""
        for start in range(0, len(thread_ids), 500):
            chunk = list(thread_ids[start : start + 500])
            self.db.execute(
                f"update dialogues set status = 'interrupted' where status = 'running' and thread_id in "
                f"({', '.join('?' * len(chunk))})",
                chunk,
            )

    # --- turns and labels -----------------------------------------------------
    def record_turns(self, thread_id: str, turns: list[dict[str, Any]], *, label_set: str = PRIMARY_LABELS) -> None:
        """Upsert the turns of a dialogue (and their labels) from the graph state, in one transaction."""
        turn_rows, label_rows = [], []
        for t in turns:
            if "reply" in t:
                turn_rows.append(
                    {
                        "thread_id": thread_id,
                        "idx": t["index"],
                        "user_message": t.get("user_message"),
                        "utterance_type": t.get("utterance_type"),
                        "reply": t.get("reply"),
                        "user_model": t.get("user_model"),
                        "target_model": t.get("target_model"),
                        "latency_user": t.get("latency_user"),
                        "latency_target": t.get("latency_target"),
                        "tokens": json.dumps(t.get("tokens", {}), sort_keys=True),
                        **_leakage_columns(t),
                        "target_attempts": t.get("target_attempts"),
                        "non_reply": t.get("non_reply"),
                        "reasoning": t.get("reasoning"),
                        "reasoning_carrier": t.get("reasoning_carrier"),
                    }
                )
            if "label" in t:
                label_rows.append(
                    scores.ScoreRow(
                        thread_id=thread_id,
                        idx=t["index"],
                        key=scores.BIAS,
                        scorer=label_set,
                        value=t["label"],
                        score=t.get("p_biased"),
                        explanation=t.get("rationale"),
                        raw=t.get("judge_raw"),
                        model=t.get("judge_model"),
                        latency=t.get("latency_judge"),
                        created_at=now(),
                    )
                )
            if "reasoning_label" in t:  # --judge-reasoning: the same judge's label of the turn's reasoning
                label_rows.append(
                    scores.ScoreRow(
                        thread_id=thread_id,
                        idx=t["index"],
                        key=scores.BIAS,
                        scorer=REASONING_LABELS,
                        subject=scores.REASONING,
                        value=t["reasoning_label"],
                        score=t.get("reasoning_p_biased"),
                        explanation=t.get("reasoning_rationale"),
                        raw=t.get("reasoning_judge_raw"),
                        model=t.get("judge_model"),
                        latency=t.get("reasoning_latency_judge"),
                        created_at=now(),
                    )
                )
        if not turn_rows and not label_rows:
            return  # a turn with only its user message so far: nothing to write yet
        with self.transaction():
            if turn_rows:
                _upsert(self.db.conn, "turns", turn_rows, ("thread_id", "idx"))
            if label_rows:
                scores.write(self.db, label_rows)

    def record_scores(self, rows: Sequence[scores.ScoreRow]) -> None:
        """Upsert scorer verdicts (re-judging, refusal, coherence, the guard filter) into the ``scores`` table."""
        scores.write(self.db, rows)

    def add_label_set(
        self,
        run_id: str,
        kind: str,
        name: str,
        *,
        model: str,
        model_id: str | None,
        prompt: str,
        prompt_hash: str,
        content_free_p_yes: float | None,
    ) -> None:
        """Describe a label set of a run (who labelled, with which prompt); an existing one is kept."""
        self.db["label_sets"].insert(  # type: ignore[union-attr]
            {
                "run_id": run_id,
                "kind": kind,
                "name": name,
                "model": model,
                "model_id": model_id,
                "prompt": prompt,
                "prompt_hash": prompt_hash,
                "content_free_p_yes": content_free_p_yes,
                "created_at": now(),
            },
            pk=("run_id", "kind", "name"),
            ignore=True,
        )

    # --- counterfactual sets --------------------------------------------------
    def add_set(
        self, name: str, *, run_id: str, parent_run_id: str | None, fork_turn: int, change: dict[str, Any]
    ) -> None:
        """Record a new set; adding branches to an existing set keeps its first description."""
        if self.get_set(name) is None:
            self.db["counterfactual_sets"].insert(  # type: ignore[union-attr]
                {
                    "name": name,
                    "created_at": now(),
                    "run_id": run_id,
                    "parent_run_id": parent_run_id,
                    "fork_turn": fork_turn,
                    "change": json.dumps(change, sort_keys=True),
                }
            )

    def add_set_member(self, set_name: str, thread_id: str, parent_thread_id: str) -> None:
        self.db["counterfactual_members"].upsert(  # type: ignore[union-attr]
            {"set_name": set_name, "thread_id": thread_id, "parent_thread_id": parent_thread_id, "added_at": now()},
            pk=("set_name", "thread_id"),
        )

    # --- traces, validations, deletion ------------------------------------------
    def write_trace_batch(
        self, encoder: TraceEncoder, items: Sequence[TraceItem], final: bool = False, *, through: Any = None
    ) -> None:
        """Store one tracer batch as the trace's next chunk (see
        :func:`checkpoints.traces.tables.write_trace_batch`)."""
        traces.write_trace_batch(self, encoder, items, final, through=through)

    def write_together(self, writes: Sequence[Callable[[], Any]]) -> list[Exception | None]:
        """Run writes queued together in one SQLite transaction (one commit, not one per write).

        Each write that opens a transaction gets a savepoint instead, so one that fails loses only
        itself: the result holds its exception, None for each that succeeded. On PostgreSQL they run
        one by one, each in its own transaction as before.
        """
        outcomes: list[Exception | None] = []
        with self.transaction() if hasattr(self.db.conn, "in_transaction") else contextlib.nullcontext():
            for write in writes:
                try:
                    write()
                    outcomes.append(None)
                except Exception as exc:  # noqa: BLE001 - reported to whoever queued that write
                    outcomes.append(exc)
        return outcomes

    def record_validation(
        self,
        *,
        judge_model: str,
        prompt_hash: str,
        file: str,
        file_sha256: str,
        result: Any,
        items: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """Store one evals.judge score (``result``: an evals.stats.agreement.Classification) and its ``items``."""
        self.db["judge_validations"].insert(  # type: ignore[union-attr]
            {
                "judge_model": judge_model,
                "prompt_hash": prompt_hash,
                "file": file,
                "file_sha256": file_sha256,
                "n_items": result.n_items,
                "n_compared": result.n_compared,
                "accuracy": result.accuracy.value,
                "accuracy_low": result.accuracy.low,
                "accuracy_high": result.accuracy.high,
                "ac1": result.ac1.value,
                "kappa": result.kappa.value,
                "tp": result.tp,
                "fp": result.fp,
                "fn": result.fn,
                "tn": result.tn,
                "items": None if items is None else json.dumps(list(items), ensure_ascii=False),
                "created_at": now(),
            }
        )

    def transaction(self) -> _Transaction:
        return _Transaction(self.db)  # type: ignore[arg-type]

    def close(self) -> None:
        self.db.conn.close()


class _Transaction:
    """BEGIN IMMEDIATE … COMMIT (ROLLBACK on an error); inside an open SQLite transaction, a savepoint instead."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db
        self.nested = False

    def __enter__(self) -> None:
        conn = self.db.conn  # sqlite3's in_transaction; PostgreSQL's transaction_open (PgDatabase)
        self.nested = bool(getattr(conn, "in_transaction", False) or getattr(conn, "transaction_open", False))
        self.db.execute("SAVEPOINT nested" if self.nested else "BEGIN IMMEDIATE")

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if self.nested:
            if exc_type:
                self.db.execute("ROLLBACK TO nested")
            self.db.execute("RELEASE nested")
        else:
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")


@functools.lru_cache(maxsize=64)
def _upsert_sql(table: str, columns: tuple[str, ...], pk: tuple[str, ...]) -> str:
    names = ", ".join(f'"{c}"' for c in columns)
    updates = ", ".join(f'"{c}" = excluded."{c}"' for c in columns if c not in pk)
    conflict = ", ".join(f'"{c}"' for c in pk)
    action = f"do update set {updates}" if updates else "do nothing"
    return f'insert into "{table}" ({names}) values ({", ".join("?" * len(columns))}) on conflict ({conflict}) {action}'


def _upsert(conn: Any, table: str, rows: list[dict[str, Any]], pk: tuple[str, ...]) -> None:
    """Insert rows, or update every given column of the row with the same key (sqlite-utils' upsert, without
    its per-call look at the schema: the turns mirror runs at every step of every dialogue)."""
    by_columns: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
    for row in rows:
        by_columns.setdefault(tuple(row), []).append(tuple(map(jsonify_if_needed, row.values())))
    for columns, values in by_columns.items():
        conn.executemany(_upsert_sql(table, columns, pk), values)


def _leakage_columns(turn: dict[str, Any]) -> dict[str, Any]:
    """The leakage columns of a turn row (migration m060), all None for turns that were never scored."""
    if "leakage" not in turn:
        return {"leakage": None, "leaked": None, "user_attempts": None, "leakage_detail": None}
    detail = {k: turn.get(k) for k in ("leakage_containment", "leakage_ngram")}
    detail["rejected"] = turn.get("user_rejected") or []
    return {
        "leakage": turn["leakage"],
        "leaked": int(bool(turn.get("leaked"))),
        "user_attempts": turn.get("user_attempts", 1),
        "leakage_detail": json.dumps(detail, sort_keys=True, ensure_ascii=False),
    }


def open_writer(path: Path | PostgresURL | str, *, create: bool = True, application_name: str | None = None) -> Writer:
    """Open (and migrate) a dialogue database for writing; with ``create=False`` it must already exist.
    ``application_name``: the PostgreSQL session's name (a worker's, which a live worker may end: claims.fence).

    ``path`` may name a PostgreSQL server (a :class:`PostgresURL` or a ``postgresql://`` string): the
    project's tables are then created there once (checkpoints/postgres/schema.py); ``create=False`` wants them made.
    """
    if isinstance(path, PostgresURL) or (isinstance(path, str) and is_postgres_url(path)):
        url = path if isinstance(path, PostgresURL) else parse_postgres_url(path)
        return _open_postgres_writer(url, create=create, application_name=application_name)
    path = check_db_path(Path(path), must_exist=not create)
    if create:
        prepare_new_file(path)
    db = sqlite_utils.Database(connect(path))
    try:
        apply_migrations(db)
    except sqlite3.DatabaseError as exc:
        db.close()
        if (damage := damage_of(exc, path)) is not None:
            raise damage from None  # rolled back: nothing written
        raise
    return Writer(path=path, db=db)


def _open_postgres_writer(url: PostgresURL, *, create: bool, application_name: str | None = None) -> Writer:
    from checkpoints.paths import StoreError
    from checkpoints.postgres import schema as pg_schema

    db = PgDatabase(url, application_name=application_name)
    try:
        if not create and pg_schema.pending(db) == list(pg_schema.PG_MIGRATIONS):
            raise StoreError(
                f"PostgreSQL at {url} holds no DyMT-ESB dialogues yet: run python -m graph.run with this --db first"
            )
        pg_schema.ensure_schema(db)
    except BaseException:
        db.close()
        raise
    return Writer(path=url, db=db)
