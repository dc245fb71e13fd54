"""Coherence scoring of a stored run: the dialogues a scorer has not scored yet, and scoring them 1 to 5."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from checkpoints.scores import COHERENCE, DIALOGUE, DIALOGUE_TURN
from checkpoints.store import Writer
from evals.scorers.loop import Tally, run_scorer, store_verdicts
from evals.scorers.posthoc import create_coherence_scorer, dialogue_messages
from models.registry import RoleModel
from nodes.state import ChatTurn

# A written rationale and a score need more room than a label.
MAX_TOKENS = 300


@dataclass(frozen=True)
class CoherenceJob:
    thread_id: str
    dialogue: list[ChatTurn]
    idx: ClassVar[int] = DIALOGUE_TURN
    subject: ClassVar[str] = DIALOGUE


def pending_dialogues(store: Writer, run_id: str, scorer: str, *, redo: bool = False) -> tuple[list[CoherenceJob], int]:
    """Dialogues of the run with at least one reply and no score from ``scorer`` (all with ``redo``)."""
    done = {thread_id for thread_id, _, _ in store.scored_items(run_id, key=COHERENCE, scorer=scorer)}
    jobs, skipped = [], 0
    for dialogue in store.dialogues(run_id):
        turns = [t for t in store.turns(dialogue["thread_id"]) if t["reply"] is not None]
        if not turns:
            continue
        if dialogue["thread_id"] in done and not redo:
            skipped += 1
            continue
        jobs.append(CoherenceJob(dialogue["thread_id"], dialogue_messages(turns)))
    return jobs, skipped


async def score_dialogues(
    store: Writer,
    jobs: Sequence[CoherenceJob],
    model: RoleModel,
    *,
    scorer: str,
    concurrency: int = 1,
    on_step: Callable[[], None] = lambda: None,
) -> Tally:
    """Score every dialogue and store the scores (NULL when unparsed); failed calls store nothing."""

    return await run_scorer(
        create_coherence_scorer(model=model),
        jobs,
        store_verdicts(store, scorer=scorer, model=model.spec),
        item=lambda job: job.dialogue,
        concurrency=concurrency,
        on_step=on_step,
    )
