"""Every place a store keeps text, searched: every column of every table, compressed values opened, on either backend.

Deletion tests use :func:`find` to show that nothing of a run is left anywhere: not its ids, not its text. Values are
searched as they are and, where they are stored compressed, as they read: the response cache's replies
(checkpoints/cache_format.py), the compact traces' chunks (checkpoints/traces/), LangGraph's checkpoints (msgpack
keeps strings as UTF-8 bytes, so a byte search finds them). A SQLite file is searched byte by byte too (with its WAL):
freed pages would keep deleted text.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.support.backends import Db, is_postgres


def find(db: Db, needles: Iterable[str]) -> list[str]:
    """Where any of ``needles`` appears: "table.column" (or "file" for the SQLite file's bytes), one per place."""
    wanted = [n for n in needles if n]
    places: set[str] = set()
    for table, columns, rows in _tables(db):
        for row in rows:
            for column, value in zip(columns, row):
                text = _readable(table, value)
                if any(n in text for n in wanted):
                    places.add(f"{table}.{column}")
        if table == "trace_chunks":  # a trace's chunks are one stream: decoded together, in order
            streams: dict[Any, list[tuple[int, bytes]]] = {}
            for row in rows:
                record = dict(zip(columns, row))
                streams.setdefault(record["trace_id"], []).append((record["seq"], bytes(record["data"])))
            for chunks in streams.values():
                if any(n in _trace_text([c for _, c in sorted(chunks)]) for n in wanted):
                    places.add("trace_chunks.data (decoded)")
    if not is_postgres(db):
        raw = b"".join(p.read_bytes() for p in (Path(db), Path(f"{db}-wal")) if p.exists())
        if any(n.encode() in raw for n in wanted):
            places.add("file")
    return sorted(places)


def _tables(db: Db) -> Iterable[tuple[str, list[str], list[tuple[Any, ...]]]]:
    if is_postgres(db):
        import psycopg

        with psycopg.connect(str(db)) as conn:
            names = [
                r[0]
                for r in conn.execute(
                    "select table_name from information_schema.tables where table_schema = 'public' and "
                    "table_type = 'BASE TABLE' order by 1"
                )
            ]
            for name in names:
                cur = conn.execute(f'select * from "{name}"')
                yield name, [d.name for d in cur.description or []], cur.fetchall()
        return
    lite = sqlite3.connect(db)
    try:
        names = [r[0] for r in lite.execute("select name from sqlite_master where type = 'table' order by 1")]
        for name in names:
            rows = lite.execute(f'select * from "{name}"')
            yield name, [d[0] for d in rows.description], rows.fetchall()
    finally:
        lite.close()


def _readable(table: str, value: Any) -> str:
    """A stored value as text a search can read: JSON of structured values, compressed values opened."""
    if value is None:
        return ""
    if isinstance(value, memoryview):
        value = bytes(value)
    if isinstance(value, (bytes, bytearray)):
        parts = [bytes(value).decode("utf-8", "replace")]
        if table == "response_cache":
            from checkpoints.cache_format import decompress

            try:
                parts.append(decompress(bytes(value)))
            except ValueError:
                pass
        for wbits in (-15, 15, 31):  # any other deflated blob
            try:
                parts.append(zlib.decompress(bytes(value), wbits).decode("utf-8", "replace"))
            except (zlib.error, ValueError):
                continue
        return "\n".join(parts)
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _trace_text(chunks: list[bytes]) -> str:
    from checkpoints.traces.decoder import decode_stream

    return json.dumps(decode_stream(chunks), ensure_ascii=False, default=str)
