"""``python -m evals.coherence``: score how coherent each stored dialogue of a run is, from 1 to 5.

A model reads the whole dialogue (``prompts/coherence.md``: points off for topic drift,
contradictions, or either side ignoring the other) and writes a rationale and a score;
a base model's score is the expectation over its answer's log-probabilities. By default
the run's own judge model scores. Unparsed scores are stored as NULL. Running again continues.
"""

from __future__ import annotations

import dymt
from cli.labelling import LabellingCommand

COMMAND = LabellingCommand(
    "evals.coherence", __doc__, dymt.score_coherence, "scorer", ("score", "scored"), "dialogues", "coherence"
)
build_parser, main = COMMAND.build_parser, COMMAND.main
