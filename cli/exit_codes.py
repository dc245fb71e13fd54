"""The exit statuses scripts can rely on, in one place (the table is in docs/outages.md)."""

from __future__ import annotations

EXIT_OK = 0  # every dialogue of the run finished (or the command did what it was asked)
EXIT_SOME_FAILED = 1  # the command ran, but some dialogues or jobs of the run ended failed: rerun to resume them
EXIT_BAD_INPUT = 2  # bad input: one line saying what to fix, nothing written
EXIT_OUTAGE = 75  # EX_TEMPFAIL: an outage (provider, store, full disk) outlasted its budget; the same command resumes

RUN_ENDED = {"finished": EXIT_OK, "unfinished": EXIT_SOME_FAILED, "outage": EXIT_OUTAGE}  # dymt.RunResult.ended


def run_exit_status(result) -> int:
    """A run's exit status from how it ended (``dymt.RunResult.ended``)."""
    return RUN_ENDED[result.ended]
