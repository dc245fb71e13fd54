"""``python -m evals.coherence``: score how coherent each stored dialogue of a run is, from 1 to 5.

A model reads the whole dialogue (``prompts/coherence.md``: points off for topic drift,
contradictions, or either side ignoring the other) and writes a rationale and a score;
a base model's score is the expectation over its answer's log-probabilities. By default
the run's own judge model scores. Unparsed scores are stored as NULL. Running again continues.
"""

from __future__ import annotations

import dymt
from cli.labelling import LabellingCommand
from cli.store_option import store_errors

COMMAND = LabellingCommand(
    prog="evals.coherence",
    doc=__doc__,
    score=dymt.score_coherence,
    labeller="scorer",
    verb=("score", "scored"),
    unit="dialogues",
    progress="coherence",
)
build_parser = COMMAND.build_parser
main = store_errors("evals.coherence")(COMMAND.main)

if __name__ == "__main__":
    raise SystemExit(main())
