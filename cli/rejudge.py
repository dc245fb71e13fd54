"""``python -m evals.rejudge``: label every stored turn of a run again with another judge.

The dialogues are not regenerated: the new judge sees exactly what the run's judge saw
(the same prompt, the same context, the same parsing) and its labels are stored as a
named label set beside the run's own ("primary"). Running the command again continues
where it stopped. At the end it reports agreement with the primary labels.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.text import Text

import prompts
from checkpoints.cache import ResponseCache
from checkpoints.queries import StoreQueries
from checkpoints.vocabulary import PRIMARY_LABELS
from cli.common import ArgumentParser, console, fail, positive_int
from cli.labelling import exit_status, labeller_parser, open_existing, progress_bar
from cli.store_option import add_db_option
from evals.dataset import check_label_set
from evals.report.scoring_tables import agreement_table
from evals.scorers.label_sets import LabellerError, prepare_labeller, register_set
from evals.scorers.loop import Tally
from evals.scorers.rejudge_jobs import pending_turns, rejudge, run_judge_template
from evals.stats.agreement import label_set_agreement


def build_parser() -> ArgumentParser:
    p = labeller_parser(
        "evals.rejudge", __doc__, items="turns to label again", model_flag="--judge-model", calls="judge",
        model_required=True, model_help="judge model spec, e.g. openai:gpt-4o-mini",
        name_help="label set name (default: the judge spec)", redo_help="label again the turns this label set already has",
    )
    p.add_argument("--n-boot", type=positive_int, default=1000, help="bootstrap resamples for agreement intervals")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--judge-prompt", type=Path, default=None, metavar="FILE",
                   help="rubric file replacing the judge prompt (default: the run's own, built-in or --judge-prompt file)")
    add_db_option(p)
    p.add_argument("--cache", action="store_true",
                   help="answer from the response cache in the database (a request sent before costs no call) and keep "
                       "new replies there")
    return p


def judge_template(store: StoreQueries, run_id: str, path: Path | None) -> prompts.PromptTemplate | None:
    """The rubric to re-judge with: --judge-prompt FILE, else the file the run's judge used, else None (built-in)."""
    if path is not None:
        try:
            return prompts.load_file(path, role="judge")
        except prompts.PromptError as exc:
            fail(f"--judge-prompt: {exc}")
    return run_judge_template(store, run_id)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    store = open_existing(args.db)
    template = judge_template(store, args.run_id, args.judge_prompt)
    cache = ResponseCache(store.path) if args.cache else None
    try:
        return _rejudge(args, store, template, cache)
    finally:
        if cache is not None:
            cache.close()


def _rejudge(args, store, template: prompts.PromptTemplate | None, cache: ResponseCache | None) -> int:
    try:
        lab = prepare_labeller(store, args.run_id, kind="bias", prompt="judge_bias", spec=args.judge_model, name=args.name,
                               flag="--judge-model", base_url=args.base_url, template=template, cache=cache)
    except LabellerError as exc:
        fail(str(exc))
    run_id, name = lab.run.run_id, lab.name
    jobs, skipped = pending_turns(store, run_id, name, redo=args.redo)
    if lab.existing is None and not jobs:
        fail(f"run {run_id!r} has no stored replies to label")

    async def go() -> Tally:
        if lab.existing is None:
            # The judge calibrates each case against its own context (nodes.judge.call_judge): no set-wide prior.
            register_set(store, run_id, "bias", name, model=lab.model, prompt=lab.template, prompt_hash=lab.digest,
                         content_free_p_yes=None)
        with progress_bar() as progress:
            task = progress.add_task("judging", total=len(jobs))
            return await rejudge(store, jobs, lab.model, label_set=name, concurrency=args.max_concurrency,
                                 on_step=lambda: progress.advance(task))

    tally = asyncio.run(go())
    tally.skipped = skipped
    console.print(
        Text(
            f"label set {name!r} on run {run_id}: labelled {tally.done} replies "
            f"({tally.unparsed} unparsed), {tally.skipped} already labelled, {tally.failed} failed"
        )
    )
    check_label_set(store, run_id, name)
    agreement = label_set_agreement(store, [run_id], PRIMARY_LABELS, name, n_boot=args.n_boot, seed=args.seed)
    console.print(agreement_table([(PRIMARY_LABELS, name, agreement)]))
    return exit_status(tally, what="judge calls")


if __name__ == "__main__":
    raise SystemExit(main())
