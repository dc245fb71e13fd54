"""``python -m graph.runs``: the documented command, kept; it lives in :mod:`cli.runs`."""

from cli.runs import main

if __name__ == "__main__":
    raise SystemExit(main())
