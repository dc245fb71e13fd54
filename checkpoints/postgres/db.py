"""A PostgreSQL database behind the part of sqlite-utils' API the store uses, so one query code serves both backends.

The store's SQL is written for SQLite: ``?`` and ``:name`` placeholders, ``[name]`` identifiers, ``BEGIN
IMMEDIATE``. :func:`translate` turns it into psycopg's (``%s``, ``%(name)s``, ``"name"``, ``BEGIN``; a literal
``%`` doubled); the connection is in autocommit mode, so a statement outside ``BEGIN`` / ``COMMIT`` commits on
its own, as on SQLite. Rows come back as tuples from :meth:`PgDatabase.execute` (as sqlite3's cursors) and as
dicts from :meth:`PgDatabase.query` (as sqlite-utils'). Blobs are ``bytea``: bytes in, bytes out.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from checkpoints.location import CONNECT_TIMEOUT_S, PostgresURL, unreachable
from checkpoints.paths import StoreError

DIALECT = "postgresql"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> str:
    """SQLite-flavoured SQL as psycopg's: placeholders, ``[identifiers]``, ``%`` escaped, ``BEGIN IMMEDIATE``."""
    if sql.strip().upper() == "BEGIN IMMEDIATE":
        return "BEGIN"
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":  # a literal or a quoted identifier, copied (a doubled quote stays inside)
            j = i + 1
            while j < n and not (sql[j] == ch and (j + 1 >= n or sql[j + 1] != ch)):
                j += 2 if sql[j] == ch else 1
            out.append(sql[i : j + 1].replace("%", "%%"))
            i = j + 1
            continue
        if ch == "?":
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        elif ch == "[":
            end = sql.index("]", i)
            out.append('"' + sql[i + 1 : end] + '"')
            i = end + 1
            continue
        elif ch == ":" and i + 1 < n and sql[i + 1] == ":":
            out.append("::")
            i += 2
            continue
        elif ch == ":" and (m := _NAME.match(sql, i + 1)):
            out.append(f"%({m.group()})s")
            i = m.end()
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _jsonify(value: Any) -> Any:
    """A dict or list as JSON text, as sqlite-utils stores them."""
    return json.dumps(value, default=repr) if isinstance(value, (dict, list, tuple)) else value


def _params(params: Any) -> Any:
    if params is None:
        return ()
    if isinstance(params, Mapping):
        return dict(params)
    return list(params)


