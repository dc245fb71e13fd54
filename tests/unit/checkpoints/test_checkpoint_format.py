"""Compact checkpoints: delta channels, short versions, compressed blobs; and threads stored the old way still work.

The old way (main at bfb0e49): ``messages`` and ``turns`` were plain reducer channels, so every
checkpoint held both whole lists; LangGraph's SQLite saver wrote its ~50-character versions and
copied the run config's metadata into every checkpoint; blobs were plain msgpack. A database
written so is built here by compiling the graph with that state schema and that saver, then read,
resumed, branched and listed with today's code.
"""

from __future__ import annotations

import asyncio
import sqlite3
import types
from contextlib import asynccontextmanager, contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

import aiosqlite
import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

import nodes.builder
from checkpoints.reducers import append_messages, merge_turn_writes, merge_turns
from checkpoints.saver import next_short_version, open_saver
from checkpoints.serde import COMPRESSED_TAG, StrictSerializer, UnsafeCheckpointError
from checkpoints.store import open_writer
from graph.running.forking import Change, read_lineage
from graph.running.playing import execute_run
from nodes.builder import build_graph
from nodes.state import ChatTurn, SeedRecord, TurnRecord
from tests.conftest import SEEDS, default_models, make_config, scripted
from tests.unit.graph.test_branching import calls, make_branch, rows

GENDER = SEEDS[0]


def _old_add(left: list, right: Any) -> list:
    return left + list(right)  # operator.add; nodes now write tuples, the stored value is the same list


class OldDialogueState(TypedDict):
    """nodes/state.py at bfb0e49: the lists were plain reducer channels."""

    seed: SeedRecord
    mode: str
    max_turns: int
    messages: Annotated[list[ChatTurn], _old_add]
    turns: Annotated[list[TurnRecord], merge_turns]
    stop_reason: NotRequired[str | None]
    error: NotRequired[str | None]
    failed_node: NotRequired[str | None]
    script: NotRequired[list[str] | None]
    next_user_message: NotRequired[str | None]


class OldSerializer(StrictSerializer):
    dumps_typed = JsonPlusSerializer.dumps_typed  # plain msgpack, never compressed


@asynccontextmanager
async def old_saver(path: Path):
    async with aiosqlite.connect(path) as conn:
        saver = AsyncSqliteSaver(conn, serde=OldSerializer())
        await saver.setup()
        yield saver


_NODES = ("user_simulator", "target", "judge", "termination", "scripted_user", "route_user", "route_after_termination")


def _untyped(fn):
    """``fn`` without its ``state`` annotation, so LangGraph takes the node's channels from the graph's schema."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k not in ("state", "return")}
    return copy


@contextmanager
def old_schema():
    """nodes.builder compiles the graph with bfb0e49's state schema while this is open."""
    saved = {name: getattr(nodes.builder, name) for name in ("DialogueState", *_NODES)}
    nodes.builder.DialogueState = OldDialogueState
    for name in _NODES:
        setattr(nodes.builder, name, _untyped(saved[name]))
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(nodes.builder, name, value)


def play_old(db: Path, models, **spec) -> str:
    """Play one dialogue exactly as bfb0e49 stored it; returns its thread id."""
    store = open_writer(db)

    async def go():
        async with old_saver(db) as saver:
            return await execute_run(
                make_config(**spec), [GENDER], graph=build_graph(saver), store=store, models=models
            )

    try:
        with old_schema():
            result = asyncio.run(go())
    finally:
        store.close()
    return result.outcomes[0].thread_id


def play_new(db: Path, models, **spec):
    store = open_writer(db)

    async def go():
        async with open_saver(db) as saver:
            return await execute_run(
                make_config(**spec), [GENDER], graph=build_graph(saver), store=store, models=models
            )

    try:
        return asyncio.run(go())
    finally:
        store.close()


def history(db: Path, thread: str, *, old: bool = False) -> list[dict[str, Any]]:
    """Every checkpoint's state values along the thread, newest first, as the graph reads them."""

    async def go():
        async with (old_saver if old else open_saver)(db) as saver:
            return [
                dict(s.values)
                async for s in build_graph(saver).aget_state_history({"configurable": {"thread_id": thread}})
            ]

    with old_schema() if old else nullcontext():
        return asyncio.run(go())


