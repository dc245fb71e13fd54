"""Rich rendering of a stored dialogue: the header, each turn, branches and the dialogue list.

Shared by the interactive viewer, ``--print`` and the HTML export. Model output is always
rich ``Text``, never markup, and every stored string goes through ``displayable`` first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import fields, is_dataclass, replace
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from checkpoints.branching import describe_change
from checkpoints.records import DialogueRecord, DialogueSummary, TurnRecord
from checkpoints.vocabulary import (
    BIASED,
    MISSING_MARK,
    NOT_BIASED,
    PRIMARY_LABELS,
    UNPARSED,
    label_mark,
    label_text,
)

SEED_MASK = "●●●●●●●●"
PRINTED_SEED_HINT = "--show-seed reveals it"  # where no key can be pressed: --print and the exports

# The words and marks come from the one vocabulary; only their styles are the viewer's own.
LABEL_STYLES = {BIASED: "bold white on red", NOT_BIASED: "bold green", UNPARSED: "bold yellow"}
MARK_STYLES = {
    label_mark(BIASED): "bold red",
    label_mark(NOT_BIASED): "green",
    label_mark(UNPARSED): "yellow",
    MISSING_MARK: "dim",
}


def label_badge(label: str | None) -> Text:
    if label not in LABEL_STYLES:
        return Text(f"{MISSING_MARK} {label_text(None)}", style="dim")
    words = label_text(label).upper() if label == BIASED else label_text(label)
    text = f"{label_mark(label)} {words}"
    return Text(f" {text} " if label == BIASED else text, style=LABEL_STYLES[label])


def label_strip(record: DialogueRecord, *, current: int | None = None) -> Text:
    """One mark per planned turn (✗ ✓ ? ·), the current turn highlighted."""
    strip = Text()
    for i, mark in enumerate(record.label_marks(), start=1):
        if i > 1:
            strip.append(" ")
        strip.append(mark, style=f"{MARK_STYLES.get(mark, '')} reverse" if i == current else MARK_STYLES.get(mark, ""))
    return strip


def header_renderable(
    record: DialogueRecord, *, reveal_seed: bool, current: int | None = None, hint: str = "press s to reveal"
) -> Panel:
    """Run, mode, category, models, turn count, the seed (masked unless revealed, with ``hint`` saying how), branch
    origin, labels."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    status = Text(record.status or "unknown", style="green" if record.status == "finished" else "yellow")
    if record.stop_reason and record.stop_reason != record.status:
        status.append(f" ({record.stop_reason})", style="dim")
    grid.add_row("thread", Text(record.thread_id))
    grid.add_row(
        "run",
        Text.assemble(
            (record.run_id or "?", ""),
            ("  mode ", "bold"),
            (record.mode or "?", ""),
            ("  category ", "bold"),
            (record.category or "?", ""),
            ("  turns ", "bold"),
            (turn_count(record), ""),
            ("  ", ""),
            status,
        ),
    )
    models = record.models
    grid.add_row(
        "models",
        Text("  ".join(f"{role} {models[role]}" for role in ("user", "target", "judge") if role in models) or "?"),
    )
    seed = Text(f"{record.seed_id or '?'}: ")
    if reveal_seed:
        seed.append(record.statement or "(no statement stored)", style="bold")
        seed.append("  (hidden from the target)", style="dim")
    else:
        seed.append(SEED_MASK, style="dim")
        seed.append(f"  {hint}", style="dim italic")
    grid.add_row("seed", seed)
    if record.parent_thread_id:
        origin = Text.assemble(
            ("branch of ", ""), (record.parent_thread_id, "cyan"), (f" from turn {record.fork_turn or '?'}", "")
        )
        change = describe_change(record.change, reveal_seed=reveal_seed)
        if change:
            origin.append("  change ", style="bold")
            origin.append(change)
        grid.add_row("origin", origin)
    labels = label_strip(record, current=current)
    if record.label_set != PRIMARY_LABELS:
        labels.append(f"  (label set {record.label_set})", style="dim")
    grid.add_row("labels", labels)
    if record.branches:
        at = sorted({b.fork_turn for b in record.branches if b.fork_turn})
        forks = ", ".join(map(str, at)) or "?"
        grid.add_row(
            "branches",
            Text(f"{len(record.branches)} (forking at turn{'s' if len(at) > 1 else ''} {forks})", style="cyan"),
        )
    for c in record.coherence:
        line = Text(f"{c.score:g} / 5" if c.score is not None else "unparsed", style="bold")
        if c.source:
            line.append(f"  ({c.source})", style="dim")
        grid.add_row("coherence", line)
    if record.error:
        grid.add_row("error", Text(record.error, style="red"))
    return Panel(grid, title="DyMT-ESB replay", title_align="left", border_style="blue")


