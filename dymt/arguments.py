"""The library's arguments checked as Python callers pass them: one string where a list of them is taken, the
wrong type said in one :class:`DymtError` line naming the keyword (never an AttributeError or a database error)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
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


def whole_number(value: Any, keyword: str) -> Any:
    """A count (1 or more), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DymtError(f"{keyword}={value!r}: give a whole number, 1 or more")
    return value


def integer(value: Any, keyword: str) -> int:
    """A whole number (a seed)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise DymtError(f"{keyword}={value!r}: give a whole number")
    return value


def share(value: Any, keyword: str, example: str) -> float:
    """A number strictly between 0 and 1 (a width, a drift); ``example`` says what one means."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise DymtError(f"{keyword}={value!r} must be between 0 and 1 ({example})")
    return float(value)


def path_of(value: Any, keyword: str) -> Path:
    """A file path (a string or an os.PathLike)."""
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise DymtError(f"{keyword}={value!r}: give a file path")
    return Path(value)


def paths(value: Any, keyword: str = "files") -> list[Path]:
    """One file path or a list of them (at least one)."""
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    if not isinstance(value, Sequence) or not value:
        raise DymtError(f"{keyword}={value!r}: give one file path or a list of them")
    return [path_of(v, keyword) for v in value]
