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
