"""LangChain's standard integration suite (langchain-tests) on the real embedded model and the wrapper around it.

The model is Gemma 3 270M, a base model: the suite checks the LangChain contract
(invoke, batch, stream, stream_events v3, usage, stop), not answer quality. Replies are
kept short (max_tokens 16) so each class runs in well under a minute on 2 cores.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

langchain_tests = pytest.importorskip(
    "langchain_tests.integration_tests", reason="needs langchain-tests (the test extra)"
)

from models.llama.instance import gemma_model_path  # noqa: E402
from models.llama.model import LlamaTranscriptChatModel  # noqa: E402
from models.resilience import ResilientChatModel  # noqa: E402

pytestmark = pytest.mark.integration

SETTINGS = {"temperature": 0.0, "max_tokens": 16, "seed": 0, "n_ctx": 1024}


class TestLlamaTranscriptChatModelIntegration(langchain_tests.ChatModelIntegrationTests):  # type: ignore[name-defined]  # importorskip's module
    @property
    def chat_model_class(self) -> type[LlamaTranscriptChatModel]:
        return LlamaTranscriptChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model_path": str(gemma_model_path()), **SETTINGS}

    @property
    def supports_model_override(self) -> bool:
        return False


class TestResilientChatModelIntegration(langchain_tests.ChatModelIntegrationTests):  # type: ignore[name-defined]  # importorskip's module
    @property
    def chat_model_class(self) -> type[ResilientChatModel]:
        return ResilientChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        inner = LlamaTranscriptChatModel(model_path=str(gemma_model_path()), instance_key="wrapped", **SETTINGS)
        return {"inner": inner, "spec": "local:gemma3-270m", "role": "target"}

    @property
    def supports_model_override(self) -> bool:
        return False


# --- beyond the suite: what the project relies on when the embedded model streams -----------------


def _model(**overrides: Any) -> LlamaTranscriptChatModel:
    return LlamaTranscriptChatModel(
        model_path=str(gemma_model_path()), instance_key="stream-checks", **{**SETTINGS, **overrides}
    )


def test_a_stream_adds_up_to_exactly_what_invoke_returns_for_the_same_seed():
    model = _model(temperature=0.8, max_tokens=24, seed=7)
    question = [HumanMessage("What do you like to do on weekends?")]
    reply = model.invoke(question)
    chunks = list(model.stream(question))
    assert len([c for c in chunks if c.content]) > 1  # really streamed, token by token
    full = chunks[0]
    for chunk in chunks[1:]:
        full += chunk
    assert full.content == reply.content and reply.content
    assert full.response_metadata["seed"] == 7 and full.response_metadata["finish_reason"] in ("stop", "length")
    usage = full.usage_metadata
    assert usage["input_tokens"] == reply.usage_metadata["input_tokens"]
    # Streaming counts every sampled token, an end-of-text token included.
    assert reply.usage_metadata["output_tokens"] <= usage["output_tokens"] <= reply.usage_metadata["output_tokens"] + 1


def test_the_judge_streams_its_log_probabilities_too():
    judge = _model(logprobs=True, top_logprobs=5, max_tokens=1, one_line=False)
    full = None
    for chunk in judge.stream([HumanMessage("Is the sky blue? Answer Yes or No.")]):
        full = chunk if full is None else full + chunk
    entries = full.response_metadata["logprobs"]["content"]
    assert len(entries) == 1 and len(entries[0]["top_logprobs"]) == 5


def test_a_timeout_stops_generation_and_says_so():
    model = _model(max_tokens=400, one_line=False, timeout=0.2, temperature=0.8)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish within 0.2 s"):
        model.invoke([HumanMessage("Write a long story about a dragon.")])
    assert time.monotonic() - started < 5  # it stopped, instead of writing 400 tokens


def test_leaving_an_async_stream_early_frees_the_model_for_the_next_call():
    model = _model(max_tokens=200, one_line=False, temperature=0.8)

    async def first_chunk_then_invoke() -> str:
        async for chunk in model.astream([HumanMessage("Tell me about the sea.")]):
            if chunk.content:
                break
        reply = await asyncio.wait_for(model.ainvoke([HumanMessage("Hi")], max_tokens=5), 60)
        return reply.content

    assert isinstance(asyncio.run(first_chunk_then_invoke()), str)


def test_a_stop_given_at_construction_cuts_the_reply():
    words = (
        _model(max_tokens=24, seed=3, temperature=0.8).invoke([HumanMessage("Count from one to ten.")]).content.split()
    )
    assert len(words) > 1
    cut = _model(max_tokens=24, seed=3, temperature=0.8, stop=[" " + words[1]]).invoke(
        [HumanMessage("Count from one to ten.")]
    )
    assert cut.content == words[0]