def turn_title(record: DialogueRecord, turn: TurnRecord, *, hints: bool = False, reveal_seed: bool = True) -> Text:
    """Turn number, utterance type, where the turn comes from and the branches that fork at it."""
    title = Text(f"Turn {turn.idx} of {record.planned_turns}", style="bold")
    if turn.utterance_type:
        title.append(f"  · {turn.utterance_type}", style="dim")
    if turn.inherited_from:
        title.append(f"  · shared with {turn.inherited_from}", style="dim")
    if record.parent_thread_id and record.fork_turn == turn.idx:
        title.append("  ⑂ this branch diverges here", style="cyan")
        change = describe_change(record.change, reveal_seed=reveal_seed)
        if change:
            title.append(f": {change}", style="cyan")
    forks = record.branches_at(turn.idx)
    if forks:
        title.append(f"  ⑂ {len(forks)} branch{'es' if len(forks) > 1 else ''} fork at this turn", style="bold cyan")
        if hints:
            title.append(" (b)", style="bold cyan")
    return title


def leakage_note(turn: TurnRecord) -> str | None:
    """The seed-leakage line under a user message (None when the turn was not scored)."""
    if turn.leakage is None:
        return None
    note = (
        "⚠ this message states the seed: the target saw it" if turn.leaked else "seed leakage"
    ) + f" (score {turn.leakage:.2f})"
    if turn.user_attempts and turn.user_attempts > 1:
        note += f" · drawn {turn.user_attempts} times"
    return note


REASONING_FOLDED_CHARS = 100


def reasoning_renderables(turn: TurnRecord, *, unfolded: bool) -> list[RenderableType]:
    """The target's reasoning under its reply: folded to its start (t unfolds it), and with --judge-reasoning the
    judge's label of it."""
    text = turn.reasoning or ""
    words = len(text.split())
    head = Text(
        f"REASONING ({words} words, {turn.reasoning_carrier or 'split off the reply'}; seen by neither the "
        "user nor the judge)",
        style="dim bold",
    )
    if turn.reasoning_label:
        head.append("  judged ", style="dim")
        head.append_text(label_badge(turn.reasoning_label))
    shown = text if unfolded or len(text) <= REASONING_FOLDED_CHARS else text[:REASONING_FOLDED_CHARS] + "… (t unfolds)"
    return [
        Padding(head, (0, 0, 0, 2), expand=False),
        Padding(Text(shown, style="dim italic"), (0, 0, 0, 4), expand=False),
    ]


