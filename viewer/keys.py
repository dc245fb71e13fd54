"""Raw keys: the terminal in cbreak mode and a decoder from its bytes to key names."""

from __future__ import annotations

import codecs
import os
import select
from collections.abc import Iterator
from contextlib import contextmanager

_ESCAPES = {
    "[A": "up",
    "[B": "down",
    "[C": "right",
    "[D": "left",
    "OA": "up",
    "OB": "down",
    "OC": "right",
    "OD": "left",
    "[H": "home",
    "[F": "end",
    "OH": "home",
    "OF": "end",
    "[1~": "home",
    "[4~": "end",
    "[7~": "home",
    "[8~": "end",
    "[5~": "pgup",
    "[6~": "pgdn",
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
