"""Read-only access to a dialogue database: the one reader of replay, the viewer, reports, traces and lists.

Opening never migrates or writes the file: a database copied from another machine (or
one a run is still writing) is read as it is; one whose migrations are behind is read
through a migrated copy in memory, so every query sees today's layout. Scores come through
checkpoints.scores (the ``scores`` table), their columns looked up rather than assumed, so an older or newer database
reads without error. A branch whose own rows start at its fork turn shows its parent's earlier turns, marked as
inherited.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Iterable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

from checkpoints import scores
from checkpoints.location import PostgresURL, is_postgres_url, parse_postgres_url
from checkpoints.migrations import MIGRATIONS, apply_migrations
from checkpoints.paths import StoreError, check_db_path, connect_readonly, damage_of
from checkpoints.postgres.db import PgDatabase
from checkpoints.queries import StoreQueries
from checkpoints.records import Coherence, DialogueRecord, DialogueSummary, Refusal, TurnRecord
from checkpoints.vocabulary import PRIMARY_LABELS, REASONING_LABELS

# An old file's migrated copy is made in memory up to this size, in a temporary file above it.
MEMORY_COPY_BYTES = 256 * 1024 * 1024
REQUIRED_TABLES = ("runs", "dialogues", "turns")
# Labels are in ``scores`` (migration m065) or, in older files, ``labels``.
LABEL_TABLES = (scores.TABLE, "labels")
# Optional per-turn / per-dialogue tables, and the columns that may name who produced a row.
_SOURCE_COLUMNS = ("label_set", "classifier", "scorer", "model")


class Reader(StoreQueries):
    """Queries over one dialogue database, opened read-only (see :func:`open_reader`)."""

    def __init__(
        self,
        path: Path | PostgresURL,
        conn: sqlite3.Connection | PgDatabase,
        *,
        file_tables: frozenset[str] | None = None,
    ) -> None:
        self.path = path
        self.conn = conn
        self.db: sqlite_utils.Database | PgDatabase  # type: ignore[assignment]
        if isinstance(conn, PgDatabase):
            self.db = conn
            self.file_tables = frozenset(conn.table_names()) if file_tables is None else file_tables
        else:
            # The tables the file itself holds (an old file is read through a migrated copy that has more).
            self.file_tables = (
                frozenset(r[0] for r in conn.execute("select name from sqlite_master where type = 'table'"))
                if file_tables is None
                else file_tables
            )
            self.db = sqlite_utils.Database(conn)
            conn.row_factory = sqlite3.Row
        self._columns: dict[str, list[str]] = {}

    # --- schema ------------------------------------------------------------------
    def columns(self, table: str) -> list[str]:
        """The columns of a table (empty when it does not exist) or of a ``scores`` source subquery."""
        if table not in self._columns:
            if table.startswith("("):
                self._columns[table] = scores.source_columns(self.conn, table)
            elif isinstance(self.db, PgDatabase):
                self._columns[table] = self.db.columns(table)
            else:
                self._columns[table] = [
                    r["name"] for r in self.conn.execute("select name from pragma_table_info(?)", [table])
                ]
        return self._columns[table]

    def has_table(self, table: str) -> bool:
        return bool(self.columns(table))

    def _query(self, sql: str, params: Iterable[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        if isinstance(self.db, PgDatabase):
            return list(self.db.query(sql, params))
        return [dict(r) for r in self.conn.execute(sql, params)]  # type: ignore[arg-type]

    # --- runs and lists ----------------------------------------------------------
    def run_ids(self) -> list[str]:
        return [r["id"] for r in self._query("select id from runs order by created_at, id")]

    def categories(self) -> list[str]:
        return [
            r["category"]
            for r in self._query("select distinct category from dialogues where category is not null order by category")
        ]

    def label_sets(self) -> list[str]:
        return scores.label_set_names(self.conn)

    def thread_ids(self) -> list[str]:
        return [r["thread_id"] for r in self._query("select thread_id from dialogues order by run_id, thread_id")]

    def summaries(
        self,
        *,
        run_id: str | None = None,
        category: str | None = None,
        biased_only: bool = False,
        label_set: str = PRIMARY_LABELS,
    ) -> list[DialogueSummary]:
        """Dialogues in run and thread order (each branch right after its parent), optionally filtered."""
        rows = self._query("select * from dialogues order by run_id, thread_id")
        labels = self._all_labels(label_set)
        by_id = {r["thread_id"]: r for r in rows}
        summaries = {r["thread_id"]: self._summary(r, by_id, labels) for r in rows}
        picked = [
            s
            for s in summaries.values()
            if (run_id is None or s.run_id == run_id)
            and (category is None or (s.category or "").lower() == category.lower())
            and (not biased_only or s.has_bias)
        ]
        return _parents_first(picked)

    def branches(self, thread_id: str, *, label_set: str = PRIMARY_LABELS) -> list[DialogueSummary]:
        """The branches forking directly from ``thread_id``, by fork turn."""
        children = self._query(
            "select * from dialogues where parent_thread_id = ? order by fork_turn, thread_id", [thread_id]
        )
        if not children:
            return []
        # Only the children and the ancestors their inherited prefix can come from.
        by_id = {r["thread_id"]: r for r in children}
        ancestor: str | None = thread_id
        while ancestor and ancestor not in by_id:
            rows = self._query("select * from dialogues where thread_id = ?", [ancestor])
            if not rows:
                break
            by_id[ancestor] = rows[0]
            ancestor = rows[0].get("parent_thread_id")
        labels = self._all_labels(label_set, thread_ids=list(by_id))
        return [self._summary(c, by_id, labels) for c in children]

    # --- one dialogue ------------------------------------------------------------
    def dialogue(self, thread_id: str, *, label_set: str = PRIMARY_LABELS) -> DialogueRecord | None:
        rows = self._query("select * from dialogues where thread_id = ?", [thread_id])
        if not rows:
            return None
        row = rows[0]
        run = self.get_run(row.get("run_id")) or {}
        return _dialogue_of(
            DialogueRecord,
            row,
            label_set=label_set,
            run_config=run.get("config") or {},
            turns=tuple(self.turn_records(thread_id, label_set=label_set)),
            branches=tuple(self.branches(thread_id, label_set=label_set)),
            coherence=tuple(self.coherence(thread_id)),
        )

    def turn_records(self, thread_id: str, *, label_set: str = PRIMARY_LABELS) -> list[TurnRecord]:
        """The dialogue's turns in order; a branch's missing prefix comes from its parent."""
        return self._turns(thread_id, label_set, seen=set())

    def _turns(self, thread_id: str, label_set: str, *, seen: set[str]) -> list[TurnRecord]:
        # A branch's turns before its fork turn are its parent's (branching copies them, so they are
        # usually stored here too): they are marked with the dialogue that first played them, and
        # read from the parent when this thread lacks them.
        seen.add(thread_id)
        rows = self._query(
            f"""
            select t.*, l.label, l.rationale, l.p_biased, l.judge_raw, l.judge_model, l.latency_judge,
                   r.label as reasoning_label, r.rationale as reasoning_rationale
            from turns t left join {scores.labels_source(self.conn)} l
              on l.thread_id = t.thread_id and l.idx = t.idx and l.label_set = ?
            left join {scores.labels_source(self.conn)} r
              on r.thread_id = t.thread_id and r.idx = t.idx and r.label_set = ?
            where t.thread_id = ? order by t.idx
            """,
            [label_set, REASONING_LABELS, thread_id],
        )
        refusals = self.refusals(thread_id)
        own = {r["idx"]: _turn_record(r, refusals.get(r["idx"], ())) for r in rows}
        parent, fork_turn = self._origin(thread_id)
        if parent and fork_turn and parent not in seen:
            theirs = {t.idx: t for t in self._turns(parent, label_set, seen=seen) if t.idx < fork_turn}
            for idx in range(1, fork_turn):
                source = (theirs[idx].inherited_from or parent) if idx in theirs else parent
                if idx in own:
                    own[idx] = replace(own[idx], inherited_from=source)
                elif idx in theirs:
                    own[idx] = replace(theirs[idx], inherited_from=source)
        return [own[i] for i in sorted(own)]

    def refusals(self, thread_id: str) -> dict[int, tuple[Refusal, ...]]:
        """Turn index → refusal verdicts, when the file holds any."""
        table = scores.refusals_source(self.conn)
        cols = self.columns(table) if table else []
        if not {"thread_id", "idx", "refused"} <= set(cols):
            return {}
        source = _first_present(_SOURCE_COLUMNS, cols)
        out: dict[int, list[Refusal]] = {}
        for r in self._query(
            f"select * from {table} s where thread_id = ? order by idx{', ' + source if source else ''}", [thread_id]
        ):
            out.setdefault(r["idx"], []).append(
                Refusal(
                    refused=_truth(r.get("refused")),
                    source=r.get(source) if source else None,
                    p_refused=r.get("p_refused"),
                    rationale=r.get("rationale"),
                )
            )
        return {idx: tuple(v) for idx, v in out.items()}

    def coherence(self, thread_id: str) -> list[Coherence]:
        """Coherence scores of a dialogue, when the file holds any."""
        table = scores.coherence_source(self.conn)
        cols = self.columns(table) if table else []
        if not {"thread_id", "score"} <= set(cols):
            return []
        source = _first_present(_SOURCE_COLUMNS, cols)
        rows = self._query(
            f"select * from {table} s where thread_id = ?{' order by ' + source if source else ''}", [thread_id]
        )
        return [
            Coherence(
                score=_number(r.get("score")), source=r.get(source) if source else None, rationale=r.get("rationale")
            )
            for r in rows
        ]

    # --- helpers -----------------------------------------------------------------
    def _origin(self, thread_id: str) -> tuple[str | None, int | None]:
        rows = self._query("select parent_thread_id, fork_turn from dialogues where thread_id = ?", [thread_id])
        return (rows[0]["parent_thread_id"], rows[0]["fork_turn"]) if rows else (None, None)

    def _all_labels(self, label_set: str, *, thread_ids: list[str] | None = None) -> dict[str, dict[int, str | None]]:
        """thread id → {turn: label} for every stored turn (None where a turn has no label yet)."""
        out: dict[str, dict[int, str | None]] = {}
        where, params = "", [label_set]
        if thread_ids is not None:
            where = f"where t.thread_id in ({', '.join('?' * len(thread_ids))})"
            params += thread_ids
        for r in self._query(
            f"""
            select t.thread_id, t.idx, l.label from turns t left join {scores.labels_source(self.conn)} l
              on l.thread_id = t.thread_id and l.idx = t.idx and l.label_set = ?
            {where}
            """,
            params,
        ):
            out.setdefault(r["thread_id"], {})[r["idx"]] = r["label"]
        return out

    def _summary(
        self, row: dict[str, Any], by_id: dict[str, dict[str, Any]], labels: dict[str, dict[int, str | None]]
    ) -> DialogueSummary:
        by_turn = _labels_with_prefix(row["thread_id"], by_id, labels)
        length = max([int(row.get("max_turns") or 0), *by_turn.keys()] or [0])
        return _dialogue_of(DialogueSummary, row, labels=tuple(by_turn.get(i) for i in range(1, length + 1)))

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


def open_reader(path: Path | PostgresURL | str) -> Reader:
    """Open an existing dialogue database read-only; StoreError says what to fix.

    A file whose migrations are behind this code's is copied into memory and migrated
    there (the file is never written), so old databases read with today's queries.
    A PostgreSQL URL is read in read-only transactions (the server refuses any write).
    """
    if isinstance(path, PostgresURL) or (isinstance(path, str) and is_postgres_url(path)):
        return _open_postgres_reader(path if isinstance(path, PostgresURL) else parse_postgres_url(path))
    path = check_db_path(Path(path), must_exist=True)
    conn = connect_readonly(path)
    try:
        return _reader_of(path, conn)
    except sqlite3.DatabaseError as exc:
        conn.close()
        if (damage := damage_of(exc, path)) is not None:
            raise damage from None
        raise


def _reader_of(path: Path, conn: sqlite3.Connection) -> Reader:
    tables = {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}
    missing = [t for t in REQUIRED_TABLES if t not in tables] or ([] if tables & set(LABEL_TABLES) else ["labels"])
    if missing:
        conn.close()
        raise StoreError(
            f"{path} holds no DyMT-ESB dialogues (no {missing[0]} table): pass --db with the file python -m "
            "graph.run wrote"
        )
    if _behind(conn, tables):
        conn = _migrated_copy(conn, size=path.stat().st_size)
    return Reader(path, conn, file_tables=frozenset(tables))


def _open_postgres_reader(url: PostgresURL) -> Reader:
    from checkpoints.postgres import schema as pg_schema

    db = PgDatabase(url, read_only=True)
    try:
        if pg_schema.pending(db):  # never set up, or by an older DyMT-ESB: a writer brings it up to date
            raise StoreError(
                f"PostgreSQL at {url} holds no DyMT-ESB dialogues (or an older layout): "
                "open it once with a writer (python -m graph.run --db URL)"
            )
    except BaseException:
        db.close()
        raise
    return Reader(url, db)


def _behind(conn: sqlite3.Connection, tables: set[str]) -> bool:
    """Whether this code knows migrations the file has not had."""
    if "_migrations" not in tables:
        return True
    applied = {r[0] for r in conn.execute("select name from _migrations")}
    return any(fn.__name__ not in applied for fn in MIGRATIONS)


def _migrated_copy(conn: sqlite3.Connection, *, size: int) -> sqlite3.Connection:
    """A copy of the database brought up to date; the file itself as it is if that fails.

    The copy is in memory for a file up to ``MEMORY_COPY_BYTES``; a larger one is copied to a
    temporary file (deleted once closed), so reading an old paper-scale store never needs its size in RAM.
    """
    if size <= MEMORY_COPY_BYTES:
        target = ":memory:"
    else:
        handle, target = tempfile.mkstemp(prefix="dymt-reader-", suffix=".db")
        os.close(handle)
    copy = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
    try:
        conn.backup(copy)
        copy.execute("pragma journal_mode=off")  # a throwaway copy: no -wal / -journal files beside it
        apply_migrations(sqlite_utils.Database(copy), announce=False)
    except Exception:  # noqa: BLE001 - a layout no migration expects (hand-made files): read it as it is
        copy.close()
        _remove(target)
        return conn
    finally:
        if target != ":memory:":
            _remove(target)  # unlinked while open: the space is freed when the copy closes
    conn.close()
    return copy


def _remove(target: str) -> None:
    if target != ":memory:":
        with contextlib.suppress(OSError):
            os.unlink(target)


def _labels_with_prefix(
    thread_id: str, by_id: dict[str, dict[str, Any]], labels: dict[str, dict[int, str | None]]
) -> dict[int, str | None]:
    """A dialogue's labels by turn, with a branch's missing prefix filled from its ancestors."""
    own = dict(labels.get(thread_id, {}))
    seen = {thread_id}
    row = by_id.get(thread_id, {})
    while row.get("parent_thread_id") and row.get("fork_turn") and row["parent_thread_id"] not in seen:
        parent = row["parent_thread_id"]
        seen.add(parent)
        for idx, label in labels.get(parent, {}).items():
            if idx < row["fork_turn"] and idx not in own:
                own[idx] = label
        row = by_id.get(parent, {})
    return own


def _parents_first(summaries: list[DialogueSummary]) -> list[DialogueSummary]:
    """Order each branch right after its parent (depth first), keeping the given order otherwise."""
    present = {s.thread_id for s in summaries}
    children: dict[str, list[DialogueSummary]] = {}
    roots = []
    for s in summaries:
        if s.parent_thread_id in present and s.parent_thread_id != s.thread_id:
            children.setdefault(s.parent_thread_id, []).append(s)
        else:
            roots.append(s)
    out: list[DialogueSummary] = []
    placed: set[str] = set()

    def walk(s: DialogueSummary) -> None:
        out.append(s)
        placed.add(s.thread_id)
        for c in sorted(children.get(s.thread_id, []), key=lambda c: (c.fork_turn or 0, c.thread_id)):
            if c.thread_id not in placed:
                walk(c)

    for s in roots:
        walk(s)
    # Anything left is in a parent cycle (never written by our tools): keep it visible.
    out.extend(s for s in summaries if s.thread_id not in placed)
    return out


def _turn_record(row: dict[str, Any], refusals: tuple[Refusal, ...]) -> TurnRecord:
    return TurnRecord(
        idx=int(row["idx"]),
        user_message=row.get("user_message"),
        reply=row.get("reply"),
        utterance_type=row.get("utterance_type"),
        user_model=row.get("user_model"),
        target_model=row.get("target_model"),
        latency_user=row.get("latency_user"),
        latency_target=row.get("latency_target"),
        tokens=_json(row.get("tokens")) or {},
        label=row.get("label"),
        rationale=row.get("rationale"),
        p_biased=row.get("p_biased"),
        judge_raw=row.get("judge_raw"),
        judge_model=row.get("judge_model"),
        latency_judge=row.get("latency_judge"),
        refusals=refusals,
        leakage=_number(row.get("leakage")),
        leaked=None if row.get("leaked") is None else bool(row["leaked"]),
        user_attempts=row.get("user_attempts"),
        non_reply=row.get("non_reply"),
        reasoning=row.get("reasoning"),
        reasoning_carrier=row.get("reasoning_carrier"),
        reasoning_label=row.get("reasoning_label"),
        reasoning_rationale=row.get("reasoning_rationale"),
    )


_Dialogue = TypeVar("_Dialogue", DialogueRecord, DialogueSummary)


def _dialogue_of(record: type[_Dialogue], row: dict[str, Any], **computed: Any) -> _Dialogue:
    """A dialogue's record from its ``dialogues`` row: each field named after a column holds that column as stored,
    ``change`` its JSON read; the other fields are ``computed`` (turns, labels, branches)."""
    columns = {f.name for f in fields(record)} - computed.keys() - {"change"}
    stored: dict[str, Any] = {name: row.get(name) for name in columns}
    return record(**stored, change=_json(row.get("change")), **computed)


def _json(text: Any) -> Any:
    if text is None or not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _truth(value: Any) -> bool | None:
    if value is None:
        return None
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "refused", "refusal"):
            return True
        if lowered in ("0", "false", "no", "complied", "not_refused"):
            return False
        return None
    return bool(value)


def _number(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _first_present(names: Iterable[str], columns: list[str]) -> str | None:
    return next((n for n in names if n in columns), None)
