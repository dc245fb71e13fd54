"""The dialogue state that LangGraph checkpoints after every node.

Only JSON-native values live here (dicts, lists, strings, numbers), so the
checkpoint serializer never needs to rebuild a Python class. Keys and node names
are stored in checkpoints: treat them as schema, add keys rather than rename.
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal, NotRequired, TypedDict

Mode = Literal["implicit", "assessment"]
MODES: tuple[str, ...] = ("implicit", "assessment")
Label = Literal["biased", "not_biased", "unparsed"]
StopReason = Literal["max_turns", "error"]
UTTERANCE_TYPES: tuple[str, ...] = ("anaphora", "reasoning", "clarification")


class SeedRecord(TypedDict):
    """The hidden stereotype that conditions the user simulator only."""

    id: str
    category: str
    statement: str


class ChatTurn(TypedDict):
    """One message the target can see: role is 'user' or 'assistant'."""

    role: Literal["user", "assistant"]
    content: str


class TurnRecord(TypedDict, total=False):
    """Everything known about one turn; nodes fill it in part by part."""

    index: int
    user_message: str
    utterance_type: str | None
    reply: str
    label: Label
    rationale: str
    p_biased: float | None
    judge_raw: str
    user_model: str
    target_model: str
    judge_model: str
    latency_user: float
    latency_target: float
    latency_judge: float
    tokens: dict[str, int]
    # Seed leakage of the user message (nodes.leakage): score, its two measures, the flag, and the
    # simulator's redraws (attempts made; the drafts it rejected, with why).
    leakage: float
    leakage_containment: float
    leakage_ngram: float
    leaked: bool
    user_attempts: int
    user_rejected: list[dict]
    target_attempts: int  # a base-model target's redraws of a reply copied from its own earlier one


def merge_turns(left: list[TurnRecord], right: list[TurnRecord]) -> list[TurnRecord]:
    """Reducer: a node's partial record for turn i is merged into turn i, never appended twice."""
    merged = {t["index"]: dict(t) for t in left}
    for part in right:
        record = merged.setdefault(part["index"], {})
        tokens = {**record.get("tokens", {}), **part.get("tokens", {})}
        record.update(part)
        if tokens:
            record["tokens"] = tokens
    return [merged[i] for i in sorted(merged)]  # type: ignore[misc]


class DialogueState(TypedDict):
    """The whole dialogue: its seed and settings, what the target sees, and one record per turn."""

    seed: SeedRecord
    mode: str
    max_turns: int
    messages: Annotated[list[ChatTurn], operator.add]
    turns: Annotated[list[TurnRecord], merge_turns]
    stop_reason: NotRequired[StopReason | None]
    error: NotRequired[str | None]
    failed_node: NotRequired[str | None]
    # Baselines replay pre-written user turns (FairMT-Bench tracks, the zero-shot question).
    script: NotRequired[list[str] | None]
    # A user message decided outside the simulator (a branch's --user-message or --swap, a person at a
    # pause): the user simulator sends it as turn text instead of calling its model, then clears it.
    next_user_message: NotRequired[str | None]


def current_turn(state: DialogueState) -> int:
    """1-based index of the turn being played: the number of user messages so far."""
    return sum(1 for m in state["messages"] if m["role"] == "user")


def apply_update(state: dict, update: dict) -> dict:
    """``state`` after a node's ``update``, as the graph's channels apply it (appended messages, merged turns).

    Used where a dialogue is rebuilt from node outputs outside LangGraph (compact traces).
    """
    merged = dict(state)
    for key, value in update.items():
        if key == "messages":
            merged[key] = [*state.get(key, []), *value]
        elif key == "turns":
            merged[key] = merge_turns(state.get(key, []), value)
        else:
            merged[key] = value
    return merged
