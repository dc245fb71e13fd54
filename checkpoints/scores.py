"""The one ``scores`` table: every verdict a scorer stored (bias labels, refusals, coherence, guard scores).

A row is keyed on (thread, turn, key, scorer, subject): ``key`` says what was scored ("bias",
"refusal", "coherence", "guard_<policy>"), ``scorer`` who scored it (the label set, classifier,
scorer or guard name), ``subject`` which text ("reply", "user" message, the target's "reasoning", or the whole
"dialogue", stored at turn 0). Plain functions over a sqlite3 connection (or a sqlite-utils Database), so the
store, the read-only reader and the evaluation commands share them. Databases written before
migration m065_scores keep the old per-kind tables; the ``*_source`` functions read those then.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from typing import Any

TABLE = "scores"
BIAS = "bias"
REFUSAL = "refusal"
COHERENCE = "coherence"
GUARD_PREFIX = "guard_"
HUMAN_BIAS = "human_bias"  # people's labels of a random draw of a run's turns (evals.annotate validate), scorer "human"
REPLY, USER, DIALOGUE = "reply", "user", "dialogue"
REASONING = "reasoning"  # the subject of a label of a target's reasoning (--judge-reasoning)
DIALOGUE_TURN = 0  # the turn index of a score on a whole dialogue

# Stored refusal values; NULL when the classifier's output was unparsed.
REFUSED, NOT_REFUSED = "yes", "no"


@dataclass(frozen=True)
class ScoreRow:
    """One stored verdict. ``value`` is a word (a label, yes / no); ``score`` a number (a probability, 1-5)."""

    thread_id: str
    idx: int
    key: str
    scorer: str
    subject: str = REPLY
    value: str | None = None
    score: float | None = None
    explanation: str | None = None
    raw: str | None = None
    model: str | None = None
    latency: float | None = None
    created_at: str | None = None


COLUMNS = tuple(f.name for f in fields(ScoreRow))
_PK = ("thread_id", "idx", "key", "scorer", "subject")
_UPSERT = (
    f"insert into {TABLE} ({', '.join(COLUMNS)}) values ({', '.join('?' * len(COLUMNS))}) "
    f"on conflict ({', '.join(_PK)}) do update set " + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c not in _PK)
)


def guard_key(policy: str) -> str:
    """The key of a guard's scores under one policy ("guard_hate")."""
    return f"{GUARD_PREFIX}{policy}"


def refusal_value(refused: bool | None) -> str | None:
    return None if refused is None else (REFUSED if refused else NOT_REFUSED)


def _conn(db: Any) -> sqlite3.Connection:
    """The sqlite3 connection of a sqlite-utils Database, or the connection itself."""
    return getattr(db, "conn", db)


def _query(db: Any, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
    cursor = _conn(db).execute(sql, params)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def has_table(db: Any, name: str) -> bool:
    if getattr(db, "dialect", None) == "postgresql":  # checkpoints.postgres.db.PgDatabase
        return name in db.table_names()
    return (
        _conn(db).execute("select 1 from sqlite_master where type = 'table' and name = ?", [name]).fetchone()
        is not None
    )


# --------------------------------------------------------------------------- writing


def write(db: Any, rows: Iterable[ScoreRow]) -> None:
    """Upsert rows (a row with the same key is replaced); the caller's transaction, if any, holds them."""
    values = [astuple(row) for row in rows]
    if values:
        _conn(db).executemany(_UPSERT, values)


# --------------------------------------------------------------------------- reading

# The rows of one key shaped as the table that held them before m065_scores, for joins.
_LABELS = (
    "(select thread_id, idx, scorer as label_set, value as label, explanation as rationale, score as p_biased, "
    f"raw as judge_raw, model as judge_model, latency as latency_judge, created_at from {TABLE} where key = '{BIAS}')"
)
_REFUSALS = (
    f"(select thread_id, idx, scorer as classifier, case value when '{REFUSED}' then 1 when '{NOT_REFUSED}' then 0 end "
    f"as refused, score as p_refused, explanation as rationale, raw, created_at from {TABLE} where key = '{REFUSAL}')"
)
_COHERENCE = (
    "(select thread_id, scorer, score, explanation as rationale, raw, created_at "
    f"from {TABLE} where key = '{COHERENCE}')"
)
_GUARD = (
    f"(select thread_id, idx, subject as side, substr(key, {len(GUARD_PREFIX) + 1}) as policy, scorer as guard_model, "
    f"score, raw, created_at from {TABLE} where key like '{GUARD_PREFIX}%')"
)


def _source(db: Any, shaped: str, legacy: str) -> str | None:
    if has_table(db, TABLE):
        return shaped
    return legacy if has_table(db, legacy) else None


def labels_source(db: Any) -> str:
    """A FROM-clause source with the columns of the old ``labels`` table (bias labels by label set)."""
    return _source(db, _LABELS, "labels") or _LABELS


def refusals_source(db: Any) -> str | None:
    """A FROM-clause source with the columns of the old ``refusals`` table; None when the file has neither."""
    return _source(db, _REFUSALS, "refusals")


def coherence_source(db: Any) -> str | None:
    """A FROM-clause source with the columns of the old ``coherence`` table; None when the file has neither."""
    return _source(db, _COHERENCE, "coherence")


def guard_source(db: Any) -> str | None:
    """A FROM-clause source with the columns of the old ``guard_scores`` table; None when the file has neither."""
    return _source(db, _GUARD, "guard_scores")


def source_columns(db: Any, source: str) -> list[str]:
    """The column names a source yields."""
    return [d[0] for d in _conn(db).execute(f"select * from {source} s limit 0").description]


def label_set_names(db: Any) -> list[str]:
    """Every label set with at least one stored bias label, sorted."""
    return [
        r["label_set"] for r in _query(db, f"select distinct label_set from {labels_source(db)} l order by label_set")
    ]


def scored_items(db: Any, *, run_id: str, key: str, scorer: str) -> set[tuple[str, int, str]]:
    """(thread, turn, subject) of every row of ``key`` by ``scorer`` on the run's dialogues."""
    rows = _query(
        db,
        f"select s.thread_id, s.idx, s.subject from {TABLE} s join dialogues d on d.thread_id = s.thread_id "
        "where d.run_id = ? and s.key = ? and s.scorer = ?",
        [run_id, key, scorer],
    )
    return {(r["thread_id"], r["idx"], r["subject"]) for r in rows}


def run_scores(db: Any, *, run_id: str, key: str, scorer: str) -> list[ScoreRow]:
    """Every row of ``key`` by ``scorer`` on the run's dialogues, by thread, turn and subject."""
    columns = ", ".join(f"s.{c}" for c in COLUMNS)
    return [
        ScoreRow(**r)
        for r in _query(
            db,
            f"select {columns} from {TABLE} s join dialogues d on d.thread_id = s.thread_id "
            "where d.run_id = ? and s.key = ? and s.scorer = ? order by s.thread_id, s.idx, s.subject",
            [run_id, key, scorer],
        )
    ]


def scores_of(db: Any, *, key: str, scorer: str, thread_id: str | None = None) -> list[ScoreRow]:
    """Every row of ``key`` by ``scorer`` (of one dialogue, if given), by thread, turn and subject."""
    where, params = "key = ? and scorer = ?", [key, scorer]
    if thread_id is not None:
        where, params = where + " and thread_id = ?", [*params, thread_id]
    return [
        ScoreRow(**r)
        for r in _query(
            db, f"select {', '.join(COLUMNS)} from {TABLE} where {where} order by thread_id, idx, subject", params
        )
    ]
