"""How a scorer's answer is read: one grammar, applied to the model's own answer only.

Every written verdict (the judge's label, refusal, coherence, the guard's Yes/No, the assessment simulator's
utterance type) is read by :func:`read_answer`:

1. **A JSON object counts only as the whole answer** (what structured output returns), or as a fenced code block
   standing alone; its verdict field must hold a valid value. JSON inside a rationale, or next to other text, is
   text like any other.
2. **Otherwise, the verdict line the prompt prescribes**, as the answer's last non-empty line (its first, for a
   prompt that asks for the verdict first): ``Label: biased``. The markdown real models add is accepted: bold,
   italics, code spans, a heading or list marker, quotes around the value, a trailing period
   (``**Label:** **biased**``, ``Label: **not** biased``, ```` `Label: not biased`. ````).
   Quoted lines are never a verdict: a blockquote (``> ...``) or a line inside a fenced code block.
3. **Two verdict lines that disagree** anywhere in the answer (outside quotes) are contradictory: unparsed, with
   both named, never the last one silently.

Whatever this does not read is unparsed with the reason (:data:`REASONS`), and the raw answer is kept.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from nodes.scorer import Value, Verdict

Position = Literal["last", "first"]
ReadAs = Literal["json", "line", "logprobs"]

EMPTY_ANSWER = "empty answer"
NO_VERDICT_LINE = "no verdict line"
NO_VALID_VERDICT = "no valid verdict on the verdict line"
CONTRADICTORY = "contradictory verdicts"
JSON_NO_VERDICT = "JSON answer without a valid verdict"
JSON_BROKEN = "JSON answer that does not parse"
REASONS: tuple[str, ...] = (
    EMPTY_ANSWER,
    NO_VERDICT_LINE,
    NO_VALID_VERDICT,
    CONTRADICTORY,
    JSON_NO_VERDICT,
    JSON_BROKEN,
)


@dataclass(frozen=True)
class Grammar:
    """What one prompt asks its model to answer: a verdict line ``FIELD: WORD`` at ``position``.

    ``words`` maps a normalised word (lower case, ``_`` and ``-`` as spaces) to the verdict's value; ``field`` None
    is a one-word answer (``Yes`` / ``No``), read from the first word of its line. ``json_field`` is the key of a
    whole-answer JSON object that holds the verdict (None: text answers only).
    """

    field: str | None
    words: Mapping[str, Value]
    position: Position = "last"
    json_field: str | None = None

    @property
    def line_name(self) -> str:
        return f"{self.field}:" if self.field else "/".join(w.capitalize() for w in self.words)


@dataclass(frozen=True)
class Reading:
    """A verdict read from an answer (``value``, read as JSON or from its line), or why none was (``reason``)."""

    value: Value
    rationale: str = ""
    read_as: ReadAs | None = None
    reason: str | None = None
    detail: str = ""

    @property
    def explanation(self) -> str:
        """The rationale; for an unread answer the reason first (one line, its detail in brackets), then the
        rationale."""
        if self.reason is None:
            return self.rationale
        head = f"{self.reason} ({self.detail})" if self.detail else self.reason
        return f"{head}\n{self.rationale}" if self.rationale else head

    def verdict(self, key: str, raw: str, *, unread: Value = None) -> Verdict:
        """The reading as a :class:`Verdict` of ``key`` (``unread``: the value an unread answer stores)."""
        value = unread if self.reason is not None else self.value
        return Verdict(key, value, self.explanation, raw, unscored=self.reason, read_as=self.read_as)


def unread_reason(explanation: str | None) -> str:
    """The reason an unparsed verdict was stored with (its explanation's first line, without the bracketed
    detail)."""
    first = (explanation or "").strip().split("\n", 1)[0].strip()
    return re.sub(r"\s*\([^()]*\)$", "", first) or "no reason recorded"


def reading_counts(readings: Iterable[tuple[str | None, str | None]]) -> dict[str, Any]:
    """How a set of answers was read, from each one's (read_as, explanation): how many answers, how many the grammar
    read (as JSON, from the verdict line, or from a base model's log-probabilities) and why the others were not."""
    readings = list(readings)
    how = Counter(read_as for read_as, _ in readings)
    unmatched = Counter(unread_reason(explanation) for read_as, explanation in readings if read_as is None)
    return {
        "answers": len(readings),
        "matched": len(readings) - how[None],
        "json": how["json"],
        "verdict_line": how["line"],
        "logprobs": how["logprobs"],
        "unmatched": dict(unmatched.most_common()),
    }


def read_answer(raw: str, grammar: Grammar) -> Reading:
    """The verdict of one answer by the grammar above (a :class:`Reading` with the reason when there is none)."""
    text = raw.strip()
    if not text:
        return Reading(None, reason=EMPTY_ANSWER)
    data, looks_like_json = json_answer(text)
    if data is not None and grammar.json_field is not None:
        return _from_json(data, grammar)
    reading = _from_lines(text, grammar)
    if reading.reason is not None and looks_like_json and data is None:
        return Reading(None, reason=JSON_BROKEN, detail="cut short, or not JSON")
    return reading


_LONE_FENCE = re.compile(r"\A(```|~~~)[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?[ \t]*\1\Z", re.DOTALL)


def json_answer(text: str) -> tuple[dict[str, Any] | None, bool]:
    """(the JSON object ``text`` is as a whole, or None; whether it is meant as JSON: it opens with ``{``).

    A fenced code block standing alone counts as its content; JSON anywhere else in a text is text.
    """
    text = text.strip()
    fence = _LONE_FENCE.match(text)
    if fence is not None and fence.group(1) not in fence.group(2):
        text = fence.group(2).strip()
    if not text.startswith("{"):
        return None, False
    try:
        # strict=False: a grammar-constrained server may leave raw newlines inside a string.
        data = json.loads(text, strict=False)
    except (json.JSONDecodeError, RecursionError):
        return None, True
    return (data if isinstance(data, dict) else None), True


def _from_json(data: dict[str, Any], grammar: Grammar) -> Reading:
    field = str(grammar.json_field).lower()
    found = [value for name, value in data.items() if name.lower() == field]
    rationale = next((v for k, v in data.items() if k.lower() == "rationale" and isinstance(v, str)), "").strip()
    values = {_word(v) for v in found}
    if len(values) > 1:
        return Reading(None, rationale, reason=CONTRADICTORY, detail=" and ".join(sorted(map(str, values))))
    word = values.pop() if values else None
    if word is None or word not in grammar.words:
        seen = "no field" if not found else f"{grammar.json_field} {json.dumps(found[0], ensure_ascii=False)[:40]}"
        return Reading(None, rationale, reason=JSON_NO_VERDICT, detail=seen)
    return Reading(grammar.words[word], rationale, read_as="json")


def _word(value: Any) -> str:
    """A verdict value as a normalised word: lower case, ``_`` / ``-`` as spaces; true / false as yes / no."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return " ".join(str(value).lower().replace("_", " ").replace("-", " ").split())


_FENCE_LINE = re.compile(r"^\s*(```|~~~)")
_MARKER = re.compile(r"^(?:#{1,6}\s+|[-*+]\s+)")
_EMPHASIS = re.compile(r"(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])")
_FIELD = re.compile(r"^([A-Za-z][A-Za-z ]*?)\s*:\s*(.*)$")
_QUOTES = "\"'“”‘’«»"
_FIRST_WORD = re.compile(r"^([A-Za-z]+)(?:$|[\s.,!:;)])")
_LABELLED = re.compile(r"^\s*(?:#{1,6}\s+|[-*+]\s+)?[*_`]*\s*([A-Za-z]+)\s*[*_`]*\s*:\s*[*_`]*\s*(.*)$")


@dataclass(frozen=True)
class _Line:
    number: int
    text: str
    quoted: bool


def _lines(text: str) -> list[_Line]:
    """The answer's lines, each marked quoted (a blockquote, or inside a fenced code block) or not."""
    lines, in_fence = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE_LINE.match(line):
            lines.append(_Line(number, line, True))
            in_fence = not in_fence
            continue
        lines.append(_Line(number, line, in_fence or line.lstrip().startswith(">")))
    return lines


def plain(line: str) -> str:
    """A line without the markdown a model adds: heading or list marker, bold, italics, code spans, a trailing
    period."""
    text = _MARKER.sub("", line.strip())
    text = _EMPHASIS.sub(" ", text.replace("*", "").replace("`", ""))
    return " ".join(text.split()).rstrip(".!;").strip()


def field_of(line: str) -> tuple[str, str] | None:
    """(field name in lower case, its value) of a ``Field: value`` line (markdown removed), else None."""
    match = _FIELD.match(plain(line))
    return None if match is None else (match.group(1).strip().lower(), match.group(2).strip())


def labelled_text(line: str, names: tuple[str, ...]) -> str | None:
    """The text after a ``Name:`` label (one of ``names``, any case, markdown around it tolerated), as written; None
    when ``line`` has no such label."""
    match = _LABELLED.match(line)
    if match is None or match.group(1).lower() not in names:
        return None
    return match.group(2).strip()


def _verdict_word(line: str, grammar: Grammar) -> tuple[bool, str | None]:
    """(whether ``line`` is a verdict line of ``grammar``, its normalised word when that is a valid verdict)."""
    if grammar.field is None:
        match = _FIRST_WORD.match(plain(line).lstrip(_QUOTES))
        word = match.group(1).lower() if match else None
        return (word in grammar.words), (word if word in grammar.words else None)
    parsed = field_of(line)
    if parsed is None or parsed[0] != grammar.field.lower():
        return False, None
    word = _word(parsed[1].strip(_QUOTES + " ").rstrip(".!;"))
    return True, (word if word in grammar.words else None)


def _from_lines(text: str, grammar: Grammar) -> Reading:
    lines = _lines(text)
    filled = [line for line in lines if line.text.strip()]
    prescribed = filled[-1] if grammar.position == "last" else filled[0]
    rationale = _rationale(filled, prescribed, grammar.position)
    where = f"the {grammar.position} line"
    if prescribed.quoted:
        return Reading(None, rationale, reason=NO_VERDICT_LINE, detail=f"{where} is a quote")
    is_verdict, word = _verdict_word(prescribed.text, grammar)
    if not is_verdict:
        return Reading(None, rationale, reason=NO_VERDICT_LINE, detail=f"{where} is not a {grammar.line_name} line")
    if word is None:
        return Reading(None, rationale, reason=NO_VALID_VERDICT, detail=plain(prescribed.text)[:60])
    if grammar.field is not None:
        # Every other verdict line outside quotes must agree with the prescribed one.
        others = [(line, _verdict_word(line.text, grammar)[1]) for line in filled if not line.quoted]
        disagree = [(line, w) for line, w in others if w is not None and w != word]
        if disagree:
            first = disagree[0]
            detail = f"{word} on line {prescribed.number}, {first[1]} on line {first[0].number}"
            return Reading(None, rationale, reason=CONTRADICTORY, detail=detail)
    return Reading(grammar.words[word], rationale, read_as="line")


def _rationale(filled: list[_Line], verdict: _Line, position: Position) -> str:
    """The answer's text on the other side of its verdict line, from its ``Rationale:`` line if it has one."""
    index = filled.index(verdict)
    rest = filled[:index] if position == "last" else filled[index + 1 :]
    for start, line in enumerate(rest):
        if (first := labelled_text(line.text, ("rationale",))) is not None:
            return "\n".join([first, *(later.text.strip() for later in rest[start + 1 :])]).strip()
    return "\n".join(line.text.strip() for line in rest).strip()
