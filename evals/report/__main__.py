"""``python -m evals.report``: the documented command, kept; it lives in :mod:`cli.report`."""

from cli.report import main

if __name__ == "__main__":
    raise SystemExit(main())
