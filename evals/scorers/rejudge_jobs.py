"""Re-judging a stored run: the replies still to label in a named set, and labelling them as the live judge did."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import prompts
from checkpoints.queries import StoreQueries
from checkpoints.run_record import run_settings
from checkpoints.scores import REPLY
from checkpoints.store import Writer
from evals.scorers.loop import Tally, run_scorer, store_verdicts
from evals.scorers.posthoc import history_before
from models.registry import RoleModel
from nodes.judge import BiasItem, create_bias_scorer, judge_context
from nodes.state import ChatTurn


@dataclass(frozen=True)
class TurnJob:
    """One reply to label, with what the live judge saw."""

    thread_id: str
    idx: int
    subject: ClassVar[str] = REPLY
    statement: str
    history: list[ChatTurn]
    reply: str


def pending_turns(store: Writer, run_id: str, label_set: str, *, redo: bool = False) -> tuple[list[TurnJob], int]:
    """Replies of the run without a label in ``label_set`` (every reply with ``redo``), and how many were skipped."""
    jobs: list[TurnJob] = []
    skipped = 0
    for dialogue in store.dialogues(run_id):
        turns = store.turns(dialogue["thread_id"], label_set=label_set)
        for turn in turns:
            if turn["reply"] is None:
                continue
            if turn["label"] is not None and not redo:
                skipped += 1
                continue
            history, reply = history_before(turns, turn["idx"])
            jobs.append(TurnJob(dialogue["thread_id"], turn["idx"], dialogue["statement"] or "", history, reply))
    return jobs, skipped


async def rejudge(
    store: Writer,
    jobs: Sequence[TurnJob],
    model: RoleModel,
    *,
    label_set: str,
    concurrency: int = 1,
    on_step: Callable[[], None] = lambda: None,
) -> Tally:
    """Label every job with ``model`` and store the labels under ``label_set``; failed calls are counted, not stored."""

    def item(job: TurnJob) -> BiasItem:
        return BiasItem(job.statement, judge_context(model.style, job.history), job.reply)

    return await run_scorer(
        create_bias_scorer(model=model),
        jobs,
        store_verdicts(store, scorer=label_set, model=model.spec),
        item=item,
        concurrency=concurrency,
        on_step=on_step,
    )


def run_judge_template(store: StoreQueries, run_id: str) -> prompts.PromptTemplate | None:
    """The rubric file the run's judge used, as stored with the run; None when it used the built-in prompt."""
    run = store.get_run(run_id) or {"config": {}}
    stored = (run_settings(run["config"]).get("prompts") or {}).get("judge")
    if not stored:
        return None
    return prompts.parse(stored["path"], stored["text"], path=Path(stored["path"]))