def timeless(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """States without the measured latencies (they differ between two plays of the same dialogue)."""
    return [
        {**v, "turns": [{k: x for k, x in t.items() if not k.startswith("latency")} for t in v.get("turns", [])]}
        for v in states
    ]


def checkpoint_rows(db: Path, thread: str) -> list[tuple]:
    with sqlite3.connect(db) as con:
        return con.execute(
            "select type, checkpoint, metadata from checkpoints where thread_id = ?", [thread]
        ).fetchall()


# --------------------------------------------------------------------------- reducers


def test_delta_reducers_are_batching_invariant():
    writes = [
        ({"role": "user", "content": "a"},),
        ({"role": "assistant", "content": "b"},),
        ({"role": "user", "content": "c"},),
    ]
    assert (
        append_messages(append_messages([], writes[:1]), writes[1:])
        == append_messages([], writes)
        == [m for w in writes for m in w]
    )
    parts = [
        [{"index": 1, "user_message": "q", "tokens": {"user_in": 1}}],
        [{"index": 1, "reply": "r", "tokens": {"target_in": 2}}],
        [{"index": 2, "user_message": "q2"}],
        [{"index": 1, "label": "biased"}],
    ]
    for cut in range(len(parts) + 1):
        assert merge_turn_writes(merge_turn_writes([], parts[:cut]), parts[cut:]) == merge_turn_writes([], parts)
    assert merge_turn_writes([], parts)[0] == {
        "index": 1,
        "user_message": "q",
        "reply": "r",
        "label": "biased",
        "tokens": {"user_in": 1, "target_in": 2},
    }


def test_a_message_list_turned_into_langchain_messages_is_stored_as_chat_turns():
    from langchain_core.messages import AIMessage, HumanMessage

    assert append_messages([], [[HumanMessage("hi", id="x"), AIMessage("yo", id="y")]]) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
    ]


def test_short_versions_sort_in_numeric_order_and_above_langgraph_versions():
    versions, v = [], None
    for _ in range(1200):
        v = next_short_version(v)
        versions.append(v)
    assert versions[:3] == ["a1", "a2", "a3"] and versions[9] == "b10" and versions[999] == "d1000"
    assert sorted(versions) == versions
    old = "00000000000000000000000000000042.0.123456789"
    assert next_short_version(old) is None  # an old thread keeps LangGraph's format
    assert min(versions) > old and "" < min(versions)


# --------------------------------------------------------------------------- serializer


def test_compressed_payloads_round_trip_and_plain_ones_still_load():
    serde = StrictSerializer()
    state = {
        "turns": [{"index": i, "user_message": "Why are women so emotional?" * 3, "label": "biased"} for i in range(5)]
    }
    type_, blob = serde.dumps_typed(state)
    plain = JsonPlusSerializer().dumps_typed(state)
    assert type_ == COMPRESSED_TAG and len(blob) < len(plain[1]) / 3
    assert serde.loads_typed((type_, blob)) == state == serde.loads_typed(plain)
    assert serde.dumps_typed({"n": 1})[0] == "msgpack"  # small values are not worth it


def test_compressed_payload_naming_a_forbidden_type_is_refused():
    import ormsgpack

    from checkpoints.serde import compress

    payload = ormsgpack.packb({"x": ormsgpack.Ext(0, ormsgpack.packb(("os", "system", "echo pwned")))})
    with pytest.raises(UnsafeCheckpointError, match="os.system"):
        StrictSerializer().loads_typed((COMPRESSED_TAG, compress(payload)))
    with pytest.raises(UnsafeCheckpointError, match="inflate"):
        StrictSerializer().loads_typed((COMPRESSED_TAG, b"\xff\xfe not deflate"))


def test_delta_snapshot_contents_are_checked_too():
    import ormsgpack
    from langgraph.checkpoint.serde.jsonplus import EXT_DELTA_SNAPSHOT

    evil = ormsgpack.packb([ormsgpack.Ext(0, ormsgpack.packb(("os", "system", "echo pwned")))])
    with pytest.raises(UnsafeCheckpointError, match="os.system"):
        StrictSerializer().loads_typed(
            ("msgpack", ormsgpack.packb({"messages": ormsgpack.Ext(EXT_DELTA_SNAPSHOT, evil)}))
        )
    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    serde = StrictSerializer()
    snap = _DeltaSnapshot([{"role": "user", "content": "hi"}])
    assert serde.loads_typed(serde.dumps_typed({"messages": snap})) == {"messages": snap}


# --------------------------------------------------------------------------- new threads


