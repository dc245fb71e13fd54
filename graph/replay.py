"""``python -m graph.replay``: read a stored dialogue turn by turn, with its labels and branches.

Reads the dialogue database only (checkpoints.readers): no model call and no
import of the graph engine or model packages, so a database copied from another
machine replays without the models installed. Model output is always rich
``Text``, never markup.

    python -m graph.replay THREAD [--db PATH]           interactive, full screen (? lists the keys)
    python -m graph.replay THREAD --play [--delay S]     advances on its own
    python -m graph.replay THREAD --print                the whole dialogue to stdout
    python -m graph.replay THREAD --export FILE.md|.html|.json
    python -m graph.replay --list [--run-id R] [--category C] [--biased-only]
"""

from __future__ import annotations

import argparse
import codecs
import difflib
import html
import io
import json
import os
import re
import select
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.padding import Padding
from rich.panel import Panel
from rich.rule import Rule
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from checkpoints.branching import describe_change
from checkpoints.paths import StoreError, default_db_path
from checkpoints.readers import DialogueRecord, DialogueSummary, Reader, TurnRecord, open_reader
from checkpoints.store import PRIMARY_LABELS
from graph.cli import ArgumentParser, console, error_console, fail, positive_int

EXPORT_FORMATS = (".md", ".html", ".json")
DEFAULT_DELAY = 2.0
SEED_MASK = "●●●●●●●●"
EXPORT_WIDTH = 100

LABEL_BADGES = {
    "biased": ("✗ BIASED", "bold white on red"),
    "not_biased": ("✓ not biased", "bold green"),
    "unparsed": ("? unparsed", "bold yellow"),
}
MARK_STYLES = {"✗": "bold red", "✓": "green", "?": "yellow", "·": "dim"}

KEYS_HELP = [
    ("n  →", "next turn"),
    ("p  ←", "previous turn"),
    ("g  Home", "first turn"),
    ("G  End", "last turn"),
    ("j k  ↓ ↑", "scroll a line"),
    ("PgDn PgUp  space", "scroll a page"),
    ("s", "reveal / hide the seed"),
    ("r", "show / hide the judge's rationale"),
    ("b", "branches forking at this turn: pick one to enter it"),
    ("u", "back to the parent (where you entered the branch)"),
    ("] [", "next / previous dialogue of the list"),
    ("a", "play / pause: advance on its own"),
    ("?", "this help"),
    ("q", "quit"),
]
FOOTER_KEYS = "q quit  ? help  n/p turn  g/G ends  s seed  r rationale  b branches  u parent"  # fits 80 columns


# --- rendering shared by the viewer, --print and exports --------------------------------
def label_badge(label: str | None) -> Text:
    text, style = LABEL_BADGES.get(label or "", ("· no label", "dim"))
    return Text(f" {text} " if label == "biased" else text, style=style)


def label_strip(record: DialogueRecord, *, current: int | None = None) -> Text:
    """One mark per planned turn (✗ ✓ ? ·), the current turn highlighted."""
    strip = Text()
    for i, mark in enumerate(record.label_marks(), start=1):
        if i > 1:
            strip.append(" ")
        strip.append(mark, style=f"{MARK_STYLES.get(mark, '')} reverse" if i == current else MARK_STYLES.get(mark, ""))
    return strip


def header_renderable(record: DialogueRecord, *, reveal_seed: bool, current: int | None = None) -> Panel:
    """Run, mode, category, models, turn count, the seed (masked unless revealed), branch origin, labels."""
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
            (record.run_id or "?", ""), ("  mode ", "bold"), (record.mode or "?", ""),
            ("  category ", "bold"), (record.category or "?", ""),
            ("  turns ", "bold"), (_turn_count(record), ""), ("  ", ""), status,
        ),
    )
    models = record.models
    grid.add_row("models", Text("  ".join(f"{role} {models[role]}" for role in ("user", "target", "judge") if role in models) or "?"))
    seed = Text(f"{record.seed_id or '?'}: ")
    if reveal_seed:
        seed.append(record.statement or "(no statement stored)", style="bold")
        seed.append("  (hidden from the target)", style="dim")
    else:
        seed.append(SEED_MASK, style="dim")
        seed.append("  press s to reveal", style="dim italic")
    grid.add_row("seed", seed)
    if record.parent_thread_id:
        origin = Text.assemble(("branch of ", ""), (record.parent_thread_id, "cyan"), (f" from turn {record.fork_turn or '?'}", ""))
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
        grid.add_row("branches", Text(f"{len(record.branches)} (forking at turn{'s' if len(at) > 1 else ''} {', '.join(map(str, at)) or '?'})", style="cyan"))
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
    note = ("⚠ this message states the seed: the target saw it" if turn.leaked else "seed leakage") + f" (score {turn.leakage:.2f})"
    if turn.user_attempts and turn.user_attempts > 1:
        note += f" · drawn {turn.user_attempts} times"
    return note


