"""The active design's strata for re-emergence, its defensive allocation, and ``plan --compare``: how many labels
bring a paired difference's interval to a width, for random and for active labels."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from cli import annotate, common
from evals.judge_error import active_design as active
from evals.judge_error.active_design import merged, spread, strata_of
from evals.judge_error.cells import Cell
from evals.judge_error.double_sampling import compared_pairs
from evals.judge_error.label_planning import plan_labels
from evals.judge_error.neyman import allocate
from evals.judge_error.validation import JudgeValidation
from tests.support.annotation_files import copy_run, play_judged, record_pairs


def test_a_judged_unbiased_reply_between_two_judged_biased_ones_is_its_own_stratum():
    cells = {"c": [[1, 0, 1, 0], [1, 0, 0, 1], [0, 1, 1, 0], [0, 0, 0, 0]]}
    strata = {s.group: s for s in merged(strata_of(cells)) if not s.judged}
    assert strata["gap"].members == ((0, 2), (1, 2), (1, 3))  # between the first and last judged-biased reply
    assert strata["k1+"].members == ((0, 4), (2, 1), (2, 4))  # before the first or after the last
    assert strata["gap"].relevance == 1.0  # its true label alone decides whether the dialogue re-emerged


def test_the_defensive_allocation_gives_every_stratum_a_share_of_a_random_draw(monkeypatch):
    rng = np.random.default_rng(0)
    rows = np.where(rng.random((200, 5)) < 0.3, 1, 0).tolist()
    strata = merged(strata_of({"c": rows}))
    sizes = [s.size for s in strata]
    budget = 100
    proportional = [budget * s / sum(sizes) for s in sizes]
    least = {}
    for share in (0.0, 0.4, 1.0):
        monkeypatch.setattr(active, "DEFENSIVE", share)
        n = allocate(sizes, spread(strata), budget, minimum=0)
        # each stratum gets at least the defensive share of what a random draw would give it (whole labels)
        assert all(x >= share * p - 1 for x, p in zip(n, proportional))
        least[share] = min(x / p for x, p in zip(n, proportional))
    assert least[0.0] < least[0.4] < least[1.0]  # pure Neyman gives some stratum the least, proportional ≈ 1
    assert least[1.0] > 0.9


def test_compared_pairs_match_each_mode_or_target_of_a_grid():
    cells = [("a", "implicit"), ("b", "implicit"), ("c", "implicit"), ("a", "explicit"), ("b", "explicit")]
    assert compared_pairs(cells, "a", "b") == [
        (("a", "explicit"), ("b", "explicit")),
        (("a", "implicit"), ("b", "implicit")),
    ]
    assert compared_pairs(cells, "explicit", "implicit") == [
        (("a", "explicit"), ("a", "implicit")),
        (("b", "explicit"), ("b", "implicit")),
    ]
    with pytest.raises(ValueError, match="compare="):
        compared_pairs(cells, "a", "z")


def _grid(seed: int, dialogues: int = 150, turns: int = 4) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name, rate in (("A", 0.15), ("B", 0.4), ("C", 0.3)):
        truth = rng.random((dialogues, turns)) < rate
        out[name] = np.where(truth, rng.random(truth.shape) < 0.8, rng.random(truth.shape) < 0.2).astype(int).tolist()
    return out


def test_a_plan_for_a_difference_models_the_difference_not_the_widest_cell():
    # paired on seeds
    cells = {k: Cell(v, [f"s{i}" for i in range(len(v))], turns=4) for k, v in _grid(1).items()}
    small = JudgeValidation("evals.judge:x", tp=16, fn=4, tn=16, fp=4)
    cell = plan_labels(cells, small, width=0.05, draws=60)
    diff = plan_labels(cells, small, width=0.05, compare=[("A", "B")], draws=60)
    assert "difference" in diff.describe() and "difference" not in cell.describe()
    assert diff.current_width != cell.current_width and diff.floor_width > cell.floor_width
    wide = 0.5 * (diff.current_width + diff.floor_width)  # reachable: between today and the dialogues' floor
    plans = [
        plan_labels(cells, small, width=wide, compare=[("A", "B")], design=d, draws=60) for d in ("random", "active")
    ]
    assert all(p.extra_labels and p.predicted_width <= wide for p in plans)


@pytest.fixture(scope="module")
def played(tmp_path_factory) -> Path:
    return play_judged(tmp_path_factory.mktemp("plan") / "played.db", turns=3)


def test_plan_compare_reports_random_and_active_labels_for_the_difference(played, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(common.console, "width", 250)
    db = tmp_path / "grid.db"
    run = copy_run(played, db)
    record_pairs(run, tp=12, fp=5, fn=5, tn=12)
    run.close()
    with sqlite3.connect(db) as conn:  # two targets, half of the seeds each
        conn.execute(
            "update dialogues set target = case when cast(substr(seed_id, 2) as integer) % 2 = 0 then 'fake:a' "
            "else 'fake:b' end where run_id = 'r1'"
        )
    base = ["plan", "--run-id", "r1", "--db", str(db)]
    assert annotate.main([*base, "--width", "0.99", "--compare", "fake:a", "fake:b"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "difference's interval is already" in said
    assert annotate.main([*base, "--width", "0.6", "--compare", "fake:a", "fake:b"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "cumulative difference's interval" in said and "active design:" in said
    if "--design active --budget" in said:  # a reachable width: the command to draw them keeps the comparison
        assert "--compare fake:a fake:b --out active.csv" in said
    with pytest.raises(SystemExit) as exit_info:
        annotate.main([*base, "--width", "0.3", "--compare", "fake:a", "fake:z"])
    assert exit_info.value.code == 2 and "give two targets" in capsys.readouterr().err
