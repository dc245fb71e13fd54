"""Two commands started together on a new SQLite file: the second's switch to WAL is tried again, not failed."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

import checkpoints.paths as paths
from checkpoints.saver import open_saver


class _BusyAtFirst:
    """A real connection whose first ``busy`` switches to WAL fail as SQLite fails them during another's switch."""

    def __init__(self, conn: sqlite3.Connection, busy: int, message: str = "database is locked") -> None:
        self._conn, self.busy, self.message, self.tries = conn, busy, message, 0

    def execute(self, sql: str, *args):
        if "journal_mode" in sql:
            self.tries += 1
            if self.tries <= self.busy:
                raise sqlite3.OperationalError(self.message)
        return self._conn.execute(sql, *args)

    def close(self) -> None:
        self._conn.close()


def _patched(monkeypatch, busy: int, message: str = "database is locked") -> list[_BusyAtFirst]:
    made: list[_BusyAtFirst] = []
    real = sqlite3.connect

    def connect(*args, **kwargs):
        made.append(_BusyAtFirst(real(*args, **kwargs), busy, message))
        return made[-1]

    monkeypatch.setattr(paths.sqlite3, "connect", connect)
    return made


def test_a_busy_switch_is_tried_again(tmp_path, monkeypatch):
    made = _patched(monkeypatch, busy=3)
    conn = paths.connect(tmp_path / "new.db")
    assert made[0].tries == 4
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_it_gives_up_after_its_tries_and_other_errors_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "_WAL_TRIES", 3)
    made = _patched(monkeypatch, busy=99)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        paths.connect(tmp_path / "a.db")
    assert made[0].tries == 3
    made = _patched(monkeypatch, busy=99, message="disk I/O error")
    with pytest.raises(sqlite3.OperationalError, match="I/O"):
        paths.connect(tmp_path / "b.db")
    assert made[0].tries == 1


def test_the_checkpointer_tries_again_too(tmp_path, monkeypatch):
    import aiosqlite

    tries = []
    real_execute = aiosqlite.Connection.execute

    async def execute(self, sql, *args):
        if "journal_mode=WAL" in sql:
            tries.append(sql)
            if len(tries) <= 2:
                raise sqlite3.OperationalError("database is locked")
        return await real_execute(self, sql, *args)

    monkeypatch.setattr(aiosqlite.Connection, "execute", execute)

    async def open_it():
        async with open_saver(tmp_path / "c.db") as saver:
            cursor = await saver.conn.execute("PRAGMA journal_mode")
            return (await cursor.fetchone())[0]

    assert asyncio.run(open_it()) == "wal"
    assert len(tries) == 3
