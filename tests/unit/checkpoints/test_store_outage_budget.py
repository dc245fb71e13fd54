"""The store-outage budget and backoff on their own (no server): what waits, what gives up, what is not an outage."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from procrastinate.exceptions import ConnectorException

from checkpoints.location import PostgresURL
from checkpoints.outages import OutageError
from checkpoints.store_outage import (
    REPLAYS_WHILE_UP,
    LockLost,
    ReplayedTooOften,
    StoreOutage,
    StoreOutageError,
    is_store_outage,
    play_through_outages,
)

URL = PostgresURL("postgresql://nobody@127.0.0.1:1/x")


def _wrapped(exc: BaseException) -> BaseException:
    try:
        try:
            raise exc
        except BaseException as inner:
            raise ConnectorException() from inner
    except ConnectorException as outer:
        return outer


def test_what_counts_as_an_outage():
    assert is_store_outage(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert is_store_outage(psycopg.errors.AdminShutdown("terminating connection due to administrator command"))
    assert is_store_outage(_wrapped(psycopg.OperationalError("gone")))  # procrastinate's wrapper
    assert is_store_outage(LockLost("t"))
    assert not is_store_outage(psycopg.errors.UniqueViolation("dup"))  # a wrong query is not an outage
    assert not is_store_outage(ValueError("x"))
    assert not is_store_outage(StoreOutageError("past the budget"))  # never waited on again
    # what a server that is up sends, of psycopg's OperationalError family: not waited on
    for answered in ("QueryCanceled", "LockNotAvailable", "DatabaseDropped", "ObjectInUse", "DiskFull"):
        assert not is_store_outage(getattr(psycopg.errors, answered)("x")), answered
    assert not is_store_outage(psycopg.errors.PipelineAborted("aborted by an earlier error"))
    aborted_by_a_drop = psycopg.errors.PipelineAborted("x")
    aborted_by_a_drop.__cause__ = psycopg.errors.AdminShutdown("terminating connection")
    assert is_store_outage(aborted_by_a_drop)  # what aborted it is what counts
    for away in ("CrashShutdown", "CannotConnectNow", "IdleSessionTimeout", "TooManyConnections"):
        assert is_store_outage(getattr(psycopg.errors, away)("x")), away
    assert not is_store_outage(ReplayedTooOften("answers, but the play fails"))
    assert issubclass(StoreOutageError, OutageError)  # exit status 75 (cli/exit_codes.py)


def test_an_operation_is_tried_again_until_the_store_answers_and_the_outage_ends():
    outage, calls = StoreOutage(URL, budget_s=5, first_pause_s=0.01, max_pause_s=0.02), []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise psycopg.OperationalError("connection refused")
        return "ok"

    assert outage.ride_out_sync(flaky) == "ok" and len(calls) == 4
    assert not outage.down and outage.outages == 1 and outage.recently_down(within_s=60)


def test_past_the_budget_it_gives_up_once_for_everyone_and_says_so():
    outage, told = StoreOutage(URL, budget_s=0.2, first_pause_s=0.01, max_pause_s=0.05), []
    outage.on_exceeded(told.append)

    async def never() -> None:
        raise psycopg.OperationalError("connection refused")

    started = time.monotonic()
    with pytest.raises(StoreOutageError, match=r"unreachable for over 0.2 s \(--store-outage-budget\)"):
        asyncio.run(outage.ride_out(never))
    assert 0.2 <= time.monotonic() - started < 2
    assert len(told) == 1
    with pytest.raises(StoreOutageError):  # and ever after, at once
        outage.ride_out_sync(lambda: "never called")
    assert len(told) == 1


def test_a_wrong_query_is_raised_at_once_not_waited_on():
    outage = StoreOutage(URL, budget_s=5)
    with pytest.raises(psycopg.errors.UndefinedTable):
        outage.ride_out_sync(lambda: (_ for _ in ()).throw(psycopg.errors.UndefinedTable("no table")))
    assert not outage.down and outage.outages == 0


def test_the_budget_is_kept_by_the_clock_not_by_the_next_caller():
    outage, told = StoreOutage(URL, budget_s=0.3), []
    outage.on_exceeded(lambda exc: told.append(time.monotonic()))
    started = time.monotonic()
    outage.went_down(psycopg.OperationalError("connection refused"))
    assert 0.25 < outage.left_s() <= 0.3
    time.sleep(0.6)  # nobody asks meanwhile
    assert len(told) == 1 and 0.3 <= told[0] - started < 0.5
    assert outage.left_s() == 0
    with pytest.raises(StoreOutageError):
        outage.check()


def test_an_outage_that_ends_in_time_is_not_called_spent_later():
    outage, told = StoreOutage(URL, budget_s=0.2), []
    outage.on_exceeded(told.append)
    outage.went_down(psycopg.OperationalError("connection refused"))
    outage.came_back()
    assert outage.left_s() is None
    time.sleep(0.4)
    assert told == [] and outage.check() is None


def test_the_checkpointers_pool_waits_no_longer_than_the_budget_and_then_fails_every_waiter_at_once():
    """Nothing listens at URL: LangGraph's saver would queue its writes on this pool, each waiting the pool's timeout
    (10 s) in turn; here the first wait ends with the budget and the queued ones fail at once with the outage's
    error."""
    from checkpoints.postgres.saver import OutagePool

    async def scenario() -> tuple[float, list[BaseException | None]]:
        outage = StoreOutage(URL, budget_s=0.5)
        pool = OutagePool(URL.url, min_size=0, max_size=2, open=False, timeout=10, reconnect_timeout=3600)
        await pool.open(wait=False)
        pool.close_when_exceeded(outage)
        outage.went_down(psycopg.OperationalError("connection refused"))
        lock = asyncio.Lock()  # as LangGraph's saver holds one across each of its queries

        async def write() -> None:
            async with lock:
                await pool.getconn()

        started = time.monotonic()
        errors = await asyncio.gather(*(write() for _ in range(8)), return_exceptions=True)
        took = time.monotonic() - started
        await pool.close()
        return took, errors

    took, errors = asyncio.run(scenario())
    assert took < 2, took  # not 8 × 10 s
    assert all(isinstance(e, StoreOutageError) for e in errors), errors


def test_a_play_failing_as_if_disconnected_while_the_server_answers_is_failed_not_replayed_for_ever(
    pg_url: str, caplog: pytest.LogCaptureFixture
):
    """A real server that answers: a connection it drops (its own backend terminated) is played on at once, no outage
    noted; a play failing the same way each time it is played again fails after REPLAYS_WHILE_UP replays."""
    outage, calls = StoreOutage(PostgresURL(pg_url), budget_s=30, first_pause_s=0.01, max_pause_s=0.02), []

    async def dropped_once() -> str:
        calls.append(1)
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            if len(calls) == 1:
                await conn.execute("select pg_terminate_backend(pg_backend_pid())")  # the server drops it
            return "played"

    assert asyncio.run(play_through_outages(outage, dropped_once)) == "played" and len(calls) == 2
    assert outage.outages == 0 and "AdminShutdown 57P01" in caplog.text and "unreachable" not in caplog.text

    async def stuck() -> str:
        calls.append(1)
        raise psycopg.OperationalError("sending query failed: another command is already in progress")

    calls.clear()
    with pytest.raises(ReplayedTooOften, match=r"failed 4 times in a row while PostgreSQL at .* answered: Oper"):
        asyncio.run(play_through_outages(outage, stuck))
    assert len(calls) == REPLAYS_WHILE_UP + 1 and outage.outages == 0 and not outage.down


def test_a_connection_left_in_pipeline_mode_is_replaced_rather_than_failing_every_statement_after(pg_url: str):
    """A connection cut in the middle of a pipelined ``executemany`` can stay open in pipeline mode, where every
    statement fails at once with no SQLSTATE (an outage, to the writer, which would wait for a store that is up): the
    statement that meets it fails, and the next one runs on a new connection."""
    import psycopg

    from checkpoints.location import parse_db
    from checkpoints.postgres.db import PgDatabase

    db = PgDatabase(parse_db(pg_url))
    first = db.execute("select pg_backend_pid()").fetchone()[0]
    db._conn.pgconn.enter_pipeline_mode()  # as a cut pipeline leaves it: busy, never synced
    db._conn.pgconn.send_query_params(b"select 1", None)
    with pytest.raises(psycopg.OperationalError) as met:
        db.execute("select pg_backend_pid()")
    assert met.value.sqlstate is None
    assert [db.execute("select pg_backend_pid()").fetchone()[0] != first for _ in range(2)] == [True, True]
    db.close()


def test_an_operation_failing_while_the_store_answers_other_calls_is_not_waited_for_for_ever():
    """A write that fails "as if disconnected" on something of its own, while the store answers everyone else (each
    success ending the outage and starting the budget anew), fails after a few tries in one line, so its worker can
    stop; a real outage, where nothing succeeds meanwhile, is still waited out."""
    import psycopg

    from checkpoints.location import parse_db
    from checkpoints.store_outage import REPLAYS_WHILE_UP, ReplayedTooOften, StoreOutage

    outage = StoreOutage(parse_db("postgresql://u@127.0.0.1:1/x"), first_pause_s=0.001, max_pause_s=0.002)
    tries = 0

    def write() -> None:
        nonlocal tries
        tries += 1
        outage.came_back()  # another caller's query succeeded meanwhile
        raise psycopg.OperationalError("sending query failed: cannot exit pipeline mode while busy")

    with pytest.raises(ReplayedTooOften, match="answered other calls") as failed:
        outage.ride_out_sync(write)
    assert tries == REPLAYS_WHILE_UP + 2 and len(str(failed.value).splitlines()) == 1

    calls = 0

    def away_then_back() -> str:
        nonlocal calls
        calls += 1
        if calls < 10:
            raise psycopg.OperationalError("connection refused")
        return "written"

    assert outage.ride_out_sync(away_then_back) == "written"
    assert asyncio.run(outage.ride_out(lambda: asyncio.sleep(0, "read"))) == "read"
