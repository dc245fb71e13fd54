"""Chat messages rendered as the plain one-line-per-turn transcript a base model continues, and its stop sequences."""

from __future__ import annotations

from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

# A transcript line longer than this is cut (head kept): a 20,000-character reply must not push a
# dialogue past the context window, and the first part of a turn carries what a 270M model can use.
MAX_LINE_CHARS = 1500


def _one_line(text: str) -> str:
    """Collapse a message onto one line so that each transcript line is exactly one turn."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def render_transcript(
    messages: list[BaseMessage],
    *,
    human_label: str = "User",
    ai_label: str = "Assistant",
    generate_as: Literal["ai", "human"] = "ai",
) -> str:
    """Render chat messages as the plain transcript a base model continues."""
    system: list[str] = []
    lines: list[str] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            if lines:
                raise ValueError(
                    "a system message after the dialogue started cannot be rendered as a "
                    "transcript: put all system messages first"
                )
            system.append(message.text.strip())
        elif isinstance(message, HumanMessage):
            lines.append(f"{human_label}: {_one_line(message.text)}")
        elif isinstance(message, AIMessage):
            lines.append(f"{ai_label}: {_one_line(message.text)}")
        else:
            raise ValueError(
                f"cannot render a {type(message).__name__} as a transcript line: "
                "only system, human and AI messages are supported"
            )
    lines.append(f"{ai_label if generate_as == 'ai' else human_label}:")
    head = "\n".join(part for part in system if part)
    return f"{head}\n\n" + "\n".join(lines) if head else "\n".join(lines)


def transcript_stops(
    *,
    human_label: str = "User",
    ai_label: str = "Assistant",
    generate_as: Literal["ai", "human"] = "ai",
    stop: list[str] | None = None,
) -> list[str]:
    """Stop sequences: the start of the next line of either speaker, then any given ones."""
    other, own = (human_label, ai_label) if generate_as == "ai" else (ai_label, human_label)
    stops = [f"\n{other}:", f"\n{own}:"]
    return stops + [s for s in stop or [] if s not in stops]
