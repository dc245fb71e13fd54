"""``python -m graph.resume``: the documented command, kept; it lives in :mod:`cli.resume`."""

from cli.resume import main

if __name__ == "__main__":
    raise SystemExit(main())
