"""``python -m evals.rejudge``: label every stored turn of a run again with another judge.

The dialogues are not regenerated: the new judge sees exactly what the run's judge saw
(the same prompt, the same context, the same parsing) and its labels are stored as a
named label set beside the run's own ("primary"). Running the command again continues
where it stopped. At the end it reports agreement with the primary labels.
"""

from __future__ import annotations

from rich.text import Text

import dymt
from checkpoints.vocabulary import PRIMARY_LABELS
from cli.common import ArgumentParser, console
from cli.labelling import add_judging_flags, exit_status, labeller_parser
from cli.rendering import run
from cli.store_option import add_db_option, add_no_backup_option, store_errors
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
    add_judging_flags(
        p,
        resamples="bootstrap resamples for agreement intervals",
        seed="bootstrap seed (default 0)",
        prompt="rubric file replacing the judge prompt (default: the run's own, built-in or --judge-prompt file)",
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
    return run(build_parser(), argv, dymt.rejudge, "run_id", show=_shown, status=lambda r: r.status, progress="judging")


def _shown(result: dymt.RejudgeResult, args: object) -> int:
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