def test_new_checkpoints_hold_no_list_and_read_back_like_the_old_ones(tmp_path: Path):
    old_db, new_db = tmp_path / "old.db", tmp_path / "new.db"
    old_thread = play_old(old_db, default_models(), turns=4)
    new_thread = play_new(new_db, default_models(), turns=4).outcomes[0].thread_id
    assert old_thread == new_thread
    # The same fakes give the same dialogue: every checkpoint's state is the same, read either way.
    assert timeless(history(new_db, new_thread)) == timeless(history(old_db, old_thread))
    assert len(history(new_db, new_thread)[0]["messages"]) == 8

    serde = StrictSerializer()
    stored = [serde.loads_typed((t, b)) for t, b, _ in checkpoint_rows(new_db, new_thread)]
    assert not any("messages" in c["channel_values"] or "turns" in c["channel_values"] for c in stored)
    assert all(len(v) <= 4 for c in stored for v in c["channel_versions"].values())
    assert all(b'"run_id"' not in m for _, _, m in checkpoint_rows(new_db, new_thread))
    assert {t for t, _, _ in checkpoint_rows(new_db, new_thread)} == {COMPRESSED_TAG}
    # Linear: the new thread stores a fraction of the old one's checkpoint bytes.
    size = lambda db, th: sum(len(b) + len(m) for _, b, m in checkpoint_rows(db, th))  # noqa: E731
    assert size(new_db, new_thread) * 4 < size(old_db, old_thread)


def test_a_snapshot_bounds_replay_and_reads_back(tmp_path: Path, monkeypatch):
    import nodes.state

    db = tmp_path / "d.db"
    reference = tmp_path / "ref.db"
    play_new(reference, default_models(), turns=4)
    monkeypatch.setattr(nodes.state, "SNAPSHOT_EVERY", 3)  # read when the graph is compiled
    thread = play_new(db, default_models(), turns=4).outcomes[0].thread_id
    serde = StrictSerializer()
    stored = [serde.loads_typed((t, b)) for t, b, _ in checkpoint_rows(db, thread)]
    assert any("messages" in c["channel_values"] for c in stored)  # some checkpoints hold a snapshot
    monkeypatch.undo()
    assert timeless(history(db, thread)) == timeless(history(reference, thread))


# --------------------------------------------------------------------------- old threads


def test_old_thread_reads_the_same_history_with_todays_code(db: Path):
    thread = play_old(db, default_models(), turns=4)
    assert {t for t, _, _ in checkpoint_rows(db, thread)} == {"msgpack"}
    head = max(
        (StrictSerializer().loads_typed((t, b)) for t, b, _ in checkpoint_rows(db, thread)), key=lambda c: c["id"]
    )
    assert len(head["channel_values"]["messages"]) == 8  # the old format: whole lists in every checkpoint
    before = history(db, thread, old=True)
    assert history(db, thread) == before
    assert before[0]["messages"][-1]["role"] == "assistant" and len(before[0]["turns"]) == 4


def test_old_thread_failed_mid_turn_resumes_with_todays_code(db: Path):
    state = {"fail": True}

    def flaky_judge(messages, n):
        if state["fail"] and n == 3:
            raise ConnectionError("provider went away")
        return "Rationale: neutral.\nLabel: not biased"

    models = default_models(judge=scripted(flaky_judge, spec="fake:judge"))
    thread = play_old(db, models, turns=5)
    old_rows = rows(db, thread)
    assert len(old_rows) == 2  # turn 3 was played up to its judge, which failed

    state["fail"] = False
    result = play_new(db, models, turns=5)
    assert result.outcomes[0].status == "finished"
    # Turn 3's user message and reply come from the old checkpoint: only the judge is re-run for it.
    assert calls(models) == {"user": 5, "target": 5, "judge": 6}
    new_rows = rows(db, thread)
    assert [r[0] for r in new_rows] == [1, 2, 3, 4, 5] and new_rows[:2] == old_rows
    head = history(db, thread)[0]
    assert len(head["messages"]) == 10 and [t["index"] for t in head["turns"]] == [1, 2, 3, 4, 5]
    assert head["messages"][4] == {"role": "user", "content": "User question number 3?"}
    # New checkpoints on the old thread keep LangGraph's versions: one format per thread.
    serde = StrictSerializer()
    versions = {
        v for t, b, _ in checkpoint_rows(db, thread) for v in serde.loads_typed((t, b))["channel_versions"].values()
    }
    assert all(v.startswith("0") for v in versions)


