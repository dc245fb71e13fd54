"""The user simulator: writes the next user message from the hidden seed, the mode and the dialogue."""

from __future__ import annotations

import random
import re
from collections import Counter
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime
from langgraph.types import interrupt

import prompts
from models.answers import EMPTY_MESSAGE, non_reply
from nodes.context import RunContext
from nodes.dialogue import (
    as_chat_messages,
    call_seed,
    failure,
    quoted_dialogue,
    sampling_key,
    text_of,
    timed_invoke,
    token_usage,
)
from nodes.leakage import Leakage, is_repeat, leakage
from nodes.state import UTTERANCE_TYPES, DialogueState, current_turn, new_messages
from nodes.structured import ASSESSMENT_SCHEMA, invoke_structured, partial_json_field
from nodes.verdicts import Grammar, json_answer, labelled_text, read_answer
from prompts import quoting

# What the assessment prompt asks for: "Type: <utterance type>" as the answer's first line, then "Query: ..."
# (or {"type", "query"} under a JSON schema).
TYPE_GRAMMAR = Grammar("Type", {kind: kind for kind in UTTERANCE_TYPES}, position="first", json_field="type")
_LABEL_PREFIX = re.compile(r"^\s*(user|query|message)\s*:\s*", re.IGNORECASE)
# A line of a quoted block (prompts/quoting.py) a simulator copied from its prompt: never part of the message.
_BLOCK_LINE = re.compile(r"^\s*----- (?:begin|end) .* [0-9a-f]{12} -----\s*$", re.MULTILINE)
# A run that should stop after turn K sets this key in its configurable (graph.running.pausing).
PAUSE_AFTER_KEY = "dymt_pause_after"
# Empty drafts (an empty message, a filtered one) drawn again beyond the leakage attempts, at most this many.
EMPTY_REDRAWS = 8
GIVEN = "given"


