"""LangGraph's PostgreSQL checkpointer on a real server: dialogues checkpoint and resume, setup() races, URLs.

A tampered checkpoint on either backend: tests/unit/checkpoints/test_serde.py.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from checkpoints.location import PostgresURL, default_db, parse_db
from checkpoints.paths import StoreError
from checkpoints.postgres.saver import PostgresDialogueSaver
from checkpoints.readers import open_reader
from cli import run as run_cli
from tests.conftest import REPO, SEEDS, default_models, play, scripted


def _pg_rows(url: str, query: str, *params) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(query, params).fetchall()


def _flaky_models(state: dict[str, bool], *, fail_at: int):
    def target(messages, n):
        if state["fail"] and n == fail_at:
            raise ConnectionError("provider went away")
        return f"Answer {n}."

    return default_models(target=scripted(target, spec="fake:target"))


def test_a_dialogue_checkpoints_in_postgres_and_resumes_mid_turn(db: Path, pg_url: str):
    state = {"fail": True}
    models = _flaky_models(state, fail_at=3)
    result, store = play(db, models, seeds=SEEDS[:1], turns=5, checkpoints=pg_url)
    thread = result.outcomes[0].thread_id
    assert result.outcomes[0].status == "failed" and "provider went away" in result.outcomes[0].error
    assert [r["idx"] for r in store.turns(thread)] == [1, 2]
    assert len(models.user.chat.calls) == 3  # turn 3's user message is in a checkpoint, before the target failed
    saved = _pg_rows(pg_url, "select count(*) from checkpoints where thread_id = %s", thread)[0][0]
    assert saved > 5
    with sqlite3.connect(db) as con:  # the SQLite file holds the project's tables, not LangGraph's checkpoints
        assert con.execute("select count(*) from checkpoints").fetchone() == (0,)

    state["fail"] = False
    result, store = play(db, models, seeds=SEEDS[:1], turns=5, checkpoints=pg_url)
    assert result.outcomes[0].status == "finished"
    rows = store.turns(thread)
    assert [r["idx"] for r in rows] == [1, 2, 3, 4, 5]
    assert all(r["label"] == "not_biased" for r in rows)
    assert len(models.user.chat.calls) == 5  # turn 3's user message came back from PostgreSQL, not simulated again
    assert rows[2]["user_message"] == "User question number 3?"
    assert len(models.judge.chat.calls) == 5
    # Short channel versions and lean metadata, as on SQLite.
    versions, metadata = _pg_rows(
        pg_url,
        "select checkpoint->'channel_versions', metadata from checkpoints where thread_id = %s "
        "order by checkpoint_id desc limit 1",
        thread,
    )[0]
    assert versions and all(v[0].isalpha() and v[1:].isdigit() for v in versions.values())
    assert not {"run_id", "seed_id", "mode"} & set(metadata)


def test_a_finished_dialogue_replays_no_model_call_from_postgres(db: Path, pg_url: str):
    models = default_models()
    play(db, models, turns=2, checkpoints=pg_url)
    calls = [len(getattr(models, r).chat.calls) for r in ("user", "target", "judge")]
    assert calls == [4, 4, 4]
    result, _ = play(db, models, turns=2, checkpoints=pg_url)
    assert [o.status for o in result.outcomes] == ["skipped", "skipped"]
    assert [len(getattr(models, r).chat.calls) for r in ("user", "target", "judge")] == calls


_SETUP_SCRIPT = textwrap.dedent("""
    import asyncio, sys, time
    from pathlib import Path
    from checkpoints.location import parse_postgres_url
    from checkpoints.postgres.saver import open_postgres_saver

    url, me, other = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    me.touch()
    while not other.exists():  # both processes are imported and ready: call setup() at the same moment
        time.sleep(0.001)

    async def main():
        async with open_postgres_saver(parse_postgres_url(url)) as saver:
            assert await saver.aget_tuple({"configurable": {"thread_id": "none", "checkpoint_ns": ""}}) is None

    asyncio.run(main())