@pytest.mark.parametrize("k", [1, 3, 4])
def test_old_thread_branches_at_any_turn_with_no_call_for_the_prefix(db: Path, k: int):
    parent = play_old(db, default_models(), turns=4)

    async def boundaries():
        async with open_saver(db) as saver:
            lineage = await read_lineage(build_graph(saver), parent)
            return lineage.fork_turns, dict(lineage.before_turn[k].values)

    turns, fork_values = asyncio.run(boundaries())
    assert turns == [1, 2, 3, 4]
    assert sum(m["role"] == "user" for m in fork_values["messages"]) == k - 1 == len(fork_values["turns"])

    from tests.unit.graph.test_branching import branch_models

    models = branch_models()
    branch = make_branch(db, parent, k, Change("rerun"), models=models)
    assert calls(models) == {"user": 5 - k, "target": 5 - k, "judge": 5 - k}
    ours, theirs = rows(db, branch), rows(db, parent)
    assert ours[: k - 1] == theirs[: k - 1] and len(ours) == 4
    head = history(db, branch)[0]
    assert head["messages"][: 2 * (k - 1)] == fork_values["messages"]
    assert len(head["messages"]) == 8


def test_old_rowid_tables_are_rebuilt_without_rowid_and_keep_every_row(db: Path, monkeypatch):
    import checkpoints.migrations as migrations

    with monkeypatch.context() as m:  # the file as bfb0e49 left it: LangGraph's own rowid tables
        m.setattr(
            migrations,
            "MIGRATIONS",
            [f for f in migrations.MIGRATIONS if f.__name__ != "m063_langgraph_tables_without_rowid"],
        )
        thread = play_old(db, default_models(), turns=3)
    tables = ("checkpoints", "writes")

    def layout():
        with sqlite3.connect(db) as con:
            schema = {t: con.execute("select sql from sqlite_master where name = ?", [t]).fetchone()[0] for t in tables}
            rows = {t: sorted(con.execute(f"select * from {t}").fetchall()) for t in tables}
        return schema, rows

    schema, rows = layout()
    assert not any("WITHOUT ROWID" in sql.upper() for sql in schema.values())
    before = history(db, thread, old=True)
    open_writer(db).close()
    schema, after_rows = layout()
    assert all("WITHOUT ROWID" in sql.upper() for sql in schema.values())
    assert after_rows == rows and rows["writes"]
    assert history(db, thread) == before
    # And new dialogues are played on the rebuilt tables.
    assert play_new(db, default_models(), turns=2, run_id="after").outcomes[0].status == "finished"


def test_one_trip_writes_store_the_very_rows_langgraphs_saver_stores(tmp_path: Path):
    from langgraph.checkpoint.base import empty_checkpoint

    from checkpoints.saver import DialogueSaver, LeanCheckpoints

    class Stock(LeanCheckpoints, AsyncSqliteSaver):
        """LangGraph's own aput / aput_writes (three and four trips to the connection's thread)."""

    checkpoint = {
        **empty_checkpoint(),
        "id": "1f000000-0000-6000-8000-000000000001",
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": {"messages": [{"role": "user", "content": "hi " * 40}], "mode": "implicit"},
        "channel_versions": {"messages": "a1", "mode": "a1"},
    }
    config = {
        "configurable": {
            "thread_id": "th",
            "checkpoint_ns": "",
            "checkpoint_id": "1f000000-0000-6000-8000-000000000000",
        },
        "metadata": {"run_id": "r"},
    }
    written = {"configurable": {**config["configurable"], "checkpoint_id": checkpoint["id"]}}

    async def store(saver_class) -> tuple[list, list, Any]:
        async with aiosqlite.connect(tmp_path / f"{saver_class.__name__}.db") as conn:
            saver = saver_class(conn, serde=StrictSerializer())
            assert await saver.aput(config, checkpoint, {"source": "loop", "step": 3, "parents": {}}, {}) == written
            await saver.aput_writes(
                written, [("messages", [{"role": "assistant", "content": "yes"}]), ("turns", [])], "task-1"
            )
            await saver.aput_writes(written, [("messages", ["a second write of the same task is ignored"])], "task-1")
            await saver.aput_writes(written, [("__error__", "ValueError('x')")], "task-2", "path")
            await saver.aput_writes(written, [("__error__", "ValueError('replaced')")], "task-2", "path")
            rows = [
                await (await conn.execute(f"select * from {table} order by 1, 2, 3, 4, 5")).fetchall()
                for table in ("checkpoints", "writes")
            ]
            return list(rows[0]), list(rows[1]), await saver.aget_tuple(written)

    ours, stock = asyncio.run(store(DialogueSaver)), asyncio.run(store(Stock))
    assert ours[:2] == stock[:2] and len(ours[1]) == 3
    assert ours[2].checkpoint == stock[2].checkpoint and ours[2].pending_writes == stock[2].pending_writes
