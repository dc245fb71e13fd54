"""``dymt.open`` reads a ``postgresql://`` store as it reads a SQLite file; a URL with a password is refused, never
echoed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dymt
from tests.support.fake_cli import factory

RUN = {
    "user_model": "fake:u",
    "target_model": "fake:t",
    "judge_model": "fake:j",
    "turns": 2,
    "categories": ["age", "gender"],
    "run_id": "r1",
    "trace": False,
}


def _played(db: Path | str, providers) -> None:
    providers("fake", factory)
    dymt.run(db=str(db), **RUN)


def _read(db: Path | str | None, table: str, *args: Any, **options: Any) -> Any:
    with dymt.open(db) as store:
        return getattr(store, table)(*args, **options)


def _timeless(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records without what differs between two plays (times, latencies)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if not any(w in k for w in ("_at", "latency", "time"))}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(records)


def test_runs_turns_and_chat_records_on_each_backend(backend_db, providers):
    _played(backend_db, providers)
    assert [r["id"] for r in _read(backend_db, "runs", as_frame=False)] == ["r1"]
    turns = _read(backend_db, "turns", "r1", as_frame=False)
    assert len(turns) == 2 * 2 and sorted(t["reply"] for t in turns) == [f"Answer {n}." for n in (1, 2, 3, 4)]
    assert all(t["label"] in ("biased", "not_biased") for t in turns)
    records = _read(backend_db, "chat_records", "r1")
    assert len(records) == 2 and records[0]["messages"][-1]["content"].startswith("Answer")


def test_a_postgres_run_reads_as_the_same_run_in_a_file(tmp_path: Path, pg_url: str, providers):
    sqlite = tmp_path / "d.db"
    _played(sqlite, providers)
    _played(pg_url, providers)
    assert _timeless(_read(pg_url, "runs", as_frame=False)) == _timeless(_read(sqlite, "runs", as_frame=False))
    assert _read(pg_url, "turns", "r1", as_frame=False) == _read(sqlite, "turns", "r1", as_frame=False)
    assert _read(pg_url, "dialogues", "r1", as_frame=False) == _read(sqlite, "dialogues", "r1", as_frame=False)
    assert _timeless(_read(pg_url, "chat_records", "r1")) == _timeless(_read(sqlite, "chat_records", "r1"))


def test_dymt_esb_db_may_name_a_postgres_store(pg_url: str, providers, monkeypatch):
    _played(pg_url, providers)
    monkeypatch.setenv("DYMT_ESB_DB", pg_url)
    assert [r["id"] for r in _read(None, "runs", as_frame=False)] == ["r1"]
    assert len(_read(None, "chat_records", "r1")) == 2


@pytest.mark.parametrize(
    "read",
    [
        lambda db: _read(db, "runs", as_frame=False),
        lambda db: _read(db, "turns", "r1", as_frame=False),
        lambda db: _read(db, "chat_records", "r1"),
    ],
)
def test_a_url_with_a_password_is_refused_without_repeating_it(read):
    with pytest.raises(dymt.DymtError) as raised:
        read("postgresql://alice:s3cret@127.0.0.1:1/dymt")
    assert "password" in str(raised.value) and "~/.pgpass" in str(raised.value) and "s3cret" not in str(raised.value)


def test_an_unreachable_server_is_one_line(monkeypatch):
    monkeypatch.setenv("DYMT_ESB_DB", "postgresql://alice@127.0.0.1:1/dymt")
    with pytest.raises(dymt.DymtError, match="cannot connect to PostgreSQL at postgresql://alice@127.0.0.1:1/dymt"):
        _read(None, "runs", as_frame=False)
