"""``python -m graph.replay``: the documented command, kept; it lives in :mod:`cli.replay`."""

from cli.replay import main

if __name__ == "__main__":
    raise SystemExit(main())
