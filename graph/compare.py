"""``python -m graph.compare``: the documented command, kept; it lives in :mod:`cli.compare`."""

from cli.compare import main

if __name__ == "__main__":
    raise SystemExit(main())
