"""``python -m graph.branch``: fork a stored dialogue before turn K, change one thing, and play it on.

    python -m graph.branch THREAD --turn K CHANGE [--turns N] [--name SET]
    python -m graph.branch --run-id R --turn K CHANGE [--name SET]     (every dialogue of run R;
                                                                       with --swap, those whose seed mentions a term)

CHANGE is one of --user-message TEXT, --swap OLD=NEW (repeatable), --target-model SPEC,
--judge-model SPEC, --mode MODE, --seed-statement TEXT, or --rerun (same settings, a new
sampling seed). Turns 1..K-1 are copied from the parent, never regenerated; the parent is not
touched. Prints each new branch id (a thread id) on stdout.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from rich.text import Text

import dymt
from checkpoints.vocabulary import iter_label_strings
from cli.common import ArgumentParser, error_console, positive_int
from cli.flag_words import flag_words
from cli.rendering import call, render
from cli.store_option import add_db_option, add_no_backup_option, chosen_db, store_errors
from dymt.events import DialogueProgress, Event, ignore
from dymt.stores import Db
from graph.running.swaps import parse_swap
from nodes.modes import DYNAMIC_MODES


def _swap_arg(text: str) -> tuple[str, str]:
    try:
        return parse_swap(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(flag_words(str(exc), {"swap": "--swap"})) from None


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.branch", description=__doc__.splitlines()[0])
    p.add_argument(
        "thread", nargs="?", metavar="THREAD", help="the dialogue to branch (a thread id; a branch id works too)"
    )
    p.add_argument(
        "--run-id",
        default=None,
        help="branch every dialogue of this run instead (with --swap: those whose seed mentions OLD)",
    )
    p.add_argument(
        "--turn", type=positive_int, required=True, metavar="K", help="fork just before turn K's user message"
    )
    change = p.add_mutually_exclusive_group(required=True)
    change.add_argument("--user-message", metavar="TEXT", help="send TEXT as turn K's user message")
    change.add_argument(
        "--swap",
        action="append",
        type=_swap_arg,
        metavar="OLD=NEW",
        help="swap a group term (whole words, case kept) in the seed and turn K's message; repeatable",
    )
    change.add_argument("--target-model", metavar="SPEC", help="play turns K.. against another target model")
    change.add_argument("--judge-model", metavar="SPEC", help="label turns K.. with another judge model")
    change.add_argument("--mode", help=f"continue in another user mode ({' or '.join(DYNAMIC_MODES)})")
    change.add_argument("--seed-statement", metavar="TEXT", help="continue with another hidden seed statement")
    change.add_argument(
        "--rerun", action="store_true", help="change nothing: re-sample turns K.. with a new sampling seed"
    )
    p.add_argument(
        "--turns", type=positive_int, default=None, metavar="N", help="turns in the branch (default the parent's)"
    )
    p.add_argument(
        "--name",
        default=None,
        metavar="SET",
        help="group the new branches as counterfactual set SET (python -m graph.compare --set SET)",
    )
    p.add_argument(
        "--sampling-seed",
        type=int,
        default=None,
        help="sampling seed of the branch (default the parent run's; --rerun draws a new one)",
    )
    p.add_argument("--base-url", default=None, help="base URL for openai: specs (if the parent run used one)")
    add_db_option(p)
    add_no_backup_option(p)
    p.add_argument("--json", action="store_true", help="print what was made as JSON on stdout")
    return p


def _change(args: argparse.Namespace) -> dict:
    """The one change given, as dymt.branch's keyword."""
    for key in ("user_message", "swap", "target_model", "judge_model", "mode", "seed_statement"):
        if getattr(args, key):
            return {key: getattr(args, key)}
    return {"rerun": True}


@store_errors("graph.branch")
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    where = shlex.quote(str(chosen_db(args.db)))
    labels = _Labels(args.db)
    try:
        made = call(
            dymt.branch, args, parser, args.thread, on_event=ignore if args.json else labels.show, **_change(args)
        )
    except KeyboardInterrupt:
        error_console.print(
            Text(
                f"Interrupted. A branch that started is saved: python -m graph.replay --list --db {where} lists it, "
                f"python -m graph.resume BRANCH --db {where} continues it",
                style="yellow",
            )
        )
        return 130
    finally:
        labels.close()
    return render(made, args, _report)


class _Labels:
    """Prints each branch that ends with its labels (read from the store, opened on the first one)."""

    def __init__(self, db: Db) -> None:
        self.db = db
        self.store: dymt.Store | None = None

    def show(self, event: Event) -> None:
        if not isinstance(event, DialogueProgress) or event.event not in ("finished", "failed"):
            return
        if self.store is None:
            self.store = dymt.open(self.db)
        labels = " ".join(iter_label_strings(self.store.labels(event.thread_id)))
        error_console.print(
            Text.assemble(
                (f"{event.event:>8} ", "green" if event.event == "finished" else "red"), event.thread_id, "  ", labels
            )
        )

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def _report(made: dymt.BranchResult) -> None:
    rows, where = made.branches, shlex.quote(made.db)
    for row in rows:
        sys.stdout.write(row["thread_id"] + "\n")
    for thread_id, reason in made.skipped:
        error_console.print(Text(f"skipped {thread_id}: {reason}", style="yellow"))
    for r in made.failed:
        error_console.print(
            Text(
                f"branch {r['thread_id']} {r['status']}: {r['error'] or ''} "
                f"(continue it with python -m graph.resume {shlex.quote(r['thread_id'])} --db {where})",
                style="red",
            )
        )
    error_console.print(
        Text(
            f"run {made.run_id}: {len(rows)} branch{'es' if len(rows) != 1 else ''} at turn {rows[0]['fork_turn']}",
            style="dim",
        )
    )
    if made.set_name:
        error_console.print(
            Text(
                f"set {made.set_name}: compare with python -m graph.compare --set {shlex.quote(made.set_name)} "
                f"--db {where}"
            ),
            soft_wrap=True,
        )


if __name__ == "__main__":
    raise SystemExit(main())
