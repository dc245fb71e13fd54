"""The project's own tables on a real PostgreSQL server: the same reader and writer, the same answers as on SQLite."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from checkpoints import scores
from checkpoints.cache import ResponseCache, request_key
from checkpoints.deletion import clear_cache, delete_run
from checkpoints.location import parse_postgres_url
from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError
from checkpoints.postgres.db import translate
from checkpoints.readers import open_reader
from checkpoints.store import open_writer
from checkpoints.traces import tables as traces
from tests.conftest import default_models, play

# What differs between two plays of the same run (clocks, timings), left out when comparing backends.
_VOLATILE = {"started_at", "ended_at", "latency_user", "latency_target", "latency_judge", "created_at"}


def _stable(value: Any) -> Any:
    """A record as plain data without clock times and latencies."""
    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    return value


def _pg_rows(url: str, query: str, *params: Any) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(query, params).fetchall()


def test_placeholders_and_identifiers_translate_outside_literals():
    sql = "select * from [t] where a = ? and b = :name and c like 'guard_%' and d::text = 'a?b :x' and e = 'it''s ?'"
    assert translate(sql) == (
        "select * from \"t\" where a = %s and b = %(name)s and c like 'guard_%%' and d::text = 'a?b :x' and e = "
        "'it''s ?'"
    )
    assert translate("BEGIN IMMEDIATE") == "BEGIN"


def test_a_fake_model_run_reads_back_the_same_on_postgres_as_on_sqlite(tmp_path: Path, pg_url: str):
    read: dict[str, Any] = {}
    for name, location in (("sqlite", tmp_path / "d.db"), ("postgres", pg_url)):
        result, store = play(location, default_models(), turns=3, run_id="r1")
        assert {o.status for o in result.outcomes} == {"finished"}
        store.close()
        with open_reader(location) as reader:
            threads = reader.thread_ids()
            read[name] = {
                "runs": reader.run_ids(),
                "summaries": _stable(reader.summaries()),
                "dialogues": [_stable(reader.dialogue(t)) for t in threads],
                "matrix": reader.label_matrix("r1"),
                "scored": _stable(reader.scored_turns("r1", label_set="primary", classifier=None)),
                "tokens": reader.token_rows(run_id="r1"),
                "label_sets": reader.label_sets(),
                "traces": [(t["thread_id"], t["model_calls"], t["status"]) for t in traces.list_traces(reader.db)],
                "runs_of_trace": len(traces.stored_runs(reader.db, thread_id=threads[0])),
            }
    pg, lite = read["postgres"], read["sqlite"]
    assert pg == lite
    assert len(pg["dialogues"]) == 2 and [len(d["turns"]) for d in pg["dialogues"]] == [3, 3]
    assert all(t["label"] == "not_biased" and t["reply"] for d in pg["dialogues"] for t in d["turns"])
    assert pg["traces"] and pg["runs_of_trace"] > 3  # traces stored as compact chunks (bytea) and decoded back
    # The checkpoints sit beside the project's tables, in the same database.
    assert _pg_rows(pg_url, "select count(distinct thread_id) from checkpoints")[0][0] == 2


def test_writes_are_idempotent_so_a_retried_job_is_harmless(pg_url: str):
    store = open_writer(pg_url)
    store.start_run("r1", config={}, prompt_hashes={}, versions={})
    store.start_run("r1", config={}, prompt_hashes={}, versions={})  # a job that starts again
    for attempt in ("first", "retry"):
        store.upsert_dialogue("t", run_id="r1", max_turns=2, status="running")
        store.record_turns(
            "t",
            [
                {"index": 1, "user_message": "u", "reply": f"r-{attempt}", "label": "biased"},
                {"index": 2, "user_message": "u2", "reply": "r2", "label": "not_biased"},
            ],
        )
        store.record_scores([scores.ScoreRow("t", 1, scores.REFUSAL, "clf", value=scores.REFUSED)])
    assert [(r["idx"], r["reply"], r["label"]) for r in store.turns("t")] == [
        (1, "r-retry", "biased"),
        (2, "r2", "not_biased"),
    ]
    assert _pg_rows(pg_url, "select count(*) from turns")[0][0] == 2
    assert _pg_rows(pg_url, "select count(*) from scores")[0][0] == 3
    assert _pg_rows(pg_url, "select count(*) from runs")[0][0] == 1
    with open_reader(pg_url) as reader:
        assert reader.refusals("t")[1][0].refused is True
    store.close()


def test_the_schema_is_created_once_by_concurrent_writers_and_a_newer_one_is_refused(pg_url: str):
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def open_one() -> None:
        barrier.wait()
        try:
            open_writer(pg_url).close()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    workers = [threading.Thread(target=open_one) for _ in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert _pg_rows(pg_url, "select name from _migrations order by name") == [
        ("pg001_schema",),
        ("pg002_plays",),
        ("pg003_validation_counts",),
        ("pg004_turn_non_reply",),
        ("pg005_validation_items",),
        ("pg006_turn_reasoning",),
        ("pg007_run_players",),
    ]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("insert into _migrations values ('pg999_future', 'later')")
    with pytest.raises(SchemaTooNewError, match="pg999_future"):
        open_writer(pg_url)
    with pytest.raises(SchemaTooNewError, match="pg999_future"):
        open_reader(pg_url)


def test_the_reader_never_writes_and_an_empty_database_is_no_store(pg_url: str):
    with pytest.raises(StoreError, match="holds no DyMT-ESB dialogues") as caught:
        open_reader(pg_url)
    assert "pg" not in caught.value.args[0].split("PostgreSQL at ")[0]
    with pytest.raises(StoreError, match="holds no DyMT-ESB dialogues"):
        open_writer(pg_url, create=False)
    assert _pg_rows(pg_url, "select count(*) from pg_tables where schemaname = 'public'")[0][0] == 0  # nothing made
    open_writer(pg_url).close()
    with open_reader(pg_url) as reader:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            reader.conn.execute("delete from runs")


def test_a_run_is_deleted_with_its_checkpoints(pg_url: str):
    result, store = play(pg_url, default_models(), turns=2, run_id="r1")
    threads = [o.thread_id for o in result.outcomes]
    counts = delete_run(store, "r1")
    assert counts["dialogues"] == 2 and counts["turns"] == 4 and counts["checkpoint threads"] == 2
    for table in (
        "checkpoints",
        "checkpoint_writes",
        "checkpoint_blobs",
        "turns",
        "scores",
        "trace_index",
        "trace_chunks",
    ):
        assert _pg_rows(pg_url, f"select count(*) from {table}")[0][0] == 0, table
    assert store.get_dialogue(threads[0]) is None
    store.close()


def _reply(text: str) -> ChatResult:
    return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


def test_the_response_cache_lives_in_the_same_postgres_database(pg_url: str):
    url = parse_postgres_url(pg_url)
    first, second = ResponseCache(url), ResponseCache(url)  # two workers
    key = request_key({"spec": "fake:x"}, [])
    assert first.get(key) is None
    assert first.put(key, _reply("one"), spec="fake:x")
    assert second.put(key, _reply("two"), spec="fake:x")  # the first stored reply of a key wins
    assert second.get(key).generations[0].message.content == "one"
    assert first.put_later(request_key({"spec": "fake:y"}, []), _reply("y"), spec="fake:y")
    assert first.entries_by_spec() == {"fake:x": 1, "fake:y": 1}
    first.close()
    second.close()
    assert _pg_rows(pg_url, "select octet_length(key) from response_cache") == [(16,), (16,)]
    store = open_writer(pg_url)
    assert clear_cache(store) == 2
    store.close()


def test_a_database_set_up_before_plays_were_recorded_gets_the_table_on_open(pg_url: str):
    open_writer(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # as the previous version left it
        conn.execute("drop table dialogue_plays")
        conn.execute("delete from _migrations where name = 'pg002_plays'")
    open_writer(pg_url).close()
    assert _pg_rows(pg_url, "select count(*) from dialogue_plays") == [(0,)]
    assert _pg_rows(pg_url, "select name from _migrations order by name") == [
        ("pg001_schema",),
        ("pg002_plays",),
        ("pg003_validation_counts",),
        ("pg004_turn_non_reply",),
        ("pg005_validation_items",),
        ("pg006_turn_reasoning",),
        ("pg007_run_players",),
    ]
