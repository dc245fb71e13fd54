"""Seed statements for bias dialogues: the Seed type, three sources and deterministic selection.

Sources are ``"builtin"`` (statements shipped in :mod:`seeds.builtin`), a path to a JSONL file,
or ``"fairmt:DIR"`` (FairMT-Bench read at run time from DIR; that data has no licence, so it is
never copied into this repository).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seeds.builtin import BUILTIN_STATEMENTS

CATEGORIES: tuple[str, ...] = ("age", "appearance", "disability", "gender", "race", "religion")

_FIELDS = ("id", "category", "statement")
_FAIRMT_PREFIX = "fairmt:"
_FAIRMT_TRACK = ("FairMT_10K", "Stereotype", "Negative_Feedback")
_FAIRMT_FILE_NAMES = {"disability": "disable"}
_FAIRMT_REASONS = re.compile(r"reasons\s+why\s+(.*)", re.IGNORECASE | re.DOTALL)
_TRAILING_PUNCT = " \t\r\n.?!;:,\u2026"


class SeedError(ValueError):
    """A seed source or selection is invalid; one-line message says what is wrong and the fix."""

    def __init__(self, message: str) -> None:
        """Keep the message on one line so it reads cleanly in CLI errors and logs."""
        super().__init__(" ".join(str(message).splitlines()))


@dataclass(frozen=True)
class Seed:
    """One stereotype statement that a dialogue is built around."""

    id: str
    category: str
    statement: str

    def __post_init__(self) -> None:
        """Reject malformed seeds at construction so bad data cannot reach a run."""
        for name in _FIELDS:
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise SeedError(f"Seed.{name} must be a non-empty string, got {_short(value)}")
        if self.category not in CATEGORIES:
            raise SeedError(f"unknown seed category {_short(self.category)}: use one of {_valid()}")


def load_seeds(
    source: str = "builtin",
    *,
    per_category: int | None = None,
    categories: Sequence[str] | None = None,
    limit: int | None = None,
    sample_seed: int = 0,
) -> list[Seed]:
    """Load seeds from a source, then filter, sample per category, sort and limit them."""
    _check_count("per_category", per_category)
    _check_count("limit", limit)
    wanted = _check_categories(categories)
    seeds = [s for s in _load_source(source, wanted) if s.category in wanted]
    if per_category is not None:
        seeds = _sample_per_category(seeds, per_category, sample_seed)
    seeds.sort(key=lambda s: (CATEGORIES.index(s.category), s.id))
    return seeds if limit is None else seeds[:limit]


def load_builtin() -> list[Seed]:
    """Return the built-in seeds with ids ``builtin-<category>-NN`` numbered from 01."""
    return [
        Seed(f"builtin-{category}-{n:02d}", category, statement)
        for category in CATEGORIES
        for n, statement in enumerate(BUILTIN_STATEMENTS[category], start=1)
    ]


def load_jsonl(path: str | Path) -> list[Seed]:
    """Read seeds from a JSONL file (id/category/statement per line), reporting errors by line."""
    path = Path(path)
    text = _read_text(path, "seed file")
    seeds: list[Seed] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(_lines(text), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SeedError(
                f"{where}: invalid JSON ({exc.msg} at column {exc.colno}); write one JSON object per line"
            ) from None
        if not isinstance(obj, dict):
            raise SeedError(f"{where}: expected a JSON object with {', '.join(_FIELDS)}, got {type(obj).__name__}")
        values: dict[str, str] = {}
        for name in _FIELDS:
            value = obj.get(name)
            if not isinstance(value, str) or not value.strip():
                raise SeedError(
                    f"{where}: field '{name}' is missing or empty (got {_short(value)}); "
                    f"every line needs non-empty strings for {', '.join(_FIELDS)}"
                )
            values[name] = value.strip()
        if values["category"] not in CATEGORIES:
            raise SeedError(f"{where}: unknown category {_short(values['category'])}; use one of {_valid()}")
        if values["id"] in first_line:
            raise SeedError(
                f"{where}: duplicate id {_short(values['id'])} (first used on line "
                f"{first_line[values['id']]}); give every seed a unique id"
            )
        first_line[values["id"]] = lineno
        seeds.append(Seed(values["id"], values["category"], values["statement"]))
    if not seeds:
        raise SeedError(f"seed file {path} has no seeds: add one JSON object per line with {', '.join(_FIELDS)}")
    return seeds


def load_fairmt(root: str | Path, categories: Iterable[str] = CATEGORIES) -> list[Seed]:
    """Extract de-duplicated stereotype statements from FairMT-Bench's Negative_Feedback track."""
    root = Path(root).expanduser()
    track = root.joinpath(*_FAIRMT_TRACK)
    if not root.is_dir():
        raise SeedError(
            f"FairMT-Bench directory not found: {root} (expected {track}/prompt_<category>.json); "
            "use fairmt:DIR with the folder that holds FairMT_10K"
        )
    seeds: list[Seed] = []
    for category in categories:
        seeds.extend(_load_fairmt_category(track, category))
    return seeds


def fairmt_statement(turn: str) -> str | None:
    """Turn the text after 'reasons why' into a capitalised statement ending in one period."""
    match = _FAIRMT_REASONS.search(turn)
    if match is None:
        return None
    statement = " ".join(match.group(1).split()).rstrip(_TRAILING_PUNCT)
    if not statement:
        return None
    return statement[0].upper() + statement[1:] + "."


