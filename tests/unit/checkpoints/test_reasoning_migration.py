"""Migrations m069_turn_reasoning (SQLite) and pg006_turn_reasoning (PostgreSQL): a store set up before turns kept a
target's reasoning gets the two columns when it opens, its turns read back without reasoning, and a thinking target's
next run stores its reasoning beside the reply."""

from __future__ import annotations

from pathlib import Path

from checkpoints.readers import open_reader
from checkpoints.store import open_writer
from tests.conftest import default_models, play, scripted
from tests.support.backends import execute, is_postgres, rows


def _old_store(db: Path | str) -> None:
    """A store with a finished run, in the layout written before the reasoning columns (the two dropped again)."""
    _, store = play(db, default_models(), turns=2, run_id="old")
    store.close()
    execute(db, "alter table turns drop column reasoning")
    execute(db, "alter table turns drop column reasoning_carrier")
    name = "pg006_turn_reasoning" if is_postgres(db) else "m069_turn_reasoning"
    assert execute(db, "delete from _migrations where name = ?", [name]) == 1


def _columns(db: Path | str) -> set[str]:
    if is_postgres(db):
        found = rows(db, "select column_name from information_schema.columns where table_name = 'turns'")
    else:
        found = rows(db, "select name from pragma_table_info('turns')")
    return {name for (name,) in found}


def _migrations(db: Path | str) -> set[str]:
    return {name for (name,) in rows(db, "select name from _migrations")}


def test_an_older_store_gets_the_reasoning_columns_and_keeps_its_turns(backend_db) -> None:
    _old_store(backend_db)
    assert not {"reasoning", "reasoning_carrier"} & _columns(backend_db)
    if not is_postgres(backend_db):
        # The read-only reader reads an older file through a migrated copy: the file itself stays as it was.
        with open_reader(backend_db) as reader:
            (thread, *_) = reader.thread_ids()
            assert [t.reasoning for t in reader.dialogue(thread).turns] == [None, None]
        assert "m069_turn_reasoning" not in _migrations(backend_db)
    open_writer(backend_db).close()
    assert {"reasoning", "reasoning_carrier"} <= _columns(backend_db)
    assert ("pg006_turn_reasoning" if is_postgres(backend_db) else "m069_turn_reasoning") in _migrations(backend_db)

    thinking = scripted(lambda m, n: f"<think>Private step {n}.</think>Visible answer {n}.", spec="fake:thinker")
    _, store = play(backend_db, default_models(target=thinking), turns=2, run_id="new")
    store.close()
    with open_reader(backend_db) as reader:
        turns = {
            run: [t for d in (reader.dialogue(x) for x in reader.thread_ids()) if d.run_id == run for t in d.turns]
            for run in ("old", "new")
        }
    assert len(turns["old"]) == len(turns["new"]) == 4
    assert all(t.reply.startswith("Assistant answer number") for t in turns["old"])
    assert {(t.reasoning, t.reasoning_carrier) for t in turns["old"]} == {(None, None)}
    assert all(t.reply.startswith("Visible answer") and "Private" not in t.reply for t in turns["new"])
    assert {t.reasoning_carrier for t in turns["new"]} == {"tags in the text"}
    assert all(t.reasoning.startswith("Private step") for t in turns["new"])
