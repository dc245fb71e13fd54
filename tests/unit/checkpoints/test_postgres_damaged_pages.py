"""A PostgreSQL store whose B-tree index is damaged on disk (a key's bytes changed while the server was stopped):
``graph.runs check`` with the server's amcheck names the index and the statement that rebuilds it, exit 2; run as
printed, the statement leaves a store that checks clean. The server is this module's own (it is stopped and started)."""

from __future__ import annotations

import struct
from pathlib import Path

import psycopg
import pytest

from cli import runs
from tests.unit.checkpoints.test_postgres_integrity import _check, _played, _sql
from tests.unit.checkpoints.test_postgres_restarts import SERVER, _start, _stop
from tests.unit.checkpoints.test_postgres_restarts import pg_server as pg_server  # this module's own server

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("postgres_damaged_pages")]
PAGE = 8192


def _damage_first_key(url: str, index: str) -> None:
    """Change one character of the first key on the index's first leaf page (block 1 of a one-page B-tree), on disk,
    with the server stopped: nothing in its buffers hides the change."""
    with psycopg.connect(url, autocommit=True) as conn:
        relative = conn.execute("select pg_relation_filepath(%s::regclass)", [index]).fetchone()[0]  # type: ignore[index]
        conn.execute("checkpoint")
    path = Path(SERVER["dir"], "data", relative)
    _stop()
    try:
        data = bytearray(path.read_bytes())
        page = PAGE  # block 1: block 0 is the metapage
        (line_pointer,) = struct.unpack_from("<I", data, page + 24)  # the first item's line pointer
        offset = line_pointer & 0x7FFF
        char = page + offset + 8 + 1 + 2  # past the tuple's header and the text's 1-byte length: its third character
        data[char] = ord("Z") if data[char] != ord("Z") else ord("Y")
        path.write_bytes(bytes(data))
    finally:
        _start()


def test_a_damaged_btree_index_is_found_by_amcheck_and_rebuilt_as_printed(pg_url, providers, capsys):
    _played(pg_url, providers)
    _sql(pg_url, "create extension amcheck")
    capsys.readouterr()
    assert _check(pg_url, capsys)[:2] == (0, [])
    _damage_first_key(pg_url, "turns_pkey")
    status, err, _ = _check(pg_url, capsys)
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith("error: index turns_pkey on turns is damaged (") and err[0].endswith(
        "): reindex index concurrently turns_pkey"
    ), err
    _sql(pg_url, err[0].rsplit(": ", 1)[1])  # as printed
    assert _check(pg_url, capsys)[:2] == (0, [])
    assert runs.main(["list", "--db", pg_url]) == 0
