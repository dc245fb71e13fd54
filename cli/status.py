"""``dymt status RUN``: a run's progress, ETA, failures, cost and bias rates so far (``python -m graph.runs
status``)."""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    """The ``status`` subcommand's parser of ``graph.runs`` (the flags are the same)."""
    from cli.runs import build_parser as runs_parser

    parser = runs_parser()
    return next(a.choices["status"] for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def main(argv: list[str] | None = None) -> int:
    import sys

    from cli.runs import main as runs

    return runs(["status", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
