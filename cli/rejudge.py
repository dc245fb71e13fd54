"""``python -m evals.rejudge``: label every stored turn of a run again with another judge.

The dialogues are not regenerated: the new judge sees exactly what the run's judge saw
(the same prompt, the same context, the same parsing) and its labels are stored as a
named label set beside the run's own ("primary"). Running the command again continues
where it stopped. At the end it reports agreement with the primary labels.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar
from pathlib import Path

import prompts
from rich.table import Table
from rich.text import Text

from checkpoints.queries import StoreQueries
from checkpoints.store import PRIMARY_LABELS, Writer
from checkpoints.scores import REPLY
from evals.agreement import Agreement, label_set_agreement
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
from evals.formatting import number
from evals.dataset import check_label_set
from evals.judging import history_before
from nodes.judge import BiasItem, create_bias_scorer, judge_context
from cli.common import ArgumentParser, console, fail, positive_int
from graph.state import ChatTurn
from models.registry import RoleModel


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

    return await run_scorer(create_bias_scorer(model=model), jobs, store_verdicts(store, scorer=label_set, model=model.spec),
                            item=item, concurrency=concurrency, on_step=on_step)


def agreement_table(rows: Sequence[tuple[str, str, Agreement]], title: str = "Agreement between label sets") -> Table:
    table = Table(title=Text(title))
    for header in ("label set", "versus", "turns", "compared", "percent", "Cohen's kappa", "Gwet's AC1"):
        table.add_column(Text(header), justify="left" if header in ("label set", "versus") else "right")
    for a, b, agreement in rows:
        table.add_row(
            Text(a), Text(b), str(agreement.n_items), str(agreement.n_compared),
            Text(number(agreement.percent)), Text(number(agreement.kappa)), Text(number(agreement.ac1)),
        )
    return table


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
    p.add_argument("--db", type=Path, default=None, help=db_help())
    return p


def judge_template(store: StoreQueries, run_id: str, path: Path | None) -> prompts.PromptTemplate | None:
    """The rubric to re-judge with: --judge-prompt FILE, else the file the run's judge used, else None (built-in)."""
    if path is not None:
        try:
            return prompts.load_file(path, role="judge")
        except prompts.PromptError as exc:
            fail(f"--judge-prompt: {exc}")
    run = store.get_run(run_id) or {"config": {}}
    stored = ((run["config"].get("spec", {}).get("calls") or {}).get("prompt_files") or {}).get("judge")
    if not stored:
        return None
    return prompts.parse(stored["path"], stored["text"], path=Path(stored["path"]))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    store = open_existing(args.db)
    lab = prepare_labeller(store, args.run_id, kind="bias", prompt="judge_bias", spec=args.judge_model, name=args.name,
                           flag="--judge-model", base_url=args.base_url, template=judge_template(store, args.run_id, args.judge_prompt))
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
