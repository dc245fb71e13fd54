"""The library's arguments checked as Python callers pass them: one string where a list of them is taken, the
wrong type said in one :class:`DymtError` line naming the keyword (never an AttributeError or a database error)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dymt.errors import DymtError


def strings(value: Any, keyword: str) -> list[str]:
    """``value`` as a list of strings: None is none, one string is one (``runs="ab"`` is the run ``ab``), a list or
    tuple of strings is itself; anything else raises."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (bytes, Mapping)) or not isinstance(value, Iterable):
        raise DymtError(f"{keyword}={value!r}: give a string or a list of strings")
    items = list(value)
    if wrong := next((item for item in items if not isinstance(item, str)), None):
        raise DymtError(f"{keyword}={value!r}: {wrong!r} is not a string")
    return items


def string(value: Any, keyword: str) -> str:
    """``value`` as one non-empty string (a run id, a thread id): a list of them raises, saying so."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, (list, tuple)) and len(value) == 1 and isinstance(value[0], str):
        raise DymtError(f"{keyword}={value!r}: give one id as a string ({keyword}={value[0]!r})")
    raise DymtError(f"{keyword}={value!r}: give one id as a non-empty string")
