"""``python -m graph.branch``: the documented command, kept; it lives in :mod:`cli.branch`."""

from cli.branch import main

if __name__ == "__main__":
    raise SystemExit(main())