def _load_fairmt_category(track: Path, category: str) -> list[Seed]:
    """Read one prompt_<category>.json file and return its unique statements as seeds."""
    path = track / f"prompt_{_FAIRMT_FILE_NAMES.get(category, category)}.json"
    if not path.is_file():
        raise SeedError(
            f"FairMT-Bench file not found: {path}; check that fairmt:DIR points at a full FairMT-Bench copy"
        )
    try:
        items = json.loads(_read_text(path, "FairMT-Bench file"))
    except json.JSONDecodeError as exc:
        message = f"{path}:{exc.lineno}: invalid JSON ({exc.msg}); restore the file"
        raise SeedError(message) from None
    if not isinstance(items, list):
        raise SeedError(f"{path}: expected a JSON list of dialogues, got {type(items).__name__}")
    seeds: list[Seed] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        statement = fairmt_statement(_last_turn(item)) if isinstance(item, dict) else None
        if statement is None:
            raise SeedError(
                f"{path}: item {index} has no last turn containing 'reasons why'; "
                "point fairmt:DIR at an unmodified FairMT-Bench copy"
            )
        key = _dedupe_key(statement)
        if key in seen:
            continue
        seen.add(key)
        digest = hashlib.sha1(key.encode("utf-8")).hexdigest()[:10]
        seeds.append(Seed(f"fairmt-{category}-{digest}", category, statement))
    return seeds


def _last_turn(item: dict[str, Any]) -> str:
    """Return the highest-numbered user turn of a FairMT dialogue, or '' if there is none."""
    turns = [item[key] for i in range(len(item)) if (key := f"{i}-turn Conv") in item]
    return turns[-1] if turns and isinstance(turns[-1], str) else ""


def _dedupe_key(statement: str) -> str:
    """Normalise case and whitespace so trivially different copies count as one statement."""
    return " ".join(statement.lower().split())


def _load_source(source: str, categories: tuple[str, ...]) -> list[Seed]:
    """Dispatch a source string to the matching loader."""
    if not isinstance(source, str) or not source.strip():
        raise SeedError(f"seed source {_short(source)} is empty: use builtin, a .jsonl file or fairmt:DIR")
    if source == "builtin":
        return load_builtin()
    if source.startswith(_FAIRMT_PREFIX):
        directory = source[len(_FAIRMT_PREFIX) :].strip()
        if not directory:
            raise SeedError("seed source 'fairmt:' has no directory: use fairmt:DIR")
        return load_fairmt(directory, categories)
    path = Path(source).expanduser()
    if path.is_file():
        return load_jsonl(path)
    if path.is_dir():
        raise SeedError(f"seed source '{source}' is a directory: pass a .jsonl file inside it")
    raise SeedError(f"seed source '{source}' not found: use builtin, a .jsonl file or fairmt:DIR")


def _sample_per_category(seeds: list[Seed], n: int, sample_seed: int) -> list[Seed]:
    """Pick up to n seeds per category with a fresh Random(sample_seed) over id-sorted seeds."""
    by_category: dict[str, list[Seed]] = {}
    for seed in seeds:
        by_category.setdefault(seed.category, []).append(seed)
    picked: list[Seed] = []
    for category in CATEGORIES:
        pool = sorted(by_category.get(category, []), key=lambda s: s.id)
        # A fresh generator per category keeps each category's pick independent of the filter.
        picked.extend(random.Random(sample_seed).sample(pool, min(n, len(pool))))
    return picked


def _check_count(name: str, value: int | None) -> None:
    """Require an optional count to be an integer of at least 1."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SeedError(f"{name} must be an integer >= 1, got {_short(value)}")


def _check_categories(categories: Sequence[str] | None) -> tuple[str, ...]:
    """Validate a category filter and return it in CATEGORIES order (all categories if None)."""
    if categories is None:
        return CATEGORIES
    if isinstance(categories, str):
        raise SeedError(
            f"categories must be a list of names, got the string {_short(categories)}: pass e.g. [{categories!r}]"
        )
    if not categories:
        raise SeedError(f"categories is empty: pass at least one of {_valid()} or None for all")
    for category in categories:
        if category not in CATEGORIES:
            raise SeedError(f"unknown category {_short(category)}: use one of {_valid()}")
    return tuple(c for c in CATEGORIES if c in categories)


def _read_text(path: Path, what: str) -> str:
    """Read a UTF-8 file, turning I/O and decoding failures into a one-line SeedError."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SeedError(f"{what} not found: {path}; check the path") from None
    except OSError as exc:
        raise SeedError(f"cannot read {what} {path}: {exc.strerror or exc}; it must be readable UTF-8 text") from None
    try:
        return data.decode("utf-8-sig")  # a byte-order mark (as spreadsheet programs write) is not part of the text
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SeedError(
            f"{path}:{line}: byte 0x{data[exc.start]:02x} at column {column} is not UTF-8; save the {what} as UTF-8"
        ) from None


def _lines(text: str) -> list[str]:
    """The file's lines, split at line feeds only: a JSON string may hold U+2028 or U+2029 (valid JSON), which
    ``str.splitlines`` would split on."""
    return [line.removesuffix("\r") for line in text.split("\n")]


def _valid() -> str:
    """List the valid categories for error messages."""
    return ", ".join(CATEGORIES)


def _short(value: object, width: int = 60) -> str:
    """Repr a value for an error message, cut short so the message stays readable."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
