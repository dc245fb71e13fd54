"""Helpers the nodes share: rendering the dialogue, timing a model call, and capturing failures."""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from checkpoints.reasons import error_class, failure_reason
from checkpoints.text import valid_strings
from models.reasoning import split_reply, token_split
from nodes.state import ChatTurn
from prompts import quoting

NO_HISTORY = "(no messages yet: this is the opening message)"


def format_history(messages: Sequence[ChatTurn], *, max_chars: int | None = None) -> str:
    """The dialogue as ``User:`` / ``Assistant:`` lines, newest kept when trimmed."""
    lines = [f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}" for m in messages]
    text = "\n".join(lines)
    if max_chars is not None and len(text) > max_chars:
        text = "…" + text[-max_chars:]
    return text or NO_HISTORY


def quoted_dialogue(
    style: str, messages: Sequence[ChatTurn], *, key: str | None = None, max_chars: int | None = None
) -> str:
    """The dialogue as another model's prompt quotes it (prompts/quoting.py): a block per message for a chat model
    (``key``: the request's block key, default one drawn over these messages), one escaped line for a base model (the
    newest ``max_chars`` characters)."""
    if style == "transcript":
        return quoting.inline_conversation(messages, max_chars=max_chars, empty=NO_HISTORY)
    key = key or quoting.request_key(m["content"] for m in messages)
    return quoting.conversation_blocks(messages, key=key, empty=NO_HISTORY)


def as_chat_messages(messages: Sequence[ChatTurn]) -> list[BaseMessage]:
    """The target-visible dialogue as LangChain messages, in the dialogue's own perspective."""
    return [_chat_message(m["role"] == "user", m["content"]) for m in messages]


@functools.lru_cache(maxsize=4096)
def _chat_message(from_user: bool, content: str) -> BaseMessage:
    """One history message, built once: a dialogue's every later prompt repeats it (nothing mutates messages)."""
    return HumanMessage(content=content) if from_user else AIMessage(content=content)


def text_of(message: BaseMessage) -> str:
    """The visible answer of a model reply, whatever content-block shape the provider used: its reasoning, whatever
    carries it, is left out (models/reasoning.py), so no prompt after it ever holds a model's reasoning."""
    return split_reply(message).answer


def token_usage(message: BaseMessage) -> dict[str, int]:
    """Prompt and completion tokens when the provider reports them; the reasoning's share of the completion when
    there was reasoning (``reasoning_tokens``, with ``reasoning_estimated`` 1 where the provider gave no count)."""
    usage = getattr(message, "usage_metadata", None) or {}
    tokens = {k: int(usage[k]) for k in ("input_tokens", "output_tokens") if k in usage}
    if "output_tokens" in tokens:
        split = token_split(message, split_reply(message))
        if split is not None and split.reasoning:
            tokens["reasoning_tokens"] = split.reasoning
            if split.estimated:
                tokens["reasoning_estimated"] = 1
    return tokens


async def timed_invoke(model: Any, messages: list[BaseMessage], **kwargs: Any) -> tuple[AIMessage, float]:
    """Invoke a chat model and return its reply with the wall-clock latency in seconds."""
    start = time.perf_counter()
    reply = await model.ainvoke(messages, **kwargs)
    return valid_reply(reply), time.perf_counter() - start


def valid_reply(reply: Any) -> Any:
    """``reply`` with each lone surrogate in its text (content, reasoning fields) replaced by U+FFFD: a provider may
    send one (valid JSON), and neither the store nor a checkpoint can hold it. A structured-output answer (a dict
    of the raw message and what was parsed from it) has its raw message made valid."""
    if isinstance(reply, dict):
        return {k: valid_reply(v) if isinstance(v, BaseMessage) else valid_strings(v) for k, v in reply.items()}
    if not isinstance(reply, BaseMessage):
        return reply
    content, extra = valid_strings(reply.content), valid_strings(reply.additional_kwargs)
    if content == reply.content and extra == reply.additional_kwargs:
        return reply
    return reply.model_copy(update={"content": content, "additional_kwargs": extra})


def call_seed(sampling_seed: int, dialogue: str, turn: int, role: str, attempt: int = 1) -> int:
    """The sampling seed of one model call, from (run sampling seed, dialogue, turn, role, attempt).

    Reproducible (the same settings draw the same samples, in a rerun or under another run id, so
    the response cache still serves them) and different for every call: one seed for every call of
    a role made llama.cpp draw the same reply for near-identical prompts. A 31-bit integer, which
    every provider accepts. ``dialogue`` is :func:`sampling_key`.
    """
    material = "\x1f".join(str(part) for part in (sampling_seed, dialogue, turn, role, attempt))
    return int.from_bytes(hashlib.sha256(material.encode("utf-8")).digest()[:4], "big") & 0x7FFFFFFF


def sampling_key(state: Any, target_spec: str) -> str:
    """What identifies a dialogue within a run for sampling: seed id, mode and target model.

    The run id is left out on purpose: another run with the same --sampling-seed reproduces the
    same dialogues. A branch keeps its parent's key unless it changes the mode or the target, so a
    counterfactual meets the same sampling noise; ``graph.branch --rerun`` changes the sampling seed.
    """
    return f"{state['seed']['id']}:{state['mode']}:{target_spec}"


def failure(node: str, exc: BaseException) -> dict[str, Any]:
    """The state update that ends a dialogue with stop reason ``error`` after ``node`` failed.

    ``error`` is the reason in words (checkpoints/reasons.py), as the summary, replay and report show it;
    ``error_class`` keeps the exception's class for debugging (the trace records the node's update).
    """
    return {"error": f"{node}: {failure_reason(exc)}", "failed_node": node, "error_class": error_class(exc)}