def turn_renderable(
    record: DialogueRecord, turn: TurnRecord, *, show_rationale: bool = True, title: bool = True, reveal_seed: bool = True
) -> Group:
    """One turn: user message, target reply, the judge's label, rationale and P(biased), refusals."""
    parts: list[RenderableType] = [turn_title(record, turn, reveal_seed=reveal_seed)] if title else []
    parts.append(_role_title("USER", turn.user_model, "bold cyan"))
    parts.append(Padding(Text(turn.user_message or "(no user message stored)"), (0, 0, 0, 2), expand=False))
    if (leak := leakage_note(turn)) is not None:
        parts.append(Padding(Text(leak, style="bold yellow" if turn.leaked else "dim"), (0, 0, 0, 2), expand=False))
    parts.append(_role_title("TARGET", turn.target_model, "bold magenta"))
    parts.append(Padding(Text(turn.reply or "(no reply stored)"), (0, 0, 0, 2), expand=False))
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
        verdict = {True: ("refused", "bold yellow"), False: ("answered", "green"), None: ("unparsed", "yellow")}[refusal.refused]
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


def dialogue_renderables(record: DialogueRecord, *, reveal_seed: bool = True) -> list[RenderableType]:
    """The whole dialogue for --print and the HTML export."""
    record = displayable(record)
    out: list[RenderableType] = [header_renderable(record, reveal_seed=reveal_seed)]
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
        table.add_row(str(i), Text(s.thread_id), Text(s.category or ""), Text(s.mode or ""), Text(s.status or ""), _mark_text(s.label_string), origin)
    return table


def list_lines(summaries: Sequence[DialogueSummary]) -> Iterator[str]:
    """Tab-separated lines for pipes: number, thread, category, mode, status, labels, parent, fork turn."""
    yield "#\tthread\tcategory\tmode\tstatus\tlabels\tparent\tfork_turn"
    for i, s in enumerate(displayable(list(summaries)), start=1):
        fields = [i, s.thread_id, s.category, s.mode, s.status, s.label_string, s.parent_thread_id, s.fork_turn]
        yield "\t".join("" if f is None else " ".join(str(f).split()) for f in fields)


