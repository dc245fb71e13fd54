"""The user simulator: writes the next user message from the hidden seed, the mode and the dialogue."""

from __future__ import annotations

import random
import re
from typing import Any

from langgraph.config import get_config
from langgraph.runtime import Runtime
from langgraph.types import interrupt

import prompts
from graph.context import RunContext
from graph.state import UTTERANCE_TYPES, DialogueState, current_turn
from nodes.dialogue import as_chat_messages, failure, format_history, text_of, timed_invoke, token_usage

_TYPE_LINE = re.compile(r"^\s*\**type\**\s*:\s*\**\s*([a-z]+)", re.IGNORECASE | re.MULTILINE)
_QUERY = re.compile(r"^\s*\**(?:query|message)\**\s*:\s*(.*)", re.IGNORECASE | re.MULTILINE | re.DOTALL)
_LABEL_PREFIX = re.compile(r"^\s*(user|query|message)\s*:\s*", re.IGNORECASE)
# A run that should stop after turn K sets this key in its configurable (graph.pausing).
PAUSE_AFTER_KEY = "dymt_pause_after"
GIVEN = "given"


async def user_simulator(state: DialogueState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Simulate the next user turn; the seed conditions this node and no other model-facing prompt."""
    ctx = runtime.context
    model = ctx.models.user
    turn = current_turn(state) + 1
    _pause_if_asked(turn)
    if state.get("next_user_message") is not None:
        return given_turn(turn, state["next_user_message"])
    mode = state["mode"]
    statement = state["seed"]["statement"]
    utterance_type: str | None = None
    try:
        if model.style == "transcript":
            # A base model cannot follow instructions: it continues a transcript framed for it,
            # so in assessment mode the utterance type is drawn here and written into the framing.
            values: dict[str, Any] = {"statement": statement}
            if mode == "assessment":
                utterance_type = _draw_utterance_type(ctx.sampling_seed, state["seed"]["id"], turn)
                values["utterance_type"] = utterance_type
            messages = prompts.load(f"user_{mode}.transcript").render(**values)
            messages += as_chat_messages(state["messages"])
        else:
            messages = prompts.load(f"user_{mode}").render(
                statement=statement,
                history=format_history(state["messages"]),
                turn=turn,
                max_turns=state["max_turns"],
            )
        reply, latency = await timed_invoke(model.chat, messages)
        raw = text_of(reply)
        if model.style == "chat" and mode == "assessment":
            utterance_type, text = parse_assessment(raw)
        else:
            text = clean_user_message(raw)
        if not text:
            raise ValueError(f"the user simulator returned an empty message (raw output {raw[:80]!r})")
    except Exception as exc:  # noqa: BLE001 - any provider failure ends the dialogue resumably
        return failure("user_simulator", exc)
    return {
        "messages": [{"role": "user", "content": text}],
        "turns": [
            {
                "index": turn,
                "user_message": text,
                "utterance_type": utterance_type,
                "user_model": model.spec,
                "latency_user": round(latency, 4),
                "tokens": {f"user_{k}": v for k, v in token_usage(reply).items()},
            }
        ],
    }


def given_turn(turn: int, text: str) -> dict[str, Any]:
    """Send a message decided outside the simulator (a branch's change, a person's edit): no model call."""
    return {
        "messages": [{"role": "user", "content": text}],
        "turns": [{"index": turn, "user_message": text, "utterance_type": GIVEN, "user_model": GIVEN, "latency_user": 0.0}],
        "next_user_message": None,
    }


def _pause_if_asked(turn: int) -> None:
    """Stop (a LangGraph interrupt) before simulating ``turn`` when the run asked to pause after the turn before.

    It comes first in the node, before any model call, so resuming re-runs the node from here at no cost;
    a resumed invocation without the key continues past this point.
    """
    try:
        pause_after = get_config().get("configurable", {}).get(PAUSE_AFTER_KEY)
    except RuntimeError:  # called outside a graph run
        return
    if pause_after is not None and turn == int(pause_after) + 1:
        interrupt({"paused_after_turn": int(pause_after)})


def parse_assessment(raw: str) -> tuple[str | None, str]:
    """Split an assessment reply into its utterance type (None if absent or unknown) and its query."""
    type_match = _TYPE_LINE.search(raw)
    kind = type_match.group(1).lower() if type_match else None
    if kind not in UTTERANCE_TYPES:
        kind = None
    query_match = _QUERY.search(raw)
    if query_match:
        text = query_match.group(1)
    else:
        text = _TYPE_LINE.sub("", raw)
    return kind, clean_user_message(text)


def clean_user_message(raw: str) -> str:
    """Strip labels and wrapping quotes a model may add around the message."""
    text = _LABEL_PREFIX.sub("", raw.strip())
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    return text.strip()


def _draw_utterance_type(sampling_seed: int, seed_id: str, turn: int) -> str:
    """A reproducible utterance type for one turn of one dialogue."""
    return random.Random(f"{sampling_seed}:{seed_id}:{turn}").choice(UTTERANCE_TYPES)
