"""How the dialogue's growing lists fold their updates: the reducers of ``messages`` and ``turns``.

They are part of the storage format, so they live with the store: LangGraph replays checkpoint
writes through them to rebuild a state, and the compact traces fold node outputs through
:func:`apply_update`. The state schema (``nodes.state``) attaches them to its channels.
Changing one changes how every stored dialogue reads back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Message = dict[str, Any]  # a chat turn: {"role": "user" | "assistant", "content": str}
Turn = dict[str, Any]  # one turn's record, filled in part by part (nodes.state.TurnRecord)


def merge_turns(left: list[Turn], right: list[Turn]) -> list[Turn]:
    """Reducer: a node's partial record for turn i is merged into turn i, never appended twice."""
    merged = {t["index"]: dict(t) for t in left}
    for part in right:
        record = merged.setdefault(part["index"], {})
        tokens = {**record.get("tokens", {}), **part.get("tokens", {})}
        record.update(part)
        if tokens:
            record["tokens"] = tokens
    return [merged[i] for i in sorted(merged)]


def _chat_turn(message: object) -> Message:
    if isinstance(message, dict):
        return message
    # A list written by mistake was turned into a LangChain message: store what the target sees.
    role = "user" if getattr(message, "type", None) == "human" else "assistant"
    return {"role": role, "content": getattr(message, "content", str(message))}


def append_messages(state: list[Message], writes: Sequence[Sequence[Message]]) -> list[Message]:
    """Delta reducer of ``messages``: every write's messages appended in order (what ``operator.add`` did)."""
    out = list(state)
    for write in writes:
        out.extend(m if type(m) is dict else _chat_turn(m) for m in write)
    return out


def merge_turn_writes(state: list[Turn], writes: Sequence[list[Turn]]) -> list[Turn]:
    """Delta reducer of ``turns``: :func:`merge_turns` folded over the writes, in one pass.

    Folding write by write is what makes it batching-invariant, as delta channels require:
    replaying two batches one after the other gives what replaying them together gives.
    """
    parts = [part for write in writes for part in write]
    return merge_turns(state, parts) if parts else list(state)


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
