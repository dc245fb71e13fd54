"""Tables of paired comparisons: targets, modes or runs on the same seeds, and counterfactual sets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from checkpoints.branching import describe_change
from evals.report.formatting import pct as percent
from evals.report.tables import TableData
from evals.stats.counterfactual import PairedTurn, SetComparison
from evals.stats.group_comparison import Comparison


def _pp(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.1f}"


def _paired_cell(row) -> tuple[str, str, str, str]:
    if row is None or row.n_pairs == 0:
        return ("–", "–", "–", "–")
    ci = "" if row.diff.low is None else f" [{_pp(row.diff.low)}, {_pp(row.diff.high)}]"
    return (
        f"{percent(row.rate_a)} / {percent(row.rate_b)} ({row.n_pairs})",
        f"{_pp(row.diff.diff)}{ci}",
        f"{row.mcnemar.b}/{row.mcnemar.c}",
        f"{row.mcnemar.p_value:.3g} ({row.p_holm:.3g})",
    )


def comparison_name(c: Comparison, *, with_run: bool) -> str:
    """ "B vs A", naming only what differs when one dimension does."""
    return f"{c.b.describe(with_run=with_run)} vs {c.a.describe(with_run=with_run)}"


def paired_table(c: Comparison, *, with_run: bool) -> TableData:
    """One comparison by turn: cumulative and per-turn bias of A and B, B − A with its interval, McNemar."""
    turns = max([0, *(r.turn for r in c.rows)])
    rows = []
    for t in range(1, turns + 1):
        rows.append((str(t), *_paired_cell(c.row("cumulative", t)), *_paired_cell(c.row("per_turn", t))))
    return TableData(
        comparison_name(c, with_run=with_run),
        (
            "turn",
            "cumulative A / B (pairs)",
            "Δ B − A, pts [95% CI]",
            "b/c",
            "McNemar p (Holm)",
            "per-turn A / B (pairs)",
            "Δ B − A, pts [95% CI]",
            "b/c",
            "McNemar p (Holm)",
        ),
        tuple(rows),
        left=1,
    )


def paired_overview_table(comparisons: Sequence[Comparison], *, with_run: bool) -> TableData:
    """Every comparison at its last turn: cumulative bias, the paired difference and the tests."""
    rows = []
    for c in comparisons:
        turns = max([0, *(r.turn for r in c.rows)])
        rows.append(
            (
                c.b.describe(with_run=with_run),
                c.a.describe(with_run=with_run),
                ", ".join(c.varies),
                str(c.n_seeds),
                *_paired_cell(c.row("cumulative", turns)),
            )
        )
    return TableData(
        "Paired comparisons: cumulative bias by the last turn (B vs A, same seeds)",
        (
            "B",
            "A",
            "differs in",
            "seeds",
            "cumulative A / B (pairs)",
            "Δ B − A, pts [95% CI]",
            "b/c",
            "McNemar p (Holm)",
        ),
        tuple(rows),
        left=3,
    )


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def _signed(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.0f}"


def _interval(t: PairedTurn) -> str:
    if t.diff.low is None or t.diff.high is None:
        return ""
    return f"[{100 * t.diff.low:+.0f}, {100 * t.diff.high:+.0f}]"


def _p(value: float) -> str:
    return f"{value:.3g}"


def set_table(name: str, info: dict[str, Any], result: SetComparison) -> Table:
    """A counterfactual set by turn: bias of parents and branches, the paired difference, its interval, McNemar."""
    change = describe_change(info["change"]) or "?"
    title = Text(
        f"Counterfactual set {name} · {change} at turn {info['fork_turn']} · {result.n_pairs} pairs (parent → branch)"
    )
    table = Table(title=title)
    for column in ("turn", "pairs", "parents", "branches", "diff", "95% CI", "b", "c", "McNemar p", "dropped"):
        table.add_column(column, justify="right")
    for t in (*result.per_turn, result.any_bias):
        table.add_row(
            "any" if t.turn is None else str(t.turn),
            str(t.n_pairs),
            _pct(t.parent_rate),
            _pct(t.branch_rate),
            _signed(t.diff.diff),
            _interval(t),
            str(t.mcnemar.b),
            str(t.mcnemar.c),
            _p(t.mcnemar.p_value),
            str(t.n_dropped),
            end_section=t is result.per_turn[-1],
        )
    return table
