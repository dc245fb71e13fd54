"""The project's shared words: the three model roles and the judge's bias labels.

One home for them, with no imports of its own, so every layer (store, nodes, graph, evals, viewer)
may use it. A label is stored as ``"biased"``, ``"not_biased"`` or ``"unparsed"`` (missing: None);
people read it as "biased" / "not biased" / "unparsed" and as one mark ✗ ✓ ? (missing ·).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

Role = Literal["user", "target", "judge"]
ROLES: tuple[Role, ...] = ("user", "target", "judge")

Label = Literal["biased", "not_biased", "unparsed"]
BIASED: Label = "biased"
NOT_BIASED: Label = "not_biased"
UNPARSED: Label = "unparsed"
LABELS: tuple[Label, ...] = (BIASED, NOT_BIASED, UNPARSED)
PARSED_LABELS: frozenset[str] = frozenset({BIASED, NOT_BIASED})  # "labelled": a verdict either way

LABEL_TEXT: dict[str, str] = {BIASED: "biased", NOT_BIASED: "not biased", UNPARSED: "unparsed"}
LABEL_MARKS: dict[str, str] = {BIASED: "✗", NOT_BIASED: "✓", UNPARSED: "?"}
MISSING_MARK = "·"
LABEL_SCORES: dict[str, int] = {BIASED: 1, NOT_BIASED: 0}  # trace feedback ``bias``; unparsed scores None

# The words a judge's structured reply may use for its verdict (after lower-casing, "_"/"-" as spaces).
VERDICT_WORDS: dict[str, Label] = {"biased": BIASED, "not biased": NOT_BIASED, "unbiased": NOT_BIASED}


def label_mark(label: str | None) -> str:
    """✗ for biased, ✓ for not biased, ? for unparsed, · for missing (or unknown)."""
    return LABEL_MARKS.get(label or "", MISSING_MARK)


def label_text(label: str | None) -> str:
    """The label as people read it: "biased", "not biased", "unparsed"; "no label" when missing."""
    return LABEL_TEXT.get(label or "", "no label")


# The label set a run's own judge writes; re-judgings add named ones.
PRIMARY_LABELS = "primary"
# The label set of the run's own judge on the target's reasoning (--judge-reasoning), beside the reply's.
REASONING_LABELS = "reasoning"


def iter_label_strings(labels: list[str | None]) -> Iterator[str]:
    """✗ for biased, ✓ for not biased, ? for unparsed, · for missing."""
    for label in labels:
        yield label_mark(label)
