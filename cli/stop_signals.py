"""SIGTERM as Ctrl-C: what a batch scheduler or an orchestrator sends stops a command as a person's Ctrl-C does.

While a command's coroutine runs, the first SIGTERM cancels it (asyncio's own way of stopping it on Ctrl-C): each
dialogue stops at its last checkpoint, traces are written, the run is marked interrupted. Outside the event loop
(preparing, the summary) it raises :class:`KeyboardInterrupt` where the command is. Which signal stopped it is
kept, for the one line and the exit status (128 + the signal's number: 130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


class Stopping:
    """Which signal stopped a command (None until one did), and the handlers that turn SIGTERM into a stop."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def exit_status(self) -> int:
        """128 + the signal's number, as a shell reports a process that a signal ended."""
        return 128 + (self.signum or signal.SIGINT)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum or signal.SIGINT).name

    @contextmanager
    def handled(self) -> Iterator[None]:
        """SIGTERM raises KeyboardInterrupt while the block runs outside an event loop (:meth:`run` inside one)."""
        previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._raise)
        try:
            yield
        except KeyboardInterrupt:
            if self.signum is None:
                self.signum = signal.SIGINT
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """``asyncio.run(coroutine)``; the first SIGTERM cancels it (later ones wait for it to stop in order), which
        raises KeyboardInterrupt here once it has stopped, as Ctrl-C does."""
        try:
            return asyncio.run(self._until_stopped(coroutine))
        except asyncio.CancelledError:
            if self.signum is None:
                raise
            raise KeyboardInterrupt from None

    async def _until_stopped(self, coroutine: Coroutine[Any, Any, T]) -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def stop(signum: int, _frame: object) -> None:
            # As asyncio's own Ctrl-C handler does: cancel at once (a run playing in processes asks its task whether
            # it is cancelled while it waits on its children, outside the loop) and wake the loop.
            if self.signum is None:
                self.signum = signum
                task.cancel()
                loop.call_soon_threadsafe(lambda: None)

        signal.signal(signal.SIGTERM, stop)
        try:
            return await coroutine
        finally:
            signal.signal(signal.SIGTERM, self._raise)

    def _raise(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            self.signum = signum
            raise KeyboardInterrupt
