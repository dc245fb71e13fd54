"""``python -m graph.branches THREAD``: a dialogue and all its branches as a tree, with each turn's label.

Each branch shows the turn it forks at, what it changed, its labels (✗ biased, ✓ not biased,
? unparsed, · none yet; the turns it shares with its parent dimmed) and its status.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.text import Text
from rich.tree import Tree

from checkpoints.paths import StoreError, default_db_path
from checkpoints.queries import StoreQueries
from checkpoints.readers import open_reader
from checkpoints.store import iter_label_strings
from cli.common import ArgumentParser, console, fail
from graph.forking import describe_change

_SYMBOL_STYLE = {"✗": "bold red", "✓": "green", "?": "yellow", "·": "dim"}
_STATUS_STYLE = {"finished": "dim green", "paused": "yellow", "failed": "red", "interrupted": "red", "running": "cyan"}


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.branches", description=__doc__.splitlines()[0])
    p.add_argument("thread", metavar="THREAD", help="the dialogue (a thread id, a branch id works too)")
    p.add_argument("--db", type=Path, default=None, help=f"dialogue database (default {default_db_path()})")
    p.add_argument("--json", action="store_true", help="print the tree as JSON on stdout")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        store = open_reader(args.db or default_db_path())
    except StoreError as exc:
        fail(str(exc))
    if store.get_dialogue(args.thread) is None:
        fail(f"no dialogue {args.thread!r} in {store.path}: check the thread id (python -m graph.replay --list)")
    if args.json:
        sys.stdout.write(json.dumps(branch_tree(store, args.thread), indent=2) + "\n")
    else:
        console.print(render_tree(store, args.thread))
    return 0


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
        "branches": [branch_tree(store, c["thread_id"], _seen=seen) for c in store.children(thread_id) if c["thread_id"] not in seen],
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


if __name__ == "__main__":
    raise SystemExit(main())
