"""``python -m evals.coherence``: score how coherent each stored dialogue of a run is, from 1 to 5.

A model reads the whole dialogue (``prompts/coherence.md``: points off for topic drift,
contradictions, or either side ignoring the other) and writes a rationale and a score;
a base model's score is the expectation over its answer's log-probabilities. By default
the run's own judge model scores. Unparsed scores are stored as NULL. Running again continues.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar
from pathlib import Path

from rich.text import Text

from checkpoints.scores import COHERENCE, DIALOGUE, DIALOGUE_TURN, scored_items
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
from evals.judging import create_coherence_scorer, dialogue_messages
from cli.common import ArgumentParser, console, fail
from graph.state import ChatTurn
from models.registry import RoleModel

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
    done = {thread_id for thread_id, _, _ in scored_items(store.db, run_id=run_id, key=COHERENCE, scorer=scorer)}
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

    return await run_scorer(create_coherence_scorer(model=model), jobs, store_verdicts(store, scorer=scorer, model=model.spec),
                            item=lambda job: job.dialogue, concurrency=concurrency, on_step=on_step)


def build_parser() -> ArgumentParser:
    p = labeller_parser(
        "evals.coherence", __doc__, items="dialogues to score", model_flag="--model", calls="model",
        model_help="scorer model spec (default: the run's judge model)", name_help="scorer name in the store (default: the model spec)",
        redo_help="score again the dialogues this scorer already did",
    )
    p.add_argument("--db", type=Path, default=None, help=db_help())
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    store = open_existing(args.db)
    lab = prepare_labeller(store, args.run_id, kind="coherence", prompt="coherence", spec=args.model, name=args.name,
                           flag="--model", base_url=args.base_url, max_tokens=MAX_TOKENS)
    jobs, skipped = pending_dialogues(store, lab.run.run_id, lab.name, redo=args.redo)
    if lab.existing is None and not jobs:
        fail(f"run {lab.run.run_id!r} has no stored dialogues with replies to score")

    async def go() -> Tally:
        if lab.existing is None:
            register_set(store, lab.run.run_id, "coherence", lab.name, model=lab.model, prompt=lab.template,
                         prompt_hash=lab.digest, content_free_p_yes=None)
        with progress_bar() as progress:
            task = progress.add_task("coherence", total=len(jobs))
            return await score_dialogues(
                store, jobs, lab.model, scorer=lab.name, concurrency=args.max_concurrency, on_step=lambda: progress.advance(task)
            )

    tally = asyncio.run(go())
    console.print(
        Text(
            f"coherence scorer {lab.name!r} on run {lab.run.run_id}: scored {tally.done} dialogues "
            f"({tally.unparsed} unparsed), {skipped} already done, {tally.failed} failed"
        )
    )
    return exit_status(tally)


if __name__ == "__main__":
    raise SystemExit(main())
