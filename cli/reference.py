"""``python -m cli.reference``: the command reference (docs/commands.md), written from the commands' own parsers.

Every command of ``dymt`` (cli/dymt.py ``COMMANDS``) with each of its subcommands: the ``--help`` text its
``build_parser()`` gives, at a fixed width and with the default database shown as
``~/.local/share/dymt-esb/dialogues.db``, so the page is the same on every machine. The docs test checks that the
page equals this output: change a flag, then run ``python -m cli.reference > docs/commands.md``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from cli.common import ArgumentParser
from cli.dymt import COMMANDS

WIDTH = 100
HEADER = """# Command reference

Every command and flag, as `--help` prints it. Each command runs as `dymt COMMAND ...` or as `python -m MODULE ...`
(the same options, output and exit status). This page is generated from the commands' own parsers
(`python -m cli.reference > docs/commands.md`) and checked against them by the documentation's tests; the default
database shown is `$DYMT_ESB_DB`, else `$XDG_DATA_HOME/dymt-esb/dialogues.db` (`~/.local/share/...` when that is unset).
`python -m benchmarks --help` lists the benchmarks ([Benchmarks](benchmarks.md)).
"""


@contextmanager
def _fixed_environment() -> Iterator[None]:
    """A fixed help width and the default database under ``~/.local/share``, whatever this machine has."""
    saved = {name: os.environ.get(name) for name in ("COLUMNS", "XDG_DATA_HOME")}
    os.environ["COLUMNS"] = str(WIDTH)
    os.environ["XDG_DATA_HOME"] = "~/.local/share"
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    return [
        (name, sub)
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, sub in action.choices.items()
    ]


def reference() -> str:
    """The whole page, as Markdown."""
    parts = [HEADER]
    with _fixed_environment():
        for name, (module, summary) in COMMANDS.items():
            if not module.startswith("cli."):
                continue
            parser = importlib.import_module(module).build_parser()
            parts.append(f"## {name}\n\n`dymt {name}` · `python -m {parser.prog}`: {summary}.\n")
            parts.append("```text\n" + parser.format_help().rstrip() + "\n```\n")
            for sub_name, sub in _subparsers(parser):
                parts.append(f"### {name} {sub_name}\n")
                parts.append("```text\n" + sub.format_help().rstrip() + "\n```\n")
    return "\n".join(parts)


def build_parser() -> ArgumentParser:
    return ArgumentParser(
        prog="cli.reference", description="print the command reference: python -m cli.reference > docs/commands.md"
    )


def main(argv: list[str] | None = None) -> int:
    build_parser().parse_args(argv)
    sys.stdout.write(reference())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
