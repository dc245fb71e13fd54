"""``python -m evals.judge``: the documented command, kept; it lives in :mod:`cli.judge`."""

from cli.judge import main

if __name__ == "__main__":
    raise SystemExit(main())
