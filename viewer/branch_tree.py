"""A dialogue and all its branches as a tree, each turn's label marked: plain data for JSON and a rich Tree."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from rich.tree import Tree

from checkpoints.branching import describe_change
from checkpoints.queries import StoreQueries
from checkpoints.vocabulary import iter_label_strings

_SYMBOL_STYLE = {"✗": "bold red", "✓": "green", "?": "yellow", "·": "dim"}

_STATUS_STYLE = {"finished": "dim green", "paused": "yellow", "failed": "red", "interrupted": "red", "running": "cyan"}


def branch_tree(store: StoreQueries, thread_id: str, *, _seen: set[str] | None = None) -> dict[str, Any]:
    """The dialogue and its branches, recursively, as plain data."""
    seen = _seen if _seen is not None else set()
    seen.add(thread_id)
    row = store.get_dialogue(thread_id) or {"thread_id": thread_id}
    labels = store.labels(thread_id)
    return {
        "thread_id": thread_id,
        "parent_thread_id": row.get("parent_thread_id"),
        "fork_turn": row.get("fork_turn"),
        "change": describe_change(row.get("change")),
        "status": row.get("status"),
        "labels": labels,
        "label_string": " ".join(iter_label_strings(labels)),
        "branches": [
            branch_tree(store, c["thread_id"], _seen=seen)
            for c in store.children(thread_id)
            if c["thread_id"] not in seen
        ],
    }


def render_tree(store: StoreQueries, thread_id: str) -> Tree:
    """A rich Tree of the dialogue and its branches; all stored text goes in as Text, never markup."""
    data = branch_tree(store, thread_id)
    tree = Tree(_node(data, root=True), guide_style="dim")
    _add(tree, data["branches"])
    return tree


def _add(tree: Tree, branches: list[dict[str, Any]]) -> None:
    for branch in branches:
        _add(tree.add(_node(branch, root=False)), branch["branches"])


def _node(data: dict[str, Any], *, root: bool) -> Text:
    text = Text(data["thread_id"], style="bold" if root else "cyan")
    fork_turn = data.get("fork_turn") or 0
    if data.get("parent_thread_id"):
        text.append(f"  ⑂ turn {fork_turn}", style="magenta")
        if root:
            text.append(f" of {data['parent_thread_id']}", style="magenta")
        if data.get("change"):
            text.append(" · ")
            text.append(data["change"])
    text.append("   ")
    for i, symbol in enumerate(iter_label_strings(data["labels"]), start=1):
        if i > 1:
            text.append(" ")
        inherited = data.get("parent_thread_id") and i < fork_turn
        text.append(symbol, style=_SYMBOL_STYLE[symbol] + (" dim" if inherited else ""))
    status = data.get("status") or "?"
    text.append(f"   {status}", style=_STATUS_STYLE.get(status, ""))
    return text
