"""What the ``python -m evals.<command>`` labelling CLIs share: their flags, opening the store, the progress
bar, the exit status and safe file writes; the scoring itself lives in :mod:`evals.scorers.loop` and
:mod:`evals.scorers.label_sets`.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from checkpoints.location import DbLocation
from checkpoints.readers import Reader
from checkpoints.store import Writer
from cli.common import ArgumentParser, error_console, positive_int
from cli.store_option import read_store, write_store
from evals.scorers.loop import Tally


def describe(doc: str | None) -> str:
    """A CLI's description: its module docstring's first line without the ``python -m ...``: prefix."""
    first = (doc or "").strip().splitlines()[0] if doc and doc.strip() else ""
    return first.split("``: ", 1)[-1]


def labeller_parser(
    prog: str, doc: str | None, *, items: str, model_flag: str, model_help: str, name_help: str, calls: str, redo_help: str,
    model_required: bool = False,
) -> ArgumentParser:
    """The flags every labelling command shares (run, model, name, base URL, concurrency, redo); callers add theirs."""
    p = ArgumentParser(prog=prog, description=describe(doc))
    p.add_argument("--run-id", required=True, help=f"the run whose {items}")
    p.add_argument(model_flag, required=model_required, default=None, metavar="SPEC", help=model_help)
    p.add_argument("--name", default=None, help=name_help)
    p.add_argument("--base-url", default=None, help="base URL for openai: specs (an OpenAI-compatible server)")
    p.add_argument("--max-concurrency", type=positive_int, default=4, help=f"{calls} calls at once (default 4)")
    p.add_argument("--redo", action="store_true", help=redo_help)
    return p


def open_existing(path: DbLocation | None) -> Writer:
    """The store a run wrote, opened for writing (labelling commands), or one line saying what to pass instead."""
    return write_store(path)


def read_existing(path: DbLocation | None) -> Reader:
    """The store a run wrote, opened read-only (reports and exports never write), or one line saying what to pass."""
    return read_store(path)


def progress_bar() -> Progress:
    """The progress display of a labelling pass, on stderr."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=error_console)


def exit_status(tally: Tally, *, what: str = "calls") -> int:
    """1 (with a hint to rerun) when some model calls failed, else 0."""
    if tally.failed:
        error_console.print(Text(f"{tally.failed} {what} failed (first: {tally.first_error}); run the same command again to retry them", style="yellow"))
        return 1
    return 0


# --------------------------------------------------------------------------- files


def write_atomic(path: Path, content: str | bytes, *, private: bool = False) -> None:
    """Write a file through a temporary sibling and a rename, so a reader never sees half of it.

    ``private`` makes it owner-only, as the database is: for files holding generated text.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")
    try:
        if isinstance(content, bytes):
            partial.write_bytes(content)
        else:
            partial.write_text(content, encoding="utf-8")
        if private:
            partial.chmod(0o600)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
