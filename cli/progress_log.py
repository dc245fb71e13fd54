"""The run's progress as plain lines for a log (stderr not a terminal: nohup, CI, a cluster job).

A line at each tenth of the dialogues and at least every 30 s while nothing else is said: dialogues done of the
total, turns, failures, calls per minute, ETA and, with ``--pricing``, the cost so far; a provider outage's start
and end as lines of their own. No ANSI codes: the lines are written as they are.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

from dymt.events import ENDED
from models.circuit import OutageStatus, format_duration
from viewer.render import safe

EVERY_S = 30.0
STEPS = 10  # a line at each tenth of the dialogues


class ProgressLog:
    """Counts the runner's progress events and writes a line when a tenth is crossed or ``every`` seconds passed."""

    def __init__(
        self,
        *,
        total: int,
        turns_per_dialogue: int,
        stream: TextIO,
        run_id: str = "",
        calls: Callable[[], int] = lambda: 0,
        cost: Callable[[], float | None] | None = None,
        outages: Callable[[], list[OutageStatus]] = lambda: [],
        mute: Callable[[], bool] = lambda: False,
        every: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.turns_total = total, total * turns_per_dialogue
        self._stream, self._run_id = stream, run_id
        self._calls, self._cost, self._outages, self._mute = calls, cost, outages, mute
        self.every, self._clock = every, clock
        self._lock = threading.Lock()  # the counts
        self._write_lock = threading.Lock()  # one line at a time
        self._seen: dict[str, int] = {}
        self.ended = self.failed = self.turns = 0
        self._turns_here = 0  # turns played by this command (skipped ones done before do not set the pace)
        self._started = clock()
        self._last_line = self._started
        self._step = 0
        self._down: dict[str, OutageStatus] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the runner's callback ----------------------------------------------------------------

    def on_progress(self, event: str, thread_id: str, done: int) -> None:
        with self._lock:
            new = done - self._seen.get(thread_id, 0)
            self._seen[thread_id] = done
            self.turns += new
            if event not in ("skipped", "started"):
                self._turns_here += max(0, new)
            if event in ENDED:
                self.ended += 1
                self.failed += event == "failed"
            step = self.ended * STEPS // self.total if self.total else STEPS
            crossed = step > self._step
            self._step = max(self._step, step)
        if crossed:
            self.write_line()

    # --- lines ------------------------------------------------------------------------------------

    def line(self) -> str:
        """One progress line (no timestamp)."""
        with self._lock:
            ended, failed, turns, here = self.ended, self.failed, self.turns, self._turns_here
        minutes = max(self._clock() - self._started, 1e-9) / 60
        percent = 100 * ended // self.total if self.total else 100
        parts = [
            f"{ended}/{self.total} dialogues ({percent}%)",
            f"{turns}/{self.turns_total} turns",
            f"{failed} failed",
            f"{self._calls() / minutes:.0f} calls/min",
        ]
        left = self.turns_total - turns
        if ended >= self.total:
            parts.append("done")
        elif here and left > 0:
            parts.append(f"ETA {format_duration(left / (here / minutes) * 60)}")
        else:
            parts.append("ETA unknown")
        if self._cost is not None and (cost := self._cost()) is not None:
            parts.append(f"${cost:.2f} spent")
        return ", ".join(parts)

    def write_line(self, text: str | None = None) -> None:
        if self._mute():
            return
        text = text if text is not None else self.line()
        stamp = datetime.now(UTC).strftime("%H:%M:%S")
        who = f"run {self._run_id}: " if self._run_id else ""
        with self._write_lock:
            self._last_line = self._clock()
            self._stream.write(safe(f"{stamp} {who}{text}") + "\n")  # an error text shown, never run
            self._stream.flush()

    def tick(self) -> None:
        """Outages begun or over since the last tick, and a line if none was written for ``every`` seconds."""
        now = {status.endpoint: status for status in self._outages()}
        for endpoint, status in now.items():
            if endpoint not in self._down:
                self.write_line(status.line())
        for endpoint, was in self._down.items():
            if endpoint not in now:
                self.write_line(f"{endpoint} answers again after {format_duration(was.down_s)} unreachable")
        self._down = now
        if self._clock() - self._last_line >= self.every:
            self.write_line()

    # --- as a context manager: a thread ticks -------------------------------------------------

    def __enter__(self) -> ProgressLog:
        self._thread = threading.Thread(target=self._run, name="dymt-progress-log", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if exc[0] is None and self._step < STEPS:
            self.write_line()  # where it stopped (a tenth not reached: held or paused dialogues)

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self.every)):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - a log line must never stop the run
                continue
