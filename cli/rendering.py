"""The one path from a command's flags to a library call and from its result to the terminal.

A command parses its flags, calls :func:`call` with the ``dymt`` function (each keyword parameter the function takes is
read from the flag of the same name; anything else is given), and hands the result to :func:`render`: ``--json`` prints
the result's JSON (``result.to_json()``, the schema docs/library.md lists), otherwise the command's own ``show``.
A library error is the command's one line in its own flags, exit 2.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from cli.common import error_console
from cli.flag_words import bad_input
from dymt.errors import DymtError
from dymt.events import Labelled, ignore

Result = TypeVar("Result")


def progress_bar() -> Progress:
    """The progress display of a labelling pass, on stderr."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=error_console,
    )


class LabelProgress:
    """The progress bar of a labelling pass, fed by the library's ``Labelled`` events: ``with LabelProgress() as bar:
    dymt.rejudge(..., on_event=bar)``."""

    def __init__(self, description: str = "judging") -> None:
        self.description, self.progress = description, progress_bar()
        self.task: TaskID | None = None

    def __enter__(self) -> LabelProgress:
        self.progress.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.progress.__exit__(exc_type, exc, traceback)

    def __call__(self, event: object) -> None:
        if not isinstance(event, Labelled):
            return
        if self.task is None:
            self.task = self.progress.add_task(self.description, total=event.total)
        self.progress.update(self.task, completed=event.done)


def call(
    function: Callable[..., Result],
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    *positional: Any,
    progress: str | None = None,
    **given: Any,
) -> Result:
    """``function(*positional, **flags, **given)``: ``flags`` are the flags named as its keyword-only parameters.

    With ``progress`` a labelling bar on stderr follows its ``Labelled`` events (none under ``--json``).
    """
    parameters = inspect.signature(function).parameters
    options = {
        name: getattr(args, name)
        for name, parameter in parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name not in given and hasattr(args, name)
    }
    try:
        if progress is None:
            return function(*positional, **options, **given)
        if getattr(args, "json", False):
            return function(*positional, **options, on_event=ignore, **given)
        with LabelProgress(progress) as bar:
            return function(*positional, **options, on_event=bar, **given)
    except DymtError as exc:
        bad_input(exc, parser)


def render(result: Any, args: argparse.Namespace, show: Callable[[Any], int | None], *, status: int = 0) -> int:
    """``--json``: the result's JSON on stdout and ``status``; else what ``show(result)`` prints, and its status."""
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
        return status
    shown = show(result)
    return status if shown is None else shown


def run(
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    function: Callable[..., Result],
    positional: str,
    *,
    show: Callable[[Result, argparse.Namespace], int | None],
    status: Callable[[Result], int] = lambda result: 0,
    progress: str | None = None,
    given: Callable[[argparse.Namespace], dict[str, Any]] = lambda args: {},
) -> int:
    """A library command's ``main``: parse ``argv``, :func:`call` ``function`` with the flag ``positional`` first,
    then :func:`render` its result with ``show``; the exit status is ``show``'s, else ``status(result)``."""
    args = parser.parse_args(argv)
    result = call(function, args, parser, getattr(args, positional), progress=progress, **given(args))
    return render(result, args, lambda shown: show(shown, args), status=status(result))
