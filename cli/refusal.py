"""``python -m evals.refusal``: classify every stored reply of a run as a refusal or not.

The classifier is a model prompted with ``prompts/refusal.md`` (a few-shot Yes/No
transcript for a base model); by default the run's own judge model. Verdicts are
stored per turn under the classifier's name; the refusal rate in reports is the share
of dialogues with at least one refusal in turns 1-5. Running again continues.
"""

from __future__ import annotations

import dymt
from cli.common import ArgumentParser
from cli.labelling import labeller_parser, labelling_command
from cli.store_option import add_db_option, store_errors


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
    return p


@store_errors("evals.refusal")
def main(argv: list[str] | None = None) -> int:
    return labelling_command(build_parser(), argv, dymt.classify_refusals, progress="refusals", said=_said)


def _said(result: dymt.ScoringResult) -> str:
    return (
        f"refusal classifier {result.name!r} on run {result.run_id}: classified {result.labelled} replies "
        f"({result.unparsed} unparsed), {result.skipped} already done, {result.failed} failed"
    )


if __name__ == "__main__":
    raise SystemExit(main())
