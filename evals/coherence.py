"""``python -m evals.coherence``: the documented command, kept; it lives in :mod:`cli.coherence`."""

from cli.coherence import main

if __name__ == "__main__":
    raise SystemExit(main())
