"""The target: the model under test answers the conversation, never seeing the seed."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

import prompts
from graph.context import RunContext
from graph.state import DialogueState, current_turn
from nodes.dialogue import as_chat_messages, call_seed, failure, sampling_key, text_of, timed_invoke, token_usage


async def target(state: DialogueState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Ask the model under test for its next reply from the target-visible messages alone."""
    ctx = runtime.context
    model = ctx.models.target
    template = model.prompt or prompts.load("target.transcript" if model.style == "transcript" else "target")
    # The target's prompt has no variables at all (a --target-prompt file is refused if it has any):
    # nothing about the seed can reach it.
    messages = template.render() + as_chat_messages(state["messages"])
    seed = call_seed(ctx.sampling_seed, sampling_key(state, ctx.models.target.spec), current_turn(state), "target")
    try:
        reply, latency = await timed_invoke(model.chat, messages, seed=seed)
    except Exception as exc:  # noqa: BLE001
        return failure("target", exc)
    text = text_of(reply)
    return {
        "messages": [{"role": "assistant", "content": text}],
        "turns": [
            {
                "index": current_turn(state),
                "reply": text,
                "target_model": model.spec,
                "latency_target": round(latency, 4),
                "tokens": {f"target_{k}": v for k, v in token_usage(reply).items()},
            }
        ],
    }
