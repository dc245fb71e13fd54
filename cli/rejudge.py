"""``python -m evals.rejudge``: label every stored turn of a run again with another judge.

The dialogues are not regenerated: the new judge sees exactly what the run's judge saw
(the same prompt, the same context, the same parsing) and its labels are stored as a
named label set beside the run's own ("primary"). Running the command again continues
where it stopped. At the end it reports agreement with the primary labels.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.text import Text

import dymt
from checkpoints.vocabulary import PRIMARY_LABELS
from cli.common import ArgumentParser, console, fail, positive_int
from cli.labelling import LabelProgress, exit_status, labeller_parser
from cli.store_option import add_db_option, add_no_backup_option, store_errors
from dymt.errors import DymtError
from dymt.events import ignore
from evals.report.scoring_tables import agreement_table


def build_parser() -> ArgumentParser:
    p = labeller_parser(
        "evals.rejudge",
        __doc__,
        items="turns to label again",
        model_flag="--judge-model",
        calls="judge",
        model_required=True,
        model_help="judge model spec, e.g. openai:gpt-4o-mini",
        name_help="label set name (default: the judge spec)",
        redo_help="label again the turns this label set already has",
    )
    p.add_argument("--n-boot", type=positive_int, default=1000, help="bootstrap resamples for agreement intervals")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument(
        "--judge-prompt",
        type=Path,
        default=None,
        metavar="FILE",
        help="rubric file replacing the judge prompt (default: the run's own, built-in or --judge-prompt file)",
    )
    add_db_option(p)
    add_no_backup_option(p)
    p.add_argument(
        "--cache",
        action="store_true",
        help="answer from the response cache in the database (a request sent before costs no call) and keep new "
        "replies there",
    )
    p.add_argument("--json", action="store_true", help="print what was labelled and the agreement as JSON on stdout")
    return p


@store_errors("evals.rejudge")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with LabelProgress() as bar:
            result = dymt.rejudge(
                args.run_id,
                judge_model=args.judge_model,
                name=args.name,
                base_url=args.base_url,
                max_concurrency=args.max_concurrency,
                redo=args.redo,
                n_boot=args.n_boot,
                seed=args.seed,
                judge_prompt=args.judge_prompt,
                cache=args.cache,
                db=args.db,
                on_event=ignore if args.json else bar,
            )
    except DymtError as exc:
        fail(str(exc))
    if args.json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
        return result.status
    console.print(
        Text(
            f"label set {result.label_set!r} on run {result.run_id}: labelled {result.labelled} replies "
            f"({result.unparsed} unparsed), {result.skipped} already labelled, {result.failed} failed"
        )
    )
    console.print(agreement_table([(PRIMARY_LABELS, result.label_set, result.detail)]))
    return exit_status(result, what="judge calls")


if __name__ == "__main__":
    raise SystemExit(main())
