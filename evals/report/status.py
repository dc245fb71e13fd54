"""A run's status while it plays: progress against its plan, ETA, failures, cost and the bias rates so far.

Read through a read-only reader (``graph.runs status RUN`` from another terminal): it never writes, so a run in
progress is not disturbed. The rates are the run summary's (raw, and corrected for the judge's error when a
validation exists), over the turns stored so far.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from checkpoints.queries import StoreQueries
from evals.cost import Pricing
from evals.judge_error.texts import interval_text
from evals.report.summary import run_summary
from evals.report.summary_view import command_block
from models.circuit import format_duration

# How many of the latest dialogues to end set the pace of the ETA (the run's recent speed, not its first minutes').
PACE_WINDOW = 20


def run_status(
    store: StoreQueries,
    run_id: str,
    *,
    pricing: Pricing | None = None,
    planned: int | None = None,
    now: datetime | None = None,
) -> dict[str, Any] | None:
    """The status of ``run_id`` (None if the store has no such run); ``planned`` overrides the recorded plan size."""
    run = store.get_run(run_id)
    if run is None:
        return None
    # The dialogues before the turns: a dialogue's turns are stored before it is marked ended, so the turns read
    # next include every turn of each dialogue counted as ended here (the other way round, one that ends between the
    # two reads would be counted as ended without its turns).
    dialogues = store.dialogues(run_id)
    summary = run_summary(store, run_id, pricing=pricing)
    by_status = Counter(d["status"] for d in dialogues)
    planned = planned or (run["config"] or {}).get("planned_dialogues") or len(dialogues)
    ended = by_status["finished"] + by_status["failed"]
    turns = summary["turns"]
    done_turns = sum(t["labelled"] + t["unparsed"] for t in summary["per_turn"])
    now = now or datetime.now(UTC)
    return {
        "run_id": run_id,
        "db": summary["db"],
        "status": run["status"],
        "planned": planned,
        "ended": ended,
        "dialogues": dict(sorted(by_status.items())),
        "turns": {"done": done_turns, "planned": planned * turns},
        "eta_s": _eta(dialogues, planned - ended, now) if run["status"] == "running" else None,
        "failed": summary["failed"],
        "cost": summary["cost"],
        "models": summary["models"],
        "per_turn": summary["per_turn"],
        "cumulative": summary["cumulative"],
        "judge_corrected": summary["judge_corrected"],
    }


def _eta(dialogues: list[dict[str, Any]], left: int, now: datetime) -> float | None:
    """Seconds until the ``left`` dialogues end at the pace of the last ones that ended (None: too soon to tell)."""
    if left <= 0:
        return 0.0
    ends = sorted(t for d in dialogues if d["status"] in ("finished", "failed") and (t := _time(d.get("ended_at"))))
    recent = ends[-PACE_WINDOW:]
    if len(recent) < 2 or recent[-1] <= recent[0]:
        return None
    per_dialogue = (recent[-1] - recent[0]).total_seconds() / (len(recent) - 1)
    since_last = max(0.0, (now - recent[-1]).total_seconds())
    return max(0.0, left * per_dialogue - min(since_last, per_dialogue))


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def status_renderables(status: dict[str, Any]) -> list[RenderableType]:
    """The status as rich renderables: a progress line, failures, cost, then the rates so far."""
    d = status["dialogues"]
    eta = status["eta_s"]
    when = (
        "done"
        if status["status"] != "running"
        else f"ETA {format_duration(eta)}"
        if eta is not None
        else "ETA unknown (fewer than 2 dialogues ended)"
    )
    head = (
        f"run {status['run_id']} ({status['status']}): {status['ended']}/{status['planned']} dialogues ended "
        f"({d.get('finished', 0)} finished, {d.get('failed', 0)} failed, {d.get('running', 0)} playing"
        + (f", {d['paused']} paused" if d.get("paused") else "")
        + f"), {status['turns']['done']}/{status['turns']['planned']} turns, {when}"
    )
    out: list[RenderableType] = [Text(head, style="bold")]
    for failure in status["failed"][:3]:
        out.append(Text(f"  failed {failure['thread_id']}: {failure['error'] or ''}", style="red"))
    if len(status["failed"]) > 3:
        out.append(Text(f"  … and {len(status['failed']) - 3} more failed", style="red"))
    cost = (status.get("cost") or {}).get("usd")
    if cost is not None:
        out.append(Text(f"cost so far ${cost:.2f}"))
    corrected = status["judge_corrected"] or {}
    fixed = {r["turn"]: r for r in corrected.get("per_turn") or []}
    fixed_cum = {r["turn"]: r for r in corrected.get("cumulative") or []}
    table = Table(title=Text("Bias rates so far (95% CI)"))
    for column in (
        "turn",
        "labelled",
        "per turn",
        "cumulative",
        *(("corrected", "corrected cumulative") if fixed else ()),
    ):
        table.add_column(column, justify="right")
    for turn, cum in zip(status["per_turn"], status["cumulative"]):
        t = turn["turn"]
        row = [str(t), str(turn["labelled"]), interval_text(turn), interval_text(cum)]
        if fixed:
            row += [interval_text(fixed.get(t)), interval_text(fixed_cum.get(t))]
        table.add_row(*row)
    out.append(table)
    if corrected.get("refusal"):
        out.append(Text("\n".join(command_block(corrected["refusal"])), style="yellow"))
    out.append(Text(f"stored in {status['db']}", style="dim"))
    return out


def render_status(status: dict[str, Any]) -> Group:
    return Group(*status_renderables(status))
