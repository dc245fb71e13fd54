"""``python -m graph.trace``: browse and export the runs recorded by the tracer (graph → turn → node → model call).

Reads the dialogue database only, read-only (checkpoints.traces): no graph engine, no
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
from rich.tree import Tree

from checkpoints.paths import StoreError, default_db_path
from checkpoints.readers import open_reader
from checkpoints.traces import (
    TraceNotFoundError,
    list_traces,
    load_feedback,
    load_runs,
    require_traces,
    resolve,
)
from checkpoints.trace_tree import TraceNode, build_tree, langsmith_feedback, langsmith_runs, only_turn
from checkpoints.vocabulary import LABEL_TEXT, LABELS, label_mark
from cli.common import ArgumentParser, console, fail, positive_int

EXPORT_FORMATS = ("jsonl",)
DEFAULT_PROJECT = "dymt-esb"
LABEL_WIDTH = 32  # name column, including the tree guides (4 characters a level)
BAR_WIDTH = 14
MIN_PREVIEW = 40  # a shortened message takes the rest of its line, at least this many characters
KIND_STYLES = {"thread": "bold", "graph": "bold", "turn": "bold cyan", "node": "green", "model": "magenta", "run": "dim"}
BIAS_BADGES = {label: (f"{label_mark(label)} {LABEL_TEXT[label]}", style) for label, style in zip(LABELS, ("bold red", "green", "yellow"))}


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
    export.add_argument("--feedback-out", type=Path, default=None, metavar="FILE", help="also write the judge feedback (LangSmith feedback records)")
    export.add_argument("--project", default=DEFAULT_PROJECT, help=f"session_name of the runs (default {DEFAULT_PROJECT})")

    push = commands.add_parser("push", help="upload a run's traces and judge feedback to LangSmith")
    push.add_argument("id", metavar="RUN", help="a run id (python -m graph.runs list), or a thread or trace id")
    push.add_argument("--project", default=None, help="LangSmith project (default $LANGSMITH_PROJECT, else dymt-esb)")
    push.add_argument("--endpoint", default=None, metavar="URL",
                      help="LangSmith API URL (default $LANGSMITH_ENDPOINT, else LangSmith's cloud)")

    for sub in (listing, show, export, push):
        sub.add_argument("--db", type=Path, default=None, help=f"dialogue database (default {default_db_path()})")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    path = args.db or default_db_path()
    try:
        reader = open_reader(path)
    except StoreError as exc:
        fail(str(exc))
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
        kind, trace_ids = resolve(db, args.id)
        if args.command == "show":
            return _show(db, kind, trace_ids, args)
        return _export(db, trace_ids, args)
    except TraceNotFoundError as exc:
        fail(str(exc))
    finally:
        reader.close()


# --- list -----------------------------------------------------------------------------------


def _list(db, args) -> int:
    rows = list_traces(db, run_id=args.run_id, thread_id=args.thread)
    if not rows:
        what = " and ".join(f"{k} {v}" for k, v in (("run", args.run_id), ("thread", args.thread)) if v)
        if what:
            fail(f"no traces for {what}: check the ids with python -m graph.trace list or python -m graph.replay --list")
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
    runs = load_runs(db, trace_ids)
    tree = build_tree(runs, load_feedback(db, trace_ids), thread_id=args.id if kind == "thread" else None)
    if args.turn is not None:
        tree = only_turn(tree, args.turn)
        if not any(n.kind == "turn" for n in tree.walk()):
            fail(f"{args.id} has no turn {args.turn}: it has turns {_turn_list(runs)}")
    view = _View(full=args.full, width=console.width)
    console.print(view.render(tree))
    if view.shortened:
        console.print(Text("Messages are shortened to one line: add --full to see them whole.", style="dim"))
    return 0


class _View:
    """Turns a TraceNode tree into a rich Tree with aligned latency bars (a waterfall) and tokens."""

    def __init__(self, *, full: bool, width: int) -> None:
        self.full = full
        self.width = width
        self.shortened = False

    def render(self, root: TraceNode) -> Tree:
        tree = Tree(self._line(root, 0, root))
        self._children(tree, root, 1, root)
        return tree

    def _children(self, branch: Tree, node: TraceNode, depth: int, frame: TraceNode) -> None:
        # Bars inside a graph are scaled to that graph; graphs of a thread to the thread.
        inner_frame = node if node.kind == "graph" else frame
        for child in node.children:
            if child.kind == "run" and child.run and child.run["node"] and not child.run["error"] and not child.children:
                continue  # a router: its decision is shown on its node's line
            sub = branch.add(self._line(child, depth, inner_frame if child.kind != "graph" else frame))
            if self.full and child.run is not None and child.run["error"]:
                sub.add(Text(child.run["error"], style="red"))
            if child.kind == "model":
                self._messages(sub, child, depth + 1)
            self._children(sub, child, depth + 1, inner_frame)

    def _line(self, node: TraceNode, depth: int, frame: TraceNode) -> Text:
        width = max(8, LABEL_WIDTH - 4 * depth)
        name = node.name
        if node.kind == "model" and node.run and node.run["model"]:
            name = f"{node.run['model']}"
        label = Text(_fit(name, width).ljust(width), style=KIND_STYLES.get(node.kind, ""))
        label.append(f" {_seconds_text(node.latency):>8} ")
        label.append(_bar(node, frame), style="blue")
        prompt, completion = node.tokens()
        if prompt or completion:
            label.append(f" {prompt:,}→{completion:,} tok", style="dim" if node.kind != "model" else "")
        if node.kind == "turn":
            for feedback in (f for n in node.walk() for f in n.feedback):
                badge, style = BIAS_BADGES.get(feedback["value"] or "", (str(feedback["value"]), ""))
                label.append(f"  {feedback['key']}: ", style="dim")
                label.append(badge, style=style)
        if node.kind == "graph":
            if node.run is not None:
                label.append(f"\ntrace {node.run['trace_id']}", style="dim")
                parent = (node.run["metadata"] or {}).get("parent_thread_id")
                if node.run["branch_id"] and parent:
                    fork = (node.run["metadata"] or {}).get("fork_turn")
                    label.append(f"  branch of {parent}" + (f" from turn {fork}" if fork else ""), style="dim")
                elif node.run["branch_id"]:
                    label.append(f"  branch {node.run['branch_id']}", style="dim")
            else:
                label.append("\nno graph run stored: the process stopped before this invocation ended", style="yellow")
        if node.kind == "thread":
            label.append(f"\n{len(node.children)} invocation{'s' if len(node.children) != 1 else ''} of this thread", style="dim")
        if node.kind == "node" and node.run is not None:
            if self.full and node.run["checkpoint_id"]:
                label.append(f"  checkpoint {node.run['checkpoint_id']}", style="dim")
            route = _route(node)
            if route:
                label.append(f"  → {route}", style="dim")
            state_error = (node.run["outputs"] or {}).get("error")
            if state_error:
                label.append("  ")
                label.append(_fit(str(state_error), 120), style="red")
        if node.run is not None and node.run["error"]:
            label.append("  ✗ ", style="bold red")
            label.append(_fit(_error_head(node.run["error"]), 120), style="red")
        if node.kind == "model" and _cache_hit(node.run):
            label.append("  cached", style="dim")
        return label

    def _messages(self, branch: Tree, node: TraceNode, depth: int) -> None:
        room = max(MIN_PREVIEW, self.width - 4 * (depth + 1))
        sent = _sent_messages(node.run["inputs"] if node.run else None)
        received = _received_text(node.run["outputs"] if node.run else None)
        if self.full:
            sent_branch = branch.add(Text(f"sent ({len(sent)} message{'s' if len(sent) != 1 else ''})", style="dim"))
            for role, content in sent:
                line = Text(f"{role}: ", style="bold")
                line.append(content)
                sent_branch.add(line)
            if received is not None:
                line = Text("received: ", style="bold")
                line.append(received)
                branch.add(line)
        else:
            if sent:
                role, content = sent[-1]
                line = Text(f"sent {len(sent)} message{'s' if len(sent) != 1 else ''}, last {role}: ", style="dim")
                line.append(self._preview(content, room - len(line)))
                branch.add(line)
            if received is not None:
                line = Text("received: ", style="dim")
                line.append(self._preview(received, room - len(line)))
                branch.add(line)
        for feedback in node.feedback:
            badge, style = BIAS_BADGES.get(feedback["value"] or "", (str(feedback["value"]), ""))
            line = Text(f"{feedback['key']}: ", style="dim")
            line.append(badge, style=style)
            if feedback["comment"]:
                line.append(" — ", style="dim")
                comment = feedback["comment"]
                line.append(comment if self.full else self._preview(comment, room - len(line)))
            branch.add(line)

    def _preview(self, text: str, room: int) -> str:
        flat = " ".join(text.split())
        room = max(room, MIN_PREVIEW // 2)
        if len(flat) > room:
            self.shortened = True
            return flat[: room - 1] + "…"
        return flat


def _bar(node: TraceNode, frame: TraceNode) -> str:
    """A waterfall bar: where in its frame (graph or thread) the run started and how long it took."""
    start, frame_start, frame_end = node.start, frame.start, frame.end
    if start is None or frame_start is None or frame_end is None:
        return "▕" + " " * BAR_WIDTH + "▏"
    span = max((frame_end - frame_start).total_seconds(), 1e-9)
    offset = min(BAR_WIDTH - 1, int((start - frame_start).total_seconds() / span * BAR_WIDTH))
    length = max(1, round((node.latency or 0.0) / span * BAR_WIDTH))
    length = min(length, BAR_WIDTH - offset)
    return "▕" + " " * offset + "█" * length + " " * (BAR_WIDTH - offset - length) + "▏"


def _error_head(error: str) -> str:
    """The exception line of a stored error (LangChain appends the traceback to it)."""
    head = error.split("Traceback (most recent call last):")[0].strip()
    return (head.splitlines() or [""])[0]


def _cache_hit(run: dict[str, Any] | None) -> bool:
    try:
        message = run["outputs"]["generations"][0][0]["message"]  # type: ignore[index]
        return message["kwargs"]["response_metadata"].get("cache") == "hit"
    except (KeyError, IndexError, TypeError, AttributeError):
        return False


def _route(node: TraceNode) -> str | None:
    for child in node.children:
        if child.kind == "run" and child.run and isinstance(child.run["outputs"], dict):
            output = child.run["outputs"].get("output")
            if isinstance(output, str):
                return "end" if output == "__end__" else output
    return None


def _sent_messages(inputs: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(role, text) of the messages a model call was sent: LangChain's serialized messages or plain prompts."""
    if not inputs:
        return []
    if "messages" in inputs:
        batches = inputs["messages"] or []
        messages = batches[0] if batches and isinstance(batches[0], list) else batches
        return [(_role(m), _content(m)) for m in messages]
    return [("prompt", str(p)) for p in inputs.get("prompts") or []]


