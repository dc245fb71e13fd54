"""``python -m benchmarks scaleout`` at a tiny size on a real PostgreSQL server: its numbers, and its exactly-once
check."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from benchmarks import scaleout
from benchmarks.__main__ import main as benchmarks_main
from tests.support.stub_server import StubServer


def _databases(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {
            name for (name,) in conn.execute("select datname from pg_database where datname like 'dymt_scaleout_%'")
        }


@pytest.mark.slow
def test_one_and_two_workers_play_every_dialogue_exactly_once_on_fresh_databases(pg_url: str):
    before = _databases(pg_url)
    result = scaleout.run(pg_url, dialogues=4, turns=2, concurrency=2, latencies=(0.01,))
    assert (result["dialogues"], result["turns"], result["concurrency"], result["worker_counts"]) == (4, 2, 2, [1, 2])
    assert result["fresh_databases"] and result["exactly_once"]
    variant = result["variants"]["10 ms"]
    one, two = variant["rounds"]
    assert (one["workers"], two["workers"], variant["target_ratio"]) == (1, 2, scaleout.TARGET_RATIO)
    for r in (one, two):
        assert 0 < r["play_s"] < r["wall_s"] and r["turns_per_s"] == pytest.approx(8 / r["play_s"])
        assert 0 < r["enqueue_s"] < r["wall_s"] and r["worker_cpu_s"] > 0
        assert r["check"] == {
            "dialogues_finished": 4,
            "jobs_succeeded": 4,
            "jobs_other": 0,
            "jobs_retried": 0,
            "turns": 8,
            "replies": 8,
            "labels": 8,
            "ok": True,
            "problems": [],
        }
    assert variant["ratio"] == pytest.approx(two["turns_per_s"] / one["turns_per_s"])
    assert variant["wall_ratio"] == pytest.approx(one["wall_s"] / two["wall_s"])
    lines = scaleout.report(result)
    assert sum("exactly once" in line for line in lines) == 2 and not any("VIOLATED" in line for line in lines)
    assert any("target ≥ 1.8" in line for line in lines)
    assert _databases(pg_url) == before  # the rounds' databases are dropped


@pytest.mark.slow
def test_the_check_flags_a_missing_turn_a_missing_label_and_a_job_started_twice(pg_url: str, tmp_path: Path):
    seeds = scaleout.write_seeds(tmp_path / "seeds.jsonl", 2)
    with StubServer() as stub:
        r = scaleout.play_round(
            pg_url, "r1", stub_url=stub.url, seeds=seeds, workers=1, concurrency=2, dialogues=2, turns=2
        )
    assert r["check"]["ok"], r["check"]
    assert not scaleout.check_exactly_once(pg_url, "r1", dialogues=3, turns=2)["ok"]  # one dialogue short
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "insert into procrastinate_events (job_id, type) select min(id), 'started' from procrastinate_jobs"
        )
    check = scaleout.check_exactly_once(pg_url, "r1", dialogues=2, turns=2)
    assert not check["ok"] and check["jobs_retried"] == 1 and check["problems"] == ["1 job(s) not started exactly once"]
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "delete from scores where (thread_id, idx) in (select thread_id, idx from scores where key = 'bias' and "
            "scorer = 'primary' limit 1)"
        )
        conn.execute(
            "delete from turns where (thread_id, idx) in (select thread_id, max(idx) from turns group by thread_id "
            "limit 1)"
        )
    problems = scaleout.check_exactly_once(pg_url, "r1", dialogues=2, turns=2)["problems"]
    assert any("turns" in p for p in problems) and any("primary labels" in p for p in problems)
    lines = scaleout.report(
        {
            "dialogues": 2,
            "turns": 2,
            "concurrency": 2,
            "fresh_databases": False,
            "cpus": 2,
            "exactly_once": False,
            "variants": {
                "10 ms": {
                    "rounds": [{**r, "check": {**r["check"], "ok": False, "problems": problems}}],
                    "ratio": 1.0,
                    "wall_ratio": 1.0,
                    "target_ratio": 1.8,
                }
            },
        }
    )
    assert any("EXACTLY-ONCE VIOLATED" in line for line in lines)


def test_without_a_server_it_says_how_to_give_one_and_skips(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.delenv("DYMT_ESB_DB", raising=False)
    monkeypatch.delenv("DYMT_ESB_TEST_PG", raising=False)
    assert benchmarks_main(["scaleout"]) == 0
    out = capsys.readouterr().out
    assert "skipped" in out and ".ci/postgres run python -m benchmarks scaleout" in out


def test_a_db_that_is_not_a_postgres_url_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_:
        benchmarks_main(["scaleout", "--db", str(tmp_path / "d.db")])
    assert exit_.value.code == 2 and "needs a PostgreSQL URL" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        benchmarks_main(["overhead", "--db", "postgresql://u@h/d"])
    assert exit_.value.code == 2 and "belongs to the scaleout benchmark" in capsys.readouterr().err
    assert not (tmp_path / "d.db").exists()
