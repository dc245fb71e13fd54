"""``python -m evals.coherence``: score how coherent each stored dialogue of a run is, from 1 to 5.

A model reads the whole dialogue (``prompts/coherence.md``: points off for topic drift,
contradictions, or either side ignoring the other) and writes a rationale and a score;
a base model's score is the expectation over its answer's log-probabilities. By default
the run's own judge model scores. Unparsed scores are stored as NULL. Running again continues.
"""

from __future__ import annotations

import dymt
from cli.common import ArgumentParser
from cli.labelling import labeller_parser, labelling_command
from cli.store_option import add_db_option, store_errors


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
    return p


@store_errors("evals.coherence")
def main(argv: list[str] | None = None) -> int:
    return labelling_command(build_parser(), argv, dymt.score_coherence, progress="coherence", said=_said)


def _said(result: dymt.ScoringResult) -> str:
    return (
        f"coherence scorer {result.name!r} on run {result.run_id}: scored {result.labelled} dialogues "
        f"({result.unparsed} unparsed), {result.skipped} already done, {result.failed} failed"
    )


if __name__ == "__main__":
    raise SystemExit(main())
