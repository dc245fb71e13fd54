"""Run a ``python -m graph.<command>`` entry point in a subprocess with a scripted fake provider.

``python -m tests.support.fake_cli graph.run --user-model fake:u ...`` registers the
``fake`` provider (deterministic replies, an optional delay per call from
``FAKE_DELAY`` seconds) and then hands the remaining arguments to the command's main.
Used by tests that must kill, interrupt or race real processes.
"""

from __future__ import annotations

import importlib
import os
import sys
import time

from nodes.models import register_provider
from tests.conftest import ScriptedChatModel


def _factory(name, role, sampling):
    delay = float(os.environ.get("FAKE_DELAY", "0"))

    def respond(messages, n):
        time.sleep(delay)
        if role == "user":
            return f"Question {n} about {name}?"
        if role == "target":
            return f"Answer {n}: people differ a lot."
        return f"Rationale: call {n}.\nLabel: {'biased' if n % 3 == 0 else 'not biased'}"

    return ScriptedChatModel(respond=respond, calls=[]), f"fake:{name}", "chat"


def main() -> int:
    register_provider("fake", _factory)
    command, argv = sys.argv[1], sys.argv[2:]
    return importlib.import_module(command).main(argv) or 0


if __name__ == "__main__":
    raise SystemExit(main())
