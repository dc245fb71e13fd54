"""The embedded model and the retry/cache wrapper as LangChain chat models: arguments, ls params, streaming.

No weights are loaded: the wrapper's streaming is checked around fake models; the
embedded model's own streaming runs in tests/integration/test_langchain_standard_integration.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.outputs import ChatGenerationChunk

from checkpoints.cache import ResponseCache
from models.call_stats import CallStats
from models.llama.model import LlamaTranscriptChatModel
from models.registry import ModelSpecError, Sampling, create_role_model
from models.resilience import ResilientChatModel
from models.retries import RetriesExhaustedError, RetryPolicy
from tests.conftest import ScriptedChatModel

GGUF = "/nonexistent/gemma3-270m.gguf"
FAST = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0, timeout=None)


def local(**overrides: Any) -> LlamaTranscriptChatModel:
    return LlamaTranscriptChatModel(model_path=GGUF, **overrides)


def wrap(inner: Any, **kwargs: Any) -> ResilientChatModel:
    return ResilientChatModel(inner=inner, spec="fake:model", role="target", **{"retry": FAST, **kwargs})


class Words(GenericFakeChatModel):
    """A streaming fake: each reply streams word by word (GenericFakeChatModel splits on spaces)."""


# --- constructor arguments ---------------------------------------------------------------------


def test_unknown_constructor_arguments_are_refused_by_name():
    with pytest.raises(TypeError, match=r"unexpected argument stopp\b"):
        local(stopp=["x"])
    with pytest.raises(TypeError, match="max_retries: an in-process model has no transient failures"):
        local(max_retries=2)
    with pytest.raises(TypeError, match="unexpected arguments api_base, bogus"):
        wrap(local(), bogus=1, api_base="x")


def test_a_bad_extra_argument_in_a_config_stops_with_one_line_naming_it():
    with pytest.raises(ModelSpecError, match="bogus") as caught:
        create_role_model("local:gemma3-270m", role="target", sampling=Sampling(extra={"model_path": GGUF, "bogus": 1}))
    assert "\n" not in str(caught.value)


def test_the_embedded_model_honours_stop_timeout_and_streaming():
    model = local(stop=["###"], timeout=5, streaming=True, max_tokens=7, temperature=0.1)
    assert model.stop_sequences(["!!"]) == ["\nUser:", "\nAssistant:", "\n", "###", "!!"]
    assert model._identifying_params["stop"] == ["###"]
    assert "stop" not in local()._identifying_params  # unchanged cache keys for models without one
    params = model._get_ls_params(stop=["!!"])
    assert params["ls_stop"] == ["###", "!!"]
    assert (params["ls_max_tokens"], params["ls_temperature"]) == (7, 0.1)
    assert model._get_ls_params(model="another-name")["ls_model_name"] == "another-name"
    with pytest.raises(ValueError, match="timeout"):
        local(timeout=0)


def test_a_call_naming_another_model_is_refused_not_served_by_this_one():
    with pytest.raises(ValueError, match="serves gemma3-270m only, not 'gpt-4o'"):
        local().invoke("hi", model="gpt-4o")
    with pytest.raises(TypeError, match="unsupported call options"):
        local().invoke("hi", top_k=3)


def test_the_wrapper_maps_standard_arguments_onto_its_policy_and_a_copy_of_the_inner_model():
    inner = local()
    model = ResilientChatModel(
        inner=inner,
        spec="local:gemma3-270m",
        role="target",
        temperature=0.0,
        max_tokens=5,
        stop=["END"],
        timeout=9,
        max_retries=3,
    )
    assert (model.retry.attempts, model.retry.timeout) == (4, 9)
    assert (model.inner.temperature, model.inner.max_tokens, model.inner.stop) == (0.0, 5, ["END"])
    assert (inner.temperature, inner.max_tokens, inner.stop) == (0.7, 250, None)  # the caller's model is untouched
    assert model._get_ls_params()["ls_stop"] == ["END"]
    assert model._get_ls_params(model="other")["ls_model_name"] == "other"
    with pytest.raises(TypeError, match="wrapped ScriptedChatModel has no temperature"):
        wrap(ScriptedChatModel(respond=lambda m, n: "x", calls=[]), temperature=0.0)
    with pytest.raises(TypeError, match="max_retries must be a whole number"):
        wrap(local(), max_retries=-1)


# --- the wrapper streams ---------------------------------------------------------------------------


def test_streaming_through_the_wrapper_yields_the_inner_chunks_then_replays_from_the_cache(tmp_path: Path):
    cache = ResponseCache(tmp_path / "cache.db")
    stats = CallStats()
    try:
        model = wrap(Words(messages=iter([AIMessage("one two three")])), response_cache=cache, stats=stats)
        chunks = list(model.stream([HumanMessage("count")]))
        assert all(isinstance(c, AIMessageChunk) for c in chunks)
        assert [c.content for c in chunks if c.content] == ["one", " ", "two", " ", "three"]
        assert chunks[-1].chunk_position == "last"
        # The fake would raise StopIteration if called again: the second stream must come from the cache.
        again = list(model.stream([HumanMessage("count")]))
        full = again[0]
        for chunk in again[1:]:
            full += chunk
        assert full.content == "one two three" and full.response_metadata["cache"] == "hit"
        assert (stats.cache_misses["target"], stats.cache_hits["target"]) == (1, 1)
        assert model.invoke([HumanMessage("count")]).content == "one two three"
    finally:
        cache.close()


def test_async_streaming_through_the_wrapper_uses_the_cache_too(tmp_path: Path):
    cache = ResponseCache(tmp_path / "cache.db")
    stats = CallStats()

    async def texts(model) -> list[str]:
        return [c.content async for c in model.astream([HumanMessage("count")]) if c.content]

    try:
        model = wrap(Words(messages=iter([AIMessage("a b")])), response_cache=cache, stats=stats)
        assert asyncio.run(texts(model)) == ["a", " ", "b"]
        assert asyncio.run(texts(model)) == ["a b"]
        assert (stats.cache_misses["target"], stats.cache_hits["target"]) == (1, 1)
    finally:
        cache.close()


class Flaky(ScriptedChatModel):
    """Streams ``chunks``; raises ``error`` before the first chunk on the first ``fail_before`` calls, or after one
    chunk."""

    chunks: list[str]
    error: Exception
    fail_before: int = 0
    fail_after_first: bool = False
    streams: int = 0

    def _stream(self, messages, stop=None, run_manager=None, **kwargs) -> Iterator[ChatGenerationChunk]:
        self.streams += 1
        if self.streams <= self.fail_before:
            raise self.error
        for i, text in enumerate(self.chunks):
            if i == 1 and self.fail_after_first:
                raise self.error
            yield ChatGenerationChunk(message=AIMessageChunk(content=text))

    async def _astream(self, messages, stop=None, run_manager=None, **kwargs) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._stream(messages, stop, **kwargs):
            yield chunk


def flaky(**kwargs: Any) -> Flaky:
    return Flaky(respond=lambda m, n: "unused", calls=[], **kwargs)


def test_a_stream_that_fails_before_its_first_chunk_is_retried():
    inner = flaky(chunks=["Hel", "lo"], error=TimeoutError("read timed out"), fail_before=2)
    stats = CallStats()
    model = wrap(inner, stats=stats)
    assert "".join(c.content for c in model.stream("hi")) == "Hello"
    assert inner.streams == 3 and stats.retries["timeout"] == 2

    inner = flaky(chunks=["Hel", "lo"], error=TimeoutError("read timed out"), fail_before=1)
    stats = CallStats()
    assert asyncio.run(_collect(wrap(inner, stats=stats))) == "Hello"
    assert stats.retries["timeout"] == 1


def test_a_stream_that_fails_after_text_went_out_is_not_retried():
    inner = flaky(chunks=["Hel", "lo"], error=TimeoutError("read timed out"), fail_after_first=True)
    stats = CallStats()
    seen: list[str] = []
    with pytest.raises(TimeoutError):
        for chunk in wrap(inner, stats=stats).stream("hi"):
            seen.append(chunk.content)
    assert seen == ["Hel"] and inner.streams == 1 and not stats.retries


def test_giving_up_on_a_stream_says_how_many_attempts():
    inner = flaky(chunks=["x"], error=TimeoutError("read timed out"), fail_before=99)
    with pytest.raises(RetriesExhaustedError, match="gave up after 3 attempts"):
        list(wrap(inner).stream("hi"))


def test_an_async_stream_that_stalls_times_out_per_chunk_and_is_retried():
    class Stalls(ScriptedChatModel):
        async def _astream(self, messages, stop=None, run_manager=None, **kwargs):
            await asyncio.sleep(5)
            yield ChatGenerationChunk(message=AIMessageChunk(content="late"))

    policy = RetryPolicy(attempts=2, base_delay=0.0, max_delay=0.0, timeout=0.05)
    model = wrap(Stalls(respond=lambda m, n: "x", calls=[]), retry=policy)
    with pytest.raises(RetriesExhaustedError, match=r"gave up after 2 attempts \(timeout\).*sent nothing for 0.05 s"):
        asyncio.run(_collect(model))


def test_an_inner_model_that_cannot_stream_arrives_as_one_chunk_with_its_usage():
    model = wrap(ScriptedChatModel(respond=lambda m, n: "whole reply", calls=[]))
    chunks = list(model.stream("hi"))
    assert [c.content for c in chunks] == ["whole reply"]
    assert chunks[0].usage_metadata["total_tokens"] == 10
    assert asyncio.run(_collect(model)) == "whole reply"


async def _collect(model) -> str:
    return "".join([c.content async for c in model.astream("hi")])


class Hangs(GenericFakeChatModel):
    """A model whose first call never answers (it is cancelled by the wrapper's timeout); later calls answer."""

    cancelled: list[bool] = []

    async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        if not self.cancelled:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled.append(True)
                raise
        return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)


def test_a_call_past_its_timeout_is_cancelled_retried_and_named_when_retries_run_out():
    retry = RetryPolicy(attempts=2, base_delay=0.0, max_delay=0.0, timeout=0.05)
    model = wrap(Hangs(messages=iter([AIMessage("late but fine")]), cancelled=[]), retry=retry)
    assert asyncio.run(model.ainvoke([HumanMessage("hi")])).content == "late but fine"
    assert model.inner.cancelled == [True] and model.stats.retries == {"timeout": 1}
    once = wrap(Hangs(messages=iter([]), cancelled=[]), retry=dataclasses.replace(retry, attempts=1))
    with pytest.raises(
        RetriesExhaustedError, match=r"gave up after 1 attempt \(timeout\): fake:model did not answer within 0.05 s"
    ):
        asyncio.run(once.ainvoke([HumanMessage("hi")]))
