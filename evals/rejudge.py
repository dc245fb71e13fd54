"""``python -m evals.rejudge``: the documented command, kept; it lives in :mod:`cli.rejudge`."""

from cli.rejudge import main

if __name__ == "__main__":
    raise SystemExit(main())