class PgTable:
    """``db[name]``: the few sqlite-utils table methods the store calls."""

    def __init__(self, db: PgDatabase, name: str) -> None:
        self.db, self.name = db, name

    def exists(self) -> bool:
        return self.name in self.db.table_names()

    @property
    def rows(self) -> Iterator[dict[str, Any]]:
        return self.rows_where()

    def rows_where(
        self, where: str | None = None, where_args: Any = None, *, order_by: str | None = None
    ) -> Iterator[dict[str, Any]]:
        sql = (
            f'select * from "{self.name}"'
            + (f" where {where}" if where else "")
            + (f" order by {order_by}" if order_by else "")
        )
        return iter(self.db.query(sql, where_args or ()))

    def insert(self, record: dict[str, Any], *, pk: Any = None, ignore: bool = False) -> PgTable:
        """Insert one row; with ``ignore`` an existing row with the same key is kept."""
        columns = list(record)
        sql = (
            f'insert into "{self.name}" ({", ".join(f"{_q(c)}" for c in columns)}) '
            f"values ({', '.join('%s' for _ in columns)})" + (" on conflict do nothing" if ignore else "")
        )
        self.db.execute_native(sql, [_jsonify(v) for v in record.values()])
        return self

    def upsert(self, record: dict[str, Any], *, pk: str | Sequence[str]) -> PgTable:
        """Insert one row, or update the given columns of the row with the same key."""
        keys = (pk,) if isinstance(pk, str) else tuple(pk)
        columns = list(record)
        updates = ", ".join(f"{_q(c)} = excluded.{_q(c)}" for c in columns if c not in keys)
        sql = (
            f'insert into "{self.name}" ({", ".join(_q(c) for c in columns)}) values '
            f"({', '.join('%s' for _ in columns)}) "
            f"on conflict ({', '.join(_q(k) for k in keys)}) "
            + (f"do update set {updates}" if updates else "do nothing")
        )
        self.db.execute_native(sql, [_jsonify(v) for v in record.values()])
        return self

    def update(self, pk_value: Any, updates: dict[str, Any]) -> PgTable:
        """Set columns of the row whose (one-column) primary key is ``pk_value``."""
        key = self.db.primary_key(self.name)
        sets = ", ".join(f"{_q(c)} = %s" for c in updates)
        self.db.execute_native(
            f'update "{self.name}" set {sets} where {_q(key)} = %s', [*map(_jsonify, updates.values()), pk_value]
        )
        return self


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PgDatabase:
    """One psycopg connection (autocommit) with sqlite-utils' ``query`` / ``execute`` / ``table_names`` /
    ``db[table]``."""

    dialect = DIALECT
    _closed = False

    def __init__(self, url: PostgresURL, *, read_only: bool = False, application_name: str | None = None) -> None:
        import psycopg

        self.url = url
        self._options: dict[str, str] = {"options": "-c default_transaction_read_only=on"} if read_only else {}
        if application_name is not None:  # who this session is in pg_stat_activity (a worker's, to be fenced)
            self._options["application_name"] = application_name
        try:
            self._conn = self._connect()
        except psycopg.OperationalError:
            raise unreachable(url) from None
        self._lock = threading.RLock()
        self._pks: dict[str, str] = {}

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(
            self.url.url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            prepare_threshold=None,
            **self._options,  # type: ignore[arg-type]
        )

    def _live(self) -> Any:
        """The connection, a new one if the last was lost (a server restart): the statement that met the loss
        raised (a transaction never goes on over two connections); callers wait for the store and try again."""
        if self._conn.broken or (self._conn.closed and not self._closed):
            self._conn = self._connect()  # psycopg.OperationalError while the server is still away
        return self._conn

    @property
    def conn(self) -> PgDatabase:
        """The object ``execute`` / ``executemany`` are called on (sqlite-utils' ``db.conn``): this database itself."""
        return self

    @property
    def transaction_open(self) -> bool:
        """Whether a BEGIN of this connection is open (a transaction inside it is a savepoint)."""
        from psycopg.pq import TransactionStatus

        # A lost connection (UNKNOWN) holds none: the next statement opens a new one.
        return self._conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR)

    def execute(self, sql: str, params: Any = None) -> Any:
        """Run one SQLite-flavoured statement; the psycopg cursor (tuple rows, ``rowcount``, ``description``)."""
        return self.execute_native(translate(sql), _params(params))

    def execute_native(self, sql: str, params: Any = None) -> Any:
        """Run one statement in psycopg's own syntax (several at once when ``params`` is None)."""
        with self._lock:
            conn = self._live()
            try:
                return conn.execute(sql, params)
            except Exception as exc:
                self._drop_if_unusable(conn, exc)
                raise

    def executemany(self, sql: str, rows: Iterable[Any]) -> Any:
        with self._lock:
            conn = self._live()
            try:
                cursor = conn.cursor()
                cursor.executemany(translate(sql), [_params(r) for r in rows])
            except Exception as exc:
                self._drop_if_unusable(conn, exc)
                raise
            return cursor

    def _drop_if_unusable(self, conn: Any, exc: BaseException) -> None:
        """After a failed statement: close a connection that psycopg left open but unusable, so the next statement
        opens a new one as after a loss. A connection cut in the middle of ``executemany`` (which pipelines its
        statements) can stay in pipeline mode, and every later statement on it then fails at once ("cannot exit
        pipeline mode while busy"): a failure raised by the client itself (no SQLSTATE) with the connection still
        open, or one leaving it outside its normal mode, is such a case. An error the server sent leaves it usable."""
        import psycopg
        from psycopg.pq import PipelineStatus

        if conn.closed or not isinstance(exc, psycopg.OperationalError):
            return
        if exc.sqlstate is None or conn.pgconn.pipeline_status != PipelineStatus.OFF:
            conn.close()  # _live: closed, not by close() → a new connection

    def query(self, sql: str, params: Any = None) -> Iterator[dict[str, Any]]:
        """Rows of one query as dicts."""
        cursor = self.execute(sql, params)
        if cursor.description is None:
            return iter(())
        names = [d.name for d in cursor.description]
        return iter([dict(zip(names, row)) for row in cursor.fetchall()])

    def table_names(self) -> list[str]:
        return [
            r[0]
            for r in self.execute_native(
                "select tablename from pg_tables where schemaname = current_schema() order by tablename"
            ).fetchall()
        ]

    def columns(self, table: str) -> list[str]:
        """A table's column names in order (empty when it does not exist)."""
        return [
            r[0]
            for r in self.execute_native(
                "select column_name from information_schema.columns where table_schema = current_schema() "
                "and table_name = %s order by ordinal_position",
                [table],
            ).fetchall()
        ]

    def primary_key(self, table: str) -> str:
        if table not in self._pks:
            rows = self.execute_native(
                "select a.attname from pg_index i join pg_attribute a on a.attrelid = i.indrelid and a.attnum = "
                "any(i.indkey) "
                "where i.indrelid = %s::regclass and i.indisprimary",
                [table],
            ).fetchall()
            if len(rows) != 1:
                raise StoreError(f"table {table} has no one-column primary key to update by")
            self._pks[table] = rows[0][0]
        return self._pks[table]

    @contextlib.contextmanager
    def notices(self) -> Iterator[list[str]]:
        """The server's notices (INFO, NOTICE, WARNING) to this connection meanwhile, each its message and detail
        (read in the handler: psycopg frees a notice once the handler returns)."""
        got: list[str] = []

        def keep(notice: Any) -> None:
            got.append(f"{notice.message_primary or ''}\n{notice.message_detail or ''}")

        conn = self._live()
        conn.add_notice_handler(keep)
        try:
            yield got
        finally:
            conn.remove_notice_handler(keep)

    def __getitem__(self, table: str) -> PgTable:
        return PgTable(self, table)

    def close(self) -> None:
        self._closed = True
        self._conn.close()


def is_postgres(db: Any) -> bool:
    """Whether ``db`` (a database or a connection) is a :class:`PgDatabase`."""
    return getattr(db, "dialect", None) == DIALECT
