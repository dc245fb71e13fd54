"""A stored trace as a rich tree: latency bars (a waterfall), tokens, routes, errors, judge badges and message
previews."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from rich.tree import Tree

from checkpoints.traces.tree import TraceNode
from checkpoints.vocabulary import LABEL_TEXT, LABELS, label_mark

LABEL_WIDTH = 32  # name column, including the tree guides (4 characters a level)
BAR_WIDTH = 14
MIN_PREVIEW = 40  # a shortened message takes the rest of its line, at least this many characters
KIND_STYLES = {
    "thread": "bold",
    "graph": "bold",
    "turn": "bold cyan",
    "node": "green",
    "model": "magenta",
    "run": "dim",
}
BIAS_BADGES: dict[str, tuple[str, str]] = {
    label: (f"{label_mark(label)} {LABEL_TEXT[label]}", style)
    for label, style in zip(LABELS, ("bold red", "green", "yellow"))
}


class TraceView:
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
            if (
                child.kind == "run"
                and child.run
                and child.run["node"]
                and not child.run["error"]
                and not child.children
            ):
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
        label.append(f" {seconds_text(node.latency):>8} ")
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
            label.append(
                f"\n{len(node.children)} invocation{'s' if len(node.children) != 1 else ''} of this thread", style="dim"
            )
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
        kind = kwargs.get("type") or kwargs.get("role")  # type: ignore[union-attr]
        if not kind and isinstance(message.get("id"), list) and message["id"]:
            kind = str(message["id"][-1]).removesuffix("Message").lower()
        return {"human": "user", "ai": "assistant"}.get(str(kind), str(kind or "?"))
    return "?"


def _content(message: Any) -> str:
    if not isinstance(message, dict):
        return str(message)
    kwargs = message.get("kwargs") if isinstance(message.get("kwargs"), dict) else message
    content = kwargs.get("content", "")  # type: ignore[union-attr]
    if isinstance(content, list):
        return "".join(part if isinstance(part, str) else str(part.get("text", "")) for part in content)
    return str(content)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def seconds_text(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"
