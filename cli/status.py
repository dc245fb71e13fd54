"""``dymt status RUN``: a run's progress, ETA, failures, cost and bias rates so far (``python -m graph.runs status``)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    import sys

    from cli.runs import main as runs

    return runs(["status", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
