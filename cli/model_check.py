"""``graph.run --check``: one tiny call per distinct model of the run, a line each (what answered, whether it thinks),
before a long run spends anything."""

from __future__ import annotations

import json
import sys

from rich.text import Text

import dymt
from cli.common import console, error_console
from cli.exit_codes import EXIT_BAD_INPUT
from graph.config.run_config import RunConfig


def check_models(config: RunConfig, *, as_json: bool) -> int:
    """--check: one tiny call per distinct model, a line each; 0 if every one answered, else 2."""
    import dataclasses

    checks = dymt.check(config)
    if as_json:
        sys.stdout.write(json.dumps([dataclasses.asdict(c) for c in checks], indent=2) + "\n")
    for c in checks:
        head = f"{'/'.join(c.roles)} {c.spec} ({c.endpoint}, {c.seconds:.1f} s)"
        thinks = f"thinks ({c.reasoning_carrier})" if c.thinks else "no reasoning seen"
        line = Text(
            f"ok     {head}: {c.reply!r} · {thinks}, thinking: {c.thinking}" if c.ok else f"error  {head}: {c.error}",
            style="green" if c.ok else "red",
        )
        (error_console if as_json or not c.ok else console).print(line, soft_wrap=True)
        for note in c.notes:
            (error_console if as_json else console).print(Text(f"       {note}", style="yellow"), soft_wrap=True)
    return 0 if all(c.ok for c in checks) else EXIT_BAD_INPUT
