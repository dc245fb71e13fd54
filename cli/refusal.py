"""``python -m evals.refusal``: classify every stored reply of a run as a refusal or not.

The classifier is a model prompted with ``prompts/refusal.md`` (a few-shot Yes/No
transcript for a base model); by default the run's own judge model. Verdicts are
stored per turn under the classifier's name; the refusal rate in reports is the share
of dialogues with at least one refusal in turns 1-5. Running again continues.
"""

from __future__ import annotations

import asyncio

from rich.text import Text

from checkpoints.cache import caching_for
from cli.common import ArgumentParser, console, fail
from cli.labelling import exit_status, labeller_parser, open_existing, progress_bar
from cli.store_option import add_db_option, add_no_backup_option, store_errors
from evals.scorers.label_sets import LabellerError, prepare_labeller, register_set
from evals.scorers.loop import Tally
from evals.scorers.posthoc import REFUSAL_VARIABLES, content_free_yes
from evals.scorers.refusal_jobs import classify_refusals, pending_refusals


def build_parser() -> ArgumentParser:
    p = labeller_parser(
        "evals.refusal",
        __doc__,
        items="replies to classify",
        model_flag="--model",
        calls="model",
        model_help="classifier model spec (default: the run's judge model)",
        name_help="classifier name in the store (default: the model spec)",
        redo_help="classify again the replies this classifier already did",
    )
    add_db_option(p)
    add_no_backup_option(p)
    return p


@store_errors("evals.refusal")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    store = open_existing(args.db)
    try:
        lab = prepare_labeller(
            store,
            args.run_id,
            kind="refusal",
            prompt="refusal",
            spec=args.model,
            name=args.name,
            flag="--model",
            base_url=args.base_url,
        )
    except LabellerError as exc:
        fail(str(exc))
    jobs, skipped = pending_refusals(store, lab.run.run_id, lab.name, redo=args.redo)
    if lab.existing is None and not jobs:
        fail(f"run {lab.run.run_id!r} has no stored replies to classify")

    async def go() -> Tally:
        if lab.existing is None:
            content_free = await content_free_yes(lab.model, "refusal", REFUSAL_VARIABLES)
            register_set(
                store,
                lab.run.run_id,
                "refusal",
                lab.name,
                model=lab.model,
                prompt=lab.template,
                prompt_hash=lab.digest,
                content_free_p_yes=content_free,
            )
        else:
            content_free = lab.existing.content_free_p_yes
        with progress_bar() as progress:
            task = progress.add_task("refusals", total=len(jobs))
            return await classify_refusals(
                store,
                jobs,
                lab.model,
                classifier=lab.name,
                content_free_p_yes=content_free,
                concurrency=args.max_concurrency,
                on_step=lambda: progress.advance(task),
            )

    with caching_for(lab.run.run_id):  # the replies it caches are the run's (deleted with it)
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
