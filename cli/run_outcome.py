"""How a run's command ends: its exit status (cli/exit_codes.py), the exact command that resumes it, outage lines."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from checkpoints.outages import OutageError, StoreUnwritable
from cli.exit_codes import EXIT_OK, EXIT_OUTAGE, EXIT_SOME_FAILED
from models.call_policy import CallPolicy


def resume_command(argv: Sequence[str] | None, run_id: str, *, prog: str = "graph.run") -> str:
    """The command as it was given, with ``--run-id`` added if it had none: rerunning it resumes the run."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--run-id" or a.startswith("--run-id=") for a in args):
        args += ["--run-id", run_id]
    return shlex.join(["python", "-m", prog, *args])


def unfinished(summary: dict[str, Any]) -> int:
    """Dialogues of the run that failed or were held back (jobs that failed before their dialogue started included)."""
    return len(summary.get("failed") or []) + int((summary.get("budget") or {}).get("held") or 0)


def exit_status(summary: dict[str, Any], *, outages_past_budget: bool = False) -> int:
    """75 after an outage past its budget; 1 if some dialogue failed or was held back; else 0 (all finished or paused as
    asked)."""
    if outages_past_budget:
        return EXIT_OUTAGE
    return EXIT_SOME_FAILED if unfinished(summary) else EXIT_OK


def print_ending(summary: dict[str, Any], status: int, policy: CallPolicy | None, console: Console) -> None:
    """One line on stderr when the command does not exit 0: what happened, how many, the command that resumes."""
    if status == EXIT_OK:
        return
    resume = summary.get("resume", "")
    if status == EXIT_OUTAGE and policy is not None:
        for circuit in policy.outages_past_budget():
            line = (
                f"outage: {circuit.endpoint} {circuit.down_words()} past the outage budget ({circuit.budget:g} s); "
                f"{unfinished(summary)} dialogue(s) stopped failed, nothing lost. Resume once it is back with: {resume}"
            )
            console.print(Text(line, style="red"), soft_wrap=True)
        return
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
    if result.status == EXIT_OK:
        return
    resume = result.summary.get("resume", "")
    if result.status == EXIT_OUTAGE:
        for outage in result.outages_past_budget:
            console.print(Text(outage.line(unfinished=result.unfinished, resume=resume), style="red"), soft_wrap=True)
        return
    print_ending(result.summary, result.status, None, console)


def outage_exit(
    exc: OutageError, *, resume: str, console: Console, run_id: str | None = None, dialogues: int | None = None
) -> int:
    """One line for an outage that stopped the run (a full or read-only store): what, what to do, the resume command;
    75."""
    advice = exc.advice(dialogues=dialogues, run_id=run_id) if isinstance(exc, StoreUnwritable) else ""
    line = f"error: {exc}: " + (f"{advice}, " if advice else "") + f"then resume with: {resume} (nothing is lost)"
    console.print(Text(line, style="red"), soft_wrap=True)
    return EXIT_OUTAGE
