"""The bias-dynamics part of ``python -m benchmarks judge_error --coverage --transitions``: its table.

Per cell and transition metric (onset, clean so far, persistence, recovery, relapse; docs/judge-error.md,
"Bias dynamics by simulation") the worst-turn coverage of the numbers shown, and the largest share of data sets
shown "too few dialogues".
"""

from __future__ import annotations

from benchmarks.judge_error import COVERAGE_TARGET

TRANSITION_NAMES = ("onset", "survival", "persistence", "recovery", "relapse")


def _worst(entry: dict | None, field: str) -> tuple[float, int | None]:
    values = [] if entry is None else [(v, i + 1) for i, v in enumerate(entry[field]) if v == v]
    return min(values) if values else (float("nan"), None)


def transition_lines(cells: list[dict]) -> list[str]:
    """The transition suite's table: per cell and metric the worst-turn coverage of the numbers shown (turns whose
    truth's base holds 20 expected dialogues), and the largest share withheld as too few dialogues at such a turn."""
    lines = [
        "  bias dynamics: worst-turn coverage of the numbers shown (* < 0.90), withheld = largest share of data sets "
        "shown 'too few dialogues' at a turn whose true base holds >= 20",
        f"  {'truth':22s} {'judge':10s} {'T':>2s} {'N':>4s} sets  "
        + " ".join(f"{n[:11]:>11s}" for n in TRANSITION_NAMES)
        + "  withheld",
    ]
    below = shown = 0
    for c in sorted(cells, key=lambda c: (c["paired"], c["turns"], c["truth"], c["judge"])):
        m = c["metrics"]
        parts, withheld = [], 0.0
        for name in TRANSITION_NAMES:
            entry = m.get(f"transitions.{name}")
            worst, turn = _worst(entry, "kept_coverage")
            if entry is not None:
                withheld = max([withheld, *(v for v in entry["flag_rate"] if v == v)])
                kept = [v for v in entry["kept_coverage"] if v == v]
                shown += len(kept)
                below += sum(v < COVERAGE_TARGET for v in kept)
            mark = "*" if worst < COVERAGE_TARGET else " "
            parts.append(f"{'–':>11s}" if worst != worst else f"{worst:.2f}{mark}@{turn:<2d}".rjust(11))
        sets = c["sets"] - c["refused"]
        lines.append(
            f"  {c['truth']:22s} {c['judge']:10s} {c['turns']:>2d} {c['dialogues']:>4d} {sets:>4d}  "
            + " ".join(parts)
            + f"  {100 * withheld:5.0f}%"
        )
    lines.append(f"  {below} of {shown} (cell, metric, turn) coverages below {COVERAGE_TARGET:.2f}")
    return lines
