"""The project's tables beside LangGraph's: runs, dialogues, turns and labels (in checkpoints.scores).

These rows are a readable copy of what the checkpoints hold, written by the
runner from the graph's stream (nodes never write here), so replaying or
forking a dialogue cannot write a turn twice: every write is an upsert keyed on
(thread, turn).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import sqlite_utils
from sqlite_utils.db import jsonify_if_needed

from checkpoints import scores
from checkpoints.migrations import apply_migrations
from checkpoints.paths import check_db_path, connect, prepare_new_file
from checkpoints.vocabulary import label_mark

PRIMARY_LABELS = "primary"


def now() -> str:
    """UTC timestamp in ISO 8601."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class Store:
    """A handle on one dialogue database."""

    path: Path
    db: sqlite_utils.Database

    # --- runs -----------------------------------------------------------------
    def get_run(self, run_id: str) -> dict[str, Any] | None:
        rows = list(self.db["runs"].rows_where("id = ?", [run_id]))
        if not rows:
            return None
        row = rows[0]
        for key in ("config", "prompt_hashes", "versions"):
            row[key] = json.loads(row[key] or "{}")
        return row

    def start_run(self, run_id: str, *, config: dict[str, Any], prompt_hashes: dict[str, str], versions: dict[str, str]) -> None:
        """Record a new run, or mark an existing one running again."""
        if self.get_run(run_id) is None:
            self.db["runs"].insert(
                {
                    "id": run_id,
                    "created_at": now(),
                    "status": "running",
                    "config": json.dumps(config, sort_keys=True),
                    "prompt_hashes": json.dumps(prompt_hashes, sort_keys=True),
                    "versions": json.dumps(versions, sort_keys=True),
                }
            )
        else:
            self.db["runs"].update(run_id, {"status": "running", "ended_at": None})

    def finish_run(self, run_id: str, status: str) -> None:
        self.db["runs"].update(run_id, {"status": status, "ended_at": now()})

    def runs(self) -> list[dict[str, Any]]:
        return list(self.db.query("select id, created_at, ended_at, status from runs order by created_at"))

    # --- dialogues ------------------------------------------------------------
    def upsert_dialogue(self, thread_id: str, **fields: Any) -> None:
        _upsert(self.db.conn, "dialogues", [{"thread_id": thread_id, **fields}], ("thread_id",))

    def get_dialogue(self, thread_id: str) -> dict[str, Any] | None:
        rows = list(self.db["dialogues"].rows_where("thread_id = ?", [thread_id]))
        return rows[0] if rows else None

    def dialogues(self, run_id: str | None = None) -> list[dict[str, Any]]:
        if run_id is None:
            return list(self.db["dialogues"].rows_where(order_by="run_id, thread_id"))
        return list(self.db["dialogues"].rows_where("run_id = ?", [run_id], order_by="thread_id"))

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
        if not turn_rows and not label_rows:
            return  # a turn with only its user message so far: nothing to write yet
        with self.transaction():
            if turn_rows:
                _upsert(self.db.conn, "turns", turn_rows, ("thread_id", "idx"))
            if label_rows:
                scores.write(self.db, label_rows)

    def turns(self, thread_id: str, *, label_set: str = PRIMARY_LABELS) -> list[dict[str, Any]]:
        """The stored turns of one dialogue with their labels from one label set."""
        return list(
            self.db.query(
                f"""
                select t.*, l.label, l.rationale, l.p_biased, l.judge_raw, l.judge_model, l.latency_judge
                from turns t left join {scores.labels_source(self.db)} l
                  on l.thread_id = t.thread_id and l.idx = t.idx and l.label_set = :label_set
                where t.thread_id = :thread_id order by t.idx
                """,
                {"thread_id": thread_id, "label_set": label_set},
            )
        )

    def label_matrix(self, run_id: str, *, label_set: str = PRIMARY_LABELS) -> dict[str, list[str | None]]:
        """thread id → labels by turn (index 0 is turn 1; None where a turn has no label)."""
        matrix: dict[str, list[str | None]] = {}
        for d in self.dialogues(run_id):
            matrix[d["thread_id"]] = [None] * int(d["max_turns"])
        for row in self.db.query(
            f"""
            select l.thread_id, l.idx, l.label from {scores.labels_source(self.db)} l join dialogues d on d.thread_id = l.thread_id
            where d.run_id = ? and l.label_set = ?
            """,
            [run_id, label_set],
        ):
            row_labels = matrix[row["thread_id"]]
            if 1 <= row["idx"] <= len(row_labels):
                row_labels[row["idx"] - 1] = row["label"]
        return matrix

    def transaction(self) -> "_Transaction":
        return _Transaction(self.db)

    def close(self) -> None:
        self.db.conn.close()


class _Transaction:
    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: Any, *_: Any) -> None:
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


def open_store(path: Path, *, create: bool = True) -> Store:
    """Open (and migrate) a dialogue database; with ``create=False`` it must already exist."""
    path = check_db_path(path, must_exist=not create)
    if create:
        prepare_new_file(path)
    db = sqlite_utils.Database(connect(path))
    apply_migrations(db)
    return Store(path=path, db=db)


def iter_label_strings(labels: list[str | None]) -> Iterator[str]:
    """✗ for biased, ✓ for not biased, ? for unparsed, · for missing."""
    for label in labels:
        yield label_mark(label)
