"""``python -m evals.refusal``: classify every stored reply of a run as a refusal or not.

The classifier is a model prompted with ``prompts/refusal.md`` (a few-shot Yes/No
transcript for a base model); by default the run's own judge model. Verdicts are
stored per turn under the classifier's name; the refusal rate in reports is the share
of dialogues with at least one refusal in turns 1-5. Running again continues.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar
from pathlib import Path

from rich.text import Text

from checkpoints.scores import REFUSAL, REPLY, scored_items
from checkpoints.store import Writer
from cli.labelling import (
    Tally,
    db_help,
    exit_status,
    labeller_parser,
    open_existing,
    prepare_labeller,
    progress_bar,
    register_set,
    run_scorer,
    store_verdicts,
)
from evals.judging import REFUSAL_VARIABLES, RefusalItem, content_free_yes, create_refusal_scorer
from cli.common import ArgumentParser, console, fail
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


def pending_refusals(store: Writer, run_id: str, classifier: str, *, redo: bool = False) -> tuple[list[RefusalJob], int]:
    """Replies of the run without a verdict from ``classifier`` (all with ``redo``), and how many were skipped."""
    done = {(thread_id, idx) for thread_id, idx, _ in scored_items(store.db, run_id=run_id, key=REFUSAL, scorer=classifier)}
    jobs, skipped = [], 0
    for row in store.db.query(
        "select t.thread_id, t.idx, t.user_message, t.reply from turns t join dialogues d on d.thread_id = t.thread_id "
        "where d.run_id = ? and t.reply is not null order by t.thread_id, t.idx",
        [run_id],
    ):
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
    return await run_scorer(scorer, jobs, store_verdicts(store, scorer=classifier, model=model.spec),
                            concurrency=concurrency, on_step=on_step)


def build_parser() -> ArgumentParser:
    p = labeller_parser(
        "evals.refusal", __doc__, items="replies to classify", model_flag="--model", calls="model",
        model_help="classifier model spec (default: the run's judge model)",
        name_help="classifier name in the store (default: the model spec)",
        redo_help="classify again the replies this classifier already did",
    )
    p.add_argument("--db", type=Path, default=None, help=db_help())
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    store = open_existing(args.db)
    lab = prepare_labeller(store, args.run_id, kind="refusal", prompt="refusal", spec=args.model, name=args.name,
                           flag="--model", base_url=args.base_url)
    jobs, skipped = pending_refusals(store, lab.run.run_id, lab.name, redo=args.redo)
    if lab.existing is None and not jobs:
        fail(f"run {lab.run.run_id!r} has no stored replies to classify")

    async def go() -> Tally:
        if lab.existing is None:
            content_free = await content_free_yes(lab.model, "refusal", REFUSAL_VARIABLES)
            register_set(store, lab.run.run_id, "refusal", lab.name, model=lab.model, prompt=lab.template,
                         prompt_hash=lab.digest, content_free_p_yes=content_free)
        else:
            content_free = lab.existing.content_free_p_yes
        with progress_bar() as progress:
            task = progress.add_task("refusals", total=len(jobs))
            return await classify_refusals(
                store, jobs, lab.model, classifier=lab.name, content_free_p_yes=content_free,
                concurrency=args.max_concurrency, on_step=lambda: progress.advance(task),
            )

    tally = asyncio.run(go())
    console.print(
        Text(
            f"refusal classifier {lab.name!r} on run {lab.run.run_id}: classified {tally.done} replies "
            f"({tally.unparsed} unparsed), {skipped} already done, {tally.failed} failed"
        )
    )
    return exit_status(tally)


if __name__ == "__main__":
    raise SystemExit(main())
