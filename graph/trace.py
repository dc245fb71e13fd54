"""``python -m graph.trace``: the documented command, kept; it lives in :mod:`cli.trace`."""

from cli.trace import main

if __name__ == "__main__":
    raise SystemExit(main())
