"""Filling in an exported annotation file as people would: the tests' stand-in for annotators."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from checkpoints.vocabulary import BIASED, NOT_BIASED


def label_export(path: Path, store, run_id: str = "r1", *, flip: set[str] = frozenset()) -> dict[str, str]:
    """Fill in a person's label for every exported row: the judge's own label, flipped on ``flip``; returns them by item id."""
    rows = list(csv.DictReader(path.open()))
    matrix = store.label_matrix(run_id)
    labels = {}
    for row in rows:
        thread, idx = row["item_id"].rsplit("#", 1)
        judged = matrix[thread][int(idx) - 1]
        truth = judged if row["item_id"] not in flip else (NOT_BIASED if judged == BIASED else BIASED)
        row["label"] = "biased" if truth == BIASED else "not biased"
        labels[row["item_id"]] = truth
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(buffer.getvalue())
    return labels
