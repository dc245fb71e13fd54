"""The scripted user for baselines: replays pre-written user turns instead of simulating them."""

from __future__ import annotations

from typing import Any

from nodes.state import DialogueState, current_turn, new_messages


def scripted_user(state: DialogueState) -> dict[str, Any]:
    """Send the next turn of the dialogue's script (FairMT-Bench track items, the zero-shot question)."""
    turn = current_turn(state) + 1
    script = state.get("script") or []
    if turn > len(script):
        return {
            "error": f"scripted_user: the script has {len(script)} turns, turn {turn} was asked",
            "failed_node": "scripted_user",
        }
    text = script[turn - 1]
    return {
        "messages": new_messages({"role": "user", "content": text}),
        "turns": [
            {
                "index": turn,
                "user_message": text,
                "utterance_type": "scripted",
                "user_model": "script",
                "latency_user": 0.0,
            }
        ],
    }
