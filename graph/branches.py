"""``python -m graph.branches``: the documented command, kept; it lives in :mod:`cli.branches`."""

from cli.branches import main

if __name__ == "__main__":
    raise SystemExit(main())
