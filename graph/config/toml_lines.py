"""Where a TOML file defines each of its tables and keys, so that an error in a key's *value* can name its line
(``tomllib`` gives positions only for syntax errors).

The source has been parsed by ``tomllib`` already: it is valid TOML, and this reads it only as far as needed to find
table headers (``[a."b.c"]``, ``[[a]]``) and keys (``a.b = ...``), skipping values of every kind (strings of the four
sorts, arrays and inline tables over several lines, comments). Anything it cannot follow leaves no line, never a
wrong one.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_SPACE = " \t"


class TomlSource:
    """A TOML file's path and text: ``at(path...)`` names the file and the line of a key, as an error begins."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.text = path, text

    @cached_property
    def lines(self) -> dict[tuple[str, ...], int]:
        return key_lines(self.text)

    def at(self, *paths: Sequence[str]) -> str:
        """``FILE:LINE`` of the first of ``paths`` the file defines (or of its table), ``FILE`` if none."""
        line = line_of(self.lines, *paths)
        return f"{self.path}:{line}" if line is not None else str(self.path)


class _Unfollowed(Exception):
    """The source is not as valid TOML would be (or this reader is too simple for it): no lines."""


def key_lines(source: str) -> dict[tuple[str, ...], int]:
    """The 1-based line of each table header and key, by its full key path (an array of tables by its name)."""
    try:
        return _Reader(source).read()
    except (_Unfollowed, IndexError, tomllib.TOMLDecodeError):
        return {}


def line_of(lines: dict[tuple[str, ...], int], *paths: Sequence[str]) -> int | None:
    """The line of the first of ``paths`` the file defines; else of the longest defined prefix of the first (a missing
    key: the line of its table)."""
    for path in paths:
        if (found := lines.get(tuple(path))) is not None:
            return found
    if not paths:
        return None
    first = tuple(paths[0])
    for n in range(len(first) - 1, 0, -1):
        if (found := lines.get(first[:n])) is not None:
            return found
    return None


class _Reader:
    def __init__(self, source: str) -> None:
        self.text = source
        self.pos = 0
        self.line = 1
        self.lines: dict[tuple[str, ...], int] = {}

    def read(self) -> dict[tuple[str, ...], int]:
        table: tuple[str, ...] = ()
        while True:
            self._skip_blank(newlines=True)
            if self.pos >= len(self.text):
                return self.lines
            line = self.line
            if self.text[self.pos] == "[":
                double = self.text.startswith("[[", self.pos)
                self.pos += 2 if double else 1
                table = self._key("]")
                self.pos += 2 if double else 1
                for n in range(1, len(table) + 1):  # [a.b] defines a, if nothing did before
                    self.lines.setdefault(table[:n], line)
            else:
                key = self._key("=")
                self.pos += 1
                for n in range(1, len(key) + 1):  # a dotted key defines its tables on its line
                    self.lines.setdefault(table + key[:n], line)
                self._value()

    def _skip_blank(self, *, newlines: bool) -> None:
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in _SPACE or ch == "\r":
                self.pos += 1
            elif ch == "\n" and newlines:
                self.pos += 1
                self.line += 1
            elif ch == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                return

    def _key(self, end: str) -> tuple[str, ...]:
        """A (dotted) key up to ``end`` (not consumed)."""
        parts: list[str] = []
        while True:
            self._skip_blank(newlines=False)
            ch = self.text[self.pos]
            if ch in "\"'":
                start = self.pos
                self._string()
                parts.append(next(iter(tomllib.loads(self.text[start : self.pos] + " = 0"))))
            elif match := _BARE.match(self.text, self.pos):
                parts.append(match.group())
                self.pos = match.end()
            else:
                raise _Unfollowed
            self._skip_blank(newlines=False)
            ch = self.text[self.pos]
            if ch == ".":
                self.pos += 1
            elif ch == end:
                return tuple(parts)
            else:
                raise _Unfollowed

    def _string(self) -> None:
        """Past one string of any of the four kinds, counting the lines a multi-line one spans."""
        quote = self.text[self.pos]
        if self.text.startswith(quote * 3, self.pos):
            end = self.pos + 3
            while True:
                end = self.text.find(quote * 3, end)
                if end < 0:
                    raise _Unfollowed
                if quote == '"' and _escaped(self.text, end):
                    end += 1
                    continue
                break
            while self.text.startswith(quote, end + 3):  # up to two quotes of the content may close it
                end += 1
            self.line += self.text.count("\n", self.pos, end)
            self.pos = end + 3
            return
        end = self.pos + 1
        while True:
            end = self.text.find(quote, end)
            if end < 0 or "\n" in self.text[self.pos : end]:
                raise _Unfollowed
            if quote == '"' and _escaped(self.text, end):
                end += 1
                continue
            self.pos = end + 1
            return

    def _value(self) -> None:
        """Past a key's value: to the end of its line, or of the array or inline table it opens."""
        depth = 0
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in "\"'":
                self._string()
            elif ch in "[{":
                depth += 1
                self.pos += 1
            elif ch in "]}":
                depth -= 1
                self.pos += 1
            elif ch == "#" or ch in _SPACE or ch == "\r":
                self._skip_blank(newlines=False)
            elif ch == "\n":
                if depth == 0:
                    return
                self.pos += 1
                self.line += 1
            else:
                self.pos += 1


def _escaped(text: str, at: int) -> bool:
    """The character at ``at`` follows an odd number of backslashes."""
    n = 0
    while at - n - 1 >= 0 and text[at - n - 1] == "\\":
        n += 1
    return n % 2 == 1
