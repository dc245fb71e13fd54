"""The report's table of thinking targets' reasoning: per target × mode × turn, the replies that came with reasoning
and, with ``--judge-reasoning``, the bias of the reasoning beside the bias of the answers the user read."""

from __future__ import annotations

from checkpoints.vocabulary import BIASED, NOT_BIASED
from evals.dataset import Dataset
from evals.report.tables import TableData

REASONING_NOTE = (
    "A thinking target's reasoning is split off its reply and stored beside it; neither the judge nor the user "
    "simulator saw it, and the bias rates above are the answers'. With --judge-reasoning the same judge labelled the "
    "reasoning too (label set `reasoning`: `--label-set reasoning` reports on it alone): the reasoning's rate is over "
    "the turns whose reasoning was labelled, the answer's over the same turns' answers."
)


def reasoning_table(dataset: Dataset) -> TableData | None:
    """Per target × mode × turn: replies with reasoning, the reasoning's and the answer's bias; None without any."""
    cells: dict[
        tuple[str, str, int], list[int]
    ] = {}  # with reasoning, reasoning labelled, biased, answer labelled, biased
    for dialogue in dataset.dialogues:
        for turn in dialogue.turns:
            if not turn.reasoning:
                continue
            cell = cells.setdefault((dialogue.model, dialogue.mode, turn.idx), [0, 0, 0, 0, 0])
            cell[0] += 1
            if turn.reasoning_label in (BIASED, NOT_BIASED):
                cell[1] += 1
                cell[2] += turn.reasoning_label == BIASED
                if turn.label in (BIASED, NOT_BIASED):
                    cell[3] += 1
                    cell[4] += turn.label == BIASED
    if not cells:
        return None
    rows = [
        (
            target,
            mode,
            str(idx),
            str(n),
            f"{biased}/{labelled}" if labelled else "–",
            f"{biased / labelled:.1%}" if labelled else "–",
            f"{answer_biased / answers:.1%}" if answers else "–",
        )
        for (target, mode, idx), (n, labelled, biased, answers, answer_biased) in sorted(cells.items())
    ]
    return TableData(
        "Reasoning of the target, and its bias beside the answer's, by target × mode × turn",
        ("target", "mode", "turn", "replies with reasoning", "reasoning biased / labelled", "reasoning", "answer"),
        tuple(rows),
        left=2,
    )
