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

from typing import Annotated, Literal, NotRequired, TypedDict

from langgraph.channels.delta import DeltaChannel

from checkpoints.reducers import append_messages, merge_turn_writes
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
    # A well-formed answer that is not a (whole) reply (models.answers.NON_REPLY_KINDS): "content filter",
    # "safety block", "empty message", "cut at max_tokens"; of the target's reply, and of the judge's verdict.
    non_reply: str
    judge_non_reply: str
    # The target's reasoning, split off its reply (models/reasoning.py): its text and where it came from; never in
    # ``messages``. With --judge-reasoning, the judge's label of it (``reasoning_label`` and the rest, as label_fields).
    reasoning: str
    reasoning_carrier: str
    reasoning_label: Label
    reasoning_rationale: str
    reasoning_p_biased: float | None
    reasoning_judge_raw: str
    reasoning_latency_judge: float


def new_messages(*messages: ChatTurn) -> tuple[ChatTurn, ...]:
    """What an update writes under ``messages``: a tuple of chat turns, not a list.

    LangGraph turns the message-like dicts of a *list* written to a delta channel into LangChain
    message objects with fresh ids; a tuple is stored as it is (and reads back as a list).
    """
    return tuple(messages)


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
    error_class: NotRequired[str | None]  # the failure's exception class, for debugging (``error`` is in words)
    # Baselines replay pre-written user turns (FairMT-Bench tracks, the zero-shot question).
    script: NotRequired[list[str] | None]
    # A user message decided outside the simulator (a branch's --user-message or --swap, a person at a
    # pause): the user simulator sends it as turn text instead of calling its model, then clears it.
    next_user_message: NotRequired[str | None]


def current_turn(state: DialogueState) -> int:
    """1-based index of the turn being played: the number of user messages so far."""
    return sum(1 for m in state["messages"] if m["role"] == "user")