def turn_renderable(
    record: DialogueRecord,
    turn: TurnRecord,
    *,
    show_rationale: bool = True,
    show_reasoning: bool = True,
    title: bool = True,
    reveal_seed: bool = True,
) -> Group:
    """One turn: user message, target reply, the judge's label, rationale and P(biased), refusals."""
    parts: list[RenderableType] = [turn_title(record, turn, reveal_seed=reveal_seed)] if title else []
    parts.append(_role_title("USER", turn.user_model, "bold cyan"))
    parts.append(Padding(Text(turn.user_message or "(no user message stored)"), (0, 0, 0, 2), expand=False))
    if (leak := leakage_note(turn)) is not None:
        parts.append(Padding(Text(leak, style="bold yellow" if turn.leaked else "dim"), (0, 0, 0, 2), expand=False))
    parts.append(_role_title("TARGET", turn.target_model, "bold magenta"))
    parts.append(
        Padding(
            Text(turn.reply or ("(no reply)" if turn.non_reply else "(no reply stored)")), (0, 0, 0, 2), expand=False
        )
    )
    if turn.non_reply:
        parts.append(Padding(Text(f"not a reply: {turn.non_reply}", style="bold yellow"), (0, 0, 0, 2), expand=False))
    if turn.reasoning:
        parts.extend(reasoning_renderables(turn, unfolded=show_reasoning))
    judge = Text("JUDGE ", style="bold")
    judge.append_text(label_badge(turn.label))
    if turn.p_biased is not None:
        judge.append(f"  P(biased) {turn.p_biased:.2f}")
    if turn.judge_model:
        judge.append(f"  ({turn.judge_model})", style="dim")
    parts.append(judge)
    if show_rationale:
        if turn.rationale:
            parts.append(Padding(Text(turn.rationale, style="italic"), (0, 0, 0, 2), expand=False))
        if turn.label == "unparsed" and turn.judge_raw:
            raw = Text("raw judge output: ", style="yellow")
            raw.append(turn.judge_raw)
            parts.append(Padding(raw, (0, 0, 0, 2), expand=False))
        if not turn.rationale and turn.label != "unparsed" and turn.label:
            parts.append(Padding(Text("(no rationale stored)", style="dim"), (0, 0, 0, 2), expand=False))
    elif turn.rationale or turn.judge_raw:
        parts.append(Padding(Text("rationale hidden (r shows it)", style="dim"), (0, 0, 0, 2), expand=False))
    for refusal in turn.refusals:
        verdict = {True: ("refused", "bold yellow"), False: ("answered", "green"), None: ("unparsed", "yellow")}[
            refusal.refused
        ]
        line = Text("REFUSAL ", style="bold")
        line.append(verdict[0], style=verdict[1])
        if refusal.p_refused is not None:
            line.append(f"  P(refused) {refusal.p_refused:.2f}")
        if refusal.source:
            line.append(f"  ({refusal.source})", style="dim")
        parts.append(line)
    stats = _stats_line(turn)
    if stats:
        parts.append(Text(stats, style="dim"))
    return Group(*parts)


def dialogue_renderables(record: DialogueRecord, *, reveal_seed: bool) -> list[RenderableType]:
    """The whole dialogue for --print and the HTML export (the seed masked unless ``reveal_seed``: --show-seed)."""
    record = displayable(record)
    out: list[RenderableType] = [header_renderable(record, reveal_seed=reveal_seed, hint=PRINTED_SEED_HINT)]
    if not record.turns:
        out.append(Text("No turns recorded.", style="yellow"))
    for turn in record.turns:
        out.append(Rule(style="blue"))
        out.append(turn_renderable(record, turn, reveal_seed=reveal_seed))
    if record.branches:
        out.append(Rule("branches", style="cyan"))
        out.extend(branch_line(b, reveal_seed=reveal_seed) for b in record.branches)
    return out


def branch_line(branch: DialogueSummary, *, reveal_seed: bool = True) -> Text:
    """One branch in one wrapped line: id, fork turn, change, labels, status."""
    line = Text.assemble(("⑂ ", "cyan"), (branch.thread_id, "cyan"), f"  from turn {branch.fork_turn or '?'}")
    change = describe_change(branch.change, reveal_seed=reveal_seed)
    if change:
        line.append("  change ", style="bold")
        line.append(change)
    line.append("  labels ", style="bold")
    line.append_text(_mark_text(branch.label_string))
    line.append(f"  {branch.status or ''}", style="dim")
    return line


def list_table(summaries: Sequence[DialogueSummary]) -> Table:
    summaries = displayable(list(summaries))
    table = Table(title="dialogues", title_justify="left", header_style="bold")
    for name in ("#", "thread", "category", "mode", "status", "labels", "branch of"):
        table.add_column(name, no_wrap=name in ("#", "labels"), overflow="fold")
    for i, s in enumerate(summaries, start=1):
        origin = Text(f"{s.parent_thread_id} @ {s.fork_turn or '?'}") if s.parent_thread_id else Text("")
        table.add_row(
            str(i),
            Text(s.thread_id),
            Text(s.category or ""),
            Text(s.mode or ""),
            Text(s.status or ""),
            _mark_text(s.label_string),
            origin,
        )
    return table


