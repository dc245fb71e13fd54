"""``python -m graph.run --run-id R --wait``: the progress of a run its workers play, then its summary."""

from __future__ import annotations

import json
import shlex
import sys
import time
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from checkpoints.location import PostgresURL
from checkpoints.paths import StoreError
from checkpoints.run_record import run_settings
from checkpoints.store import Writer, open_writer
from cli.common import console, error_console, fail
from cli.exit_codes import EXIT_OK
from cli.run_outcome import exit_status, print_ending
from dymt.results import RUN_SCHEMA
from evals.cost import budget_status
from evals.report.summary import run_summary
from evals.report.summary_view import render_summary
from graph.running.playing import DialogueOutcome
from graph.workers.dialogue_jobs import job_counts, job_threads, run_budget
from viewer.render import displayable

POLL_S = 1.0
WAITING = ("todo", "doing")


def wait_for_run(
    url: PostgresURL, run_id: str, *, as_json: bool = False, poll_s: float = POLL_S, resume: str | None = None
) -> int:
    """Poll the run's jobs until none is waiting or running; then settle the run's status and print its summary.

    Exit 0 when every dialogue of the run finished, 1 when some failed (jobs that failed before their dialogue
    started included), with the command that resumes them (``resume``: the enqueuing command, when known).
    """
    try:
        counts = _poll_jobs(url, run_id, as_json=as_json, poll_s=poll_s)
        store = open_writer(url, create=False)
    except StoreError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        error_console.print(
            Text.assemble(
                ("Stopped waiting.", "yellow"),
                " The workers go on; wait again with: "
                + shlex.join(["python", "-m", "graph.run", "--run-id", run_id, "--db", str(url), "--wait"]),
            ),
            soft_wrap=True,
        )
        return 130
    try:
        summary, run_config = _settled_summary(store, url, run_id, counts)
    except StoreError as exc:
        fail(str(exc))
    finally:
        store.close()
    status = exit_status(summary)
    if status != EXIT_OK:
        summary["resume"] = resume or shlex.join(
            ["python", "-m", "graph.run", "--run-id", run_id, "--db", str(url), "--enqueue", "--wait"]
        )
        if (summary.get("budget") or {}).get("held") and (cap := run_settings(run_config).get("max_cost")):
            summary["resume"] += f" --max-cost {2 * cap:g}"  # the dialogues held back need a higher cap
    if as_json:
        sys.stdout.write(json.dumps({"schema": RUN_SCHEMA, **summary}, indent=2) + "\n")
    else:
        render_summary(displayable(summary), console)
        if counts.get("failed"):
            error_console.print(
                f"[red]{counts['failed']} job(s) failed[/]: see the workers' logs, then enqueue the run again"
            )
    print_ending(summary, status, error_console)
    return status


def _poll_jobs(url: PostgresURL, run_id: str, *, as_json: bool, poll_s: float) -> dict[str, int]:
    """Show the run's jobs as a progress bar (on stderr, none with --json) until none waits; their final counts."""
    counts = job_counts(url, run_id)
    if not counts:
        fail(f"run {run_id} has no jobs in {url}: enqueue it first with --enqueue")
    total = sum(counts.values())
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[doing]} playing"),
        console=error_console,
        disable=as_json,
    ) as progress:
        bar = progress.add_task("dialogues", total=total, doing=counts.get("doing", 0))
        while True:
            waiting = sum(counts.get(s, 0) for s in WAITING)
            progress.update(
                bar, total=sum(counts.values()), completed=sum(counts.values()) - waiting, doing=counts.get("doing", 0)
            )
            if not waiting:
                break
            time.sleep(poll_s)
            counts = job_counts(url, run_id)
    return counts


def _settled_summary(
    store: Writer, url: PostgresURL, run_id: str, counts: dict[str, int]
) -> tuple[dict[str, Any], Any]:
    """The run's status settled and its summary, counting jobs that never started their dialogue; its stored config."""
    store.refresh_run_status(run_id)
    outcomes = [DialogueOutcome(d["thread_id"], d["status"], d.get("error")) for d in store.dialogues(run_id)]
    summary = run_summary(store, run_id, outcomes=outcomes)
    run_config = (store.get_run(run_id) or {}).get("config")
    started = {d["thread_id"] for d in store.dialogues(run_id)}
    if counts.get("failed"):
        summary["jobs_failed"] = counts["failed"]
        never = [thread for thread in job_threads(url, run_id, "failed") if thread not in started]
        summary["failed"] += [
            {"thread_id": t, "error": "its job failed before the dialogue started: see the workers' logs"}
            for t in never
        ]
        summary["dialogues"] += len(never)
    # Jobs that found the run's --max-cost reached succeeded without starting their dialogue: held back.
    held = [thread for thread in job_threads(url, run_id, "succeeded") if thread not in started]
    if (cap := run_budget(url, run_id)) is not None:
        dollars = budget_status(store, run_id, cap)
        summary["budget"] = {
            **{k: dollars[k] for k in ("max_usd", "spent_usd", "reserved_usd", "estimate_usd")},
            "held": len(held),
        }
    elif held:
        summary["budget"] = {"held": len(held)}
    summary["dialogues"] += len(held)
    return summary, run_config
