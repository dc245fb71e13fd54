"""Compact traces: what is decoded is exactly what the tracer saw; old plain rows still read; streams survive kills."""

from __future__ import annotations

import datetime as dt
import functools
import json
import zlib

import pytest

import checkpoints.traces.tables as traces
from checkpoints.redaction import Redactor, _json_default
from checkpoints.reducers import apply_update
from checkpoints.traces.decoder import TraceDecoder, decode_stream
from checkpoints.traces.encoder import TraceEncoder
from checkpoints.traces.tables import (
    RUN_COLUMNS,
    RUN_JSON_COLUMNS,
    list_traces,
    load_feedback,
    load_runs,
    resolve,
    stored_runs,
)
from cli import trace as trace_cli
from tests.conftest import SEEDS, default_models, play

PLAIN = (
    "id",
    "trace_id",
    "parent_run_id",
    "dotted_order",
    "run_type",
    "name",
    "error",
    "model",
    "turn",
    "role",
    "node",
)


def _json(value):
    """As the plain layout stored a value: JSON, prompt messages in LangChain's serialised form."""
    from langchain_core.load import dumpd

    from checkpoints.traces.encoder import LazyMessages

    def plain(v):
        if isinstance(v, LazyMessages):
            return [dumpd(m) for m in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    return json.loads(Redactor({}).json(plain(value))) if value is not None else None


def _router_rows(node: dict) -> list[dict]:
    """The rows of a node's routers, as the tracer hands them over inside the node's row (nodes.builder.Router)."""
    rows = []
    for run_id, name, inputs, choice, started, ended, tags, error in node.get("routes") or ():
        own = started.strftime("%Y%m%dT%H%M%S%fZ") + run_id
        rows.append(
            {
                **node,
                "id": run_id,
                "parent_run_id": node["id"],
                "dotted_order": f"{node['dotted_order']}.{own}",
                "run_type": "chain",
                "name": name,
                "start_time": started,
                "end_time": ended,
                "latency": (ended - started).total_seconds(),
                "inputs": inputs,
                "outputs": {"output": choice},
                "error": error,
                "prompt_tokens": None,
                "completion_tokens": None,
                "model": None,
                "tags": tags,
                "extra": {},
            }
        )
    return rows


@pytest.mark.parametrize("interval", [0.0, 60.0])
def test_decoded_runs_are_exactly_what_the_tracer_saw(db, monkeypatch, interval):
    seen: list[dict] = []
    original = traces.write_trace_batch

    def spy(store, encoder, items, final=False, **kwargs):
        for item in items:
            if item[0] == "run":
                seen.append(item[1])
                seen.extend(_router_rows(item[1]))
        return original(store, encoder, items, final, **kwargs)

    monkeypatch.setattr("checkpoints.traces.tables.write_trace_batch", spy)
    monkeypatch.setattr("graph.tracing.tracer.FLUSH_INTERVAL", interval)
    _, store = play(db, default_models(), seeds=SEEDS[:2], turns=3)
    decoded = {row["id"]: row for row in stored_runs(store.db)}
    assert len(seen) == len(decoded) == 2 * (1 + 3 * 9)  # a turn: 4 nodes, 3 model calls, 2 routers
    assert sum(row["name"] in ("after_target", "route_after_termination") for row in seen) == 2 * 3 * 2
    for row in seen:
        got = decoded[row["id"]]
        assert {k: got[k] for k in PLAIN} == {k: row[k] for k in PLAIN}
        assert got["start_time"] == row["start_time"].isoformat() and got["end_time"] == row["end_time"].isoformat()
        assert got["latency"] == row["latency"]
        assert got["status"] == "success"
        assert (got["prompt_tokens"], got["completion_tokens"]) == (row["prompt_tokens"], row["completion_tokens"])
        for column in RUN_JSON_COLUMNS:
            assert got[column] == _json(row[column]), (row["name"], column)
        assert got["thread_id"] == row["metadata"]["thread_id"] and got["run_id"] == row["metadata"]["run_id"]
        assert got["step"] == row["metadata"].get("langgraph_step")
        assert got["checkpoint_ns"] == row["metadata"].get("langgraph_checkpoint_ns")
    # Node states are stored once, not in each of the nine runs of a turn: far below the plain layout.
    plain = sum(len(json.dumps(_json(row[c]))) for row in seen for c in RUN_JSON_COLUMNS)
    stored = store.db.execute("select sum(length(data)) from trace_chunks").fetchone()[0]
    assert stored * 10 < plain


def test_old_plain_rows_still_read_beside_compact_ones(db, capsys):
    """A database written before compact traces has its runs in trace_runs / trace_feedback: still listed and shown."""
    result, store = play(db, default_models(), seeds=SEEDS[:2], turns=2)
    old_thread, new_thread = (o.thread_id for o in result.outcomes)
    [old_trace] = resolve(store.db, old_thread)[1]
    before_runs = load_runs(store.db, [old_trace])
    before_feedback = load_feedback(store.db, [old_trace])
    before_summary = list_traces(store.db, thread_id=old_thread)
    # Rewrite one thread as the previous version stored it: plain rows, JSON as text, feedback rows.
    rows = [tuple(json.dumps(run[c]) if c in RUN_JSON_COLUMNS else run[c] for c in RUN_COLUMNS) for run in before_runs]
    with store.transaction():
        store.db.conn.executemany(
            f"insert into trace_runs ({', '.join(RUN_COLUMNS)}) values ({', '.join('?' for _ in RUN_COLUMNS)})", rows
        )
        for on_run in before_feedback.values():
            for f in on_run:
                store.db["trace_feedback"].insert({**f, "extra": json.dumps(f["extra"])})
        store.db.execute("delete from trace_chunks where trace_id = ?", [old_trace])
        store.db.execute("delete from trace_index where trace_id = ?", [old_trace])
    assert store.db["trace_runs"].count == len(before_runs)

    assert load_runs(store.db, [old_trace]) == before_runs
    assert load_feedback(store.db, [old_trace]) == before_feedback
    assert list_traces(store.db, thread_id=old_thread) == before_summary
    assert {t["thread_id"] for t in list_traces(store.db)} == {old_thread, new_thread}
    # a prefix past the UUIDv7's millisecond clock (its first 12 hex digits), where two traces begun in the same
    # milliseconds still differ
    assert resolve(store.db, old_trace[:23]) == ("trace", [old_trace])
    assert trace_cli.main(["show", old_thread, "--db", str(db)]) == 0
    assert "bias: ✓ not biased" in capsys.readouterr().out


def test_a_run_id_finds_its_trace(db):
    _, store = play(db, default_models(), seeds=SEEDS[:2], turns=1)
    run = next(r for r in stored_runs(store.db) if r["run_type"] == "llm")
    assert resolve(store.db, run["id"]) == ("trace", [run["trace_id"]])
    # A stream stored before lines were written compact (json.dumps's spaced separators) is found too.
    conn = store.db.conn
    data = b"".join(
        r[0] for r in conn.execute("select data from trace_chunks where trace_id = ? order by seq", [run["trace_id"]])
    )
    spaced = "".join(
        json.dumps(json.loads(line), ensure_ascii=False) + "\n" for line in zlib.decompress(data).decode().splitlines()
    )
    with conn:
        conn.execute("delete from trace_chunks where trace_id = ?", [run["trace_id"]])
        conn.execute(
            "insert into trace_chunks (trace_id, seq, data) values (?, 0, ?)",
            [run["trace_id"], zlib.compress(spaced.encode())],
        )
    assert f'"id": "{run["id"]}"' in spaced
    assert resolve(store.db, run["id"]) == ("trace", [run["trace_id"]])


def _codec(states=None):
    redactor = Redactor({"MY_API_KEY": "sk-canary-0123456789abcdef"})
    encoder = TraceEncoder(
        "t-1", fold=apply_update, redact=redactor.json_text, redact_text=redactor.text, default=_json_default
    )
    return encoder, TraceDecoder("t-1", fold=apply_update)


def _row(run_id, start, *, parent=None, parent_dotted=None, inputs=None, outputs=None, metadata=None):
    own = start.strftime("%Y%m%dT%H%M%S%fZ") + run_id
    return {
        "id": run_id,
        "trace_id": "t-1",
        "parent_run_id": parent,
        "parent_dotted_order": parent_dotted,
        "dotted_order": f"{parent_dotted}.{own}" if parent else own,
        "run_type": "chain",
        "name": run_id,
        "start_time": start,
        "end_time": start + dt.timedelta(milliseconds=5),
        "latency": 0.005,
        "inputs": inputs,
        "outputs": outputs,
        "error": None,
        "prompt_tokens": None,
        "completion_tokens": None,
        "model": None,
        "turn": 1,
        "role": None,
        "node": None,
        "metadata": metadata or {"thread_id": "th"},
        "tags": [],
        "extra": {},
    }


def test_values_that_look_like_references_and_secrets_round_trip():
    encoder, decoder = _codec()
    t0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
    tricky = {
        "a": {"$s": 0},
        "b": {"$state": 0},
        "c": {"$d": 1, "v": "x"},
        "d": {"$lit": {}},
        "long": "line one is long enough to be interned as a string\n" * 5,
        "again": "z" * 50,
        "twice": "z" * 50,
        "key": "sent sk-canary-0123456789abcdef along",
        "api_key": "y" * 60,
        "later": "y" * 60,
    }
    start = encoder.start(start_time=t0, metadata={"thread_id": "th"}, state=None)
    run = encoder.run(_row("r1", t0, inputs=tricky, outputs={"ok": True}), is_node=False)
    data = encoder.encode([start, run], final=True)
    assert b"canary" not in zlib.decompress(data)
    [got], _ = decoder.decode(decode_stream([data]))
    expected = dict(tricky, key="sent [redacted:MY_API_KEY] along", api_key="[redacted]", later="[redacted]")
    assert got["inputs"] == expected and got["outputs"] == {"ok": True}


def test_a_stream_cut_by_a_killed_writer_keeps_its_complete_records():
    encoder, decoder = _codec()
    t0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
    state = {"messages": [], "turns": []}
    first = encoder.encode(
        [
            encoder.start(start_time=t0, metadata={"thread_id": "th"}, state=state),
            encoder.run(
                _row("r1", t0, inputs=state, outputs={"messages": [{"role": "user", "content": "hi"}]}), is_node=True
            ),
        ]
    )
    second = encoder.encode(
        [
            encoder.run(
                _row(
                    "r2",
                    t0 + dt.timedelta(seconds=1),
                    inputs={"messages": [{"role": "user", "content": "hi"}], "turns": []},
                    outputs=None,
                ),
                is_node=False,
            )
        ]
    )
    records = decode_stream([first, second[: len(second) // 2]])
    runs, _ = decoder.decode(records)
    assert [r["id"] for r in runs] == ["r1"] and runs[0]["inputs"] == state
    # Whole, the second run's input is the first node's output folded into its input state.
    runs, _ = TraceDecoder("t-1", fold=apply_update).decode(decode_stream([first, second]))
    assert runs[1]["inputs"] == {"messages": [{"role": "user", "content": "hi"}], "turns": []}
    assert (
        json.dumps(records[1]["in"]) == '{"$state": 0}'
        and json.dumps(decode_stream([first, second])[2]["in"]) == '{"$state": 1}'
    )


def test_model_calls_stored_as_patches_decode_to_what_was_seen():
    """A model call is stored as what changed since the last call of its role: keys added, removed, retyped, lists
    grown, values that look like patches, a call equal to the last; each decodes to its own objects."""
    encoder, decoder = _codec()
    t0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
    outputs = [
        {
            "generations": [[{"text": "a", "info": {"n": 1, "gone": True}}]],
            "llm_output": {"id": "x-1"},
            "type": "LLMResult",
        },
        {"generations": [[{"text": "b", "info": {"n": 2, "new": [1, 2]}}]], "llm_output": None, "type": "LLMResult"},
        {
            "generations": [[{"text": "b", "info": {"n": 2, "new": [1, 2, 3]}}], []],
            "llm_output": {"$p": {"x": 1}},
            "type": "LLMResult",
        },
        {
            "generations": [[{"text": "b", "info": {"n": 2, "new": [1, 2, 3]}}], []],
            "llm_output": {"$p": {"x": 1}},
            "type": "LLMResult",
        },
        {
            "generations": [[{"text": "c", "info": {"n": True, "new": {"$pl": []}}}], []],
            "llm_output": {"$x": []},
            "type": 7,
        },
    ]
    extras = [{"invocation_params": {"seed": i, "model": "m"}, "batch_size": 1} for i in (1, 2, 2, 3, 3)]
    records = [encoder.start(start_time=t0, metadata={"thread_id": "th"}, state=None)]
    for i, (out, extra) in enumerate(zip(outputs, extras)):
        row = dict(_row(f"m{i}", t0 + dt.timedelta(seconds=i), outputs=out), run_type="llm", name="Model", extra=extra)
        records.append(encoder.run(row, is_node=False))
    data = encoder.encode(records, final=True)
    text = zlib.decompress(data).decode()
    assert text.count('"out":{"$p"') == 4 and '"x":{"$p":{}}' in text  # the 4th call is the 3rd again
    runs, _ = decoder.decode(decode_stream([data]))
    assert [r["outputs"] for r in runs] == outputs and [r["extra"] for r in runs] == extras
    assert runs[4]["outputs"]["generations"][0][0]["info"]["n"] is True
    assert runs[3]["outputs"]["generations"] is not runs[2]["outputs"]["generations"]
    assert runs[3]["extra"]["invocation_params"] is not runs[2]["extra"]["invocation_params"]


def test_routers_recorded_in_their_nodes_read_as_traced_routers_would(db, tmp_path, monkeypatch):
    """Routers are not LangChain runs unless LangSmith traces (nodes.builder.Router); their stored runs then read
    exactly as those of routers traced through callbacks, but for ids, times and LangGraph's task namespaces."""
    routers = ("after_target", "route_after_termination")
    volatile = ("langgraph_checkpoint_ns", "checkpoint_ns")

    def steady(value):  # without the latencies measured in the run
        if isinstance(value, dict):
            return {k: steady(v) for k, v in value.items() if not k.startswith("latency")}
        return [steady(v) for v in value] if isinstance(value, list) else value

    def router_runs(store) -> list[dict]:
        runs = stored_runs(store.db)
        by_id = {r["id"]: r for r in runs}
        return [
            {
                **{
                    k: r[k]
                    for k in (
                        "name",
                        "run_type",
                        "status",
                        "outputs",
                        "error",
                        "tags",
                        "turn",
                        "role",
                        "node",
                        "step",
                        "extra",
                        "model",
                        "prompt_tokens",
                    )
                },
                "inputs": steady(r["inputs"]),
                "metadata": {k: v for k, v in r["metadata"].items() if k not in volatile},
                "parent": by_id[r["parent_run_id"]]["name"],
                "under_parent": r["dotted_order"].startswith(by_id[r["parent_run_id"]]["dotted_order"] + "."),
            }
            for r in runs
            if r["name"] in routers
        ]

    _, light = play(db, default_models(), seeds=SEEDS[:1], turns=2)
    import tests.conftest

    monkeypatch.setattr(
        tests.conftest, "build_graph", functools.partial(tests.conftest.build_graph, traced_routers=True)
    )
    _, traced = play(tmp_path / "traced.db", default_models(), seeds=SEEDS[:1], turns=2)
    expected = router_runs(traced)
    assert [r["name"] for r in expected] == ["after_target", "route_after_termination"] * 2
    assert router_runs(light) == expected
    assert all(r["under_parent"] for r in expected)


def test_a_nodes_routers_decode_as_runs_of_their_own():
    """Routers recorded inside their node's record: a choice, an input that is not a known state, an error."""
    encoder, decoder = _codec()
    t0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
    state = {"messages": [], "turns": []}
    update = {"messages": [{"role": "user", "content": "hi"}]}
    after = {"messages": [{"role": "user", "content": "hi"}], "turns": []}
    at = lambda ms: t0 + dt.timedelta(milliseconds=ms)  # noqa: E731
    node = _row(
        "n1",
        at(1),
        parent="root",
        parent_dotted="x",
        inputs=state,
        outputs=update,
        metadata={"thread_id": "th", "langgraph_step": 1},
    )
    node["routes"] = [
        ("r-ok", "after_user", after, "target", at(2), at(3), ["seq:step:3"], None),
        ("r-odd", "odd", {"other": 1}, "__end__", at(4), at(5), [], None),
        ("r-bad", "broken", after, None, at(6), at(7), [], "ValueError('no route')"),
    ]
    data = encoder.encode(
        [encoder.start(start_time=t0, metadata={"thread_id": "th"}, state=state), encoder.run(node, is_node=True)],
        final=True,
    )
    assert encoder.summary["errors"] == 1
    runs, _ = decoder.decode(decode_stream([data]))
    by_id = {r["id"]: r for r in runs}
    assert [r["id"] for r in runs] == ["n1", "r-ok", "r-odd", "r-bad"]
    ok, odd, bad = by_id["r-ok"], by_id["r-odd"], by_id["r-bad"]
    assert (ok["parent_run_id"], ok["name"], ok["inputs"], ok["outputs"], ok["tags"], ok["status"]) == (
        "n1",
        "after_user",
        after,
        {"output": "target"},
        ["seq:step:3"],
        "success",
    )
    assert ok["metadata"] == by_id["n1"]["metadata"] and ok["metadata"] is not by_id["n1"]["metadata"]
    assert ok["dotted_order"] == by_id["n1"]["dotted_order"] + "." + at(2).strftime("%Y%m%dT%H%M%S%fZ") + "r-ok"
    assert (ok["start_time"], ok["latency"]) == (at(2).isoformat(), 0.001)
    assert odd["inputs"] == {"other": 1} and odd["outputs"] == {"output": "__end__"}
    assert (bad["outputs"], bad["error"], bad["status"]) == ({}, "ValueError('no route')", "error")
