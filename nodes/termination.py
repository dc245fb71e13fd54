"""Termination: loop for another turn, or end and record why."""

from __future__ import annotations

from typing import Any, Literal

from nodes.state import DialogueState


def termination(state: DialogueState) -> dict[str, Any]:
    """Record the stop reason once the dialogue has all its turns or a node failed."""
    if state.get("error"):
        return {"stop_reason": "error"}
    if completed_turns(state) >= state["max_turns"]:
        return {"stop_reason": "max_turns"}
    return {}


def route_after_termination(state: DialogueState) -> Literal["user_simulator", "scripted_user", "__end__"]:
    """Another turn unless a stop reason was recorded."""
    return "__end__" if state.get("stop_reason") else route_user(state)


def route_user(state: DialogueState) -> Literal["user_simulator", "scripted_user"]:
    """Who writes the next user message: the simulator, or the script of a baseline dialogue."""
    return "scripted_user" if state.get("script") else "user_simulator"


def completed_turns(state: DialogueState) -> int:
    """Turns whose reply has been labelled."""
    return sum(1 for t in state["turns"] if "label" in t)
