"""What the library raises: bad input (one line saying what to fix) and a run stopped by an outage."""

from __future__ import annotations

from checkpoints.outages import OutageError


class DymtError(ValueError):
    """Bad input, said in one line that names what to fix; nothing was written. The commands exit 2 with it."""


class RunStopped(RuntimeError):
    """A run stopped by an outage past its budget before it could end on its own: a full or read-only disk, or the
    store unreachable. ``error`` is the outage, ``resume`` the command that goes on once it is over; nothing is lost."""

    def __init__(self, error: OutageError, *, run_id: str, resume: str, dialogues: int | None = None) -> None:
        super().__init__(str(error))
        self.error, self.run_id, self.resume, self.dialogues = error, run_id, resume, dialogues
