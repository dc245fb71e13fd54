"""The LangGraph SQLite checkpointer, opened safely: WAL, a busy timeout, the strict serializer."""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import aiosqlite
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from checkpoints.paths import BUSY_TIMEOUT_MS
from checkpoints.serde import StrictSerializer


@asynccontextmanager
async def open_saver(path: Path) -> AsyncIterator[AsyncSqliteSaver]:
    """An AsyncSqliteSaver on ``path`` (one checkpoint per node step, one thread per dialogue)."""
    conn = await aiosqlite.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        await conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=NORMAL")
        saver = AsyncSqliteSaver(conn, serde=StrictSerializer())
        await saver.setup()
        yield saver
    finally:
        await conn.close()
