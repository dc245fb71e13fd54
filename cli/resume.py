"""``python -m graph.resume THREAD [--message TEXT]``: continue a paused (or failed, or interrupted) dialogue.

    python -m graph.resume THREAD [THREAD ...]      continue from the newest checkpoint to the end
    python -m graph.resume THREAD --message TEXT    send TEXT as the next user message first
    python -m graph.resume --run-id R               every unfinished dialogue of run R (a finished run: its summary)
    --interactive                                   review each simulated user message on the way

Works in any process: everything a dialogue needs is in its checkpoints and its run's record
(the models are rebuilt from the specs the run stored).
"""

from __future__ import annotations

import json
import shlex
import sys

from rich.panel import Panel
from rich.text import Text

import dymt
from checkpoints.store import Writer
from checkpoints.vocabulary import BIASED, NOT_BIASED, UNPARSED, iter_label_strings
from cli.common import ArgumentParser, console, error_console
from cli.flag_words import bad_input
from cli.store_option import add_db_option, store_errors
from dymt.errors import DymtError
from evals.report.summary_view import render_summary
from graph.running.pausing import PendingMessage, Review
from viewer.render import displayable

_LABEL_STYLE: dict[str, str] = {BIASED: "bold red", NOT_BIASED: "green", UNPARSED: "yellow"}


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.resume", description=__doc__.splitlines()[0])
    p.add_argument("threads", nargs="*", metavar="THREAD", help="the dialogue(s) to continue")
    p.add_argument("--run-id", default=None, help="continue every unfinished dialogue of this run")
    p.add_argument("--message", default=None, metavar="TEXT", help="the next user message (one THREAD only)")
    p.add_argument(
        "--interactive", action="store_true", help="review each simulated user message before the target sees it"
    )
    p.add_argument("--base-url", default=None, help="base URL for openai: specs (if the run used one)")
    add_db_option(p)
    p.add_argument("--json", action="store_true", help="print how each dialogue stands now as JSON on stdout")
    return p


@store_errors("graph.resume")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    review = terminal_review if args.interactive else None
    try:
        result = dymt.resume(
            args.threads, run_id=args.run_id, message=args.message, review=review, base_url=args.base_url, db=args.db
        )
    except DymtError as exc:
        bad_input(exc, build_parser())
    except KeyboardInterrupt:
        error_console.print(
            Text("Interrupted: the dialogue is saved; run the same command to continue.", style="yellow")
        )
        return 130
    if args.json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
        return 0
    if result.summary is not None:  # a finished run: its summary again, as graph.run --run-id R shows it
        render_summary(displayable(result.summary), console)
        error_console.print(
            Text(
                f"every dialogue of run {args.run_id} is finished: nothing to resume "
                "(graph.branch forks a dialogue to take it elsewhere)",
                style="yellow",
            )
        )
        return 0
    for row in result.dialogues:
        thread_id, status = row["thread_id"], row["status"]
        labels = " ".join(iter_label_strings(row["labels"]))
        error_console.print(
            Text.assemble((f"{status:>8} ", "green" if status == "finished" else "yellow"), thread_id, "  ", labels)
        )
        sys.stdout.write(thread_id + "\n")
    if result.paused:
        print_paused_hint(result.db, result.paused)
    return 0


# --------------------------------------------------------------------------- the terminal review


def terminal_review(pending: PendingMessage) -> Review:
    """Show a simulated user message and ask: accept, edit, replace or quit (EOF and Ctrl+C quit)."""
    out = error_console
    if pending.previous_reply is not None:
        label = pending.previous_label or "not labelled"
        out.print(
            Panel(
                Text(pending.previous_reply),
                title=Text(f"turn {pending.turn - 1} · target reply · {label}"),
                border_style=_LABEL_STYLE.get(pending.previous_label or "", "dim"),
                title_align="left",
            )
        )
    out.print(
        Panel(
            Text(pending.message),
            title=Text(f"turn {pending.turn}/{pending.max_turns} · simulated user message · {pending.thread_id}"),
            border_style="cyan",
            title_align="left",
        )
    )
    while True:
        try:
            out.print(Text("[a]ccept  [e]dit  [r]eplace  [q]uit (a): "), end="")
            choice = input().strip().lower() or "a"
        except (EOFError, KeyboardInterrupt):
            return Review("quit")
        if choice in ("a", "accept"):
            return Review("accept")
        if choice in ("q", "quit"):
            return Review("quit")
        if choice in ("e", "edit", "r", "replace"):
            out.print(Text("message: " if choice.startswith("r") else "edit the message: "), end="")
            try:
                text = _read_line(prefill=pending.message if choice.startswith("e") else "")
            except (EOFError, KeyboardInterrupt):
                return Review("quit")
            if text.strip():
                return Review("replace", text.strip())
            out.print(Text("an empty message cannot be sent: choose again", style="yellow"))
            continue
        out.print(Text(f"unknown choice {choice!r}: type a, e, r or q", style="yellow"))


def _read_line(*, prefill: str) -> str:
    """A line from stdin; on a terminal, ``prefill`` is already typed in, ready to edit."""
    if not prefill or not sys.stdin.isatty():
        return input()
    try:
        import readline
    except ImportError:
        return input()
    readline.set_startup_hook(lambda: readline.insert_text(prefill))
    try:
        return input()
    finally:
        readline.set_startup_hook()


def print_paused_hint(store: Writer | str, threads: list[str], *, run_id: str | None = None) -> None:
    """Tell the person how to continue paused dialogues later (``store``: the store, or where it is)."""
    if not threads:
        return
    where = f" --db {shlex.quote(str(store if isinstance(store, str) else store.path))}"
    if run_id and len(threads) > 1:
        command = f"python -m graph.resume --run-id {shlex.quote(run_id)}{where}"
    else:
        command = f"python -m graph.resume {shlex.quote(threads[0])}{where} [--message TEXT]"
    n = len(threads)
    error_console.print(
        Text(f"{n} dialogue{'s' if n != 1 else ''} paused: continue with {command}", style="yellow"), soft_wrap=True
    )


if __name__ == "__main__":
    raise SystemExit(main())
