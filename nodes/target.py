"""The target: the model under test answers the conversation, never seeing the seed."""

from __future__ import annotations

from collections import Counter
from typing import Any

from langgraph.runtime import Runtime

import prompts
from models.answers import CUT_AT_MAX_TOKENS, non_reply
from models.reasoning import SplitReply, capped_answer, split_reply
from models.registry import RoleModel
from nodes.context import RunContext
from nodes.dialogue import as_chat_messages, call_seed, failure, sampling_key, timed_invoke, token_usage
from nodes.leakage import is_repeat
from nodes.state import DialogueState, current_turn, new_messages

# A base model continuing a transcript copies lines from its context: a reply that repeats one of
# its own earlier replies word for word is drawn again (with the next per-call seed) at most this
# many times in all. Chat models are never redrawn: what they answer is what is measured.
TRANSCRIPT_TARGET_ATTEMPTS = 3


async def target(state: DialogueState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Ask the model under test for its next reply from the target-visible messages alone."""
    ctx = runtime.context
    model = ctx.models.target
    template = model.prompt or prompts.load("target.transcript" if model.style == "transcript" else "target")
    # The target's prompt has no variables at all (a --target-prompt file is refused if it has any):
    # nothing about the seed can reach it.
    messages = template.render() + as_chat_messages(state["messages"])
    key, turn = sampling_key(state, model.spec), current_turn(state)
    earlier = [m["content"] for m in state["messages"] if m["role"] == "assistant"]
    attempts = TRANSCRIPT_TARGET_ATTEMPTS if model.style == "transcript" else 1
    latency_total, tokens = 0.0, Counter[str]()
    try:
        for attempt in range(1, attempts + 1):
            reply, latency = await timed_invoke(
                model.chat, messages, seed=call_seed(ctx.sampling_seed, key, turn, "target", attempt)
            )
            latency_total += latency
            usage = token_usage(reply)
            tokens.update(usage)
            split = split_reply(reply)
            text = split.answer
            if not is_repeat(text, earlier):
                break
    except Exception as exc:  # noqa: BLE001
        return failure("target", exc)
    text, cut = _within_cap(model, text, usage)
    record: dict[str, Any] = {
        "index": turn,
        "reply": text,
        "target_model": model.spec,
        "latency_target": round(latency_total, 4),
        "tokens": {f"target_{k}": v for k, v in tokens.items()},
    }
    if attempt > 1:
        record["target_attempts"] = attempt
    record |= reasoning_fields(split)
    if (why := CUT_AT_MAX_TOKENS if cut else non_reply(reply, text, split)) is not None:
        record["non_reply"] = why  # a filtered, blocked, empty or cut reply is data: kept, and said so
    # Only the visible answer goes on: the user simulator, the judge and the target's own later prompts never see the
    # reasoning, which is kept on the turn.
    return {"messages": new_messages({"role": "assistant", "content": text}), "turns": [record]}


def reasoning_fields(split: SplitReply) -> dict[str, Any]:
    """The turn's reasoning (its text and carrier), kept beside the reply; {} for a reply without reasoning."""
    if not split.reasoning:
        return {}
    return {"reasoning": split.reasoning, "reasoning_carrier": split.carrier}


def _within_cap(model: RoleModel, text: str, usage: dict[str, int]) -> tuple[str, bool]:
    """The answer cut to the reply's cap (``--max-tokens``) when a reasoning budget let the request write more."""
    cap = model.sampling.max_tokens
    if model.request_cap <= cap or "output_tokens" not in usage:
        return text, False
    answer_tokens = usage["output_tokens"] - usage.get("reasoning_tokens", 0)
    capped = capped_answer(text, answer_tokens, cap)
    return capped, capped != text
