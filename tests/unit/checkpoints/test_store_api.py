"""The one reader and the one writer: reading commands never write, old layouts still read, typed writes."""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import threading
from pathlib import Path

import pytest

from checkpoints import readers
from checkpoints.deletion import delete_run
from checkpoints.paths import StoreError
from checkpoints.readers import Reader, open_reader
from checkpoints.store import Writer, open_writer
from cli import branches, compare, replay, report, runs
from cli import trace as trace_cli
from evals.scorers.judge_validation import find_validation
from graph.running.playing import StoreWriter
from tests.conftest import default_models, play

# Migrations whose changes _downgrade takes back, as a file written before them would lack them.
_LATER = ("m060_turn_leakage", "m061_judge_validations")


def _played(db: Path) -> list[str]:
    result, store = play(db, default_models(), turns=2, run_id="r1")
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return [o.thread_id for o in result.outcomes]


def _downgrade(db: Path) -> None:
    """Turn a database into one written before the last migrations (their tables and columns gone)."""
    conn = sqlite3.connect(db)
    for column in ("leakage", "leaked", "user_attempts", "leakage_detail", "target_attempts"):
        conn.execute(f"alter table turns drop column {column}")
    conn.execute("drop table judge_validations")
    conn.execute(f"delete from _migrations where name in {_LATER}")
    conn.commit()
    conn.close()


