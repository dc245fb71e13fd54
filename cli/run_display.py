"""A run's events rendered for a person: rich's progress bars (with a line per provider outage) on a terminal, plain
lines in a log (cli/progress_log.py), nothing with --json or --quiet but what the command prints at the end."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from cli.outage_display import OutageProgress
from dymt.events import ENDED, DialogueProgress, Event, RunStarted


class RunDisplay:
    """An event sink for ``dymt.run``: used as a context manager around the call, it closes what it opened."""

    def __init__(self, *, quiet: bool, log: bool, console: Console) -> None:
        self.quiet, self.log, self.console = quiet, log, console
        self._stack = ExitStack()
        self._on_progress: Any = None
        self._events: dict[type, Event] = {}

    def __enter__(self) -> RunDisplay:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.__exit__(*exc)

    def last(self, kind: type) -> Any:
        """The last event of this kind the run sent (None if none)."""
        return self._events.get(kind)

    def __call__(self, event: Event) -> None:
        self._events[type(event)] = event
        if isinstance(event, RunStarted):
            self._on_progress = self._open_log(event) if self.log else self._open_bars(event)
        elif isinstance(event, DialogueProgress) and self._on_progress is not None:
            self._on_progress(event.event, event.thread_id, event.turns_done)

    def _open_log(self, started: RunStarted):
        from cli.progress_log import ProgressLog

        status = started.status
        lines = ProgressLog(
            total=started.dialogues,
            turns_per_dialogue=started.turns,
            stream=sys.stderr,
            run_id=started.run_id,
            calls=status.calls,
            cost=status.cost,
            outages=status.outages,
            mute=status.muted,
        )
        return self._stack.enter_context(lines).on_progress

    def _open_bars(self, started: RunStarted):
        progress = OutageProgress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            disable=self.quiet,
            transient=False,
            outages=started.status.outages,
        )
        self._stack.enter_context(progress)
        dialogues = progress.add_task("dialogues", total=started.dialogues)
        turns = progress.add_task("turns", total=started.dialogues * started.turns)
        seen: dict[str, int] = {}

        def on_progress(event: str, thread_id: str, done: int) -> None:
            progress.advance(turns, done - seen.get(thread_id, 0))
            seen[thread_id] = done
            if event in ENDED:
                progress.advance(dialogues)

        return on_progress
