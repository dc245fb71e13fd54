"""``python -m evals.filter``: the documented command, kept; it lives in :mod:`cli.filter`."""

from cli.filter import main

if __name__ == "__main__":
    raise SystemExit(main())
