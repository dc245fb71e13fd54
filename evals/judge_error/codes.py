"""Labels as the codes the latent chain reads: 1 biased, 0 not, 2 no emission, 3/4 a person's known label.

One place turns the judge's and people's labels (1/0/True/False/None or the store's words from
``checkpoints.vocabulary``) into these codes, so the validation, the cells and the chain agree on them.
"""

from __future__ import annotations

from collections.abc import Sequence

from checkpoints.vocabulary import BIASED, LABEL_SCORES, NOT_BIASED, UNPARSED

MISSING = 2  # observation code: unparsed or missing label, no emission
KNOWN_BIASED, KNOWN_NOT = 3, 4  # observation codes: a person labelled the reply (its truth is known)

LabelLike = int | bool | str | None
RowLike = Sequence[LabelLike]


def code(label: LabelLike) -> int:
    """1 biased, 0 not biased, 2 unparsed or missing; accepts 1/0/True/False/None and the store's words."""
    if label is None or label == UNPARSED:
        return MISSING
    if isinstance(label, str) and label in LABEL_SCORES:  # the store's words, as the vocabulary scores them
        return LABEL_SCORES[label]
    if label is True or (isinstance(label, int) and label == 1):
        return 1
    if label is False or (isinstance(label, int) and label == 0):
        return 0
    raise ValueError(f"unknown label {label!r}: use 1/0/None or {BIASED!r}/{NOT_BIASED!r}/{UNPARSED!r}/None")
