"""How a run's command ends: its exit status (cli/exit_codes.py), the exact command that resumes it, outage lines."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from checkpoints.outages import OutageError, StoreUnwritable
from cli.exit_codes import EXIT_OK, EXIT_OUTAGE, EXIT_SOME_FAILED, run_exit_status
from dymt.results import unfinished


def resume_command(argv: Sequence[str] | None, run_id: str, *, prog: str = "graph.run") -> str:
    """The command as it was given, with ``--run-id`` added if it had none: rerunning it resumes the run."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--run-id" or a.startswith("--run-id=") for a in args):
        args += ["--run-id", run_id]
    return shlex.join(["python", "-m", prog, *args])


def exit_status(summary: dict[str, Any], *, outages_past_budget: bool = False) -> int:
    """75 after an outage past its budget, 1 when some dialogue did not finish (failed, or held by the cost cap), else
    0."""
    return EXIT_OUTAGE if outages_past_budget else EXIT_SOME_FAILED if unfinished(summary) else EXIT_OK


def print_ending(summary: dict[str, Any], status: int, console: Console) -> None:
    """One line on stderr when the command does not exit 0: how many dialogues did not finish, the command that
    resumes."""
    if status == EXIT_OK:
        return
    resume = summary.get("resume", "")
    held = int((summary.get("budget") or {}).get("held") or 0)
    why = f" ({held} held back by --max-cost: raise it)" if held else ""
    console.print(
        Text(
            f"{unfinished(summary)} of {summary.get('dialogues', 0)} dialogue(s) did not finish{why}. "
            f"Resume with: {resume}",
            style="red",
        ),
        soft_wrap=True,
    )


def print_result_ending(result: Any, console: Console) -> None:
    """One line on stderr when a run (dymt.RunResult) did not end with status 0: what happened, the command that
    resumes."""
    status = run_exit_status(result)
    if status == EXIT_OK:
        return
    resume = result.summary.get("resume", "")
    if status == EXIT_OUTAGE:
        for outage in result.outages_past_budget:
            console.print(Text(outage.line(unfinished=result.unfinished, resume=resume), style="red"), soft_wrap=True)
        return
    print_ending(result.summary, status, console)


def interrupted_line(
    location: Any, run_id: str, *, resume: str, signal_name: str, again: str, started: bool = True
) -> str:
    """One line for a run a signal stopped: how many of its dialogues are unfinished and the command that resumes it,
    or, when every one had finished, that nothing is left and the command that shows its summary again (``again``)."""
    from checkpoints.paths import StoreError
    from checkpoints.readers import open_reader

    head = "Interrupted" if signal_name == "SIGINT" else f"Stopped by {signal_name}"
    try:
        with open_reader(location) as reader:
            run = reader.get_run(run_id)
            dialogues = reader.dialogues(run_id) if run is not None else []
    except (StoreError, OSError, ValueError):  # the store itself failed: say what is sure
        return f"{head}. Dialogues keep their last checkpoint. Resume with: {resume}"
    if run is None:
        if started:
            return f"{head}: run {run_id} is no longer in the store (deleted)."
        return f"{head} before run {run_id} started: nothing was stored."
    planned = int((run.get("config") or {}).get("planned_dialogues") or len(dialogues))
    done = sum(1 for d in dialogues if d["status"] in ("finished", "paused"))
    left = max(0, planned - done)
    if not left:
        return f"{head} after every dialogue of run {run_id} had finished ({done} of {planned}); its summary: {again}"
    return (
        f"{head}: {left} of {planned} dialogue(s) of run {run_id} unfinished, each saved at its last checkpoint. "
        f"Resume with: {resume}"
    )


def outage_exit(
    exc: OutageError, *, resume: str, console: Console, run_id: str | None = None, dialogues: int | None = None
) -> int:
    """One line for an outage that stopped the run (a full or read-only store): what, what to do, the resume command;
    75."""
    advice = exc.advice(dialogues=dialogues, run_id=run_id) if isinstance(exc, StoreUnwritable) else ""
    line = f"error: {exc}: " + (f"{advice}, " if advice else "") + f"then resume with: {resume} (nothing is lost)"
    console.print(Text(line, style="red"), soft_wrap=True)
    return EXIT_OUTAGE