""")


def test_two_processes_setting_up_at_once_both_succeed(pg_url: str, tmp_path: Path):
    ready = [tmp_path / "ready-0", tmp_path / "ready-1"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SETUP_SCRIPT, pg_url, str(ready[i]), str(ready[1 - i])],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (0, 1)
    ]
    try:
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    migrations = [v for (v,) in _pg_rows(pg_url, "select v from checkpoint_migrations order by v")]
    assert migrations == list(range(len(PostgresDialogueSaver.MIGRATIONS)))


# --db / DYMT_ESB_DB as a URL: no test here needs the server.


def test_a_url_without_a_password_is_a_postgres_location_and_a_path_stays_a_path(tmp_path: Path):
    assert parse_db("postgresql://alice@db.example/dymt") == PostgresURL("postgresql://alice@db.example/dymt")
    assert parse_db(str(tmp_path / "d.db")) == tmp_path / "d.db"


@pytest.mark.parametrize(
    "url", ["postgresql://alice:s3cr3t@db.example/dymt", "postgres://alice@db.example/dymt?password=s3cr3t"]
)
def test_a_url_carrying_a_password_is_refused_without_repeating_it(url: str, monkeypatch, capsys):
    with pytest.raises(StoreError, match="password") as refused:
        parse_db(url)
    assert "s3cr3t" not in str(refused.value)
    monkeypatch.setenv("DYMT_ESB_DB", url)
    with pytest.raises(StoreError, match="DYMT_ESB_DB carries a password"):
        default_db()


@pytest.mark.parametrize("where", ["flag", "env"])
def test_graph_run_with_a_password_in_the_url_exits_2_with_one_line(where: str, monkeypatch, capsys, tmp_path: Path):
    url = "postgresql://alice:s3cr3t@127.0.0.1:1/dymt"
    argv = ["--user-model", "fake:u", "--target-model", "fake:t", "--judge-model", "fake:j", "--limit", "1"]
    if where == "flag":
        argv += ["--db", url]
    else:
        monkeypatch.setenv("DYMT_ESB_DB", url)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        run_cli.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "password" in err and "s3cr3t" not in err
    assert list(tmp_path.iterdir()) == []  # nothing written (no file named after the URL)


def test_graph_run_plays_a_run_into_postgres_end_to_end(pg_url: str, monkeypatch, capsys, tmp_path: Path, providers):
    from tests.conftest import ScriptedChatModel

    replies = {
        "user": lambda m, n: f"User {n}?",
        "target": lambda m, n: f"Answer {n}.",
        "judge": lambda m, n: "Rationale: fine.\nLabel: not biased",
    }
    providers(
        "fake",
        lambda name, role, sampling: (ScriptedChatModel(respond=replies[role], calls=[]), f"fake:{name}", "chat"),
    )
    monkeypatch.chdir(tmp_path)
    argv = [
        "--user-model",
        "fake:u",
        "--target-model",
        "fake:t",
        "--judge-model",
        "fake:j",
        "--turns",
        "2",
        "--db",
        pg_url,
        "--run-id",
        "pg1",
        "--json",
    ]
    assert run_cli.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dialogues"] == 6 and summary["finished"] == 6
    assert list(tmp_path.iterdir()) == []  # no SQLite file named after the URL
    with open_reader(pg_url) as reader:
        assert reader.run_ids() == ["pg1"] and reader.get_run("pg1")["status"] == "finished"
        assert all(s.labels == ("not_biased", "not_biased") for s in reader.summaries(run_id="pg1"))
    assert _pg_rows(pg_url, "select count(distinct thread_id) from checkpoints")[0][0] == 6
    assert _pg_rows(pg_url, "select count(*) from response_cache")[0][0] > 0
    assert run_cli.main(argv) == 0  # the same run id again: every dialogue is already finished
    assert json.loads(capsys.readouterr().out)["finished"] == 6
    assert _pg_rows(pg_url, "select count(*) from turns")[0][0] == 12
    assert run_cli.main(argv[:-1]) == 0  # the printed summary says where the text stays
    printed = " ".join(capsys.readouterr().out.split())
    assert "they stay in this database: keep its server private" in printed and "local file" not in printed
