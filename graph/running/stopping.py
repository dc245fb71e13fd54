"""Stop a run's players (``graph.runs delete --force``): nothing may go on writing a run that is about to be deleted.

A ``graph.run`` playing it on this machine is sent SIGTERM, which stops it as Ctrl-C does (each dialogue at its last
checkpoint, the run marked interrupted), and waited for. On PostgreSQL the run's waiting jobs leave the queue and the
workers playing its dialogues are asked to abort them (procrastinate's abort: the play stops at once, its row closed,
its job not retried). A player on another machine, or one that does not stop in time (a process stopped with
SIGSTOP cannot act on a signal), is named, and nothing is deleted.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from dataclasses import dataclass

from checkpoints.location import DbLocation, PostgresURL
from checkpoints.players import Activity, activity
from checkpoints.process_claims import Owner
from checkpoints.store import open_writer

STOP_TIMEOUT_S = 60.0
_POLL_S = 0.2


class CannotStop(RuntimeError):
    """A player of the run that this process cannot stop (another machine), or that did not stop in time."""


@dataclass(frozen=True)
class Stopped:
    """What was stopped: graph.run processes (their pids) and worker jobs asked to abort."""

    processes: tuple[int, ...] = ()
    jobs: int = 0
    waiting_jobs: int = 0  # jobs cancelled before any worker took them

    def words(self) -> str:
        parts = []
        if self.processes:
            parts.append(f"graph.run pid {', '.join(str(p) for p in self.processes)}")
        if self.jobs:
            parts.append(f"{self.jobs} dialogue(s) played by workers")
        if self.waiting_jobs:
            parts.append(f"{self.waiting_jobs} waiting job(s) cancelled")
        return ", ".join(parts) or "nothing (it had stopped)"


def stop_players(location: DbLocation, run_id: str, *, timeout_s: float = STOP_TIMEOUT_S) -> Stopped:
    """Stop everything that plays ``run_id`` and wait until nothing does; :class:`CannotStop` otherwise."""
    who = _activity(location, run_id)
    here = socket.gethostname()
    elsewhere = [p for p in who.players if p.host != here]
    if elsewhere:
        raise CannotStop(
            f"run {run_id} is played on another machine ({'; '.join(p.words() for p in elsewhere)}): stop it there "
            "(Ctrl-C, or kill PID there), then delete again"
        )
    me = Owner.me()
    signalled = []
    for player in who.players:
        owner = Owner(player.host, player.pid, player.started)
        if owner == me or not owner.alive():
            continue
        try:
            os.kill(player.pid, signal.SIGTERM)
            signalled.append(player.pid)
        except ProcessLookupError:
            continue
        except PermissionError:
            raise CannotStop(
                f"run {run_id} is played by {player.words()}, another user's process: stop it as that user, then "
                "delete again"
            ) from None
    aborted = waiting = 0
    if isinstance(location, PostgresURL):
        from graph.workers.dialogue_jobs import abort_run_jobs

        aborted, waiting = asyncio.run(abort_run_jobs(location, run_id))
    deadline = time.monotonic() + timeout_s
    while (now := _activity(location, run_id)).playing or _busy(location, run_id):
        if time.monotonic() >= deadline:
            stalled = " (stopped with SIGSTOP? kill -CONT PID)" if now.players else ""
            raise CannotStop(
                f"run {run_id} still plays after {timeout_s:g} s ({now.who() or 'a worker'}){stalled}: stop it, then "
                "delete again"
            )
        time.sleep(_POLL_S)
    return Stopped(tuple(signalled), aborted, waiting)


def _activity(location: DbLocation, run_id: str) -> Activity:
    store = open_writer(location, create=False)
    try:
        return activity(store.db, run_id)
    finally:
        store.close()


def _busy(location: DbLocation, run_id: str) -> bool:
    """PostgreSQL: a job of the run that a live worker is still playing (its abort not yet acted on)."""
    if not isinstance(location, PostgresURL):
        return False
    from graph.workers.dialogue_jobs import busy_jobs

    return bool(busy_jobs(location, run_id))
