"""LangChain's standard integration suite (langchain-tests) on the real embedded model and the wrapper around it.

The model is Gemma 3 270M, a base model: the suite checks the LangChain contract
(invoke, batch, stream, stream_events v3, usage, stop), not answer quality. Replies are
kept short (max_tokens 16) so each class runs in well under a minute on 2 cores.
"""

from __future__ import annotations

from typing import Any

import pytest

langchain_tests = pytest.importorskip("langchain_tests.integration_tests", reason="needs langchain-tests (the test extra)")

from nodes.local_model import LlamaTranscriptChatModel, gemma_model_path  # noqa: E402
from nodes.resilience import ResilientChatModel  # noqa: E402

pytestmark = pytest.mark.integration

SETTINGS = {"temperature": 0.0, "max_tokens": 16, "seed": 0}


class TestLlamaTranscriptChatModelIntegration(langchain_tests.ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[LlamaTranscriptChatModel]:
        return LlamaTranscriptChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model_path": str(gemma_model_path()), **SETTINGS}

    @property
    def supports_model_override(self) -> bool:
        return False


class TestResilientChatModelIntegration(langchain_tests.ChatModelIntegrationTests):
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
