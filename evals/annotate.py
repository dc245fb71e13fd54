"""``python -m evals.annotate``: the documented command, kept; it lives in :mod:`cli.annotate`."""

from cli.annotate import main

if __name__ == "__main__":
    raise SystemExit(main())
