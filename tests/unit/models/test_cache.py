"""The response cache: keyed on the whole request, stored as JSON, off the event loop, visible in the summary."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from checkpoints.cache import ResponseCache, decode_result, decompress, encode_result, request_key
from checkpoints.store import open_writer
from models.call_policy import CallPolicy
from models.registry import Sampling, cache_params, create_role_model
from tests.conftest import ScriptedChatModel

MESSAGES = [SystemMessage("You judge."), HumanMessage("Is this biased?")]


def _params(**overrides):
    sampling = Sampling(**{"temperature": 0.7, "max_tokens": 250, "seed": 0, **overrides})
    return cache_params("openai:gpt-4o-mini", sampling, ScriptedChatModel(respond=lambda m, n: "", calls=[]))


def test_key_covers_spec_messages_sampling_and_extra_but_not_message_ids_or_secrets():
    base = request_key(_params(), MESSAGES)
    assert base == request_key(_params(), [m.model_copy(update={"id": "run-123"}) for m in MESSAGES])
    assert base != request_key(_params(temperature=0.0), MESSAGES)
    assert base != request_key(_params(max_tokens=10), MESSAGES)
    assert base != request_key(_params(seed=1), MESSAGES)
    assert base != request_key(_params(extra={"top_p": 0.9}), MESSAGES)
    assert base != request_key(_params(base_url="http://a/v1"), MESSAGES)
    assert base != request_key(_params(), MESSAGES[:1])
    assert base != request_key(_params(), MESSAGES, stop=["\n"])
    other_spec = cache_params("openai:gpt-4o", Sampling(seed=0), ScriptedChatModel(respond=lambda m, n: "", calls=[]))
    assert base != request_key(other_spec, MESSAGES)
    assert request_key(_params(extra={"api_key": "a"}), MESSAGES) == request_key(
        _params(extra={"api_key": "b"}), MESSAGES
    )


def _result() -> ChatResult:
    logprobs = {
        "content": [
            {"token": " Yes", "logprob": -0.1, "bytes": [32, 89], "top_logprobs": [{"token": " No", "logprob": -2.3}]}
        ]
    }
    message = AIMessage(
        content="Label: not biased",
        usage_metadata={"input_tokens": 12, "output_tokens": 4, "total_tokens": 16},
        response_metadata={"model_name": "m", "finish_reason": "stop", "logprobs": logprobs},
    )
    return ChatResult(
        generations=[ChatGeneration(message=message, generation_info={"finish_reason": "stop"})],
        llm_output={"model_name": "m"},
    )


def test_reply_round_trips_as_json_with_usage_and_logprobs(tmp_path: Path):
    text = encode_result(_result())
    assert json.loads(text)  # plain JSON, nothing pickled
    again = decode_result(text)
    message = again.generations[0].message
    assert message.content == "Label: not biased"
    assert message.usage_metadata["input_tokens"] == 12
    assert message.response_metadata["logprobs"]["content"][0]["token"] == " Yes"
    assert message.response_metadata["cache"] == "hit"
    assert again.generations[0].generation_info == {"finish_reason": "stop"}


def test_stored_in_the_dialogue_database_and_a_damaged_row_is_a_miss(tmp_path: Path):
    db = tmp_path / "d.db"
    open_writer(db).close()
    cache = ResponseCache(db)
    assert cache.put("k1", _result(), spec="openai:m")
    assert cache.get("k1").generations[0].message.content == "Label: not biased"
    assert cache.get("k2") is None
    cache.close()
    with sqlite3.connect(db) as conn:
        value = conn.execute("select value from response_cache where key='k1'").fetchone()[0]
        assert json.loads(decompress(value))["generations"][0]["message"]["type"] == "ai"  # JSON, never pickled
        conn.execute("update response_cache set value = ? where key = 'k1'", ["\x80\x04not json"])
    cache = ResponseCache(db)
    assert cache.get("k1") is None
    cache.close()


def _counting_provider(providers, name: str, calls: list[str]):
    def factory(model_name, role, sampling):
        def respond(messages, n):
            calls.append(role)
            if role == "judge":
                return "Rationale: fine.\nLabel: not biased"
            digest = hashlib.sha256("\n".join(str(m.content) for m in messages).encode()).hexdigest()[:8]
            return f"{role} answers {digest}"  # the same request always gets the same reply

        return ScriptedChatModel(respond=respond, calls=[]), f"{name}:{model_name}", "chat"

    providers(name, factory)


def test_identical_request_does_not_pay_twice_and_cache_work_is_off_the_loop(tmp_path: Path, monkeypatch, providers):
    calls: list[str] = []
    _counting_provider(providers, "counting", calls)
    cache = ResponseCache(tmp_path / "d.db")
    threads: set[str] = set()
    real_get = ResponseCache._get

    def spy_get(self, key):
        threads.add(threading.current_thread().name)
        return real_get(self, key)

    monkeypatch.setattr(ResponseCache, "_get", spy_get)
    policy = CallPolicy(cache=cache)
    model = create_role_model("counting:m", role="target", sampling=Sampling(seed=0), policy=policy)

    async def twice():
        first = await model.chat.ainvoke(MESSAGES)
        second = await model.chat.ainvoke(MESSAGES)
        return first, second

    first, second = asyncio.run(twice())
    cache.close()
    assert calls == ["target"]
    assert first.content == second.content
    assert second.response_metadata.get("cache") == "hit"
    assert threading.main_thread().name not in threads and threads
    assert policy.stats.cache_summary(enabled=True)["hits"] == 1


def test_identical_requests_in_flight_together_make_one_call(tmp_path: Path, providers):
    calls: list[str] = []
    _counting_provider(providers, "counting2", calls)
    cache = ResponseCache(tmp_path / "d.db")
    policy = CallPolicy(cache=cache)
    models = [create_role_model("counting2:m", role="user", sampling=Sampling(seed=0), policy=policy) for _ in range(4)]

    async def together():
        return await asyncio.gather(*(m.chat.ainvoke(MESSAGES) for m in models))

    replies = asyncio.run(together())
    cache.close()
    assert calls == ["user"]
    assert len({r.content for r in replies}) == 1


def _run_cli(tmp_path: Path, capsys, *extra: str, run_id: str) -> dict:
    from cli import run

    argv = [
        "--user-model",
        "counting3:u",
        "--target-model",
        "counting3:t",
        "--judge-model",
        "counting3:j",
        "--turns",
        "2",
        "--categories",
        "gender",
        "age",
        "--db",
        str(tmp_path / "d.db"),
        "--run-id",
        run_id,
        "--json",
        "--no-trace",
        *extra,
    ]
    assert run.main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_rerun_of_identical_dialogues_is_served_from_the_cache_and_no_cache_turns_it_off(
    tmp_path: Path, capsys, providers
):
    calls: list[str] = []
    _counting_provider(providers, "counting3", calls)
    first = _run_cli(tmp_path, capsys, run_id="a")
    assert first["cache"]["enabled"] is True and first["cache"]["hits"] == 0
    assert first["cache"]["misses"] == len(calls) == 12  # 2 dialogues × 2 turns × 3 roles
    # The same dialogues under a new run id: every request is identical.
    second = _run_cli(tmp_path, capsys, run_id="b")
    assert len(calls) == 12
    assert second["cache"]["hits"] == 12 and second["cache"]["hit_rate"] == 1.0
    assert second["cache"]["by_role"]["judge"] == {"hits": 4, "misses": 0}
    assert second["per_turn"] == first["per_turn"]
    third = _run_cli(tmp_path, capsys, "--no-cache", run_id="c")
    assert len(calls) == 24
    assert third["cache"] == {"enabled": False, "hits": 0, "misses": 0, "hit_rate": None, "by_role": {}}
    assert third["retries"]["retries"] == 0


def test_summary_renders_cache_line(tmp_path: Path, capsys, providers):
    from rich.console import Console

    from evals.report.summary_view import render_summary

    calls: list[str] = []
    _counting_provider(providers, "counting3", calls)
    summary = _run_cli(tmp_path, capsys, run_id="r")
    console = Console(record=True, width=200)
    render_summary(summary, console)
    assert "response cache: 0 hits, 12 misses" in console.export_text()


@pytest.mark.parametrize("value", ["not json", json.dumps({"generations": [{"message": {"type": "weird"}}]})])
def test_decode_refuses_foreign_rows(value):
    with pytest.raises((ValueError, KeyError, TypeError)):
        decode_result(value)


def test_a_stored_row_is_small_compressed_json_under_a_16_byte_key(tmp_path: Path):
    db = tmp_path / "d.db"
    cache = ResponseCache(db)
    key = request_key(_params(), MESSAGES)
    assert cache.put(key, _result(), spec="openai:m")
    cache.close()
    with sqlite3.connect(db) as conn:
        stored, value = conn.execute("select key, value from response_cache").fetchone()
        ddl = conn.execute("select sql from sqlite_master where name = 'response_cache'").fetchone()[0]
    assert "without rowid" in ddl.lower()
    assert stored == bytes.fromhex(key)[:16]
    assert value[0] == 1 and len(value) < len(encode_result(_result())) / 2
    assert (
        decode_result(decompress(value)).generations[0].message.response_metadata["logprobs"]["content"][0]["token"]
        == " Yes"
    )


@pytest.mark.parametrize("value", [b"\x02whatever", b"\x01", b"\x01\x00\x01", b"", 42])
def test_a_value_of_an_unknown_format_or_damaged_is_a_miss(tmp_path: Path, value):
    db = tmp_path / "d.db"
    cache = ResponseCache(db)
    cache.put("k1", _result(), spec="openai:m")
    cache.close()
    with sqlite3.connect(db) as conn:
        conn.execute("update response_cache set value = ? where key = 'k1'", [value])
    cache = ResponseCache(db)
    assert cache.get("k1") is None
    cache.close()


def test_replies_queued_together_are_written_in_one_batch_and_seen_by_later_lookups(tmp_path: Path, monkeypatch):
    cache = ResponseCache(tmp_path / "d.db")
    batches: list[int] = []
    real = ResponseCache._put_rows

    def spy(self, items):
        batches.append(len(items))
        real(self, items)

    monkeypatch.setattr(ResponseCache, "_put_rows", spy)
    gate = threading.Event()
    cache._executor.submit(gate.wait)  # the worker is busy: the puts queue up behind it
    keys = [request_key(_params(seed=i), MESSAGES) for i in range(20)]
    for key in keys:
        assert cache.put_later(key, _result(), spec="openai:m")
    gate.set()
    assert all(cache.get(key) is not None for key in keys)
    assert batches == [20]
    assert cache.entries_by_spec() == {"openai:m": 20} and cache.write_failures == 0
    cache.close()


def test_lookups_queued_together_are_answered_at_once_after_the_writes_queued_before_them(tmp_path: Path, monkeypatch):
    cache = ResponseCache(tmp_path / "d.db")
    answered: list[int] = []
    real = ResponseCache._answer

    def spy(self, lookups):
        answered.append(len(lookups))
        real(self, lookups)

    monkeypatch.setattr(ResponseCache, "_answer", spy)
    keys = [request_key(_params(seed=i), MESSAGES) for i in range(3)]

    async def go():
        gate = threading.Event()
        cache._executor.submit(gate.wait)  # the worker is busy: the write and the lookups queue up behind it
        assert cache.put_later(keys[0], _result(), spec="openai:m")
        lookups = [asyncio.ensure_future(cache.aget(key)) for key in keys]
        await asyncio.sleep(0)
        lookups[2].cancel()  # its caller gave up: the others are still answered
        gate.set()
        return await asyncio.gather(*lookups[:2])

    hit, miss = asyncio.run(go())
    cache.close()
    assert hit.generations[0].message.content == "Label: not biased" and miss is None
    assert answered == [3]


def test_close_writes_what_is_still_queued(tmp_path: Path):
    db = tmp_path / "d.db"
    cache = ResponseCache(db)
    cache.put_later("k1", _result(), spec="openai:m")
    cache.close()
    cache = ResponseCache(db)
    assert cache.get("k1").generations[0].message.content == "Label: not biased"
    cache.close()


def _old_cache_database(path: Path, monkeypatch) -> list[str]:
    """A database as the code before m064 wrote it (main at bfb0e49): hex text keys, JSON text values, ISO times."""
    from langchain_core.messages import message_to_dict

    from checkpoints import migrations

    with monkeypatch.context() as patch:
        patch.setattr(
            migrations,
            "MIGRATIONS",
            [fn for fn in migrations.MIGRATIONS if fn.__name__ != "m064_response_cache_compact"],
        )
        open_writer(path).close()
    result = _result()
    old_json = json.dumps(
        {  # encode_result as it was: default separators
            "generations": [
                {"message": message_to_dict(g.message), "generation_info": g.generation_info}
                for g in result.generations
            ],
            "llm_output": result.llm_output,
        },
        ensure_ascii=False,
        allow_nan=False,
    )
    keys = [request_key(_params(seed=i), MESSAGES) for i in range(3)]
    with sqlite3.connect(path) as conn:
        for key in keys:
            conn.execute(
                "insert or ignore into response_cache (key, spec, value, created_at) values (?, ?, ?, ?)",
                [key, "openai:m", old_json, "2025-01-02T03:04:05.678+00:00"],
            )
        conn.execute(
            "insert into response_cache (key, spec, value, created_at) values ('k1', 'openai:m', 'not json', 'x')"
        )
    return keys


def test_a_database_written_before_m064_is_converted_and_its_replies_still_served(tmp_path: Path, monkeypatch):
    db = tmp_path / "old.db"
    keys = _old_cache_database(db, monkeypatch)
    with sqlite3.connect(db) as conn:
        assert conn.execute(
            "select typeof(key), typeof(value) from response_cache where spec = 'openai:m' limit 1"
        ).fetchone() == ("text", "text")
    cache = ResponseCache(db)
    for key in keys:
        hit = cache.get(key)
        assert hit.generations[0].message.content == "Label: not biased"
        assert hit.generations[0].message.usage_metadata["input_tokens"] == 12
        assert (
            hit.generations[0].message.response_metadata["logprobs"]["content"][0]["top_logprobs"][0]["token"] == " No"
        )
        assert hit.llm_output == {"model_name": "m"}
    assert cache.get("k1") is None  # a damaged row stays a miss
    assert cache.get(request_key(_params(seed=9), MESSAGES)) is None
    assert cache.entries_by_spec() == {"openai:m": 4}
    cache.close()
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "select typeof(key), typeof(value), created_at from response_cache where key != 'k1'"
        ).fetchall()
        tables = {name for (name,) in conn.execute("select name from sqlite_master where type = 'table'")}
    assert rows == [("blob", "blob", 1735787045)] * 3
    assert "response_cache_m040" not in tables
