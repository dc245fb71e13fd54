"""The interactive viewer: what the reader sees and where they are, one key at a time."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from checkpoints.readers import Reader
from checkpoints.records import DialogueRecord, DialogueSummary, TurnRecord
from checkpoints.vocabulary import PRIMARY_LABELS
from viewer.keys import KeyReader, cbreak
from viewer.render import branch_line, displayable, header_renderable, safe, turn_renderable, turn_title

DEFAULT_DELAY = 2.0

KEYS_HELP = [
    ("n  →", "next turn"),
    ("p  ←", "previous turn"),
    ("g  Home", "first turn"),
    ("G  End", "last turn"),
    ("j k  ↓ ↑", "scroll a line"),
    ("PgDn PgUp  space", "scroll a page"),
    ("s", "reveal / hide the seed"),
    ("r", "show / hide the judge's rationale"),
    ("t", "unfold / fold a thinking target's reasoning"),
    ("b", "branches forking at this turn: pick one to enter it"),
    ("u", "back to the parent (where you entered the branch)"),
    ("] [", "next / previous dialogue of the list"),
    ("a", "play / pause: advance on its own"),
    ("?", "this help"),
    ("q", "quit"),
]
FOOTER_KEYS = "q quit  ? help  n/p turn  g/G ends  s seed  r rationale  b branches  u parent"  # fits 80 columns


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
        console: Console | None = None,
    ) -> None:
        self.reader = reader
        self.console = console or Console()  # the terminal it draws on
        self.label_set = label_set
        self.playlist = list(playlist) or [thread_id]
        self.stack: list[tuple[str, int]] = []  # where ``u`` returns to after entering a branch
        self.reveal_seed = False
        self.show_rationale = True
        self.show_reasoning = False  # a thinking target's reasoning starts folded under its reply
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
        elif key == "t":
            self.show_reasoning = not self.show_reasoning
            self.message = "reasoning unfolded" if self.show_reasoning else "reasoning folded"
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
        con = self.console
        options = con.options.update(width=width, height=None)
        record = displayable(self.record)
        turn = record.turns[self.pos] if record.turns else None
        top: list[RenderableType] = [
            header_renderable(record, reveal_seed=self.reveal_seed, current=turn.idx if turn else None)
        ]
        if turn and not self.overlay:
            top.append(
                turn_title(record, turn, hints=True, reveal_seed=self.reveal_seed)
            )  # stays put while the turn scrolls
        header = con.render_lines(Group(*top), options, pad=True)
        body = con.render_lines(self._body(record, turn), options, pad=True)
        room = max(1, height - len(header) - 2)
        self.page = max(1, room - 1)
        self.max_scroll = max(0, len(body) - room)
        self.scroll = min(self.scroll, self.max_scroll)
        shown = body[self.scroll : self.scroll + room]
        shown += [[Segment(" " * width)]] * (room - len(shown))
        footer = con.render_lines(
            Group(
                self._status_line(len(body), room),
                Text(FOOTER_KEYS, style="reverse", overflow="ellipsis", no_wrap=True),
            ),
            options,
            pad=True,
        )
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
        return turn_renderable(
            record, turn, show_rationale=self.show_rationale, show_reasoning=self.show_reasoning, title=False
        )

    def _status_line(self, body_lines: int, room: int) -> Text:
        line = Text()
        if self.message:
            line.append(safe(self.message), style="bold yellow")
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
        console = self.console
        with (
            cbreak(fd),
            Live(
                console=console, screen=True, auto_refresh=False, redirect_stdout=False, redirect_stderr=False
            ) as live,
        ):
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
