"""LangChain's standard unit suite (langchain-tests) on the embedded model and on the retry/cache wrapper.

Neither loads weights: the unit suite only builds models and reads their parameters.
Tools, structured output and multimodal inputs are declared unsupported (the suite's
defaults). The suite passes a placeholder ``api_key``, which keyless local models refuse
(unknown arguments are refused, not dropped: tests/unit/models/test_chat_model_contract.py), so it is left out for both
classes; the
embedded model also refuses ``max_retries`` (retries are the wrapper's), while the
wrapper takes every other standard argument, ``max_retries`` included.
"""

from __future__ import annotations

from typing import Any

import pytest

langchain_tests = pytest.importorskip("langchain_tests.unit_tests", reason="needs langchain-tests (the test extra)")

from models.llama.model import LlamaTranscriptChatModel  # noqa: E402
from models.resilience import ResilientChatModel  # noqa: E402

PLACEHOLDER_GGUF = "/nonexistent/gemma3-270m.gguf"  # never loaded: unit tests make no call


def _without(params: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in names}


class TestLlamaTranscriptChatModelUnit(langchain_tests.ChatModelUnitTests):  # type: ignore[name-defined]  # importorskip's module
    @property
    def chat_model_class(self) -> type[LlamaTranscriptChatModel]:
        return LlamaTranscriptChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model_path": PLACEHOLDER_GGUF, "seed": 0}

    @property
    def standard_chat_model_params(self) -> dict[str, Any]:
        return _without(super().standard_chat_model_params, "api_key", "max_retries")

    @property
    def supports_model_override(self) -> bool:
        return False  # one embedded model: another name is refused, not silently served


class TestResilientChatModelUnit(langchain_tests.ChatModelUnitTests):  # type: ignore[name-defined]  # importorskip's module
    """The wrapper as create_role_model builds it, around the embedded model."""

    @property
    def chat_model_class(self) -> type[ResilientChatModel]:
        return ResilientChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        inner = LlamaTranscriptChatModel(model_path=PLACEHOLDER_GGUF, seed=0)
        return {"inner": inner, "spec": "local:gemma3-270m", "role": "target"}

    @property
    def standard_chat_model_params(self) -> dict[str, Any]:
        return _without(super().standard_chat_model_params, "api_key")

    @property
    def supports_model_override(self) -> bool:
        return False
