"""The response cache: model replies kept as compressed JSON in the dialogue database, keyed on the whole request.

The key is a SHA-256 over the model spec and its resolved parameters (temperature,
max tokens, sampling seed, base URL, extra arguments, the provider's identifying
parameters), the full message list, stop sequences and call options. The value is
the reply (content, usage, response metadata including logprobs) as JSON: nothing
here is ever pickled, and a row that does not decode is treated as a miss.

On PostgreSQL the table is in the same database as the dialogues and LangGraph's checkpoints
(``bytea`` key and value), shared by every worker. The table lives in the same file as the dialogues
(``response_cache``, created by migration ``m040_response_cache`` and compacted by ``m064_response_cache_compact``), so
a replay, a branch's shared prefix or a rerun of the judge in that database does not pay twice; deleting the file
deletes it too. A row is small: the key is stored as the first 16 bytes of the digest (a blob, in a WITHOUT ROWID table:
no separate index), the value as a format byte and the JSON deflated against a preset dictionary of the JSON every reply
shares (:data:`checkpoints.cache_format.ZDICT_V1`), and the time as Unix seconds. All SQLite work runs on one worker
thread: the LangGraph checkpointer writes the same file from the event loop, and a blocking call on the loop could wait
on it forever. Replies queued for storing are written together, one transaction per batch.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
from langchain_core.outputs import ChatGeneration, ChatResult

from checkpoints.cache_format import KEY_VERSION, TABLE, compress, decompress, stored_key
from checkpoints.location import PostgresURL
from checkpoints.paths import connect, prepare_new_file
from checkpoints.postgres.db import PgDatabase

T = TypeVar("T")

# The run whose call is being made: a reply stored meanwhile is recorded as that run's, so deleting the run deletes it
# (set per dialogue by graph/running/playing.py and per scored item by evals/scorers/loop.py; asyncio tasks copy it).
CACHE_RUN: ContextVar[str | None] = ContextVar("dymt_cache_run", default=None)


@contextmanager
def caching_for(run_id: str | None) -> Iterator[None]:
    """Replies stored in the block are recorded as ``run_id``'s (the first run to store a reply keeps it)."""
    token = CACHE_RUN.set(run_id)
    try:
        yield
    finally:
        CACHE_RUN.reset(token)


def request_key(
    params: Mapping[str, Any],
    messages: Sequence[BaseMessage],
    *,
    stop: Sequence[str] | None = None,
    call_options: Mapping[str, Any] | None = None,
) -> str:
    """The cache key of one request: equal keys mean the provider would be sent the same thing."""
    material = {
        "v": KEY_VERSION,
        "params": params,
        "messages": [_message_record(m) for m in messages],
        "stop": list(stop) if stop else None,
        "options": dict(call_options or {}),
    }
    return hashlib.sha256(_KEY_JSON(material).encode("utf-8")).hexdigest()


# json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str), built once
_KEY_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str).encode


def _message_record(message: BaseMessage) -> dict[str, Any]:
    # Message ids differ from run to run and never reach the provider: leave them out.
    record: dict[str, Any] = {"type": message.type, "content": message.content}
    if message.name:
        record["name"] = message.name
    if message.additional_kwargs:
        record["additional_kwargs"] = message.additional_kwargs
    return record


def encode_result(result: ChatResult) -> str | None:
    """The reply as JSON text, or None when it holds something JSON cannot represent."""
    data = {
        "generations": [
            {"message": message_to_dict(g.message), "generation_info": g.generation_info} for g in result.generations
        ],
        "llm_output": result.llm_output,
    }
    try:
        return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return None


def decode_result(text: str) -> ChatResult:
    """Rebuild a reply from :func:`encode_result`'s JSON, marked as a cache hit."""
    data = json.loads(text)
    generations = []
    for item in data["generations"]:
        message = messages_from_dict([item["message"]])[0]
        message.response_metadata = {**message.response_metadata, "cache": "hit"}
        generations.append(ChatGeneration(message=message, generation_info=item.get("generation_info")))
    return ChatResult(generations=generations, llm_output=data.get("llm_output"))


def decode_stored(value: bytes | str) -> ChatResult:
    """Rebuild a reply from a stored value (compressed, or JSON text from before m064)."""
    return decode_result(decompress(value))


