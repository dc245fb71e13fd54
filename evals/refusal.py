"""``python -m evals.refusal``: the documented command, kept; it lives in :mod:`cli.refusal`."""

from cli.refusal import main

if __name__ == "__main__":
    raise SystemExit(main())
