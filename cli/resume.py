"""``python -m graph.resume THREAD [--message TEXT]``: continue a paused (or failed, or interrupted) dialogue.

    python -m graph.resume THREAD [THREAD ...]      continue from the newest checkpoint to the end
    python -m graph.resume THREAD --message TEXT    send TEXT as the next user message first
    python -m graph.resume --run-id R               every unfinished dialogue of run R (a finished run: its summary)
    --interactive                                   review each simulated user message on the way

Works in any process: everything a dialogue needs is in its checkpoints and its run's record
(the models are rebuilt from the specs the run stored).
"""

from __future__ import annotations

import asyncio
import shlex
import sys

from rich.panel import Panel
from rich.text import Text

from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError
from checkpoints.serde import UnsafeCheckpointError
from checkpoints.store import Writer
from checkpoints.vocabulary import BIASED, NOT_BIASED, UNPARSED, iter_label_strings
from cli.common import ArgumentParser, console, error_console, fail
from cli.store_option import add_db_option, open_checkpointer, write_store
from evals.report.summary import render_summary, run_summary
from graph.running.forking import BranchSettings, ForkError, build_settings
from graph.running.pausing import (
    PAUSED,
    PauseOptions,
    PendingMessage,
    ResumeError,
    Review,
    ReviewQuit,
    resumable,
    resume_dialogue,
)
from graph.running.playing import StoreWriter
from nodes.builder import build_graph

_LABEL_STYLE: dict[str, str] = {BIASED: "bold red", NOT_BIASED: "green", UNPARSED: "yellow"}


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.resume", description=__doc__.splitlines()[0])
    p.add_argument("threads", nargs="*", metavar="THREAD", help="the dialogue(s) to continue")
    p.add_argument("--run-id", default=None, help="continue every unfinished dialogue of this run")
    p.add_argument("--message", default=None, metavar="TEXT", help="the next user message (one THREAD only)")
    p.add_argument("--interactive", action="store_true", help="review each simulated user message before the target sees it")
    p.add_argument("--base-url", default=None, help="base URL for openai: specs (if the run used one)")
    add_db_option(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if bool(args.threads) == bool(args.run_id):
        fail("give the THREAD(s) to continue, or --run-id R for every unfinished dialogue of a run (not both)")
    if args.message is not None and (len(args.threads) != 1):
        fail("--message is the next user message of one dialogue: give exactly one THREAD")
    if args.message is not None and not args.message.strip():
        fail("--message is empty: give the text of the next user message")
    try:
        store = write_store(args.db)
    except (StoreError, SchemaTooNewError) as exc:
        fail(str(exc))
    threads = list(dict.fromkeys(args.threads))
    if args.run_id:
        if store.get_run(args.run_id) is None:
            fail(f"no run {args.run_id!r} in {store.path}: check the run id")
        threads = resumable(store, args.run_id)
        if not threads:  # a finished run: its summary again, as graph.run --run-id R shows it
            render_summary(run_summary(store, args.run_id), console)
            error_console.print(Text(f"every dialogue of run {args.run_id} is finished: nothing to resume "
                                     "(graph.branch forks a dialogue to take it elsewhere)", style="yellow"))
            return 0
    rows = []
    for thread_id in threads:
        row = store.get_dialogue(thread_id)
        if row is None:
            fail(f"no dialogue {thread_id!r} in {store.path}: check the thread id (python -m graph.replay --list "
                f"--db {shlex.quote(str(store.path))})")
        if row["status"] == "finished":
            fail(f"dialogue {thread_id} is finished: nothing to resume (branch it with python -m graph.branch "
                f"{thread_id} --turn K ...)")
        rows.append(row)
    settings: dict[tuple, BranchSettings] = {}
    for row in rows:
        key = (row["run_id"], row.get("target"))
        if key not in settings:
            try:
                settings[key] = build_settings(store, row, base_url=args.base_url)
            except ForkError as exc:
                fail(str(exc))
    review = terminal_review if args.interactive else None
    try:
        outcomes = asyncio.run(_resume(store, rows, settings, message=args.message, review=review))
    except ResumeError as exc:
        fail(str(exc))
    except UnsafeCheckpointError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        error_console.print(Text("Interrupted: the dialogue is saved; run the same command to continue.", style="yellow"))
        return 130
    for thread_id, status in outcomes:
        labels = " ".join(iter_label_strings(store.labels(thread_id)))
        error_console.print(Text.assemble((f"{status:>8} ", "green" if status == "finished" else "yellow"), thread_id, "  ", labels))
        sys.stdout.write(thread_id + "\n")
    if any(status == PAUSED for _, status in outcomes):
        print_paused_hint(store, [t for t, s in outcomes if s == PAUSED])
    return 0


async def _resume(store: Writer, rows: list[dict], settings: dict, *, message: str | None, review) -> list[tuple[str, str]]:
    done: list[tuple[str, str]] = []
    async with open_checkpointer(store.path) as saver:
        graph = build_graph(saver)
        for row in rows:  # read-only checks first: a bad thread stops the command before any write
            head = await graph.aget_state({"configurable": {"thread_id": row["thread_id"]}})
            if not head.values:
                raise ResumeError(f"thread {row['thread_id']} has no checkpoints in {store.path}: it never started")
        if review is not None:
            graph = PauseOptions(interactive=True).configure(graph)
        write = StoreWriter(store)
        try:
            for row in rows:
                context = settings[(row["run_id"], row.get("target"))].context()
                try:
                    outcome = await resume_dialogue(graph, store, row["thread_id"], write=write, context=context, message=message, review=review)
                except ReviewQuit:
                    done.append((row["thread_id"], PAUSED))
                    break
                done.append((outcome.thread_id, outcome.status))
        finally:
            for run_id in sorted({r["run_id"] for r in rows if r.get("run_id")}):
                await write.refresh_run_status(run_id)
            write.close()
    return done


# --------------------------------------------------------------------------- the terminal review


def terminal_review(pending: PendingMessage) -> Review:
    """Show a simulated user message and ask: accept, edit, replace or quit (EOF and Ctrl+C quit)."""
    out = error_console
    if pending.previous_reply is not None:
        label = pending.previous_label or "not labelled"
        out.print(Panel(Text(pending.previous_reply), title=Text(f"turn {pending.turn - 1} · target reply · {label}"),
                        border_style=_LABEL_STYLE.get(pending.previous_label or "", "dim"), title_align="left"))
    out.print(Panel(Text(pending.message), title=Text(f"turn {pending.turn}/{pending.max_turns} · simulated user message · {pending.thread_id}"),
                    border_style="cyan", title_align="left"))
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


def print_paused_hint(store: Writer, threads: list[str], *, run_id: str | None = None) -> None:
    """Tell the person how to continue paused dialogues later."""
    if not threads:
        return
    where = f" --db {store.path}"
    if run_id and len(threads) > 1:
        command = f"python -m graph.resume --run-id {run_id}{where}"
    else:
        command = f"python -m graph.resume {threads[0]}{where} [--message TEXT]"
    n = len(threads)
    error_console.print(Text(f"{n} dialogue{'s' if n != 1 else ''} paused: continue with {command}", style="yellow"))


if __name__ == "__main__":
    raise SystemExit(main())
