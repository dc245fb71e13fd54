"""The LangGraph SQLite checkpointer, opened safely: WAL, a busy timeout, the strict serializer.

Channel versions are short for new threads. LangGraph's SQLite saver writes a version as
``f"{n:032}.{random:016}"`` (about 50 characters), and every checkpoint stores one per channel
(``channel_versions``) and one per node and channel it read (``versions_seen``). Ours writes
``n`` in decimal after a letter giving its digit count (1 → ``"a1"``, 42 → ``"b42"``), so versions
still compare as strings in numeric order. A thread that already holds LangGraph's versions
(they start with ``0``) keeps getting them, so one thread never mixes the two formats in normal
use; and if it ever did, every short version sorts above every long one, so versions still grow.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from checkpoints.paths import BUSY_TIMEOUT_MS, is_busy, wal_retry_pauses
from checkpoints.serde import StrictSerializer


def next_short_version(current: Any) -> Any:
    """The version after ``current`` (None: a channel's first): short for new threads, LangGraph's for old ones."""
    if isinstance(current, int):
        return current + 1  # an in-memory saver's versions, kept as ints
    if isinstance(current, str) and current.startswith("0"):
        return None  # LangGraph's own format: the caller keeps it
    n = int(current[1:]) + 1 if current else 1
    digits = str(n)
    return f"{chr(ord('a') + len(digits) - 1)}{digits}"


class LeanCheckpoints:
    """Short channel versions for new threads (see the module docstring), for any LangGraph saver (mixed in first).

    A checkpoint's metadata keeps what LangGraph writes (source, step, parents, delta counters)
    but not the run config's metadata (run, seed, mode, target), which LangGraph would copy into
    every checkpoint: the ``dialogues`` row and the trace hold it once.
    """

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await super().aput({"configurable": config["configurable"]}, checkpoint, metadata, new_versions)  # type: ignore[misc]

    def get_next_version(self, current: str | None, channel: None) -> str:
        short = next_short_version(current)
        return super().get_next_version(current, channel) if short is None else short  # type: ignore[misc]


class OneHopWrites(AsyncSqliteSaver):
    """``AsyncSqliteSaver``'s ``aput`` and ``aput_writes``, each in one trip to the connection's thread.

    The stock methods make three trips per checkpoint (execute, close the cursor, commit) and
    four per task's writes (open a cursor, executemany, commit, close), each a queue hand-off
    and an event-loop wake-up, with the saver's lock held throughout. These run the very same
    statements with the very same rows and commit in one function on aiosqlite's thread
    (``Connection._execute``, what each of aiosqlite's own calls goes through).

    One trip also means a write, once started, commits (or rolls back) whatever happens to its dialogue: LangGraph's
    own insert-then-commit, cancelled in between (Ctrl-C, another process's full disk), left the insert's transaction
    open and the file's write lock held, so every other writer of the file waited out the busy timeout (30 s).
    """

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        await self.setup()
        thread_id = config["configurable"]["thread_id"]
        checkpoint_ns = config["configurable"]["checkpoint_ns"]
        type_, serialized_checkpoint = self.serde.dumps_typed(checkpoint)
        serialized_metadata = json.dumps(get_checkpoint_metadata(config, metadata), ensure_ascii=False).encode(
            "utf-8", "ignore"
        )
        row = (
            str(thread_id),
            checkpoint_ns,
            checkpoint["id"],
            config["configurable"].get("checkpoint_id"),
            type_,
            serialized_checkpoint,
            serialized_metadata,
        )
        async with self.lock:
            await self.conn._execute(_commit_one, self.conn._conn, _PUT_CHECKPOINT, row)
        return {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint["id"]}
        }

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        query = _PUT_WRITES.format("REPLACE" if all(w[0] in WRITES_IDX_MAP for w in writes) else "IGNORE")
        await self.setup()
        configurable = config["configurable"]
        rows = [
            (
                str(configurable["thread_id"]),
                str(configurable["checkpoint_ns"]),
                str(configurable["checkpoint_id"]),
                task_id,
                task_path,
                WRITES_IDX_MAP.get(channel, idx),
                channel,
                *self.serde.dumps_typed(value),
            )
            for idx, (channel, value) in enumerate(writes)
        ]
        async with self.lock:
            await self.conn._execute(_commit_many, self.conn._conn, query, rows)


_PUT_CHECKPOINT = (
    "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, "
    "checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_PUT_WRITES = (
    "INSERT OR {} INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, "
    "value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _commit_one(conn: sqlite3.Connection, sql: str, row: tuple[Any, ...]) -> None:
    try:
        conn.execute(sql, row).close()
        conn.commit()
    except BaseException:
        conn.rollback()  # a failed write (a full disk) holds no lock after it
        raise


def _commit_many(conn: sqlite3.Connection, sql: str, rows: list[tuple[Any, ...]]) -> None:
    try:
        conn.executemany(sql, rows).close()
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


class DialogueSaver(LeanCheckpoints, OneHopWrites):
    """LangGraph's SQLite saver with :class:`LeanCheckpoints`, writing in one trip per call (:class:`OneHopWrites`)."""


@asynccontextmanager
async def open_saver(path: Path) -> AsyncIterator[AsyncSqliteSaver]:
    """A :class:`DialogueSaver` on ``path`` (one checkpoint per node step, one thread per dialogue)."""
    conn = await aiosqlite.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        await conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        for pause in wal_retry_pauses():  # two commands started together on a new file (checkpoints/paths.py)
            try:
                await conn.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if pause is None or not is_busy(exc):
                    raise
                await asyncio.sleep(pause)
        await conn.execute("PRAGMA synchronous=NORMAL")
        saver = DialogueSaver(conn, serde=StrictSerializer())
        await saver.setup()
        yield saver
    finally:
        await conn.close()
