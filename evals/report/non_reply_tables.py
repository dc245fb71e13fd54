"""The report's count of target answers that were not replies (filtered, blocked, empty, cut), per target × mode."""

from __future__ import annotations

from evals.dataset import Dataset
from evals.report.tables import TableData
from models.answers import NON_REPLY_KINDS, WITHHELD_KINDS

NON_REPLY_NOTE = (
    "A target answer the provider withheld (its content filter or safety block) or left empty is kept as data, not "
    "retried and not failed: the turn records why, the judge does not label it (its label is unparsed, with the "
    "reason), "
    "and it is counted here rather than as biased or not biased. An answer that is all reasoning, cut by the cap "
    "before any answer, is 'cut while reasoning' and withheld the same way (its reasoning is kept). A reply cut at "
    "max_tokens keeps its text and is judged as it is, and so is an OpenAI 'refusal', whose text is the reply. "
    "A high share of withheld replies for one target is itself a finding: read the bias rates of that "
    "target with it."
)


def non_reply_table(dataset: Dataset) -> TableData:
    """Per target × mode: replies stored, then how many of them were each kind of non-reply, and the share withheld."""
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for dialogue in dataset.dialogues:
        cell = counts.setdefault((dialogue.model, dialogue.mode), {"replies": 0})
        for turn in dialogue.turns:
            if turn.reply is None:
                continue
            cell["replies"] += 1
            if turn.non_reply:
                cell[turn.non_reply] = cell.get(turn.non_reply, 0) + 1
    rows = []
    for (target, mode), cell in sorted(counts.items()):
        withheld = sum(cell.get(kind, 0) for kind in WITHHELD_KINDS)
        share = f"{withheld / cell['replies']:.1%}" if cell["replies"] else "–"
        rows.append((target, mode, str(cell["replies"]), *(str(cell.get(kind, 0)) for kind in NON_REPLY_KINDS), share))
    return TableData(
        "Non-replies of the target, by target × mode",
        ("target", "mode", "replies", *NON_REPLY_KINDS, "withheld"),
        tuple(rows),
        left=2,
    )


def has_non_replies(table: TableData) -> bool:
    """Whether any target answer of the table was a non-reply."""
    kinds = len(NON_REPLY_KINDS)
    return any(int(cell) for row in table.rows for cell in row[3 : 3 + kinds])
