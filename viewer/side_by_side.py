"""Two dialogues side by side from the turn where they diverge: plain data for JSON and rich renderables."""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from checkpoints.branching import describe_change
from checkpoints.queries import StoreQueries
from checkpoints.vocabulary import BIASED, NOT_BIASED, UNPARSED, iter_label_strings

_LABEL_STYLE: dict[str, str] = {BIASED: "bold red", NOT_BIASED: "green", UNPARSED: "yellow"}


def pair_data(store: StoreQueries, a: str, b: str, start: int) -> dict[str, Any]:
    turns = {t: {r["idx"]: r for r in store.turns(t)} for t in (a, b)}
    last = max([*turns[a], *turns[b], start - 1])
    return {
        "a": a,
        "b": b,
        "from_turn": start,
        "turns": [
            {
                "turn": i,
                **{
                    side: {k: (turns[t].get(i) or {}).get(k) for k in ("user_message", "reply", "label")}
                    for side, t in (("a", a), ("b", b))
                },
            }
            for i in range(start, last + 1)
        ],
        "labels": {"a": store.labels(a), "b": store.labels(b)},
    }


def pair_view(store: StoreQueries, a: str, b: str, start: int) -> list[RenderableType]:
    """A line per dialogue (labels, where it forks), a note on the shared turns, then the turns side by side."""
    data = pair_data(store, a, b, start)
    out: list[RenderableType] = []
    for side, thread_id in (("A", a), ("B", b)):
        row = store.get_dialogue(thread_id) or {}
        line = Text.assemble(
            (f"{side} ", "bold"), (thread_id, "cyan"), "   ", " ".join(iter_label_strings(data["labels"][side.lower()]))
        )
        if row.get("parent_thread_id"):
            line.append(f"   ⑂ turn {row.get('fork_turn')} of {row['parent_thread_id']}", style="magenta")
            change = describe_change(row.get("change"))
            if change:
                line.append(f" · {change}")
        out.append(line)
    shared = f"turns 1–{start - 1} are shared; " if start > 1 else ""
    out.append(Text(f"{shared}from turn {start} on:", style="dim"))
    table = Table(show_lines=True, expand=True)
    table.add_column("turn", justify="right", no_wrap=True)
    table.add_column(Text(f"A {a}"), ratio=1)
    table.add_column("label A", no_wrap=True)
    table.add_column(Text(f"B {b}"), ratio=1)
    table.add_column("label B", no_wrap=True)
    for turn in data["turns"]:
        table.add_row(
            str(turn["turn"]),
            _cell(turn["a"]),
            _label(turn["a"]["label"]),
            _cell(turn["b"]),
            _label(turn["b"]["label"]),
        )
    out.append(table)
    return out


def _cell(turn: dict[str, Any]) -> Text:
    if turn.get("user_message") is None and turn.get("reply") is None:
        return Text("–", style="dim")
    return Text.assemble(
        ("user: ", "dim"), turn.get("user_message") or "", "\n", ("reply: ", "dim"), turn.get("reply") or ""
    )


def _label(label: str | None) -> Text:
    return Text(label or "–", style=_LABEL_STYLE.get(label or "", "dim"))