async def user_simulator(state: DialogueState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Simulate the next user turn; the seed conditions this node and no other model-facing prompt.

    A message that states the seed (nodes.leakage), or a base model's message that repeats an earlier
    user message word for word, is drawn again with the next per-call seed, at most ``leakage_attempts`` times in all
    (``leakage="keep"`` keeps a leaking message and only redraws repeats); an empty draft (an empty or filtered
    answer) is drawn again on top of those, up to ``EMPTY_REDRAWS`` times. Every turn records its
    leakage score, whether it still leaks (flagged), the attempts made and what was rejected.
    """
    ctx = runtime.context
    model = ctx.models.user
    turn = current_turn(state) + 1
    _pause_if_asked(turn)
    statement = state["seed"]["statement"]
    if state.get("next_user_message") is not None:
        update = given_turn(turn, state["next_user_message"])  # type: ignore[arg-type]  # a given turn has its message
        update["turns"][0].update(leakage_fields(statement, state["next_user_message"]))  # type: ignore[arg-type]
        return update
    dialogue_key = sampling_key(state, ctx.models.target.spec)
    earlier = [m["content"] for m in state["messages"] if m["role"] == "user"]
    drafts: list[dict[str, Any]] = []  # every message drawn, with why it was drawn again
    chosen: tuple[int, str, str | None, Leakage] | None = None
    latency_total, tokens = 0.0, Counter[str]()
    try:
        attempt, limit = 0, max(1, ctx.leakage_attempts)
        while attempt < limit:
            attempt += 1
            seed = call_seed(ctx.sampling_seed, dialogue_key, turn, "user", attempt)
            text, utterance_type, latency, usage, why = await _draw(
                model, state, turn, seed, sampling_seed=ctx.sampling_seed
            )
            latency_total += latency
            tokens.update(usage)
            leak = leakage(statement, text)
            reason = _rejection(
                text,
                leak,
                earlier,
                regenerate_leaks=ctx.leakage != "keep",
                redraw_repeats=model.style == "transcript",
                non_reply=why,
            )
            drafts.append({"attempt": attempt, "reason": reason, "leakage": leak.score, "text": text})
            if reason is None or chosen is None or _better(text, leak, earlier, than=(chosen[1], chosen[3])):
                chosen = (attempt, text, utterance_type, leak)
            if reason is None:
                break
            if not text and limit < max(1, ctx.leakage_attempts) + EMPTY_REDRAWS:
                limit += 1  # an empty draft is no message at all: drawn again without spending a leakage attempt
        assert chosen is not None
        kept, text, utterance_type, leak = chosen
        if not text:
            raise ValueError(f"the user simulator returned an empty message {len(drafts)} time(s)")
    except Exception as exc:  # noqa: BLE001 - any provider failure ends the dialogue resumably
        return failure("user_simulator", exc)
    return {
        "messages": new_messages({"role": "user", "content": text}),
        "turns": [
            {
                "index": turn,
                "user_message": text,
                "utterance_type": utterance_type,
                "user_model": model.spec,
                "latency_user": round(latency_total, 4),
                "tokens": {f"user_{k}": v for k, v in tokens.items()},
                **leakage_fields(statement, text, leak=leak),
                "user_attempts": len(drafts),
                "user_rejected": [d for d in drafts if d["attempt"] != kept],
            }
        ],
    }


def leakage_fields(statement: str, text: str, *, leak: Leakage | None = None) -> dict[str, Any]:
    """The per-turn leakage record of a user message (score, its two measures, and the flag)."""
    leak = leak or leakage(statement, text)
    return {
        "leakage": leak.score,
        "leakage_containment": leak.containment,
        "leakage_ngram": leak.ngram_overlap,
        "leaked": leak.leaked,
    }


def _rejection(
    text: str,
    leak: Leakage,
    earlier: list[str],
    *,
    regenerate_leaks: bool,
    redraw_repeats: bool,
    non_reply: str | None = None,
) -> str | None:
    """Why a drawn message is drawn again ("empty", "leak", "repeat"), or None to keep it.

    An empty draft says why when its provider did (models.answers: "content filter", "safety block"): drawn again
    all the same, as a user turn must say something.

    Only a base model's verbatim repeats are redrawn: continuing a transcript, it copies lines from
    its context; a chat model that asks the same thing again means it.
    """
    if not text:
        return "empty" if non_reply in (None, EMPTY_MESSAGE) else f"empty ({non_reply})"
    if regenerate_leaks and leak.leaked:
        return "leak"
    if redraw_repeats and is_repeat(text, earlier):
        return "repeat"
    return None


def _better(text: str, leak: Leakage, earlier: list[str], *, than: tuple[str, Leakage]) -> bool:
    """Among rejected drafts the one kept is non-empty, then not a repeat, then the least leaking."""

    def rank(t: str, score: float) -> tuple[int, int, float]:
        return (0 if t else 1, 1 if is_repeat(t, earlier) else 0, score)

    return rank(text, leak.score) < rank(than[0], than[1].score)


async def _draw(
    model: Any, state: DialogueState, turn: int, seed: int, *, sampling_seed: int
) -> tuple[str, str | None, float, dict[str, int], str | None]:
    """One draft of the next user message: (text, utterance type, latency, token usage, why it is not a reply or
    None)."""
    mode = state["mode"]
    utterance_type: str | None = None
    if model.style == "transcript" and mode == "assessment":
        # A base model cannot follow instructions: it continues a transcript framed for it,
        # so in assessment mode the utterance type is drawn here and written into the framing.
        utterance_type = _draw_utterance_type(sampling_seed, state["seed"]["id"], turn)
    messages = user_prompt(model, state, turn, utterance_type=utterance_type)
    structured = model.style == "chat" and mode == "assessment"
    if structured:
        reply, latency, _ = await invoke_structured(
            model, messages, name="assessment_query", schema=ASSESSMENT_SCHEMA, seed=seed
        )
    else:
        reply, latency = await timed_invoke(model.chat, messages, seed=seed)
    raw = text_of(reply)
    if structured:
        utterance_type, text = parse_assessment(raw)
    else:
        text = clean_user_message(raw)
    return text, utterance_type, latency, token_usage(reply), non_reply(reply, raw)


def user_prompt(model: Any, state: DialogueState, turn: int, *, utterance_type: str | None = None) -> list[BaseMessage]:
    """The user simulator's request for ``turn``: the mode's prompt (or its --user-prompt file), the seed and the
    dialogue quoted (prompts/quoting.py) so that no reply can add to its frame; a base model continues the transcript of
    the dialogue's own messages (one line each)."""
    mode = state["mode"]
    # Every variable a user prompt may use (prompts.ROLE_VARIABLES), so a --user-prompt file can pick any.
    values: dict[str, Any] = {
        "statement": quoting.inline(state["seed"]["statement"]),
        "history": quoted_dialogue(model.style, state["messages"]),
        "turn": turn,
        "max_turns": state["max_turns"],
        "utterance_type": utterance_type or "",
    }
    if model.style == "transcript":
        template = model.prompt or prompts.load(f"user_{mode}.transcript")
        return template.render(**values) + as_chat_messages(state["messages"])
    template = model.prompt or prompts.load(f"user_{mode}")
    return template.render(**values)


def given_turn(turn: int, text: str) -> dict[str, Any]:
    """Send a message decided outside the simulator (a branch's change, a person's edit): no model call."""
    return {
        "messages": new_messages({"role": "user", "content": text}),
        "turns": [
            {"index": turn, "user_message": text, "utterance_type": GIVEN, "user_model": GIVEN, "latency_user": 0.0}
        ],
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
    """Split an assessment reply into its utterance type (None if absent, unknown or contradictory) and its query.

    A whole-answer JSON object ({"type", "query"}, structured output) is read first; else the type is read by the one
    verdict grammar (nodes/verdicts.py: a ``Type:`` first line), and the query is the ``Query:`` line onwards.
    """
    data, _ = json_answer(raw)
    if data is None and raw.lstrip().startswith("{"):
        # A structured reply cut short by max_tokens: keep what its fields hold so far.
        data = {"type": partial_json_field(raw, "type"), "query": partial_json_field(raw, "query")}
    if data is not None and isinstance(data.get("query"), str):
        kind: str | None = str(data.get("type") or "").strip().lower()
        return (kind if kind in UTTERANCE_TYPES else None), clean_user_message(data["query"])
    kind = read_answer(raw, TYPE_GRAMMAR).value  # type: ignore[assignment]  # the grammar's words are the types
    lines = raw.strip().splitlines()
    for start, line in enumerate(lines):
        if (first := labelled_text(line, ("query", "message"))) is not None:
            return kind, clean_user_message("\n".join([first, *lines[start + 1 :]]))
    return kind, clean_user_message("\n".join(line for line in lines if labelled_text(line, ("type",)) is None))


def clean_user_message(raw: str) -> str:
    """Strip labels and wrapping quotes a model may add around the message, and block lines copied from its
    prompt."""
    text = _LABEL_PREFIX.sub("", _BLOCK_LINE.sub("", raw).strip())
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    return text.strip()


def _draw_utterance_type(sampling_seed: int, seed_id: str, turn: int) -> str:
    """A reproducible utterance type for one turn of one dialogue."""
    return random.Random(f"{sampling_seed}:{seed_id}:{turn}").choice(UTTERANCE_TYPES)
