"""``python -m graph.run --estimate``: what a run will call and cost, before anything runs.

The grid (seeds × modes × targets × samples) and the turn count give the model calls; stored
runs in the same database refine the tokens per call for specs already played in the same
role (evals.cost.estimate), from a SQLite file or a PostgreSQL store. Nothing is written, and no model or key is needed.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from evals.estimates import run_estimate  # noqa: F401 - the command's numbers, re-exported for its callers


def _usd(value: float | None) -> str:
    return "–" if value is None else f"${value:,.2f}"


def print_estimate(data: dict[str, Any], console: Console, *, as_json: bool = False) -> None:
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    table = Table(
        title=Text(
            f"Estimate: {data['dialogues']:,} dialogues × {data['turns']} turns"
            + (f" ({data['samples']} samples each)" if data["samples"] > 1 else "")
        )
    )
    for column in ("role", "spec", "model calls", "input tokens", "output tokens", "USD", "tokens from"):
        table.add_column(column, justify="left" if column in ("role", "spec", "tokens from") else "right")
    for r in data["by_role"]:
        basis = "stored runs of this spec" if r["basis"] == "stored" else "defaults (max tokens, growing prompt)"
        table.add_row(
            r["role"],
            Text(r["spec"]),
            f"{r['calls']:,}",
            f"{r['input_tokens']:,}",
            f"{r['output_tokens']:,}",
            _usd(r["usd"]),
            basis,
        )
    table.add_row(
        "total",
        "",
        f"{data['model_calls']:,}",
        f"{data['input_tokens']:,}",
        f"{data['output_tokens']:,}",
        _usd(data["usd"]),
        "",
        end_section=True,
    )
    console.print(table)
    if data["pricing"] is None:
        console.print(Text("no --pricing FILE: tokens only (see examples/pricing.toml)", style="yellow"))
    elif data["unpriced"]:
        console.print(
            Text(f"no price in {data['pricing']} for {', '.join(data['unpriced'])}: total left out", style="yellow")
        )
    console.print(Text("nothing was run; retries and response-cache hits are not taken into account", style="dim"))
