"""``python -m evals.coherence``: score how coherent each stored dialogue of a run is, from 1 to 5.

A model reads the whole dialogue (``prompts/coherence.md``: points off for topic drift,
contradictions, or either side ignoring the other) and writes a rationale and a score;
a base model's score is the expectation over its answer's log-probabilities. By default
the run's own judge model scores. Unparsed scores are stored as NULL. Running again continues.
"""

from __future__ import annotations

import asyncio

from rich.text import Text

from checkpoints.cache import caching_for
from cli.common import ArgumentParser, console, fail
from cli.labelling import exit_status, labeller_parser, open_existing, progress_bar
from cli.store_option import add_db_option, add_no_backup_option, store_errors
from evals.scorers.coherence_jobs import MAX_TOKENS, pending_dialogues, score_dialogues
from evals.scorers.label_sets import LabellerError, prepare_labeller, register_set
from evals.scorers.loop import Tally


def build_parser() -> ArgumentParser:
    p = labeller_parser(
        "evals.coherence",
        __doc__,
        items="dialogues to score",
        model_flag="--model",
        calls="model",
        model_help="scorer model spec (default: the run's judge model)",
        name_help="scorer name in the store (default: the model spec)",
        redo_help="score again the dialogues this scorer already did",
    )
    add_db_option(p)
    add_no_backup_option(p)
    return p


@store_errors("evals.coherence")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    store = open_existing(args.db)
    try:
        lab = prepare_labeller(
            store,
            args.run_id,
            kind="coherence",
            prompt="coherence",
            spec=args.model,
            name=args.name,
            flag="--model",
            base_url=args.base_url,
            max_tokens=MAX_TOKENS,
        )
    except LabellerError as exc:
        fail(str(exc))
    jobs, skipped = pending_dialogues(store, lab.run.run_id, lab.name, redo=args.redo)
    if lab.existing is None and not jobs:
        fail(f"run {lab.run.run_id!r} has no stored dialogues with replies to score")

    async def go() -> Tally:
        if lab.existing is None:
            register_set(
                store,
                lab.run.run_id,
                "coherence",
                lab.name,
                model=lab.model,
                prompt=lab.template,
                prompt_hash=lab.digest,
                content_free_p_yes=None,
            )
        with progress_bar() as progress:
            task = progress.add_task("coherence", total=len(jobs))
            return await score_dialogues(
                store,
                jobs,
                lab.model,
                scorer=lab.name,
                concurrency=args.max_concurrency,
                on_step=lambda: progress.advance(task),
            )

    with caching_for(lab.run.run_id):  # the replies it caches are the run's (deleted with it)
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
