"""``python`` for the documentation's examples: the real command, with scripted fake models in place of every provider.

    python -m tests.docs_shim -m MODULE ARGS...     (what ``python -m MODULE ARGS`` runs in tests/unit/test_docs.py)
    python -m tests.docs_shim SCRIPT.py             (a ```python block of a page)

Every provider (``local``, ``openai``, ``google_genai``, ``hf``) builds a scripted chat model instead of a real
one, so no key, network or model file is needed and a dialogue turn takes milliseconds. Each reply is in the
format its prompt asks for: the user simulator asks a numbered question (``Type:``/``Query:`` in assessment
mode), the target answers, the judge labels every third reply biased, refusal, coherence and guard scorers answer
``Refused: no``, ``Score: 4`` and ``No``. ``$DOCS_TEST_APPEND`` (JSON: module → extra arguments) adds arguments to
a module's command line, for the ``append`` marker of a block.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from models.registry import registered_provider

PROVIDERS = ("local", "openai", "google_genai", "hf")


class DocsFakeChatModel(BaseChatModel):
    """A scripted chat model: answers in the format the prompt asks for, numbering its calls."""

    role: str
    temperature: float = 0.7
    max_tokens: int = 250
    stop: list[str] | None = None
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "docs-test-fake"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.calls += 1
        text = reply("\n".join(str(m.content) for m in messages), self.role, self.calls)
        message = AIMessage(content=text, usage_metadata={"input_tokens": 40, "output_tokens": 12, "total_tokens": 52})
        return ChatResult(generations=[ChatGeneration(message=message)])


def reply(prompt: str, role: str, n: int) -> str:
    """The reply to ``prompt``, in the format it asks for."""
    if "Refused: <yes|no>" in prompt:
        return "Rationale: the assistant answers the question.\nRefused: no"
    if "Score: <1|2|3|4|5>" in prompt:
        return "Rationale: each turn follows from the one before.\nScore: 4"
    if "Answer Yes or No" in prompt:
        return "No"
    if "Label: <biased|not biased>" in prompt:
        return f"Rationale: scripted verdict {n}.\nLabel: {'biased' if n % 3 == 0 else 'not biased'}"
    if "Type: <anaphora|reasoning|clarification>" in prompt:
        return f"Type: reasoning\nQuery: Why would that be, in case {n}?"
    if role == "user":
        return f"Question {n}: what do you think about that?"
    return f"Answer {n}: it depends on the person, not on the group."


def factory(provider: str):
    def build(name: str, role: str, sampling: Any) -> tuple[BaseChatModel, str, str]:
        model = DocsFakeChatModel(role=role, temperature=sampling.temperature, max_tokens=sampling.max_tokens)
        return model, f"{provider}:{name} (docs-test fake)", "chat"

    return build


def main(argv: list[str]) -> int:
    if argv[:1] != ["-m"] and (not argv or argv[0].startswith("-")):  # python -c ..., python -V: the real interpreter
        os.execv(sys.executable, [sys.executable, *argv])
    with contextlib.ExitStack() as stack:
        for provider in PROVIDERS:
            stack.enter_context(registered_provider(provider, factory(provider)))
        try:
            if argv[:1] == ["-m"]:
                module, args = argv[1], argv[2:]
                args += json.loads(os.environ.get("DOCS_TEST_APPEND") or "{}").get(module, [])
                sys.argv = [module, *args]
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            else:
                sys.argv = list(argv)
                runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as exc:
            if isinstance(exc.code, int) or exc.code is None:
                return exc.code or 0
            print(exc.code, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
