"""A model's reply split into the visible answer and its reasoning, whatever carries the reasoning.

A thinking model's reasoning arrives in one of several carriers:

- LangChain's standard content blocks of type ``reasoning`` (``message.content_blocks``): the providers' own
  integrations fill them from Gemini's thought parts (langchain-google-genai, ``include_thoughts``), OpenAI's
  reasoning summaries (langchain-openai, Responses API), and the ``reasoning_content`` field of OpenAI-compatible
  servers (langchain-deepseek's ``ChatDeepSeek`` reads it, and ``reasoning`` as OpenRouter and newer vLLM name it);
- ``<think>``, ``<thinking>`` or ``<reasoning>`` blocks at the start of the text, as Qwen3, DeepSeek-R1 distills and
  Olmo 3's Think models write them when a server has no reasoning parser. No integration reads those, so they are
  split here: a closed block, a block the cap cut before it closed, and a closing tag alone (the chat template
  opened the block in the prompt, as R1 distills' templates do). Only a block *before* the answer is reasoning: a
  tag later in the text is the answer's own text.

The visible answer is all that goes on: into the dialogue's history, the user simulator's and the judge's prompts.
The reasoning is stored beside the turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage

TAGS = ("think", "thinking", "reasoning")
# Carriers, as a turn records where its reasoning came from.
TAGGED = "tags in the text"
CONTENT_BLOCKS = "reasoning blocks"
REASONING_FIELD = "reasoning_content field"
THOUGHT_PARTS = "thought parts"
SUMMARY = "reasoning summary"

_OPEN = re.compile(r"\A\s*<(" + "|".join(TAGS) + r")>", re.IGNORECASE)
_CLOSE_ALONE = re.compile(r"</(" + "|".join(TAGS) + r")>", re.IGNORECASE)


@dataclass(frozen=True)
class SplitReply:
    """A reply as the dialogue keeps it: the visible ``answer``, and its ``reasoning`` (None: none came)."""

    answer: str
    reasoning: str | None = None
    carrier: str | None = None
    """Where the reasoning came from (one of the carriers above)."""
    cut: bool = False
    """The reasoning was cut before it ended (an unclosed block): the cap was reached while the model reasoned."""
    refusal: str | None = None
    """OpenAI's ``refusal`` field: the model's refusal, in its words (the answer then is that text)."""


def split_text(text: str) -> SplitReply:
    """``text`` without the reasoning blocks it starts with (see the module's docstring)."""
    thoughts: list[str] = []
    rest = text
    while (opened := _OPEN.match(rest)) is not None:
        tag = opened.group(1)
        end = re.search(rf"</{tag}>", rest[opened.end() :], re.IGNORECASE)
        if end is None:  # cut while reasoning: everything after the tag is reasoning
            thoughts.append(rest[opened.end() :])
            return _tagged("", thoughts, cut=True)
        thoughts.append(rest[opened.end() : opened.end() + end.start()])
        rest = rest[opened.end() + end.end() :]
    if not thoughts and (close := _CLOSE_ALONE.search(rest)) is not None and "<" + close.group(1) not in rest.lower():
        # The chat template opened the block in the prompt: the text starts inside it.
        thoughts.append(rest[: close.start()])
        rest = rest[close.end() :]
    if not thoughts:
        return SplitReply(text.strip())
    return _tagged(rest, thoughts)


def _tagged(rest: str, thoughts: list[str], *, cut: bool = False) -> SplitReply:
    reasoning = "\n\n".join(t.strip() for t in thoughts if t.strip())
    # An empty block (Qwen3 with thinking off writes "<think>\n\n</think>") is no reasoning.
    return SplitReply(rest.strip(), reasoning or None, TAGGED if reasoning else None, cut=cut and bool(reasoning))


def split_reply(message: BaseMessage) -> SplitReply:
    """The visible answer and the reasoning of a model's reply, whatever shape its provider gave it."""
    content = message.content
    if isinstance(content, str) and not _has_reasoning_fields(message):
        return split_text(content)  # the common case, without building content blocks
    texts: list[str] = []
    thoughts: list[str] = []
    refusals: list[str] = []
    for block in _blocks(message):
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "reasoning":
            thoughts.append(str(block.get("reasoning") or ""))
        elif kind == "refusal":
            refusals.append(str(block.get("refusal") or ""))
    refusal = "".join(refusals).strip() or _string(message.additional_kwargs.get("refusal"))
    if not thoughts and (summary := _summary(message.additional_kwargs.get("reasoning"))):
        thoughts.append(summary)
    tagged = split_text("".join(texts))
    reasoning = "\n\n".join(t.strip() for t in thoughts if t.strip())
    if not reasoning:
        return SplitReply(tagged.answer or (refusal or ""), tagged.reasoning, tagged.carrier, tagged.cut, refusal)
    if tagged.reasoning:  # both: a server that parsed some reasoning and left a block in the text
        reasoning = f"{reasoning}\n\n{tagged.reasoning}"
    return SplitReply(tagged.answer or (refusal or ""), reasoning, _carrier(message), tagged.cut, refusal)


def _has_reasoning_fields(message: BaseMessage) -> bool:
    extra = message.additional_kwargs or {}
    return any(extra.get(key) for key in ("reasoning_content", "reasoning", "refusal"))


def _blocks(message: BaseMessage) -> list[dict[str, Any]]:
    """LangChain's standard content blocks of ``message`` (its provider's translator, else its best effort)."""
    try:
        return [dict(block) for block in message.content_blocks]
    except Exception:  # noqa: BLE001 - a shape no translator knows: its text parts alone
        content = message.content
        parts = [content] if isinstance(content, str) else content
        return [{"type": "text", "text": p if isinstance(p, str) else p.get("text", "")} for p in parts]


def _carrier(message: BaseMessage) -> str:
    if (message.additional_kwargs or {}).get("reasoning_content"):
        return REASONING_FIELD
    content = message.content
    if isinstance(content, list):
        kinds = {part.get("type") for part in content if isinstance(part, dict)}
        if "thinking" in kinds:
            return THOUGHT_PARTS
        if "reasoning" in kinds:
            return SUMMARY
    if (message.additional_kwargs or {}).get("reasoning"):
        return SUMMARY
    return CONTENT_BLOCKS


def _summary(value: Any) -> str:
    """The text of an OpenAI reasoning item (``{"summary": [{"text": ...}]}``), or ""."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        parts = value.get("summary") or []
        return "\n\n".join(str(p.get("text") or "") for p in parts if isinstance(p, dict)).strip()
    return ""


def _string(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


# --------------------------------------------------------------------------- tokens


@dataclass(frozen=True)
class TokenSplit:
    """A reply's output tokens split into the answer's and the reasoning's."""

    answer: int
    reasoning: int
    estimated: bool
    """The provider reported no reasoning count: the reasoning's share of the output was estimated from the
    characters of the two texts."""


def token_split(message: BaseMessage, split: SplitReply) -> TokenSplit | None:
    """The reply's output tokens as answer and reasoning; None when the provider reported no usage."""
    usage = getattr(message, "usage_metadata", None) or {}
    if "output_tokens" not in usage:
        return None
    output = int(usage["output_tokens"])
    reported = (usage.get("output_token_details") or {}).get("reasoning")
    if reported is not None and (int(reported) > 0 or not split.reasoning):
        reasoning = min(int(reported), output)
        return TokenSplit(output - reasoning, reasoning, estimated=False)
    if not split.reasoning:
        return TokenSplit(output, 0, estimated=False)
    chars = len(split.reasoning) + len(split.answer)
    reasoning = round(output * len(split.reasoning) / chars) if chars else 0
    return TokenSplit(output - reasoning, reasoning, estimated=True)


def capped_answer(answer: str, answer_tokens: int, cap: int) -> str:
    """``answer`` cut to about ``cap`` tokens (its share of the characters, at a word's end) when it has more.

    A reasoning budget beside the reply's cap makes the request's own cap larger than the reply's: a model that
    reasons less than its budget could then answer longer than ``--max-tokens``, and the answer is cut here to the
    reply's cap (the turn says so, as a reply the provider cut).
    """
    if answer_tokens <= cap or not answer:
        return answer
    keep = max(1, len(answer) * cap // answer_tokens)
    cut = answer[:keep]
    if keep < len(answer) and not answer[keep].isspace() and " " in cut:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip()