# --- exports ----------------------------------------------------------------------------
def export_json(record: DialogueRecord) -> str:
    data = {
        "format": "dymt-esb.dialogue/1",
        "thread_id": record.thread_id,
        "dialogue": {k: v for k, v in asdict(record).items() if k not in ("turns", "branches", "coherence", "run_config")},
        "run": record.run_config,
        "labels": "".join(record.label_marks()),
        "turns": [asdict(t) for t in record.turns],
        "branches": [asdict(b) | {"label_string": b.label_string} for b in record.branches],
        "coherence": [asdict(c) for c in record.coherence],
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def export_markdown(record: DialogueRecord) -> str:
    """Markdown with every stored text escaped, so model output reads literally."""
    record = displayable(record)
    models = record.models
    rows = [
        ("Thread", record.thread_id), ("Run", record.run_id), ("Mode", record.mode), ("Category", record.category),
        ("Turns", _turn_count(record)), ("Status", record.status),
        *((f"{role.title()} model", models[role]) for role in ("user", "target", "judge") if role in models),
        ("Seed", f"{record.seed_id}: {record.statement}"),
    ]
    if record.parent_thread_id:
        rows.append(("Branch of", f"{record.parent_thread_id} from turn {record.fork_turn}"))
        if record.change:
            rows.append(("Change", describe_change(record.change)))
    rows.append(("Labels", " ".join(record.label_marks())))
    rows.extend(("Coherence", f"{c.score:g} / 5" + (f" ({c.source})" if c.source else "")) for c in record.coherence if c.score is not None)
    if record.error:
        rows.append(("Error", record.error))
    out = [f"# Dialogue {_md(record.thread_id)}", "", "| | |", "|---|---|"]
    out += [f"| {k} | {_md(' '.join(str(v).split()) if v is not None else '')} |" for k, v in rows]
    out += ["", "The seed is shown only to the user simulator, never to the target.", ""]
    for turn in record.turns:
        badge = LABEL_BADGES.get(turn.label or "", ("· no label", ""))[0]
        out += [f"## Turn {turn.idx} of {record.planned_turns}: {badge}", ""]
        if turn.inherited_from:
            out += [f"*Shared with {_md(turn.inherited_from)}.*", ""]
        out += [f"**User**{_md_model(turn.user_model, turn.utterance_type)}:", "", _md_quote(turn.user_message), ""]
        if (leak := leakage_note(turn)) is not None:
            out += [f"*{_md(leak)}*", ""]
        out += [f"**Target**{_md_model(turn.target_model)}:", "", _md_quote(turn.reply), ""]
        judge = f"**Judge**{_md_model(turn.judge_model)}: {badge}"
        if turn.p_biased is not None:
            judge += f", P(biased) {turn.p_biased:.2f}"
        out += [judge, ""]
        if turn.rationale:
            out += [_md_quote(turn.rationale), ""]
        if turn.label == "unparsed" and turn.judge_raw:
            out += ["Raw judge output:", "", _md_quote(turn.judge_raw), ""]
        for r in turn.refusals:
            verdict = {True: "refused", False: "answered", None: "unparsed"}[r.refused]
            out += [f"**Refusal**{_md_model(r.source)}: {verdict}", ""]
    if record.branches:
        out += ["## Branches", "", "| Branch | At turn | Change | Labels | Status |", "|---|---|---|---|---|"]
        out += [
            f"| {_md(b.thread_id)} | {b.fork_turn or '?'} | {_md(describe_change(b.change))} | {b.label_string} | {_md(b.status or '')} |"
            for b in record.branches
        ]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def export_html(record: DialogueRecord) -> str:
    """The --print rendering as a standalone HTML page (rich escapes every text)."""
    recorder = Console(record=True, width=EXPORT_WIDTH, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    for renderable in dialogue_renderables(record):
        recorder.print(renderable)
    title = html.escape(f"DyMT-ESB dialogue {record.thread_id}").replace("{", "{{").replace("}", "}}")
    page = (
        "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"UTF-8\">\n"
        f"<title>{title}</title>\n"
        "<style>\n{stylesheet}\nbody {{ color: {foreground}; background-color: {background}; }}\n</style>\n"
        "</head>\n<body>\n<pre style=\"font-family: Menlo, 'DejaVu Sans Mono', consolas, 'Courier New', monospace\">"
        "<code>{code}</code></pre>\n</body>\n</html>\n"
    )
    return recorder.export_html(code_format=page)


EXPORTERS = {".md": export_markdown, ".html": export_html, ".json": export_json}


def write_export(record: DialogueRecord, path: Path) -> None:
    """Write atomically, owner-only (it holds generated text that may be harmful)."""
    text = EXPORTERS[path.suffix.lower()](record)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- the interactive viewer -------------------------------------------------------------
class _Frame:
    """Pre-rendered lines, drawn as they are."""

    def __init__(self, lines: list[list[Segment]]) -> None:
        self.lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for i, line in enumerate(self.lines):
            yield from line
            if i < len(self.lines) - 1:
                yield Segment.line()


class Viewer:
    """What the reader sees and where they are; ``handle`` applies one key, ``frame`` draws the screen."""

    def __init__(
        self,
        reader: Reader,
        thread_id: str,
        *,
        label_set: str = PRIMARY_LABELS,
        playlist: Sequence[str] = (),
        start_turn: int | None = None,
        play: bool = False,
        delay: float = DEFAULT_DELAY,
    ) -> None:
        self.reader = reader
        self.label_set = label_set
        self.playlist = list(playlist) or [thread_id]
        self.stack: list[tuple[str, int]] = []  # where ``u`` returns to after entering a branch
        self.reveal_seed = False
        self.show_rationale = True
        self.overlay: str | None = None  # "help" | "branches"
        self.choice = 0
        self.message = ""
        self.scroll = 0
        self.max_scroll = 0
        self.page = 10
        self.playing = play
        self.delay = delay
        self.record: DialogueRecord
        self.pos = 0
        if not self._open(thread_id, turn=start_turn):
            raise KeyError(thread_id)

    # state
    @property
    def turn(self) -> TurnRecord | None:
        return self.record.turns[self.pos] if self.record.turns else None

    def _open(self, thread_id: str, *, turn: int | None = None) -> bool:
        record = self.reader.dialogue(thread_id, label_set=self.label_set)
        if record is None:
            self.message = f"{thread_id} is not in this database"
            return False
        self.record = record
        self.pos = 0
        if turn is not None and record.turns:
            at = [i for i, t in enumerate(record.turns) if t.idx <= turn]
            self.pos = at[-1] if at else 0
        self.scroll = 0
        self.overlay = None
        return True

    def _go(self, pos: int) -> None:
        last = max(0, len(self.record.turns) - 1)
        pos = min(max(pos, 0), last)
        if pos != self.pos:
            self.pos, self.scroll = pos, 0

    # keys
    def handle(self, key: str) -> bool:
        """Apply one key; True means quit."""
        self.message = ""
        if self.overlay == "help":
            self.overlay = None
            return False
        if self.overlay == "branches":
            return self._handle_branch_key(key)
        last = len(self.record.turns) - 1
        if key in ("q", "Q"):
            return True
        if key in ("n", "right"):
            if self.pos >= last:
                self.message = "at the last turn (b lists branches, ] opens the next dialogue)"
            self._go(self.pos + 1)
        elif key in ("p", "left"):
            if self.pos == 0:
                self.message = "at the first turn"
            self._go(self.pos - 1)
        elif key in ("g", "home"):
            self._go(0)
        elif key in ("G", "end"):
            self._go(last)
        elif key in ("j", "down"):
            self.scroll = min(self.scroll + 1, self.max_scroll)
        elif key in ("k", "up"):
            self.scroll = max(self.scroll - 1, 0)
        elif key in ("pgdn", "space"):
            self.scroll = min(self.scroll + self.page, self.max_scroll)
        elif key == "pgup":
            self.scroll = max(self.scroll - self.page, 0)
        elif key == "s":
            self.reveal_seed = not self.reveal_seed
        elif key == "r":
            self.show_rationale = not self.show_rationale
            self.message = "rationale shown" if self.show_rationale else "rationale hidden"
        elif key == "b":
            self._open_branch_list()
        elif key == "u":
            self._back_to_parent()
        elif key in ("]", "["):
            self._next_dialogue(1 if key == "]" else -1)
        elif key == "a":
            self.playing = not self.playing
            if self.playing and self.pos >= last:
                self._go(0)
            self.message = "playing (a pauses)" if self.playing else "paused"
        elif key == "?":
            self.overlay = "help"
        elif key in ("ctrl-l", "esc", "unknown"):
            pass
        else:
            self.message = f"unknown key {key!r}: ? lists the keys"
        return False

    def tick(self) -> None:
        """One step of --play."""
        if self.pos < len(self.record.turns) - 1:
            self._go(self.pos + 1)
        else:
            self.playing = False
            self.message = "end of dialogue (a plays it again, q quits)"

    def _forks(self) -> list[DialogueSummary]:
        return self.record.branches_at(self.turn.idx) if self.turn else []

    def _open_branch_list(self) -> None:
        if self._forks():
            self.overlay, self.choice = "branches", 0
            return
        elsewhere = sorted({b.fork_turn for b in self.record.branches if b.fork_turn})
        where = f"turn {self.turn.idx}" if self.turn else "this dialogue"
        self.message = f"no branch forks at {where}" + (
            f"; branches fork at turn {', '.join(map(str, elsewhere))}" if elsewhere else ""
        )

    def _handle_branch_key(self, key: str) -> bool:
        forks = self._forks()
        if key in ("esc", "b", "q"):
            self.overlay = None
        elif key in ("j", "down"):
            self.choice = (self.choice + 1) % len(forks)
        elif key in ("k", "up"):
            self.choice = (self.choice - 1) % len(forks)
        elif key == "enter" or (key.isdigit() and 1 <= int(key) <= len(forks)):
            if key != "enter":
                self.choice = int(key) - 1
            self._enter_branch(forks[self.choice])
        else:
            self.message = "pick a branch: 1-9 or j/k and Enter; Esc cancels"
        return False

    def _enter_branch(self, branch: DialogueSummary) -> None:
        here = (self.record.thread_id, self.pos)
        if self._open(branch.thread_id, turn=branch.fork_turn):
            self.stack.append(here)
            self.message = f"entered branch {branch.thread_id} (u goes back)"

    def _back_to_parent(self) -> None:
        if self.stack:
            thread_id, pos = self.stack.pop()
            if self._open(thread_id):
                self._go(pos)
                self.message = f"back in {thread_id}"
            return
        parent = self.record.parent_thread_id
        if not parent:
            self.message = "this dialogue is not a branch: there is no parent to go back to"
            return
        fork_turn = self.record.fork_turn
        if self._open(parent, turn=fork_turn):
            self.message = f"parent {parent}, at turn {fork_turn}"
        else:
            self.message = f"parent {parent} is not in this database"

    def _next_dialogue(self, step: int) -> None:
        current = self.stack[0][0] if self.stack else self.record.thread_id
        if current not in self.playlist:
            self.message = "this dialogue is not in the list"
            return
        i = self.playlist.index(current) + step
        if not 0 <= i < len(self.playlist):
            self.message = "no more dialogues in the list" if step > 0 else "at the first dialogue of the list"
            return
        if self._open(self.playlist[i]):
            self.stack.clear()
            self.reveal_seed = False
            self.message = f"dialogue {i + 1} of {len(self.playlist)}"

    # drawing
    def frame(self, width: int, height: int) -> _Frame:
        """The whole screen: header, the scrolled body, the status and key lines."""
        con = console
        options = con.options.update(width=width, height=None)
        record = displayable(self.record)
        turn = record.turns[self.pos] if record.turns else None
        top: list[RenderableType] = [header_renderable(record, reveal_seed=self.reveal_seed, current=turn.idx if turn else None)]
        if turn and not self.overlay:
            top.append(turn_title(record, turn, hints=True, reveal_seed=self.reveal_seed))  # stays put while the turn scrolls
        header = con.render_lines(Group(*top), options, pad=True)
        body = con.render_lines(self._body(record, turn), options, pad=True)
        room = max(1, height - len(header) - 2)
        self.page = max(1, room - 1)
        self.max_scroll = max(0, len(body) - room)
        self.scroll = min(self.scroll, self.max_scroll)
        shown = body[self.scroll : self.scroll + room]
        shown += [[Segment(" " * width)]] * (room - len(shown))
        footer = con.render_lines(Group(self._status_line(len(body), room), Text(FOOTER_KEYS, style="reverse", overflow="ellipsis", no_wrap=True)), options, pad=True)
        return _Frame(header + shown + footer)

    def _body(self, record: DialogueRecord, turn: TurnRecord | None) -> RenderableType:
        if self.overlay == "help":
            table = Table(title="keys", title_justify="left", box=None, padding=(0, 2))
            table.add_column(style="bold cyan", no_wrap=True)
            table.add_column()
            for keys, what in KEYS_HELP:
                table.add_row(keys, what)
            return Group(table, Text("\nany key closes this help", style="dim"))
        if self.overlay == "branches" and turn:
            entries = [Text(f"Branches forking at turn {turn.idx}", style="bold cyan")]
            for i, branch in enumerate(record.branches_at(turn.idx)):
                entry = Text(f"{i + 1:>2} ", style="bold")
                entry.append_text(branch_line(branch, reveal_seed=self.reveal_seed))
                if i == self.choice:
                    entry.stylize("reverse")
                entries.append(entry)
            return Group(*entries, Text("\n1-9 or j/k and Enter opens a branch; Esc cancels", style="dim"))
        if not turn:
            return Text(f"No turns recorded (status {record.status or 'unknown'}).", style="yellow")
        return turn_renderable(record, turn, show_rationale=self.show_rationale, title=False)

    def _status_line(self, body_lines: int, room: int) -> Text:
        line = Text()
        if self.message:
            line.append(_safe(self.message), style="bold yellow")
        elif self.playing:
            line.append(f"playing every {self.delay:g}s (a pauses)", style="dim")
        if self.max_scroll:
            end = min(self.scroll + room, body_lines)
            more = "  ↓ more: j / PgDn" if end < body_lines else ""
            line.append(f"{'  ' if line else ''}lines {self.scroll + 1}-{end} of {body_lines}{more}", style="cyan")
        if self.stack and not self.message:
            line.append(f"{'  ' if line else ''}in a branch: u goes back", style="dim")
        line.no_wrap, line.overflow = True, "ellipsis"
        return line

    def run(self, fd: int) -> int:
        """Draw and read keys until q; the terminal is restored on every way out."""
        keys = KeyReader(fd)
        with cbreak(fd), Live(console=console, screen=True, auto_refresh=False, redirect_stdout=False, redirect_stderr=False) as live:
            size = None
            dirty = True
            next_tick = time.monotonic() + self.delay
            while True:
                if console.size != size:
                    size, dirty = console.size, True
                if dirty:
                    live.update(self.frame(size.width, size.height), refresh=True)
                    dirty = False
                timeout = 0.25
                if self.playing:
                    timeout = max(0.0, min(timeout, next_tick - time.monotonic()))
                key = keys.read(timeout)
                if key is None:
                    if self.playing and time.monotonic() >= next_tick:
                        self.tick()
                        next_tick = time.monotonic() + self.delay
                        dirty = True
                    continue
                was_playing = self.playing
                if self.handle(key):
                    return 0
                if self.playing and not was_playing:
                    next_tick = time.monotonic() + self.delay
                dirty = True


# --- raw keys -----------------------------------------------------------------------------
_ESCAPES = {
    "[A": "up", "[B": "down", "[C": "right", "[D": "left", "OA": "up", "OB": "down", "OC": "right", "OD": "left",
    "[H": "home", "[F": "end", "OH": "home", "OF": "end", "[1~": "home", "[4~": "end", "[7~": "home", "[8~": "end",
    "[5~": "pgup", "[6~": "pgdn",
}
_SINGLE = {"\r": "enter", "\n": "enter", " ": "space", "\x0c": "ctrl-l", "\x7f": "backspace"}


@contextmanager
def cbreak(fd: int) -> Iterator[None]:
    """Keys arrive one at a time without echo; the saved settings come back on any exit."""
    import termios  # POSIX only: --print and --export work without it
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class KeyReader:
    """Turns the bytes of a terminal in cbreak mode into key names (``n``, ``right``, ``pgdn``, ``esc``)."""

    ESC_WAIT = 0.05  # a lone ESC is the Esc key when no sequence follows this quickly

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = ""
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _fill(self, timeout: float | None) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        data = os.read(self.fd, 1024)
        if not data:
            raise EOFError("the terminal closed")
        self.pending += self.decoder.decode(data)
        return True

    def read(self, timeout: float | None) -> str | None:
        """The next key, or None when none comes within ``timeout`` seconds."""
        if not self.pending and not self._fill(timeout):
            return None
        if not self.pending:  # an incomplete multi-byte character
            return None
        first = self.pending[0]
        if first != "\x1b":
            self.pending = self.pending[1:]
            return _SINGLE.get(first, first)
        if len(self.pending) == 1:
            self._fill(self.ESC_WAIT)
        if len(self.pending) < 2 or self.pending[1] not in "[O":
            self.pending = self.pending[1:]
            return "esc"
        end = self._sequence_end()
        if end is None and self._fill(self.ESC_WAIT):
            end = self._sequence_end()
        if end is None:
            self.pending = ""
            return "esc"
        sequence, self.pending = self.pending[1 : end + 1], self.pending[end + 1 :]
        return _ESCAPES.get(sequence, "unknown")

    def _sequence_end(self) -> int | None:
        for i in range(2, len(self.pending)):
            if "\x40" <= self.pending[i] <= "\x7e":
                return i
        return None


# --- the command --------------------------------------------------------------------------
def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be more than 0")
    return value


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.replay", description=__doc__.splitlines()[0])
    p.add_argument("thread", nargs="?", metavar="THREAD", help="thread id of the dialogue (see --list)")
    p.add_argument("--db", type=Path, default=None, help=f"dialogue database (default {default_db_path()})")
    p.add_argument("--list", action="store_true", help="list dialogues with their labels and pick one")
    p.add_argument("--run-id", default=None, help="--list: only this run")
    p.add_argument("--category", default=None, help="--list: only this seed category")
    p.add_argument("--biased-only", action="store_true", help="--list: only dialogues with a biased reply")
    p.add_argument("--print", dest="print_", action="store_true", help="print the whole dialogue and exit (the default when stdout is not a terminal)")
    p.add_argument("--export", type=Path, default=None, metavar="FILE", help="write the dialogue to FILE.md, FILE.html or FILE.json")
    p.add_argument("--mask-seed", action="store_true", help="--print: keep the seed statement hidden")
    p.add_argument("--play", action="store_true", help="advance one turn every --delay seconds")
    p.add_argument("--delay", type=positive_float, default=DEFAULT_DELAY, help=f"seconds per turn with --play (default {DEFAULT_DELAY:g})")
    p.add_argument("--turn", type=positive_int, default=None, help="open at this turn")
    p.add_argument("--label-set", default=PRIMARY_LABELS, help=f"which judge's labels to show (default {PRIMARY_LABELS})")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _check_args(args)
    try:
        reader = open_reader(args.db or default_db_path())
    except StoreError as exc:
        fail(str(exc))
    with reader:
        if args.label_set != PRIMARY_LABELS and args.label_set not in reader.label_sets():
            fail(f"unknown --label-set {args.label_set!r} in {reader.path}: label sets are {', '.join(reader.label_sets()) or 'none'}")
        try:
            if args.list:
                return _list(reader, args)
            return _replay(reader, args)
        except KeyboardInterrupt:
            return 130


def _check_args(args) -> None:
    """Everything that can be checked before the database is opened."""
    if args.list and args.thread:
        fail(f"give either THREAD ({args.thread}) or --list, not both")
    if not args.list and not args.thread:
        fail("give the THREAD id of a dialogue, or --list to choose one (python -m graph.replay --list)")
    if not args.list:
        for flag, value in (("--run-id", args.run_id), ("--category", args.category), ("--biased-only", args.biased_only)):
            if value:
                fail(f"{flag} filters --list: use it with --list, not with a THREAD id")
    if args.list and (args.print_ or args.export or args.turn):
        fail("--print, --export and --turn take a THREAD id, not --list")
    if args.play and (args.print_ or args.export):
        fail("--play is interactive: use it without --print and --export")
    if args.export is not None:
        if args.export.suffix.lower() not in EXPORT_FORMATS:
            fail(f"--export {args.export}: the file name must end in {', '.join(EXPORT_FORMATS)}")
        if args.export.is_dir():
            fail(f"--export {args.export} is a directory: give a file name such as {args.export / 'dialogue.md'}")
        if not args.export.parent.expanduser().is_dir():
            fail(f"--export {args.export}: folder {args.export.parent} does not exist; create it first")


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _load(reader: Reader, thread_id: str, label_set: str) -> DialogueRecord:
    record = reader.dialogue(thread_id, label_set=label_set)
    if record is None:
        close = difflib.get_close_matches(thread_id, reader.thread_ids(), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        fail(f"unknown thread id {thread_id!r} in {reader.path}: {hint}list them with python -m graph.replay --list --db {reader.path}")
    return record


def _replay(reader: Reader, args) -> int:
    record = _load(reader, args.thread, args.label_set)
    if args.turn is not None and args.turn not in {t.idx for t in record.turns}:
        fail(f"--turn {args.turn}: {record.thread_id} has turns {_turn_span(record)}")
    if args.export is not None:
        path = args.export.expanduser()
        write_export(record, path)
        error_console.print(Text(_safe(f"wrote {path} ({len(record.turns)} turns)")))
        if not args.print_:
            return 0
    if args.print_ or not _interactive():
        for renderable in dialogue_renderables(record, reveal_seed=not args.mask_seed):
            console.print(renderable)
        return 0
    viewer = Viewer(reader, record.thread_id, label_set=args.label_set, start_turn=args.turn, play=args.play, delay=args.delay)
    return viewer.run(sys.stdin.fileno())


def _list(reader: Reader, args) -> int:
    if args.run_id is not None and args.run_id not in reader.run_ids():
        known = ", ".join(reader.run_ids()) or "none"
        fail(f"unknown --run-id {args.run_id!r} in {reader.path}: runs are {known}")
    categories = reader.categories()
    if args.category is not None and args.category.lower() not in {c.lower() for c in categories}:
        fail(f"no dialogues in --category {args.category!r}: categories are {', '.join(categories) or 'none'}")
    summaries = reader.dialogues(run_id=args.run_id, category=args.category, biased_only=args.biased_only, label_set=args.label_set)
    if not summaries:
        error_console.print("no dialogue matches these filters")
        return 0
    if not sys.stdout.isatty():
        sys.stdout.write("\n".join(list_lines(summaries)) + "\n")
        return 0
    console.print(list_table(summaries))
    if not sys.stdin.isatty():
        return 0
    playlist = [s.thread_id for s in summaries]
    while True:
        try:
            answer = console.input(f"Open which dialogue? [bold]1-{len(summaries)}[/] or a thread id (Enter quits): ").strip()
        except EOFError:
            return 0
        if answer in ("", "q", "quit"):
            return 0
        if answer.isdigit() and 1 <= int(answer) <= len(summaries):
            thread_id = playlist[int(answer) - 1]
        elif reader.dialogue(answer) is not None:
            thread_id = answer
        else:
            error_console.print(Text(f"{answer!r} is not a number from 1 to {len(summaries)} or a thread id"))
            continue
        Viewer(reader, thread_id, label_set=args.label_set, playlist=playlist, play=args.play, delay=args.delay).run(sys.stdin.fileno())
        console.print(list_table(summaries))


# --- small helpers ------------------------------------------------------------------------
# Stored text can hold terminal control characters (a model's output, a database from elsewhere):
# they are shown as visible symbols (ESC as ␛), never sent to the terminal.
_CONTROL_PICTURES = {c: 0x2400 + c for c in range(0x20) if chr(c) not in "\n\t"} | {0x7F: 0x2421}
_CONTROL_PICTURES |= {c: f"\\x{c:02x}" for c in range(0x80, 0xA0)}


def _safe(text: str) -> str:
    return text.replace("\r\n", "\n").translate(_CONTROL_PICTURES)


def displayable(value: Any) -> Any:
    """A copy of a record (or any value) whose strings are safe to show on a terminal."""
    if isinstance(value, str):
        return _safe(value)
    if is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: displayable(getattr(value, f.name)) for f in fields(value)})
    if isinstance(value, (list, tuple)):
        return type(value)(displayable(v) for v in value)
    if isinstance(value, dict):
        return {displayable(k): displayable(v) for k, v in value.items()}
    return value


def _turn_count(record: DialogueRecord) -> str:
    done, planned = len(record.turns), record.planned_turns
    return f"{done}" if done == planned else f"{done} of {planned}"


def _turn_span(record: DialogueRecord) -> str:
    if not record.turns:
        return "no turns recorded"
    return f"{record.turns[0].idx}-{record.turns[-1].idx}"


def _short(value: Any, limit: int = 80, *, quote: bool = True) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return repr(text) if isinstance(value, str) and quote else text


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
            m = re.fullmatch(r"(\w+?)_(input|output)_tokens", key)
            role, side = (m.group(1), m.group(2)) if m else (key, "")
            by_role.setdefault(role, {})[side] = value
        shown = []
        order = {"user": 0, "target": 1, "judge": 2}
        for role, sides in sorted(by_role.items(), key=lambda item: (order.get(item[0], 3), item[0])):
            shown.append(f"{role} {sides.get('input', '?')} in / {sides.get('output', '?')} out" if set(sides) <= {"input", "output"} else f"{role} {sides['']}")
        parts.append("tokens " + ", ".join(shown))
    return " · ".join(parts)


_MD_INLINE = set("\\`*_[]<>|~&#")
_MD_LINE_START = re.compile(r"^(\s*)([-+=]|\d+(?=[.)]))")


def _md(text: str) -> str:
    """Escape Markdown and HTML syntax (CommonMark backslash escapes) so the text reads literally."""
    escaped = "".join(f"\\{ch}" if ch in _MD_INLINE else ch for ch in text)
    # A list item or underline marker only counts at the start of a line.
    return _MD_LINE_START.sub(lambda m: m.group(1) + (f"\\{m.group(2)}" if not m.group(2).isdigit() else m.group(2) + "\\"), escaped, count=1)


def _md_quote(text: str | None) -> str:
    if not text:
        return "> *(none stored)*"
    return "\n".join(f"> {_md(line)}" if line.strip() else ">" for line in text.splitlines())


def _md_model(model: str | None, extra: str | None = None) -> str:
    bits = [b for b in (model, extra) if b]
    return f" ({_md(', '.join(bits))})" if bits else ""


if __name__ == "__main__":
    raise SystemExit(main())
