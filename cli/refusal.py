"""``python -m evals.refusal``: classify every stored reply of a run as a refusal or not.

The classifier is a model prompted with ``prompts/refusal.md`` (a few-shot Yes/No
transcript for a base model); by default the run's own judge model. Verdicts are
stored per turn under the classifier's name; the refusal rate in reports is the share
of dialogues with at least one refusal in turns 1-5. Running again continues.
"""

from __future__ import annotations

import dymt
from cli.labelling import LabellingCommand

COMMAND = LabellingCommand(
    "evals.refusal", __doc__, dymt.classify_refusals, "classifier", ("classify", "classified"), "replies", "refusals"
)
build_parser, main = COMMAND.build_parser, COMMAND.main
