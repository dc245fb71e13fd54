"""``python -m graph.worker``: the documented command; it lives in :mod:`cli.worker`."""

from cli.worker import main

if __name__ == "__main__":
    raise SystemExit(main())
