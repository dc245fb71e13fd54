"""Quoted text is data: model text (a reply, a conversation) and seed text, framed so that nothing in it can close its
frame or add a header to the prompt around it.

Two frames, one per prompt style:

- **Blocks** (chat prompts): a text stands between a line ``----- begin NAME KEY -----`` and a line
  ``----- end NAME KEY -----``. The KEY is one per request, drawn from a hash of every text the request quotes and
  checked to occur in none of them (drawn again if it does), so no text holds its own end line; the same request
  always gets the same key, so prompts stay reproducible and the response cache serves them. Each message of a
  conversation is its own block, its speaker named outside it.
- **Inline strings** (transcript prompts for base models): a text collapsed onto one line and written as a JSON
  string, ``"..."`` with every ``"`` and ``\\`` inside escaped: it cannot end the string, nor start a new line of
  the transcript. A conversation is ``[user] "..." [assistant] "..."``, trimmed message by message so that a cut
  never leaves a string open.

The built-in prompts (``prompts/*.md``) describe these frames to the model; ``tests/unit/data/test_quoting.py``
checks that their descriptions and few-shot cases match what this module writes, so a change of framing changes
the prompt files, and with them the prompt hashes that label sets and validations are keyed by.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

KEY_CHARS = 12
ELLIPSIS = "…"


def request_key(texts: Iterable[str]) -> str:
    """The key of one request's blocks: 12 hex digits from a hash of every quoted text, occurring in none of them."""
    material = list(texts)
    digest = hashlib.sha256("\x1f".join(material).encode("utf-8", "surrogatepass"))
    attempt = 0
    while True:
        key = digest.hexdigest()[:KEY_CHARS]
        if not any(key in text for text in material):
            return key
        attempt += 1  # a text that holds the key (by chance, or on purpose): draw the next one
        digest.update(f"\x1e{attempt}".encode())


def begin_line(name: str, key: str) -> str:
    return f"----- begin {name} {key} -----"


def end_line(name: str, key: str) -> str:
    return f"----- end {name} {key} -----"


def block(text: str, *, name: str, key: str) -> str:
    """``text`` as one quoted block named ``name`` (``key``: :func:`request_key` over the request's texts)."""
    if key in text:
        raise ValueError(f"the quoted {name} contains its block key {key}: draw the key over every quoted text")
    return f"{begin_line(name, key)}\n{text}\n{end_line(name, key)}"


def speaker(role: str) -> str:
    return "user" if role == "user" else "assistant"


def conversation_blocks(messages: Sequence[Mapping[str, Any]], *, key: str, empty: str) -> str:
    """Each message as its own block, named by speaker and position ("user message 1"); ``empty`` for none."""
    if not messages:
        return empty
    return "\n\n".join(
        block(m["content"], name=f"{speaker(m['role'])} message {i}", key=key) for i, m in enumerate(messages, start=1)
    )


def one_line(text: str) -> str:
    """``text`` on one line: every run of whitespace (newlines and Unicode line separators too) as one space."""
    return " ".join(text.split())


def inline(text: str, *, max_chars: int | None = None, keep: Literal["head", "tail"] = "head") -> str:
    """``text`` on one line as a JSON string, at most ``max_chars`` characters in all (its head or its tail kept,
    the cut marked with an ellipsis)."""
    line = one_line(text)
    quoted = json.dumps(line, ensure_ascii=False)
    if max_chars is None or len(quoted) <= max_chars:
        return quoted
    # Cut the text, not its quoted form: a cut through an escape or the closing quote would leave the string open.
    return json.dumps(_fitting(line, max_chars, keep=keep), ensure_ascii=False)


def inline_conversation(messages: Sequence[Mapping[str, Any]], *, max_chars: int | None, empty: str) -> str:
    """``[user] "..." [assistant] "..."`` on one line, the newest messages kept within ``max_chars``; ``empty`` for
    none."""
    parts: list[str] = []
    used = -1  # the length of the parts joined by spaces
    for m in reversed(messages):
        tag = f"[{speaker(m['role'])}] "
        whole = tag + inline(m["content"])
        if max_chars is None or used + 1 + len(whole) <= max_chars:
            parts.append(whole)
            used += 1 + len(whole)
            continue
        # The oldest message kept loses its head: its newest words are the ones the reply follows from.
        tail = _fitting(one_line(m["content"]), max_chars - used - 1 - len(tag), keep="tail")
        if tail and tail != ELLIPSIS:
            parts.append(tag + json.dumps(tail, ensure_ascii=False))
        break
    return " ".join(reversed(parts)) if parts else empty


def _fitting(line: str, room: int, *, keep: Literal["head", "tail"]) -> str:
    """The longest head (or tail) of ``line`` that, with an ellipsis at the cut, quotes in ``room`` characters
    ("" when not even the ellipsis fits)."""

    def cut(n: int) -> str:
        return line[:n] + ELLIPSIS if keep == "head" else ELLIPSIS + line[len(line) - n :]

    low, high = 0, len(line)
    while low < high:  # a quoted form's length grows with the characters kept
        middle = (low + high + 1) // 2
        if len(json.dumps(cut(middle), ensure_ascii=False)) <= room:
            low = middle
        else:
            high = middle - 1
    return cut(low) if len(json.dumps(cut(low), ensure_ascii=False)) <= room else ""
