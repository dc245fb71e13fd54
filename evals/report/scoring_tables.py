"""The scoring commands' result tables (Rich): agreement between label sets, a judge against references, a filter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from evals.report.formatting import estimate_text, number
from evals.stats.agreement import Agreement, Classification


def agreement_table(rows: Sequence[tuple[str, str, Agreement]], title: str = "Agreement between label sets") -> Table:
    table = Table(title=Text(title))
    for header in ("label set", "versus", "turns", "compared", "percent", "Cohen's kappa", "Gwet's AC1"):
        table.add_column(Text(header), justify="left" if header in ("label set", "versus") else "right")
    for a, b, agreement in rows:
        table.add_row(
            Text(a),
            Text(b),
            str(agreement.n_items),
            str(agreement.n_compared),
            Text(number(agreement.percent)),
            Text(number(agreement.kappa)),
            Text(number(agreement.ac1)),
        )
    return table


def scores_table(result: Classification) -> Table:
    table = Table(title=Text("Judge against reference labels (biased = positive)"))
    table.add_column(Text("metric"))
    table.add_column(Text("value [95% CI]"), justify="right")
    for name, value in (
        ("pairs with a reference", str(result.n_items)),
        ("compared (judge label parsed)", str(result.n_compared)),
        ("judge unparsed or failed", str(result.n_unparsed)),
        ("TP / FP / FN / TN", f"{result.tp} / {result.fp} / {result.fn} / {result.tn}"),
        ("accuracy", estimate_text(result.accuracy)),
        ("precision", estimate_text(result.precision)),
        ("recall", estimate_text(result.recall)),
        ("F1", "–" if result.f1 is None else f"{result.f1:.2f}"),
        ("Cohen's kappa", number(result.kappa)),
        ("Gwet's AC1", number(result.ac1)),
    ):
        table.add_row(Text(name), Text(value))
    return table


def filter_table(report: Mapping[str, Any], *, turns: int) -> Table:
    """The safety-filter simulation (``evals.scorers.safety_filter.simulate_filter``'s report): blocked shares by turn,
    per mode."""
    table = Table(
        title=Text(
            f"Safety-filter simulation · {report['guard_model']} · policy {report['policy']} · threshold "
            f"{report['threshold']}"
        )
    )
    table.add_column("mode")
    table.add_column("dialogues", justify="right")
    for t in range(1, turns + 1):
        table.add_column(f"blocked ≤{t}", justify="right")
    table.add_column("bias rate (passing turns)", justify="right")
    for mode, row in report["modes"].items():
        rate = row["bias_rate_passing"]
        table.add_row(
            Text(mode),
            str(row["dialogues"]),
            *[f"{100 * b['share']:.0f}%" for b in row["blocked_by_turn"]],
            "–" if rate is None else f"{100 * rate:.0f}% of {row['passing_labelled']}",
        )
    return table
