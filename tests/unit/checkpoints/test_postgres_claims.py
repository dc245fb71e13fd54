"""A worker's dialogue plays on a real PostgreSQL server: a play cut by a lost connection is closed, even when the
worker gets no other dialogue before it stops."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from checkpoints.location import parse_postgres_url
from checkpoints.postgres.claims import DialogueClaims
from checkpoints.store import open_writer
from checkpoints.store_outage import LockLost
from tests.unit.checkpoints.test_postgres_restarts import _drop_connections


def _plays(url: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "select thread_id, started_at, ended_at, outcome from dialogue_plays order by id"
        ).fetchall()


def _cut_play(url: str, *, settle: bool) -> object:
    """Play t1 until its claims connection is dropped, then stop the worker without another claim; the last
    moment the lock was confirmed held."""

    async def scenario() -> object:
        claims = DialogueClaims(parse_postgres_url(url), worker="vm:1")
        held_at = None
        with pytest.raises(LockLost):
            async with claims.claim("t1", run_id="r1") as play:
                await claims.confirm("t1")
                held_at = play.held_at
                _drop_connections(url)
                await claims.confirm("t1")  # the lock went with the connection
        await claims.close(settle=settle)
        return held_at

    return asyncio.run(scenario())


@pytest.fixture
def plays_url(pg_url: str) -> str:
    store = open_writer(pg_url)  # the project's tables, and the run the plays are of
    store.start_run("r1", config={}, prompt_hashes={}, versions={})
    store.close()
    return pg_url


def test_a_play_cut_by_a_lost_connection_is_closed_when_the_worker_stops_without_another_claim(plays_url: str):
    held_at = _cut_play(plays_url, settle=True)
    [(thread, started_at, ended_at, outcome)] = _plays(plays_url)
    assert (thread, outcome) == ("t1", "lock lost")
    assert started_at <= ended_at == held_at  # ended at the last moment the lock was confirmed held


def test_told_the_store_is_away_a_stopping_worker_leaves_the_cut_play_open(plays_url: str):
    _cut_play(plays_url, settle=False)
    [(thread, _, ended_at, outcome)] = _plays(plays_url)
    assert (thread, ended_at, outcome) == ("t1", None, None)  # as a dead worker's play
