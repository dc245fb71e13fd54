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
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import aiosqlite
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from checkpoints.paths import BUSY_TIMEOUT_MS
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

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await super().aput({"configurable": config["configurable"]}, checkpoint, metadata, new_versions)

    def get_next_version(self, current: str | None, channel: None) -> str:  # type: ignore[override]
        short = next_short_version(current)
        return super().get_next_version(current, channel) if short is None else short


class DialogueSaver(LeanCheckpoints, AsyncSqliteSaver):
    """LangGraph's SQLite saver with :class:`LeanCheckpoints`; a write, once started, commits even if its dialogue is cancelled.

    LangGraph's saver inserts and then commits. A dialogue cancelled in between (Ctrl-C, another process's full disk)
    would leave the insert's transaction open, holding the file's write lock: every other writer of the file, in this
    process or another, would wait out the busy timeout (30 s). Shielded, the write finishes as if the cancellation
    had come just after it.
    """

    async def aput(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        return await asyncio.shield(super().aput(*args, **kwargs))

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.shield(super().aput_writes(*args, **kwargs))


@asynccontextmanager
async def open_saver(path: Path) -> AsyncIterator[AsyncSqliteSaver]:
    """A :class:`DialogueSaver` on ``path`` (one checkpoint per node step, one thread per dialogue)."""
    conn = await aiosqlite.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        await conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=NORMAL")
        saver = DialogueSaver(conn, serde=StrictSerializer())
        await saver.setup()
        yield saver
    finally:
        await conn.close()
