"""``python -m evals.judge FILE.jsonl --judge-model SPEC``: label standalone (statement, reply) pairs.

Each line is a JSON object: ``statement`` and ``reply``, optionally ``context``, ``id`` and
``label`` (the file format: docs/choosing-a-judge.md; a bad line stops the command in one
line naming the line and the field). The judge uses the run judge's prompt and parsing. Where references exist it prints
accuracy, precision, recall, F1, Cohen's kappa and Gwet's AC1 against them: validate a judge before trusting it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

import prompts
from checkpoints.location import PostgresURL
from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError, check_db_path
from checkpoints.readers import open_reader
from checkpoints.store import open_writer
from checkpoints.vocabulary import BIASED, NOT_BIASED
from cli.common import ArgumentParser, console, error_console, fail, positive_int
from cli.labelling import describe, write_atomic
from cli.store_option import add_db_option, chosen_db
from evals.judge_error.validation import JudgeValidation
from evals.report.formatting import pct
from evals.report.scoring_tables import scores_table
from evals.scorers.judge_pairs import (
    PairFileError,
    against_references,
    judge_pairs,
    read_pairs,
    record_pairs_validation,
    verdict_lines,
)
from evals.scorers.label_sets import LabellerError, build_labeller, stored_endpoint


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evals.judge", description=describe(__doc__))
    p.add_argument("file", type=Path, help="JSONL file: statement, reply, optional context, id, label")
    p.add_argument("--judge-model", required=True, metavar="SPEC", help="judge model spec, e.g. openai:gpt-4o-mini")
    p.add_argument("--base-url", default=None,
                   help="base URL for openai: specs (default: where the database's newest run called --judge-model, if one did)")
    p.add_argument("--out", type=Path, default=None, help="write one JSON line per pair with the judge's verdict")
    p.add_argument("--max-concurrency", type=positive_int, default=4, help="judge calls at once (default 4)")
    p.add_argument("--n-boot", type=positive_int, default=1000, help="bootstrap resamples for intervals")
    p.add_argument("--seed", type=int, default=0, help="bootstrap and sampling seed (default 0)")
    p.add_argument("--judge-prompt", type=Path, default=None, metavar="FILE", help="rubric file replacing the built-in judge prompt")
    add_db_option(p, help="dialogue database where the score is recorded, so run summaries cite it: a SQLite file or a "
                  "postgresql:// URL (default $DYMT_ESB_DB, else the default file)")
    p.add_argument("--no-record", action="store_true", help="do not record the score in the database")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        pairs = read_pairs(args.file)
    except PairFileError as exc:
        fail(str(exc))
    if args.out is not None and args.out.is_dir():
        fail(f"--out {args.out} is a directory: give a file path such as {args.out / 'verdicts.jsonl'}")
    template = None
    if args.judge_prompt is not None:
        try:
            template = prompts.load_file(args.judge_prompt, role="judge")
        except prompts.PromptError as exc:
            fail(f"--judge-prompt: {exc}")
    store = None
    record = not args.no_record and any(p.gold is not None for p in pairs)
    if record:
        location = chosen_db(args.db)
        try:
            if not isinstance(location, PostgresURL):
                location = check_db_path(location)
        except StoreError as exc:
            fail(str(exc))
    # The model is built (and the embedded one probed) before the database is opened: a model that
    # cannot run leaves nothing written.
    base_url = args.base_url or _stored_endpoint(args.db, args.judge_model)
    try:
        model = build_labeller(args.judge_model, flag="--judge-model", base_url=base_url, seed=args.seed)
    except LabellerError as exc:
        fail(str(exc))
    if record:
        try:
            store = open_writer(location)
        except (StoreError, SchemaTooNewError) as exc:
            fail(str(exc))
    if template is not None:
        model = dataclasses.replace(model, prompt=template)

    async def go():
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=error_console) as progress:
            task = progress.add_task("judging", total=len(pairs))
            return await judge_pairs(pairs, model, concurrency=args.max_concurrency, on_step=lambda: progress.advance(task))

    verdicts, tally = asyncio.run(go())
    if args.out is not None:
        write_atomic(args.out, verdict_lines(pairs, verdicts, model.spec), private=True)
    labels = [v["label"] if v else None for v in verdicts]
    n_biased = labels.count(BIASED)
    n_parsed = n_biased + labels.count(NOT_BIASED)
    console.print(
        Text(
            f"{model.spec}: {len(pairs)} pairs, {tally.unparsed} unparsed, {tally.failed} failed; "
            f"biased {n_biased}/{n_parsed} ({pct(n_biased / n_parsed if n_parsed else None)})"
        )
    )
    result = against_references(pairs, labels, n_boot=args.n_boot, seed=args.seed)
    if result is not None:
        console.print(scores_table(result))
        if store is not None and not tally.failed:
            digest = record_pairs_validation(store, model, args.file, result, template=template)
            console.print(Text(f"recorded in {store.path}: run summaries with judge {model.spec} and this prompt "
                               f"(sha256 {digest[:12]}) cite this score", style="dim"))
            validation = JudgeValidation(source=f"evals.judge:{model.spec}@{digest[:12]}", tp=result.tp, fp=result.fp,
                                         fn=result.fn, tn=result.tn)
            console.print(Text(f"{validation.describe()}: "
                               + (validation.refusal() or "bias rates of those runs are now corrected for its error"),
                               style="yellow" if validation.refusal() else "dim"))
    else:
        console.print(Text("no reference labels in the file: add a \"label\" field to score the judge", style="dim"))
    if args.out is not None:
        console.print(Text(f"verdicts written to {args.out}", style="dim"))
    if tally.failed:
        error_console.print(Text(f"{tally.failed} judge calls failed (first: {tally.first_error})", style="yellow"))
        return 1
    return 0


def _stored_endpoint(db, spec: str) -> str | None:
    """Where the store's newest run that played ``spec`` called it (read-only; None without a store or such a run)."""
    try:
        location = chosen_db(db)
        if not isinstance(location, PostgresURL) and not location.exists():
            return None
        with open_reader(location) as reader:
            return stored_endpoint(reader, spec)
    except StoreError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