def _received_text(outputs: dict[str, Any] | None) -> str | None:
    if not outputs:
        return None
    try:
        generation = outputs["generations"][0][0]
    except (KeyError, IndexError, TypeError):
        return None
    message = generation.get("message")
    if isinstance(message, dict):
        return _content(message)
    return str(generation.get("text", ""))


def _role(message: Any) -> str:
    if isinstance(message, dict):
        kwargs = message.get("kwargs") if isinstance(message.get("kwargs"), dict) else message
        kind = kwargs.get("type") or kwargs.get("role")
        if not kind and isinstance(message.get("id"), list) and message["id"]:
            kind = str(message["id"][-1]).removesuffix("Message").lower()
        return {"human": "user", "ai": "assistant"}.get(str(kind), str(kind or "?"))
    return "?"


def _content(message: Any) -> str:
    if not isinstance(message, dict):
        return str(message)
    kwargs = message.get("kwargs") if isinstance(message.get("kwargs"), dict) else message
    content = kwargs.get("content", "")
    if isinstance(content, list):
        return "".join(part if isinstance(part, str) else str(part.get("text", "")) for part in content)
    return str(content)


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
    from graph.langsmith_push import DEFAULT_ENDPOINT, PushError, push_traces

    trace_ids = [row["trace_id"] for row in list_traces(db, run_id=args.id)]
    what = f"run {args.id}"
    if not trace_ids:
        kind, trace_ids = resolve(db, args.id)  # a thread or a trace; TraceNotFoundError says what exists
        what = f"{kind} {args.id}"
    endpoint = (args.endpoint or os.environ.get("LANGSMITH_ENDPOINT") or os.environ.get("LANGCHAIN_ENDPOINT")
                or DEFAULT_ENDPOINT).rstrip("/")
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
        result = push_traces(db, trace_ids, project=project, api_url=endpoint, api_key=api_key,
                             description=f"DyMT-ESB traces uploaded by python -m graph.trace push ({what})")
    except PushError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        langsmith_log.setLevel(level)
    line = Text(f"pushed {result.runs} runs of {result.traces} trace{'s' if result.traces != 1 else ''} "
                f"and {result.feedback} feedback records of {what} to project {result.project} at {result.endpoint}")
    if result.feedback_already_there:
        line.append(f" ({result.feedback_already_there} feedback records were already there)", style="dim")
    console.print(line)
    return 0


# --- formatting -----------------------------------------------------------------------------


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _seconds_text(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def _seconds(value: float | None) -> Text:
    return Text(_seconds_text(value))


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
