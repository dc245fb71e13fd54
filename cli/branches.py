"""``python -m graph.branches THREAD``: a dialogue and all its branches as a tree, with each turn's label.

Each branch shows the turn it forks at, what it changed, its labels (✗ biased, ✓ not biased,
? unparsed, · none yet; the turns it shares with its parent dimmed) and its status.
"""

from __future__ import annotations

import json
import shlex
import sys

from checkpoints.paths import StoreError
from cli.common import ArgumentParser, console, fail
from cli.store_option import add_db_option, read_store, store_errors
from viewer.branch_tree import branch_tree, render_tree


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.branches", description=__doc__.splitlines()[0])
    p.add_argument("thread", metavar="THREAD", help="the dialogue (a thread id, a branch id works too)")
    add_db_option(p)
    p.add_argument("--json", action="store_true", help="print the tree as JSON on stdout")
    return p


@store_errors("graph.branches")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        store = read_store(args.db)
    except StoreError as exc:
        fail(str(exc))
    if store.get_dialogue(args.thread) is None:
        fail(
            f"no dialogue {args.thread!r} in {store.path}: check the thread id (python -m graph.replay --list --db "
            f"{shlex.quote(str(store.path))})"
        )
    if args.json:
        sys.stdout.write(json.dumps(branch_tree(store, args.thread), indent=2) + "\n")
    else:
        console.print(render_tree(store, args.thread))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
