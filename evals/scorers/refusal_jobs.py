"""Refusal classification of a stored run: the replies a classifier has not judged yet, and judging them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from checkpoints.scores import REFUSAL, REPLY
from checkpoints.store import Writer
from evals.scorers.loop import Tally, run_scorer, store_verdicts
from evals.scorers.posthoc import RefusalItem, create_refusal_scorer
from models.registry import RoleModel


@dataclass(frozen=True)
class RefusalJob:
    thread_id: str
    idx: int
    user_message: str
    reply: str
    subject: ClassVar[str] = REPLY

    @property
    def item(self) -> RefusalItem:
        return RefusalItem(self.user_message, self.reply)


def pending_refusals(
    store: Writer, run_id: str, classifier: str, *, redo: bool = False
) -> tuple[list[RefusalJob], int]:
    """Replies of the run without a verdict from ``classifier`` (all with ``redo``), and how many were skipped."""
    done = {(thread_id, idx) for thread_id, idx, _ in store.scored_items(run_id, key=REFUSAL, scorer=classifier)}
    jobs, skipped = [], 0
    for row in store.user_turns(run_id, with_reply=True):
        if (row["thread_id"], row["idx"]) in done and not redo:
            skipped += 1
            continue
        jobs.append(RefusalJob(row["thread_id"], row["idx"], row["user_message"] or "", row["reply"]))
    return jobs, skipped


async def classify_refusals(
    store: Writer,
    jobs: Sequence[RefusalJob],
    model: RoleModel,
    *,
    classifier: str,
    content_free_p_yes: float | None,
    concurrency: int = 1,
    on_step: Callable[[], None] = lambda: None,
) -> Tally:
    """Classify every job and store the verdicts (refused NULL when unparsed); failed calls store nothing."""

    scorer = create_refusal_scorer(model=model, content_free_p_yes=content_free_p_yes)
    return await run_scorer(
        scorer,
        jobs,
        store_verdicts(store, scorer=classifier, model=model.spec),
        concurrency=concurrency,
        on_step=on_step,
    )
