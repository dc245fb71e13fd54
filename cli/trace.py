"""``python -m graph.trace``: browse and export the runs recorded by the tracer (graph → turn → node → model call).

Reads the dialogue database only, read-only (checkpoints.traces.tables): no graph engine, no
model package. Model text is always rich ``Text``, never markup.

    python -m graph.trace list [--run-id R] [--thread T] [--db PATH]
    python -m graph.trace show ID [--turn K] [--full] [--db PATH]       ID: a trace id (or its start) or a thread id
    python -m graph.trace export ID --format jsonl [--out FILE] [--feedback-out FILE] [--project NAME]
    python -m graph.trace push RUN [--project NAME] [--endpoint URL]   RUN: a run id (or a thread or trace id)
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from checkpoints.paths import StoreError
from checkpoints.traces.tables import (
    TraceNotFoundError,
    list_traces,
    load_feedback,
    load_runs,
    require_traces,
    resolve,
)
from checkpoints.traces.tree import build_tree, langsmith_feedback, langsmith_runs, only_turn
from cli.common import ArgumentParser, console, fail, positive_int
from cli.store_option import add_db_option, read_store, store_errors
from viewer.render import displayable
from viewer.waterfall import TraceView, seconds_text

EXPORT_FORMATS = ("jsonl",)
DEFAULT_PROJECT = "dymt-esb"


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.trace", description=__doc__.splitlines()[0])
    commands = p.add_subparsers(dest="command", required=True, metavar="{list,show,export,push}")

    listing = commands.add_parser("list", help="traces with duration, tokens and errors")
    listing.add_argument("--run-id", default=None, help="only this run")
    listing.add_argument("--thread", default=None, metavar="T", help="only this dialogue thread")

    show = commands.add_parser("show", help="one trace or thread as a tree")
    show.add_argument("id", metavar="ID", help="a trace id (or a unique start of one) or a thread id")
    show.add_argument("--turn", type=positive_int, default=None, metavar="K", help="only turn K")
    show.add_argument("--full", action="store_true", help="print the messages sent and received in full")

    export = commands.add_parser("export", help="runs in LangSmith's run format")
    export.add_argument("id", metavar="ID", help="a trace id (or a unique start of one) or a thread id")
    export.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="jsonl: one LangSmith run per line")
    export.add_argument("--out", type=Path, default=None, metavar="FILE", help="write here instead of stdout")
    export.add_argument(
        "--feedback-out",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the judge feedback (LangSmith feedback records)",
    )
    export.add_argument(
        "--project", default=DEFAULT_PROJECT, help=f"session_name of the runs (default {DEFAULT_PROJECT})"
    )

    push = commands.add_parser("push", help="upload a run's traces and judge feedback to LangSmith")
    push.add_argument("id", metavar="RUN", help="a run id (python -m graph.runs list), or a thread or trace id")
    push.add_argument("--project", default=None, help="LangSmith project (default $LANGSMITH_PROJECT, else dymt-esb)")
    push.add_argument(
        "--endpoint",
        default=None,
        metavar="URL",
        help="LangSmith API URL (default $LANGSMITH_ENDPOINT, else LangSmith's cloud)",
    )

    add_db_option(p, listing, show, export, push)
    return p


@store_errors("graph.trace")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    reader = read_store(args.db)
    path = reader.path
    db = reader.db
    try:
        require_traces(reader.file_tables, path)
    except StoreError as exc:
        reader.close()
        fail(str(exc))
    try:
        if args.command == "list":
            return _list(db, args)
        if args.command == "push":
            return _push(db, args)
        kind, trace_ids = resolve(db, args.id)  # type: ignore[arg-type]
        if args.command == "show":
            return _show(db, kind, trace_ids, args)
        return _export(db, trace_ids, args)
    except TraceNotFoundError as exc:
        fail(str(exc))
    finally:
        reader.close()


# --- list -----------------------------------------------------------------------------------


def _list(db, args) -> int:
    rows = displayable(list_traces(db, run_id=args.run_id, thread_id=args.thread))
    if not rows:
        what = " and ".join(f"{k} {v}" for k, v in (("run", args.run_id), ("thread", args.thread)) if v)
        if what:
            fail(
                f"no traces for {what}: check the ids with python -m graph.trace list or python -m graph.replay --list"
            )
        fail("no traces in this database: python -m graph.run records them (unless run with --no-trace)")
    table = Table(title="Traces", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("trace id · thread · started", no_wrap=True, overflow="fold")
    for header in ("turns", "time", "calls", "tokens in→out", "errors"):
        table.add_column(header, justify="right")
    for row in rows:
        status_style = {"success": "", "error": "bold red"}.get(row["status"], "yellow")
        ident = Text(row["trace_id"], style=status_style)
        ident.append(f"\n{row['thread_id'] or '—'}")
        ident.append(f"\n{_clock(row['start_time'])}", style="dim")
        took = _seconds(row["latency"]) if row["status"] != "unfinished" else Text("unfinished", style="yellow")
        table.add_row(
            ident,
            _turn_range(row["first_turn"], row["last_turn"]),
            took,
            str(row["model_calls"] or 0),
            f"{row['prompt_tokens'] or 0:,}→{row['completion_tokens'] or 0:,}",
            Text(str(row["errors"]), style="bold red") if row["errors"] else Text("—", style="dim"),
        )
    console.print(table)
    console.print(Text("Show one with: python -m graph.trace show TRACE_ID_OR_THREAD [--turn K]", style="dim"))
    return 0


# --- show -----------------------------------------------------------------------------------


def _show(db, kind: str, trace_ids: list[str], args) -> int:
    runs = displayable(load_runs(db, trace_ids))  # a reply's escape sequences shown as symbols, never run
    feedback = displayable(load_feedback(db, trace_ids))
    tree = build_tree(runs, feedback, thread_id=args.id if kind == "thread" else None)
    if args.turn is not None:
        tree = only_turn(tree, args.turn)
        if not any(n.kind == "turn" for n in tree.walk()):
            fail(f"{args.id} has no turn {args.turn}: it has turns {_turn_list(runs)}")
    view = TraceView(full=args.full, width=console.width)
    console.print(view.render(tree))
    if view.shortened:
        console.print(Text("Messages are shortened to one line: add --full to see them whole.", style="dim"))
    return 0


# --- export ---------------------------------------------------------------------------------


def _export(db, trace_ids: list[str], args) -> int:
    runs = load_runs(db, trace_ids)
    feedback = load_feedback(db, trace_ids)
    records = langsmith_runs(runs, feedback, project=args.project)
    for out in (args.out, args.feedback_out):
        if out is not None:
            _check_out(out.expanduser())
    _write_jsonl(records, args.out)
    if args.feedback_out is not None:
        _write_jsonl(langsmith_feedback(feedback), args.feedback_out)
    return 0


def _write_jsonl(records: Iterable[dict[str, Any]], out: Path | None) -> None:
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if out is None:
        sys.stdout.write(lines)
        return
    out = out.expanduser()
    # Written beside the target and renamed: a failure never leaves half a file.
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(lines)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _check_out(out: Path) -> None:
    if out.is_dir():
        fail(f"{out} is a directory: give a file path such as {out / 'trace.jsonl'}")
    if not out.parent.is_dir():
        fail(f"cannot write {out}: folder {out.parent} does not exist")


# --- push -----------------------------------------------------------------------------------


def _push(db, args) -> int:
    from graph.tracing.langsmith_push import DEFAULT_ENDPOINT, PushError, push_traces

    trace_ids = [row["trace_id"] for row in list_traces(db, run_id=args.id)]
    what = f"run {args.id}"
    if not trace_ids:
        kind, trace_ids = resolve(db, args.id)  # a thread or a trace; TraceNotFoundError says what exists
        what = f"{kind} {args.id}"
    endpoint = (
        args.endpoint
        or os.environ.get("LANGSMITH_ENDPOINT")
        or os.environ.get("LANGCHAIN_ENDPOINT")
        or DEFAULT_ENDPOINT
    ).rstrip("/")
    if not endpoint.startswith(("http://", "https://")):
        fail(f"--endpoint {endpoint!r} is not an http(s) URL: give the API URL, such as {DEFAULT_ENDPOINT}")
    api_key = os.environ.get("LANGSMITH_API_KEY") or os.environ.get("LANGCHAIN_API_KEY")
    if not api_key and endpoint == DEFAULT_ENDPOINT:
        fail("no LangSmith API key: set LANGSMITH_API_KEY (or pass --endpoint for a self-hosted server)")
    project = args.project or os.environ.get("LANGSMITH_PROJECT") or DEFAULT_PROJECT
    # The client logs each failure as a warning; the one-line error below says it once.
    langsmith_log = logging.getLogger("langsmith")
    level = langsmith_log.level
    langsmith_log.setLevel(logging.CRITICAL)
    try:
        result = push_traces(
            db,
            trace_ids,
            project=project,
            api_url=endpoint,
            api_key=api_key,
            description=f"DyMT-ESB traces uploaded by python -m graph.trace push ({what})",
        )
    except PushError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        langsmith_log.setLevel(level)
    line = Text(
        f"pushed {result.runs} runs of {result.traces} trace{'s' if result.traces != 1 else ''} "
        f"and {result.feedback} feedback records of {what} to project {result.project} at {result.endpoint}"
    )
    if result.feedback_already_there:
        line.append(f" ({result.feedback_already_there} feedback records were already there)", style="dim")
    console.print(line)
    return 0


# --- formatting -----------------------------------------------------------------------------


def _seconds(value: float | None) -> Text:
    return Text(seconds_text(value))


def _clock(iso: str | None) -> str:
    return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S") if iso else "—"


def _turn_range(first: int | None, last: int | None) -> str:
    if first is None:
        return "—"
    return str(first) if first == last else f"{first}–{last}"


def _turn_list(runs: list[dict[str, Any]]) -> str:
    turns = sorted({r["turn"] for r in runs if r["turn"] is not None})
    return ", ".join(map(str, turns)) or "none"


if __name__ == "__main__":
    raise SystemExit(main())
