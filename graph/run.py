"""``python -m graph.run``: the documented command, kept; it lives in :mod:`cli.run`."""

from cli.run import main

if __name__ == "__main__":
    raise SystemExit(main())
