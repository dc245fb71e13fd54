"""``python -m evals.refusal``: classify every stored reply of a run as a refusal or not.

The classifier is a model prompted with ``prompts/refusal.md`` (a few-shot Yes/No
transcript for a base model); by default the run's own judge model. Verdicts are
stored per turn under the classifier's name; the refusal rate in reports is the share
of dialogues with at least one refusal in turns 1-5. Running again continues.
"""

from __future__ import annotations

import dymt
from cli.labelling import LabellingCommand
from cli.store_option import store_errors

COMMAND = LabellingCommand(
    prog="evals.refusal",
    doc=__doc__,
    score=dymt.classify_refusals,
    labeller="classifier",
    verb=("classify", "classified"),
    unit="replies",
    progress="refusals",
)
build_parser = COMMAND.build_parser
main = store_errors("evals.refusal")(COMMAND.main)

if __name__ == "__main__":
    raise SystemExit(main())
