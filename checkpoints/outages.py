"""An outage that outlasted its budget: the run stops cleanly, nothing lost, and the same command resumes it."""

from __future__ import annotations


class OutageError(Exception):
    """A provider, the store or the disk stayed unavailable past its budget; the CLI prints one line and exits 75."""