class ResponseCache:
    """Replies by request key, in the ``response_cache`` table of one database file or PostgreSQL database."""

    def __init__(self, path: Path | PostgresURL) -> None:
        self.path = path if isinstance(path, PostgresURL) else Path(path)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="response-cache")
        self._conn: sqlite3.Connection | PgDatabase | None = None
        self._flights: dict[str, list[Any]] = {}  # key -> [asyncio.Lock, users]
        self._closed = False
        self._pending: list[tuple[str, str, str, str | None]] = []  # (key, JSON text, spec, run) queued by put_later
        self._lookups: list[tuple[str, asyncio.Future]] = []  # (key, its answer) queued by aget
        self._pending_lock = threading.Lock()
        self._flush_queued = False  # a job that takes every queued write and lookup is waiting on the thread
        self.write_failures = 0
        # PostgreSQL: a lookup or write that meets a store outage waits for the store (checkpoints/store_outage.py),
        # rather than failing the model call and with it the dialogue. Set by the command that owns the outage.
        self.outage: Any = None

    # --- on the worker thread ----------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection | PgDatabase:
        if self._conn is None and isinstance(self.path, PostgresURL):
            from checkpoints.postgres.schema import ensure_schema

            db = PgDatabase(self.path)
            ensure_schema(db)
            self._conn = db
        if self._conn is None:
            import sqlite_utils

            from checkpoints.migrations import apply_migrations

            prepare_new_file(self.path)  # type: ignore[arg-type]  # the SQLite branch: a Path
            conn = connect(self.path)  # type: ignore[arg-type]
            apply_migrations(sqlite_utils.Database(conn))
            self._conn = conn
        return self._conn

    def _through_outages(self, call: Callable[[], T]) -> T:
        return call() if self.outage is None else self.outage.ride_out_sync(call)

    def _get(self, key: str) -> ChatResult | None:
        row = self._through_outages(
            lambda: self._connection().execute(f"select value from {TABLE} where key = ?", [stored_key(key)]).fetchone()
        )
        if row is None:
            return None
        try:
            return decode_stored(row[0])
        except (ValueError, KeyError, TypeError):
            return None  # a damaged or foreign row is a miss, never a crash

    def _put_rows(self, items: Sequence[tuple[str, str, str, str | None]]) -> None:
        """Write (key, JSON text, spec, run) items in one transaction; the first stored reply of a key wins."""
        created = int(time.time())
        rows = [(stored_key(key), spec, compress(text), created, run) for key, text, spec, run in items]
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                f"insert into {TABLE} (key, spec, value, created_at, run_id) values (?, ?, ?, ?, ?) "
                "on conflict (key) do nothing",
                rows,
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _flush(self) -> None:
        """Write every queued reply, then answer every queued lookup (so a lookup sees the writes queued before it)."""
        with self._pending_lock:
            batch, self._pending = self._pending, []
            lookups, self._lookups = self._lookups, []
            self._flush_queued = False
        if batch:
            try:
                self._through_outages(lambda: self._put_rows(batch))
            except Exception:  # noqa: BLE001 - best effort: a lost row only costs a future miss
                self.write_failures += len(batch)
        if lookups:
            self._answer(lookups)

    def _answer(self, lookups: list[tuple[str, asyncio.Future]]) -> None:
        """Look the keys up and hand the answers to their event loops, one wake-up per loop."""
        answers: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, Any, BaseException | None]]] = {}
        for key, future in lookups:
            try:
                answer: tuple[asyncio.Future, Any, BaseException | None] = (future, self._get(key), None)
            except BaseException as exc:  # noqa: BLE001 - the lookup's caller gets it, as from run_in_executor
                answer = (future, None, exc)
            answers.setdefault(future.get_loop(), []).append(answer)
        for loop, settled in answers.items():
            try:
                loop.call_soon_threadsafe(_settle, settled)
            except RuntimeError:  # the loop closed meanwhile: nobody waits for these answers
                pass

    def _stats(self) -> dict[str, Any]:
        rows = self._connection().execute(f"select spec, count(*) from {TABLE} group by spec order by spec").fetchall()
        return {spec: n for spec, n in rows}

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return self._executor.submit(fn, *args).result()

    # --- the public interface -----------------------------------------------------------------
    def get(self, key: str) -> ChatResult | None:
        return self._run(self._get, key)

    def put(self, key: str, result: ChatResult, *, spec: str) -> bool:
        """Store a reply (waiting for the write); False if it cannot be stored as JSON."""
        text = encode_result(result)
        if text is None:
            return False
        self._run(self._put_rows, [(key, text, spec, CACHE_RUN.get())])
        return True

    def entries_by_spec(self) -> dict[str, int]:
        return self._run(self._stats)

    async def aget(self, key: str) -> ChatResult | None:
        """The cached reply for ``key``, or None: looked up on the worker thread after every write queued before it.

        Lookups queued while the worker is busy are answered together, with one wake-up of the event loop.
        """
        future = asyncio.get_running_loop().create_future()
        self._queue(lookup=(key, future))
        return await future

    def put_later(self, key: str, result: ChatResult, *, spec: str) -> bool:
        """Queue a reply for storing and return at once; False if it cannot be stored as JSON.

        The caller does not wait for SQLite: the reply is already in hand. Replies queued
        while the worker is busy are compressed and written together, in one transaction. A
        lookup queued after this (the same worker thread, first in first out) sees the
        stored row: the write that takes this reply is queued before it.
        """
        text = encode_result(result)
        if text is None:
            return False
        self._queue(write=(key, text, spec, CACHE_RUN.get()))
        return True

    def _queue(
        self, *, write: tuple[str, str, str, str | None] | None = None, lookup: tuple[str, asyncio.Future] | None = None
    ) -> None:
        with self._pending_lock:
            if write is not None:
                self._pending.append(write)
            if lookup is not None:
                self._lookups.append(lookup)
            if self._flush_queued:
                return  # a queued job, not started yet, will take this one too
            self._flush_queued = True
        self._executor.submit(self._flush)

    @asynccontextmanager
    async def single_flight(self, key: str) -> AsyncIterator[None]:
        """Identical requests in flight at once wait for the first, which then serves them from the cache.

        In a grid run the user simulator's opening request is the same for every target
        of a seed; without this, dialogues started together would each pay for it.
        """
        entry = self._flights.setdefault(key, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                self._flights.pop(key, None)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        def shut() -> None:
            self._flush()  # anything queued (its own write ran first: first in, first out)
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        self._executor.submit(shut).result()
        self._executor.shutdown(wait=True)


def _settle(answers: list[tuple[asyncio.Future, Any, BaseException | None]]) -> None:
    """On the event loop: hand each lookup its answer (a lookup whose caller gave up is skipped)."""
    for future, result, error in answers:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
