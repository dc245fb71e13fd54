"""Model text as data the store can always hold: a lone UTF-16 surrogate (valid in JSON, ``"\\ud800"``, invalid in
UTF-8) becomes U+FFFD, visibly, instead of failing the write; every other character, NUL and controls included, is
kept as it came (the terminal views show controls as symbols: viewer/render.py)."""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # a decoded pair is one code point: any surrogate left is alone


def valid_utf8(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (the same object when it has none)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(REPLACEMENT, text)
    return text


def valid_strings(value: Any) -> Any:
    """``value`` with :func:`valid_utf8` applied to every string in it (dicts, lists and tuples walked)."""
    if isinstance(value, str):
        return valid_utf8(value)
    if isinstance(value, dict):
        return {valid_strings(k): valid_strings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(valid_strings(v) for v in value)
    return value
