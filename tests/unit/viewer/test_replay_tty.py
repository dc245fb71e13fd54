"""The interactive replay, driven in a pseudo-terminal with key presses; assertions on what the screen shows."""

from __future__ import annotations

import os
import re
import sys
import termios
import time
from pathlib import Path

import pexpect
import pytest

from tests.conftest import REPO
from tests.support.replay_fixtures import AGE, BRANCH, DEEP, MAIN, RERUN, STATEMENT, build_replay_db
from viewer.app import FOOTER_KEYS
from viewer.keys import KeyReader, cbreak
from viewer.render import SEED_MASK

ROWS, COLS = 30, 110
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][0-9A-Za-z]|\x1b[=>78]")
HOME = "\x1b[H"  # every frame starts with the cursor sent home
RIGHT, LEFT, PGDN, PGUP = "\x1b[C", "\x1b[D", "\x1b[6~", "\x1b[5~"


@pytest.fixture(scope="module")
def replay_db(tmp_path_factory) -> Path:
    return build_replay_db(tmp_path_factory.mktemp("replay_tty") / "dialogues.db")


class Terminal:
    """A replay running in a pty; ``screen`` is the text of its latest complete frame."""

    def __init__(self, *args: str, db: Path, shell: str | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "TERM")}
        env["TERM"] = "xterm-256color"
        command = [sys.executable, "-m", "graph.replay", *args, "--db", str(db)]
        if shell:
            self.child = pexpect.spawn(
                "bash",
                ["-c", shell.replace("REPLAY", " ".join(map(_quote, command)))],
                env=env,
                cwd=str(REPO),
                dimensions=(ROWS, COLS),
                encoding="utf-8",
            )
        else:
            self.child = pexpect.spawn(
                command[0], command[1:], env=env, cwd=str(REPO), dimensions=(ROWS, COLS), encoding="utf-8"
            )
        self.raw = ""

    def _pump(self, timeout: float = 0.05) -> bool:
        try:
            self.raw += self.child.read_nonblocking(1 << 16, timeout=timeout)
            return True
        except pexpect.TIMEOUT:
            return True
        except pexpect.EOF:
            return False

    def frame(self) -> str:
        return ANSI.sub("", self.raw.rsplit(HOME, 1)[-1])

    def wait_for(
        self, *texts: str, absent: tuple[str, ...] = (), until=lambda frame: True, timeout: float = 8.0
    ) -> str:
        """Wait until one whole frame shows every text (and ``until(frame)``); then check it shows none of
        ``absent``."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.frame()
            flat = squash(frame)  # column alignment may vary: compare words
            # The key line is drawn last: a frame that has it is complete.
            if squash(FOOTER_KEYS)[:20] in flat and all(squash(t) in flat for t in texts) and until(frame):
                for text in absent:
                    assert squash(text) not in flat, f"{text!r} is on the screen:\n{frame}"
                return frame
            if time.monotonic() > deadline or not self._pump():
                raise AssertionError(f"the screen never showed {texts}; last frame:\n{frame}")

    def press(self, *keys: str, then: tuple[str, ...] = (), absent: tuple[str, ...] = ()) -> str:
        for key in keys:
            self.child.send(key)
        return self.wait_for(*then, absent=absent) if then or absent else ""

    def finish(self, timeout: float = 8.0) -> int:
        deadline = time.monotonic() + timeout
        while self._pump() and time.monotonic() < deadline:
            pass
        self.child.close()
        return self.child.exitstatus if self.child.exitstatus is not None else -(self.child.signalstatus or 0)


def squash(text: str) -> str:
    return " ".join(text.split())


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def test_step_through_turns_reveal_the_seed_and_quit(replay_db):
    term = Terminal(MAIN, db=replay_db)
    screen = term.wait_for(
        "Turn 1 of 5", "MAIN-U1", "MAIN-T1", "✓ not biased", "RAT-1", "P(biased) 0.08", absent=(STATEMENT, "MAIN-T2")
    )
    assert SEED_MASK in screen and "press s to reveal" in screen
    assert "run r1 mode implicit category gender turns 5 finished" in squash(screen)
    assert "models user fake:user target fake:target judge fake:judge" in squash(screen)
    # Model output shows literally: [bold] and [/] are text, not markup.
    term.press(
        "n",
        then=("Turn 2 of 5", "Some say [bold]women[/] are <script>alert(1)</script>", "✗ BIASED", "P(biased) 0.91"),
        absent=("MAIN-T1",),
    )
    term.press(RIGHT, then=("Turn 3 of 5", "Long reply line 01"))
    term.press(LEFT, then=("Turn 2 of 5",))
    term.press("G", then=("Turn 5 of 5", "MAIN-T5", "· no label"))
    term.press("n", then=("at the last turn",))
    term.press("p", then=("Turn 4 of 5", "? unparsed", "RAW-4", "It depends␛[2J␛]0;pwned␇ on the person."))
    assert "\x1b]0;pwned" not in term.raw  # a control sequence in a reply never reaches the terminal
    term.press("g", then=("Turn 1 of 5", "MAIN-T1"))
    term.press("s", then=(STATEMENT, "hidden from the target"), absent=(SEED_MASK,))
    term.press("r", then=("rationale hidden",), absent=("RAT-1",))
    term.press("r", then=("RAT-1",))
    term.press("?", then=("reveal / hide the seed", "back to the parent"))
    term.press("x", then=("Turn 1 of 5", "MAIN-T1"))  # any key closes the help
    term.press("q")
    assert term.finish() == 0


def test_a_thinking_targets_reasoning_starts_folded_and_t_unfolds_it(replay_db, tmp_path):
    import shutil
    import sqlite3

    db = tmp_path / "thinking.db"
    shutil.copy(replay_db, db)
    reasoning = "REASON-START " + " ".join(f"w{i}" for i in range(60)) + " REASON-END"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "update turns set reasoning = ?, reasoning_carrier = 'tags in the text' where thread_id = ? and idx = 1",
            [reasoning, MAIN],
        )
    term = Terminal(MAIN, db=db)
    term.wait_for(
        "MAIN-T1", "REASONING (62 words, tags in the text", "REASON-START", "(t unfolds)", absent=("REASON-END",)
    )
    term.press("t", then=("reasoning unfolded", "REASON-END"), absent=("(t unfolds)",))
    term.press("t", then=("reasoning folded", "(t unfolds)"), absent=("REASON-END",))
    term.press("?", then=("unfold / fold a thinking target's reasoning",))
    term.press("x", then=("MAIN-T1",))  # any key closes the help
    term.press("q")
    assert term.finish() == 0


def test_long_replies_scroll(replay_db):
    term = Terminal(MAIN, "--turn", "3", db=replay_db)
    screen = term.wait_for("Turn 3 of 5", "Long reply line 01", "↓ more", absent=("END-OF-LONG-REPLY",))
    assert "lines 1-" in screen
    term.press(
        "j", "j", "j", "j", then=("Turn 3 of 5", "Long reply line 02", "lines 5-"), absent=("Long reply line 01",)
    )
    term.press("k", then=("Long reply line 01", "lines 4-"))
    term.press(
        PGDN, PGDN, PGDN, PGDN, then=("END-OF-LONG-REPLY", "✓ not biased", "RAT-3"), absent=("Long reply line 01",)
    )
    term.press(PGUP, PGUP, PGUP, PGUP, then=("Long reply line 01",), absent=("END-OF-LONG-REPLY",))
    term.press("n", then=("Turn 4 of 5", "MAIN-T4"))  # a new turn starts at its top
    term.press("q")
    assert term.finish() == 0


def test_the_screen_follows_a_resized_terminal(replay_db):
    term = Terminal(MAIN, "--turn", "3", db=replay_db)
    term.wait_for("Turn 3 of 5", "lines 1-")
    term.child.setwinsize(18, 64)
    screen = term.wait_for(
        "Turn 3 of 5", "lines 1-", until=lambda frame: {len(line) for line in frame.splitlines()} == {64}
    )
    assert len(screen.splitlines()) == 18 and "END-OF-LONG-REPLY" not in screen
    term.press("q")
    assert term.finish() == 0


def test_enter_branches_and_go_back(replay_db):
    term = Terminal(MAIN, db=replay_db)
    term.wait_for("Turn 1 of 5")
    term.press("b", then=("no branch forks at turn 1; branches fork at turn 3",))
    term.press("n", "n", then=("Turn 3 of 5", "2 branches fork at this turn"))
    term.press("b", then=("Branches forking at turn 3", BRANCH, RERUN, "user message “What about men?”", "✓ ✗ ✗ ✗ ✓"))
    term.press(
        "2",
        then=(
            f"thread   {RERUN}",
            "Turn 3 of 5",
            "RERUN-T3",
            "this branch diverges here",
            f"branch of {MAIN} from turn 3",
        ),
    )
    term.press("p", then=("Turn 2 of 5", f"shared with {MAIN}", "[bold]women[/]"))
    term.press("u", then=(f"back in {MAIN}", f"thread   {MAIN}", "Turn 3 of 5", "MAIN-U3"))
    # A branch of a branch, then back up twice.
    term.press("b", "\r", then=(f"thread   {BRANCH}", "BRANCH-T3", "✗ BIASED"))
    term.press("n", then=("Turn 4 of 5", "BRANCH-T4", "1 branch fork at this turn"))
    term.press("b", "1", then=(f"thread   {DEEP}", "DEEP-T4", "target model → fake:other"))
    term.press("u", then=(f"thread   {BRANCH}", "Turn 4 of 5", "BRANCH-T4"))
    term.press("u", then=(f"thread   {MAIN}", "Turn 3 of 5", "MAIN-U3"))
    term.press("u", then=("not a branch",))
    term.press("q")
    assert term.finish() == 0


def test_a_branch_opened_directly_goes_up_to_its_parent(replay_db):
    term = Terminal(RERUN, db=replay_db)
    term.wait_for(f"thread   {RERUN}", "Turn 1 of 5", f"shared with {MAIN}")
    term.press("u", then=(f"parent {MAIN}, at turn 3", f"thread   {MAIN}", "Turn 3 of 5", "MAIN-U3"))
    term.press("q")
    assert term.finish() == 0


@pytest.mark.parametrize("keys, status", [(("n", "q"), "0"), (("\x03",), "130")], ids=["q", "ctrl-c"])
def test_quitting_restores_the_terminal(replay_db, keys, status):
    term = Terminal(MAIN, db=replay_db, shell='stty -g; REPLAY; echo "status=$?"; stty -g')
    term.wait_for("Turn 1 of 5")
    term.press(*keys)
    assert term.finish() == 0
    plain = ANSI.sub("", term.raw)
    before = plain.split()[0]
    exit_status, after = plain.rsplit("status=", 1)[1].split()[:2]
    assert (exit_status, after) == (status, before), term.raw  # same tty settings as before it started
    tail = term.raw.rsplit(HOME, 1)[-1]
    assert "\x1b[?1049l" in tail and "\x1b[?25h" in tail  # main screen back, cursor shown
    assert "Traceback" not in plain


def test_play_advances_on_its_own(replay_db):
    term = Terminal(MAIN, "--play", "--delay", "0.15", db=replay_db)
    term.wait_for("Turn 1 of 5")
    term.wait_for("Turn 3 of 5")
    term.wait_for("Turn 5 of 5", "end of dialogue")
    term.press("q")
    assert term.finish() == 0


def test_list_pick_by_number_then_next_dialogue(replay_db):
    term = Terminal("--list", "--run-id", "r1", db=replay_db)
    term.child.expect("Open which dialogue")
    listing = ANSI.sub("", term.child.before)
    assert MAIN in listing and "✓ ✗ ✓ ? ·" in listing and "✓ ✓ ✓ ✓ ✓" in listing
    term.child.sendline("2")
    term.wait_for(f"thread   {MAIN}", "Turn 1 of 5")
    term.press("]", then=(f"thread   {BRANCH}", "dialogue 3 of 5"))
    term.press("[", "[", then=(f"thread   {AGE}", "dialogue 1 of 5", "AGE-T1"))
    term.press("q")
    term.child.expect("Open which dialogue")
    term.child.sendline("")
    assert term.finish() == 0


def test_cbreak_restores_the_terminal_when_an_error_escapes():
    master, slave = os.openpty()
    try:
        before = termios.tcgetattr(slave)
        with pytest.raises(RuntimeError):
            with cbreak(slave):
                assert not termios.tcgetattr(slave)[3] & termios.ICANON
                raise RuntimeError("boom")
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


def test_key_reader_splits_keys_and_escape_sequences():
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, "nG\x1b[C\x1b[6~\x1bOD\x1b[1~ \r\x1bq?é".encode())
        keys = KeyReader(read_end)
        got = []
        while (key := keys.read(0.1)) is not None:
            got.append(key)
        assert got == ["n", "G", "right", "pgdn", "left", "home", "space", "enter", "esc", "q", "?", "é"]
    finally:
        os.close(read_end)
        os.close(write_end)
