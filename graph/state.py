"""The dialogue state that LangGraph checkpoints after every node.

Only JSON-native values live here (dicts, lists, strings, numbers), so the
checkpoint serializer never needs to rebuild a Python class. Keys and node names
are stored in checkpoints: treat them as schema, add keys rather than rename.

The two lists that grow every turn (``messages``, ``turns``) are LangGraph delta
channels: a checkpoint stores only what each step wrote, and a state is rebuilt by
replaying the writes since the nearest stored value, so the store grows linearly in
turns. Threads written when they were plain reducer channels (every checkpoint held
the whole list) load unchanged: their stored lists are the values the replay starts from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal, NotRequired, TypedDict

from langgraph.channels.delta import DeltaChannel

from checkpoints.vocabulary import Label

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


def new_messages(*messages: ChatTurn) -> tuple[ChatTurn, ...]:
    """What an update writes under ``messages``: a tuple of chat turns, not a list.

    LangGraph turns the message-like dicts of a *list* written to a delta channel into LangChain
    message objects with fresh ids; a tuple is stored as it is (and reads back as a list).
    """
    return tuple(messages)


def _chat_turn(message: object) -> ChatTurn:
    if isinstance(message, dict):
        return message  # type: ignore[return-value]
    # A list written by mistake was turned into a LangChain message: store what the target sees.
    role = "user" if getattr(message, "type", None) == "human" else "assistant"
    return {"role": role, "content": getattr(message, "content", str(message))}


def append_messages(state: list[ChatTurn], writes: Sequence[Sequence[ChatTurn]]) -> list[ChatTurn]:
    """Delta reducer of ``messages``: every write's messages appended in order (what ``operator.add`` did)."""
    out = list(state)
    for write in writes:
        out.extend(m if type(m) is dict else _chat_turn(m) for m in write)
    return out


def merge_turn_writes(state: list[TurnRecord], writes: Sequence[list[TurnRecord]]) -> list[TurnRecord]:
    """Delta reducer of ``turns``: :func:`merge_turns` folded over the writes, in one pass.

    Folding write by write is what makes it batching-invariant, as delta channels require:
    replaying two batches one after the other gives what replaying them together gives.
    """
    parts = [part for write in writes for part in write]
    return merge_turns(state, parts) if parts else list(state)


# Snapshot (store the whole list) after this many updates of the channel (2-3 a turn): replay depth stays
# bounded on very long dialogues, while a dialogue of up to ~30 turns stores each message once.
SNAPSHOT_EVERY = 100


class DialogueState(TypedDict):
    """The whole dialogue: its seed and settings, what the target sees, and one record per turn."""

    seed: SeedRecord
    mode: str
    max_turns: int
    messages: Annotated[list[ChatTurn], DeltaChannel(append_messages, snapshot_frequency=SNAPSHOT_EVERY)]
    turns: Annotated[list[TurnRecord], DeltaChannel(merge_turn_writes, snapshot_frequency=SNAPSHOT_EVERY)]
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