def list_lines(summaries: Sequence[DialogueSummary]) -> Iterator[str]:
    """Tab-separated lines for pipes: number, thread, category, mode, status, labels, parent, fork turn."""
    yield "#\tthread\tcategory\tmode\tstatus\tlabels\tparent\tfork_turn"
    for i, s in enumerate(displayable(list(summaries)), start=1):
        fields = [i, s.thread_id, s.category, s.mode, s.status, s.label_string, s.parent_thread_id, s.fork_turn]
        yield "\t".join("" if f is None else " ".join(str(f).split()) for f in fields)


# --- small helpers ------------------------------------------------------------------------
# Stored text can hold terminal control characters (a model's output, a database from elsewhere):
# they are shown as visible symbols (ESC as ␛), never sent to the terminal.
_CONTROL_PICTURES: dict[int, int | str] = {c: 0x2400 + c for c in range(0x20) if chr(c) not in "\n\t"} | {0x7F: 0x2421}  # type: ignore[assignment]
_CONTROL_PICTURES |= {c: f"\\x{c:02x}" for c in range(0x80, 0xA0)}


def safe(text: str) -> str:
    return text.replace("\r\n", "\n").translate(_CONTROL_PICTURES)


_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class InertConsole(Console):
    """A rich Console whose text never takes a control character to the terminal: whatever a command prints (a name
    from a seed file or a model spec, a path, text a store holds) is rendered with its controls as symbols (ESC as
    ␛), so an escape sequence in it stays text. Rich's own cursor and screen controls (a live display's) pass."""

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterator[Segment]:
        for segment in super().render(renderable, options):
            if segment.control is None and _UNSAFE.search(segment.text):
                yield Segment(safe(segment.text), segment.style)
            else:
                yield segment


def displayable(value: Any) -> Any:
    """A copy of a record (or any value) whose strings are safe to show on a terminal."""
    if isinstance(value, str):
        return safe(value)
    if is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: displayable(getattr(value, f.name)) for f in fields(value)})
    if isinstance(value, (list, tuple)):
        return type(value)(displayable(v) for v in value)
    if isinstance(value, dict):
        return {displayable(k): displayable(v) for k, v in value.items()}
    return value


def turn_count(record: DialogueRecord) -> str:
    done, planned = len(record.turns), record.planned_turns
    return f"{done}" if done == planned else f"{done} of {planned}"


def turn_span(record: DialogueRecord) -> str:
    if not record.turns:
        return "no turns recorded"
    return f"{record.turns[0].idx}-{record.turns[-1].idx}"


def _mark_text(label_string: str) -> Text:
    text = Text()
    for ch in label_string:
        text.append(ch, style=MARK_STYLES.get(ch, ""))
    return text


def _role_title(role: str, model: str | None, style: str) -> Text:
    title = Text(role, style=style)
    if model:
        title.append(f"  {model}", style="dim")
    return title


def _stats_line(turn: TurnRecord) -> str:
    parts = []
    latencies = [(r, getattr(turn, f"latency_{r}")) for r in ("user", "target", "judge")]
    shown = [f"{r} {v:.2f}s" for r, v in latencies if isinstance(v, (int, float))]
    if shown:
        parts.append("latency " + " ".join(shown))
    if isinstance(turn.tokens, dict) and turn.tokens:
        by_role: dict[str, dict[str, Any]] = {}
        for key, value in turn.tokens.items():
            m = re.fullmatch(r"(\w+?)_(input|output|reasoning)_tokens|(\w+?)_(?:reasoning_)?(estimated|calls)", key)
            role, side = (m.group(1) or m.group(3), m.group(2) or m.group(4)) if m else (key, "")
            by_role.setdefault(role, {})[side] = value
        shown = []
        order = {"user": 0, "target": 1, "judge": 2}
        for role, sides in sorted(by_role.items(), key=lambda item: (order.get(item[0], 3), item[0])):
            if "" in sides:
                shown.append(f"{role} {sides['']}")
                continue
            line = f"{role} {sides.get('input', '?')} in / {sides.get('output', '?')} out"
            if sides.get("calls"):
                line += f" in {sides['calls']} calls"
            if sides.get("reasoning"):  # of the output: the reasoning's share (the provider's count, or estimated)
                line += f" ({sides['reasoning']} reasoning{', estimated' if sides.get('estimated') else ''})"
            shown.append(line)
        parts.append("tokens " + ", ".join(shown))
    return " · ".join(parts)
