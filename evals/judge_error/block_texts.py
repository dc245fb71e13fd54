"""The one-line texts of a ``judge_corrected`` block, as summaries, reports and pages show them: a rate with its
interval, the validation it rests on, the judge's drift, and the flags of numbers past the validated turns.
"""

from __future__ import annotations

import shlex
from typing import Any

from evals.metric_registry import format_interval

__all__ = ["beyond_fix", "beyond_note", "drift_line", "flag_lines", "interval_text", "validation_line"]


def interval_text(entry: dict[str, Any] | None, key: str = "rate") -> str:
    """ "33% [22–45]" from a {rate, ci95} entry (or "–"), as ``evals.metric_registry`` formats a share."""
    if not entry or entry.get(key) is None:
        return "–"
    low, high = entry["ci95"]
    return format_interval(entry[key], low, high)


def validation_line(block: dict[str, Any]) -> str:
    """Which validation a block used, its size, sensitivity and specificity with 95% intervals, in one line."""
    v = block.get("validation")
    if not v:
        return ""

    def rate(entry: dict[str, Any]) -> str:
        low, high = entry["ci95"]
        return "–" if entry["value"] is None else f"{entry['value']:.2f} [{low:.2f}, {high:.2f}]"

    line = (
        f"corrected with {v['kind'] or 'a'} validation {v['source']}: {v['what']}; n={v['n']} (TP/FP/FN/TN "
        f"{v['tp']}/{v['fp']}/{v['fn']}/{v['tn']}), sensitivity {rate(v['sensitivity'])}, specificity "
        f"{rate(v['specificity'])}"
    )
    return line + (f"; {v['note']}" if v.get("note") else "")


def drift_line(block: dict[str, Any]) -> str:
    """One line: how much the judge's error changes from the first validated turn to the last (or why that is not
    known)."""
    drift = block.get("judge_drift")
    if not drift:
        return ""
    parts = []
    for name in ("sensitivity", "specificity"):
        c = drift.get(name)
        if c:
            low, high = c["ci95"]
            parts.append(f"{name} {c['change']:+.2f} [{low:+.2f}, {high:+.2f}]")
    span = f" from turn {drift['first_turn']} to {drift['last_turn']}: " + ", ".join(parts) if parts else ""
    return f"judge drift: {drift['verdict']}{span} ({drift['reason']})"


def beyond_fix(run_id: str, db: str | None = None, *, sample: int = 150) -> str:
    """The commands that label replies at every turn of a run, so its judge is validated where its numbers rest."""
    at = f" --db {shlex.quote(db)}" if db else ""
    run = shlex.quote(run_id)
    return (
        f"label replies at every turn: python -m evals.annotate export --run-id {run} --design active --sample "
        f"{sample} --out more.csv{at}, then python -m evals.annotate validate more.csv --run-id {run}{at}"
    )


def beyond_note(block: dict[str, Any]) -> str:
    """One line for numbers past the validated turns that stand: the run's labels do not change there."""
    beyond = block.get("beyond_validation")
    if not beyond or beyond.get("flagged"):
        return ""
    first, last = beyond["validated_turns"]
    held = f"turn {first}" if first == last else f"turns {first}–{last}"
    return (
        f"the validation holds items at {held} only; {beyond['detail']}, so the judge's error past them is taken "
        f"to be that at turn {last}"
    )


def flag_lines(block: dict[str, Any]) -> list[str]:
    """The flags of a block's numbers past the validated turns: why (one line), and the fix when the block has one."""
    beyond = block.get("beyond_validation")
    if not beyond or not beyond.get("flagged"):
        return []
    note = (block.get("unreliable") or {}).get("per_turn") or next(iter((block.get("unreliable") or {}).values()), "")
    lines = [note.split(" (label replies")[0] if block.get("fix") else note]
    if block.get("fix"):
        lines.append(block["fix"])
    return lines
