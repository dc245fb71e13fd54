"""What the ``python -m evals.<command>`` labelling CLIs share: their flags, opening the store, the exit status and
safe file writes (their progress bar is cli/rendering.py's); the scoring itself lives in :mod:`evals.scorers.loop` and
:mod:`evals.scorers.label_sets`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rich.text import Text

from checkpoints.location import DbLocation
from checkpoints.readers import Reader
from checkpoints.store import Writer
from cli.common import ArgumentParser, console, error_console, positive_int
from cli.rendering import call
from cli.store_option import add_db_option, add_no_backup_option, read_store, store_errors, write_store
from dymt.files import write_atomic  # noqa: F401 - the commands' way to write a file whole


def describe(doc: str | None) -> str:
    """A CLI's description: its module docstring's first line without the ``python -m ...``: prefix."""
    first = (doc or "").strip().splitlines()[0] if doc and doc.strip() else ""
    return first.split("``: ", 1)[-1]


def labeller_parser(
    prog: str,
    doc: str | None,
    *,
    items: str,
    model_flag: str,
    model_help: str,
    name_help: str,
    calls: str,
    redo_help: str,
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


def add_judging_flags(p: ArgumentParser, *, resamples: str, seed: str, prompt: str) -> None:
    """``--n-boot``, ``--seed`` and ``--judge-prompt FILE``, as the judging commands take them."""
    p.add_argument("--n-boot", type=positive_int, default=1000, help=resamples)
    p.add_argument("--seed", type=int, default=0, help=seed)
    p.add_argument("--judge-prompt", type=Path, default=None, metavar="FILE", help=prompt)


def open_existing(path: DbLocation | None) -> Writer:
    """The store a run wrote, opened for writing (labelling commands), or one line saying what to pass instead."""
    return write_store(path)


def read_existing(path: DbLocation | None) -> Reader:
    """The store a run wrote, opened read-only (reports and exports never write), or one line saying what to pass."""
    return read_store(path)


class Failures(Protocol):
    """What :func:`exit_status` reads of a labelling pass (an ``evals.scorers.loop.Tally``, a ``dymt`` result)."""

    @property
    def failed(self) -> int: ...
    @property
    def first_error(self) -> str | None: ...


def exit_status(tally: Failures, *, what: str = "calls") -> int:
    """1 (with a hint to rerun) when some model calls failed, else 0."""
    if tally.failed:
        error_console.print(
            Text(
                f"{tally.failed} {what} failed (first: {tally.first_error}); run the same command again to retry them",
                style="yellow",
            )
        )
        return 1
    return 0


@dataclass(frozen=True)
class LabellingCommand:
    """A command that runs one library labelling pass over a run (``evals.refusal``, ``evals.coherence``)."""

    prog: str
    doc: str | None
    score: Callable[..., Any]
    """The library's pass: ``dymt.classify_refusals``, ``dymt.score_coherence``."""
    labeller: str
    """What the model is called: ``classifier``, ``scorer``."""
    verb: tuple[str, str]
    """``("classify", "classified")``."""
    unit: str
    """What it labels: ``replies``, ``dialogues``."""
    progress: str

    def build_parser(self) -> ArgumentParser:
        p = labeller_parser(
            self.prog,
            self.doc,
            items=f"{self.unit} to {self.verb[0]}",
            model_flag="--model",
            calls="model",
            model_help=f"{self.labeller} model spec (default: the run's judge model)",
            name_help=f"{self.labeller} name in the store (default: the model spec)",
            redo_help=f"{self.verb[0]} again the {self.unit} this {self.labeller} already did",
        )
        add_db_option(p)
        add_no_backup_option(p)
        return p

    def main(self, argv: list[str] | None = None) -> int:
        """The flags into the library's pass, its progress on stderr, then one line of what it did."""
        return store_errors(self.prog)(self._main)(argv)

    def _main(self, argv: list[str] | None) -> int:
        parser = self.build_parser()
        args = parser.parse_args(argv)
        result = call(self.score, args, parser, args.run_id, progress=self.progress)
        console.print(
            Text(
                f"{result.kind} {self.labeller} {result.name!r} on run {result.run_id}: {self.verb[1]} "
                f"{result.labelled} {self.unit} ({result.unparsed} unparsed), {result.skipped} already done, "
                f"{result.failed} failed"
            )
        )
        return exit_status(result)
