"""A guard on large runs: a new run expected past ``--confirm-above`` model calls (or ``--confirm-cost`` dollars) asks
on a terminal and, off one, plays only with ``--yes`` or a ``--max-cost`` cap; a run being resumed is never asked
about again."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from cli import run
from tests.unit.cli.test_run_cli import _register_fake_provider

FAKES = ["--user-model", "fake:u", "--target-model", "fake:t", "--judge-model", "fake:j", "--no-trace"]


def _seeds(path: Path, n: int) -> Path:
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"s{i}", "category": "gender", "statement": f"Statement number {i}."}) + "\n")
    return path


def test_ten_thousand_seeds_off_a_terminal_play_nothing_and_say_what_to_add(tmp_path, capsys, providers):
    _register_fake_provider(providers)
    db = tmp_path / "dialogues.db"
    seeds = _seeds(tmp_path / "seeds.jsonl", 10_000)
    with pytest.raises(SystemExit) as stopped:
        run.main([*FAKES, "--seeds", str(seeds), "--db", str(db)])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1, err
    assert "this run makes about 150,000 model calls (past --confirm-above 5,000): nothing played" in err
    assert "add --yes" in err and "--max-cost USD" in err
    assert not db.exists()  # nothing written


def test_yes_or_a_lower_count_plays_and_a_resumed_run_is_not_asked_again(tmp_path, capsys, providers):
    _register_fake_provider(providers)
    db = tmp_path / "dialogues.db"
    seeds = _seeds(tmp_path / "seeds.jsonl", 4)
    small = [*FAKES, "--seeds", str(seeds), "--turns", "2", "--db", str(db), "--json"]  # 4 × 2 × 3 = 24 calls
    with pytest.raises(SystemExit):
        run.main([*small, "--run-id", "asked", "--confirm-above", "10"])
    assert "about 24 model calls (past --confirm-above 10)" in capsys.readouterr().err
    assert run.main([*small, "--run-id", "yes", "--confirm-above", "10", "--yes"]) == 0
    assert json.loads(capsys.readouterr().out)["finished"] == 4
    assert run.main([*small, "--run-id", "under"]) == 0  # 24 calls: under the default
    capsys.readouterr()
    with sqlite3.connect(db) as conn:  # a run cut short, resumed with the same command: it was confirmed when it began
        conn.execute("delete from turns where thread_id like 'yes:%' and idx = 2")
        conn.execute("update dialogues set status = 'interrupted' where run_id = 'yes'")
    assert run.main([*small, "--run-id", "yes", "--confirm-above", "10"]) == 0
    assert json.loads(capsys.readouterr().out)["finished"] == 4


def test_a_known_cost_past_the_threshold_asks_too(tmp_path, capsys, providers):
    _register_fake_provider(providers)
    pricing = tmp_path / "pricing.toml"
    pricing.write_text('["fake:u"]\ninput = 1000.0\noutput = 1000.0\n')
    db = tmp_path / "dialogues.db"
    argv = [*FAKES, "--seeds", str(_seeds(tmp_path / "s.jsonl", 2)), "--turns", "1", "--db", str(db)]
    with pytest.raises(SystemExit):
        run.main([*argv, "--pricing", str(pricing), "--confirm-cost", "0.01"])
    err = capsys.readouterr().err
    assert "costing at least $1.30 (past --confirm-cost 0.01)" in err, err  # fake:u priced, the others not


def _priced(tmp_path: Path) -> Path:
    pricing = tmp_path / "pricing.toml"
    pricing.write_text("".join(f'["fake:{m}"]\ninput = 0.1\noutput = 0.1\n' for m in "utj"))
    return pricing


def test_a_max_cost_cap_plays_a_large_run_off_a_terminal(tmp_path, capsys, providers):
    _register_fake_provider(providers)
    db = tmp_path / "dialogues.db"
    argv = [*FAKES, "--seeds", str(_seeds(tmp_path / "s.jsonl", 2)), "--turns", "1", "--db", str(db), "--json"]
    argv += ["--confirm-above", "2"]  # 2 × 1 × 3 = 6 calls
    with pytest.raises(SystemExit):
        run.main([*argv, "--run-id", "uncapped"])
    assert "about 6 model calls (past --confirm-above 2)" in capsys.readouterr().err
    assert run.main([*argv, "--run-id", "capped", "--pricing", str(_priced(tmp_path)), "--max-cost", "5"]) == 0
    assert json.loads(capsys.readouterr().out)["finished"] == 2
    with sqlite3.connect(db) as conn:
        assert conn.execute("select id from runs").fetchall() == [("capped",)]


class _Terminal:
    """stdin and stderr on a terminal, and the answers its user types."""

    def __init__(self, monkeypatch, *answers: str):
        self.asked: list[str] = []
        self.answers = list(answers)
        monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)
        monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
        monkeypatch.setattr("builtins.input", self._input)

    def _input(self, prompt: str) -> str:
        self.asked.append(prompt)
        return self.answers.pop(0)


def _pg_rows(url: str, query: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(query).fetchall()


def _tables(url: str) -> list[str]:
    return [t for (t,) in _pg_rows(url, "select tablename from pg_tables where schemaname = 'public'")]


def test_enqueueing_ten_thousand_seeds_off_a_terminal_enqueues_nothing_and_writes_nothing(
    pg_url, tmp_path, capsys, providers
):
    _register_fake_provider(providers)
    seeds = _seeds(tmp_path / "seeds.jsonl", 10_000)
    with pytest.raises(SystemExit) as stopped:
        run.main([*FAKES, "--seeds", str(seeds), "--db", pg_url, "--enqueue"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1, err
    assert "this run makes about 150,000 model calls (past --confirm-above 5,000): nothing played" in err
    assert _tables(pg_url) == []  # no run, no queue, no store: nothing written


def test_enqueueing_a_large_run_asks_on_a_terminal_and_plays_with_yes_or_a_cap(
    pg_url, tmp_path, capsys, providers, monkeypatch
):
    _register_fake_provider(providers)
    argv = [*FAKES, "--seeds", str(_seeds(tmp_path / "s.jsonl", 3)), "--turns", "2", "--db", pg_url, "--enqueue"]
    argv += ["--confirm-above", "10"]  # 3 × 2 × 3 = 18 calls
    terminal = _Terminal(monkeypatch, "n", "y")
    with pytest.raises(SystemExit) as stopped:
        run.main([*argv, "--run-id", "declined"])
    assert stopped.value.code == 2
    assert terminal.asked == ["This run makes about 18 model calls (past --confirm-above 10). Play it? [y/N] "]
    assert _tables(pg_url) == []
    assert run.main([*argv, "--run-id", "accepted"]) == 0
    monkeypatch.undo()  # off a terminal again
    capsys.readouterr()
    assert run.main([*argv, "--run-id", "yes", "--yes"]) == 0
    assert run.main([*argv, "--run-id", "capped", "--pricing", str(_priced(tmp_path)), "--max-cost", "5"]) == 0
    assert "3 dialogue(s) enqueued" in " ".join(capsys.readouterr().err.split())
    with pytest.raises(SystemExit):
        run.main([*argv, "--run-id", "refused"])
    assert "nothing played; add --yes" in capsys.readouterr().err
    jobs = _pg_rows(pg_url, "select args->>'run_id', count(*) from procrastinate_jobs group by 1 order by 1")
    assert jobs == [("accepted", 3), ("capped", 3), ("yes", 3)]
    assert _pg_rows(pg_url, "select id from runs order by id") == [("accepted",), ("capped",), ("yes",)]
    assert run.main([*argv, "--run-id", "yes"]) == 0  # enqueued again: asked when it began, not again
    assert "0 dialogue(s) enqueued, 3 already" in " ".join(capsys.readouterr().err.split())


def test_an_experiment_files_max_cost_is_a_cap_as_the_flag_is(tmp_path, capsys, providers):
    _register_fake_provider(providers)
    db = tmp_path / "dialogues.db"
    pricing = _priced(tmp_path)
    experiment = tmp_path / "exp.toml"
    experiment.write_text(f'pricing = "{pricing.name}"\nmax_cost = 5\n')
    argv = [*FAKES, "--seeds", str(_seeds(tmp_path / "s.jsonl", 2)), "--turns", "1", "--db", str(db), "--json"]
    argv += ["--confirm-above", "2", "--run-id", "capped", "--config", str(experiment)]
    assert run.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["finished"] == 2
