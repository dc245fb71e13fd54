"""A run's status while it plays: progress against its plan, ETA, failures, cost and the bias rates so far.

Read through a read-only reader (``graph.runs status RUN`` from another terminal): it never writes, so a run in
progress is not disturbed. The rates are the run summary's (raw, and corrected for the judge's error when a
validation exists), over the turns stored so far.
"""

from __future__ import annotations

import shlex
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from checkpoints.players import activity, state_of
from checkpoints.queries import StoreQueries
from checkpoints.scores import labels_source
from checkpoints.vocabulary import PRIMARY_LABELS
from evals.cost import Pricing
from evals.judge_error.block_texts import interval_text
from evals.report.summary import run_summary
from evals.report.summary_view import command_block
from models.circuit import format_duration

# How many of the latest labelled turns set the pace of the ETA (the run's recent speed, not its first minutes').
PACE_WINDOW = 200


def run_status(
    store: StoreQueries,
    run_id: str,
    *,
    pricing: Pricing | None = None,
    planned: int | None = None,
    now: datetime | None = None,
) -> dict[str, Any] | None:
    """The status of ``run_id`` (None if the store has no such run); ``planned`` overrides the recorded plan size.

    ``state`` is what the run is doing now, told from who plays it (checkpoints/players.py): ``playing`` (a live
    process or worker plays it), ``queued`` (jobs wait for a worker), ``interrupted`` (unfinished, and nothing
    plays it: resume it), ``failed``, ``paused``, ``stopped`` (held back by ``--max-cost``) or ``finished``.
    """
    run = store.get_run(run_id)
    if run is None:
        return None
    # The dialogues before the turns: a dialogue's turns are stored before it is marked ended, so the turns read
    # next include every turn of each dialogue counted as ended here (the other way round, one that ends between the
    # two reads would be counted as ended without its turns).
    dialogues = store.dialogues(run_id)
    summary = run_summary(store, run_id, pricing=pricing)
    who = activity(store.db, run_id)
    by_status = Counter(d["status"] for d in dialogues)
    planned = planned or (run["config"] or {}).get("planned_dialogues") or len(dialogues)
    state = state_of(run["status"], who, by_status, planned)
    if state != "playing":  # a dialogue marked running that nothing plays is an interrupted one
        by_status["interrupted"] += by_status.pop("running", 0)
    ended = by_status["finished"] + by_status["failed"]
    turns = summary["turns"]
    done_turns = sum(t["labelled"] + t["unparsed"] for t in summary["per_turn"])
    now = now or datetime.now(UTC)
    return {
        "run_id": run_id,
        "db": summary["db"],
        "status": run["status"],
        "state": state,
        "players": who.who() or None,
        "queued": who.queued,
        "planned": planned,
        "ended": ended,
        "dialogues": dict(sorted(by_status.items())),
        "turns": {"done": done_turns, "planned": planned * turns},
        "eta_s": _eta(store, run_id, planned * turns - done_turns, now) if state == "playing" else None,
        "failed": [f for f in summary["failed"] if f["thread_id"] in _failed(dialogues)],
        "resume": summary.get("resume")
        or shlex.join(["python", "-m", "graph.run", "--run-id", run_id, "--db", str(summary["db"])]),
        "cost": summary["cost"],
        "models": summary["models"],
        "per_turn": summary["per_turn"],
        "cumulative": summary["cumulative"],
        "judge_corrected": summary["judge_corrected"],
    }


def _failed(dialogues: list[dict[str, Any]]) -> set[str]:
    return {d["thread_id"] for d in dialogues if d["status"] == "failed"}


def _eta(store: StoreQueries, run_id: str, left: int, now: datetime) -> float | None:
    """Seconds until the ``left`` turns are done at the run's measured pace: labelled turns per second over its
    latest :data:`PACE_WINDOW` labelled turns (None: too soon to tell)."""
    if left <= 0:
        return 0.0
    rows = store.query(
        f"select l.created_at from {labels_source(store.db)} l join dialogues d on d.thread_id = l.thread_id "
        "where d.run_id = ? and l.label_set = ? order by l.created_at desc limit ?",
        [run_id, PRIMARY_LABELS, PACE_WINDOW],
    )
    stamps = sorted(t for r in rows if (t := _time(r["created_at"])))
    if len(stamps) < 3 or stamps[-1] <= stamps[0]:
        return None
    # Up to now, not to the last label: a pace that has slowed shows in the ETA before the next label comes.
    span = max((now - stamps[0]).total_seconds(), (stamps[-1] - stamps[0]).total_seconds())
    return left * span / len(stamps)


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
    state = status.get("state") or status["status"]
    when = (
        f"ETA {format_duration(eta)}"
        if eta is not None
        else "ETA unknown (too few turns labelled yet)"
        if state == "playing"
        else "done"
        if state == "finished"
        else ""
    )
    counts = [f"{d.get('finished', 0)} finished", f"{d.get('failed', 0)} failed"]
    counts += [f"{d[k]} {word}" for k, word in _COUNTED if d.get(k)]
    head = (
        f"run {status['run_id']} ({_state_words(status)}): {status['ended']}/{status['planned']} dialogues ended "
        f"({', '.join(counts)}), {status['turns']['done']}/{status['turns']['planned']} turns"
        + (f", {when}" if when else "")
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


_COUNTED = (("running", "playing"), ("interrupted", "interrupted"), ("paused", "paused"))


def _state_words(status: dict[str, Any]) -> str:
    """The run's state and who plays it, or what to do: "playing: graph.run (pid 4121, since …)", "interrupted:
    nothing plays it; resume with …"."""
    state = status.get("state") or status["status"]
    if state == "playing":
        return f"playing: {status['players']}"
    if state == "queued":
        return f"queued: {status['queued']} dialogue(s) wait for a worker (python -m graph.worker --db {status['db']})"
    if state == "interrupted":
        return f"interrupted: nothing plays it; resume with {status['resume']}"
    return state


def render_status(status: dict[str, Any]) -> Group:
    return Group(*status_renderables(status))