def _snapshot(db: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and mtime of the database file and its write-ahead log when it holds any (a reader may leave an
    empty one; the -shm index is not data)."""
    files = [db, db.with_name(db.name + "-wal")]
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in files if p.exists() and p.stat().st_size}


def _run(main, argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize("layout", ["current", "behind"])
def test_reading_commands_never_write_the_database(db, tmp_path, capsys, layout):
    threads = _played(db)
    if layout == "behind":
        _downgrade(db)
    before = _snapshot(db)
    out = tmp_path / "report"
    assert _run(report.main, ["--run-id", "r1", "--out", str(out), "--db", str(db), "--n-boot", "50", "--html"]) == 0
    assert "leakage" in (out / "turns.csv").read_text().splitlines()[0]
    assert _run(replay.main, [threads[0], "--print", "--db", str(db)]) == 0
    assert _run(replay.main, ["--list", "--db", str(db)]) == 0
    assert _run(replay.main, [threads[0], "--export", str(tmp_path / "t.md"), "--db", str(db)]) == 0
    assert _run(runs.main, ["--db", str(db), "list"]) == 0
    assert _run(branches.main, [threads[0], "--db", str(db)]) == 0
    assert _run(compare.main, [*threads[:2], "--db", str(db)]) == 0
    assert _run(trace_cli.main, ["list", "--db", str(db)]) == 0
    assert _run(trace_cli.main, ["show", threads[0], "--db", str(db)]) == 0
    capsys.readouterr()
    assert _snapshot(db) == before
    with sqlite3.connect(db) as conn:  # still behind: nothing migrated the file
        applied = {r[0] for r in conn.execute("select name from _migrations")}
    assert (set(_LATER) <= applied) == (layout == "current")


@pytest.mark.parametrize("copy_in", ["memory", "a temporary file"])
def test_an_old_layout_reads_through_a_migrated_copy(db, tmp_path, monkeypatch, copy_in):
    threads = _played(db)
    _downgrade(db)
    before = _snapshot(db)
    if copy_in == "a temporary file":  # as for a store larger than the in-memory limit
        monkeypatch.setattr(readers, "MEMORY_COPY_BYTES", 0)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
        (tmp_path / "tmp").mkdir()
    with open_reader(db) as reader:
        assert "judge_validations" not in reader.file_tables and "judge_validations" in reader.table_names()
        turns = reader.turns(threads[0])
        assert [t["idx"] for t in turns] == [1, 2] and all(t["leakage"] is None for t in turns)
        assert reader.get_run("r1")["status"] == "finished"
        assert reader.dialogue(threads[0]).turns[0].reply
        assert (reader.conn.execute("pragma database_list").fetchone()[2] == "") is (copy_in == "memory")
    assert _snapshot(db) == before
    assert copy_in == "memory" or not list((tmp_path / "tmp").iterdir())  # the temporary copy is gone


def test_the_reader_cannot_write(db):
    _played(db)
    with open_reader(db) as reader:
        assert isinstance(reader, Reader) and not hasattr(reader, "upsert_dialogue")
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.conn.execute("delete from runs")
    with pytest.raises(StoreError, match="no database"):
        open_reader(db.parent / "absent.db")


def test_writer_runs_dialogues_sets_and_deletion(backend_db):
    store = open_writer(backend_db)
    assert isinstance(store, Writer)
    store.start_run("r1", config={"spec": {}}, prompt_hashes={}, versions={})
    store.upsert_dialogue("a", run_id="r1", max_turns=2, status="finished")
    store.upsert_dialogue("b", run_id="r2", max_turns=2, status="paused", parent_thread_id="a", fork_turn=2)
    store.record_turns("a", [{"index": 1, "user_message": "u", "reply": "r", "label": "biased"}])
    assert store.labels("a") == ["biased", None] and store.labels("b") == [None, None]
    assert [c["thread_id"] for c in store.children("a")] == ["b"] and store.divergence_turn("a", "b") == 2
    store.add_set("s", run_id="r2", parent_run_id="r1", fork_turn=2, change={"kind": "rerun"})
    store.add_set("s", run_id="other", parent_run_id=None, fork_turn=1, change={})  # the first description stays
    store.add_set_member("s", "b", "a")
    assert store.get_set("s")["run_id"] == "r2" and [m["thread_id"] for m in store.set_members("s")] == ["b"]
    store.start_run("r2", config={}, prompt_hashes={}, versions={})
    assert store.refresh_run_status("r2") == "paused" and store.get_run("r2")["status"] == "paused"
    store.finish_run("r1", "finished")
    assert store.get_run("r1")["status"] == "finished" and store.get_run("r1")["ended_at"]
    assert store.threads_of_run("r1") == ["a", "b"]  # the branch belongs to another run but descends from r1
    counts = delete_run(store, "r1")
    assert counts["dialogues"] == 2 and counts["runs"] == 1 and store.get_dialogue("b") is None
    store.close()


def test_writer_label_sets_and_validations(backend_db):
    class Interval:
        def __init__(self, value: float) -> None:
            self.value, self.low, self.high = value, value - 0.1, value + 0.1

    class Result:
        n_items, n_compared, accuracy, ac1, kappa = 10, 9, Interval(0.9), Interval(0.8), Interval(0.7)
        tp, fp, fn, tn = 5, 1, 0, 3  # the confusion counts judge-corrected rates rest on

    store = open_writer(backend_db)
    store.start_run("r1", config={}, prompt_hashes={}, versions={})
    for model in ("fake:a", "fake:b"):  # an existing set is kept
        store.add_label_set(
            "r1", "bias", "x", model=model, model_id=None, prompt="p", prompt_hash="h", content_free_p_yes=None
        )
    assert [(r["name"], r["model"]) for r in store.query("select * from label_sets")] == [("x", "fake:a")]
    store.record_validation(judge_model="fake:a", prompt_hash="h", file="f.csv", file_sha256="0" * 64, result=Result())
    assert (
        find_validation(store, "fake:a", "h")["accuracy"] == 0.9 and find_validation(store, "fake:a", "other") is None
    )
    assert [find_validation(store, "fake:a", "h")[k] for k in ("tp", "fp", "fn", "tn")] == [5, 1, 0, 3]
    store.close()


def test_store_writer_methods_are_typed_and_run_on_its_thread(backend_db):
    store = open_writer(backend_db)
    seen: list[str] = []
    original = store.upsert_dialogue

    def spy(thread_id, **fields):
        seen.append(threading.current_thread().name)
        original(thread_id, **fields)

    store.upsert_dialogue = spy  # type: ignore[method-assign]

    async def go():
        write = StoreWriter(store)
        await write.start_run("r1", config={}, prompt_hashes={}, versions={})
        await write.upsert_dialogue("t", run_id="r1", max_turns=1, status="running")
        await write.record_turns("t", [{"index": 1, "user_message": "u", "reply": "r", "label": "not biased"}])
        row = await write.get_dialogue("t")
        await write.finish_run("r1", "finished")
        write.close()
        return row

    row = asyncio.run(go())
    assert row["status"] == "running" and seen and all(name.startswith("store") for name in seen)
    assert store.turns("t")[0]["label"] == "not biased" and store.get_run("r1")["status"] == "finished"
    store.close()


def test_a_dialogue_record_holds_each_of_its_dialogues_columns_as_stored(db):
    store = open_writer(db)
    store.start_run("r1", config={"spec": {}}, prompt_hashes={}, versions={})
    store.upsert_dialogue("a", run_id="r1", max_turns=2, status="finished", category="age", statement="S.")
    store.upsert_dialogue(
        "b", run_id="r1", max_turns=2, status="paused", parent_thread_id="a", fork_turn=2, change='{"kind": "rerun"}'
    )
    store.record_turns("b", [{"index": 1, "user_message": "u", "reply": "r", "label": "biased"}])
    columns = {c.name for c in store.db.table("dialogues").columns}
    store.close()
    with open_reader(db) as reader:
        record = reader.dialogue("b")
        (summary,) = reader.branches("a")
    computed = {"label_set", "run_config", "turns", "branches", "coherence", "labels"}
    for kept in (record, summary):  # every other field is a column of the row (none silently empty)
        assert {f for f in type(kept).__dataclass_fields__} - computed <= columns
    assert (record.thread_id, record.run_id, record.status, record.parent_thread_id, record.fork_turn) == (
        "b",
        "r1",
        "paused",
        "a",
        2,
    )
    assert record.change == {"kind": "rerun"} and summary.change == {"kind": "rerun"}
    assert (summary.thread_id, summary.mode, summary.max_turns, summary.labels) == ("b", None, 2, ("biased", None))
