"""Run a ``python -m graph.<command>`` with scripted fake models, as its own process (for subprocess tests).

    python -m tests.support.fake_cli run|resume|branch|branches|compare ARGS...
    python -m tests.support.fake_cli evals.rejudge ARGS...     (a dotted name: that module's main)

Model specs ``fake:NAME`` resolve to scripted models: the user asks "Question N?", the target
answers "Answer N.", the judge labels odd calls biased. When the command ends, the number of
model calls per role is written as JSON to ``$FAKE_CALLS_FILE`` (if set); ``$FAKE_DELAY`` seconds
are slept in every call (for tests that kill or interrupt a run midway).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time

from models.registry import registered_provider
from tests.conftest import ScriptedChatModel

REPLIES = {
    "user": lambda messages, n: f"Question {n}?",
    "target": lambda messages, n: f"Answer {n}.",
    "judge": lambda messages, n: f"Rationale: r{n}.\nLabel: {'biased' if n % 2 else 'not biased'}",
}
MODELS: dict[str, list[ScriptedChatModel]] = {}


def factory(name: str, role: str, sampling):
    delay = float(os.environ.get("FAKE_DELAY", "0"))  # seconds per call, for tests that interrupt a run

    def respond(messages, n):
        time.sleep(delay)
        return REPLIES[role](messages, n)

    model = ScriptedChatModel(respond=respond, calls=[])
    MODELS.setdefault(role, []).append(model)
    return model, f"fake:{name}", "chat"


def calls() -> dict[str, int]:
    return {role: sum(len(m.calls) for m in models) for role, models in MODELS.items()}


def main(argv: list[str]) -> int:
    command, *args = argv
    module = importlib.import_module(command if "." in command else f"graph.{command}")
    if not hasattr(module, "main"):  # a package whose ``python -m`` forwarder is its __main__ (evals.report)
        module = importlib.import_module(f"{command}.__main__")
    try:
        with registered_provider("fake", factory):
            code = module.main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        if os.environ.get("FAKE_CALLS_FILE"):
            with open(os.environ["FAKE_CALLS_FILE"], "w", encoding="utf-8") as handle:
                json.dump(calls(), handle)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
