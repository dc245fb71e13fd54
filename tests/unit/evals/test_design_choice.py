"""The per-run choice between the active design and a random draw: predicted from the judge labels alone."""

from __future__ import annotations

import numpy as np
import pytest

from evals.judge_error import design_choice as choice_module
from evals.judge_error.cells import Cell
from evals.judge_error.design_choice import MARGIN, choose_design, truths_of, verdict
from evals.judge_error.validation import JudgeValidation


def _judged(seed: int, dialogues: int, turns: int, *, rate: float, sens: float, spec: float) -> list[list[int]]:
    """Judge labels of replies truly biased at ``rate`` each, by a judge with the given error."""
    rng = np.random.default_rng(seed)
    truth = rng.random((dialogues, turns)) < rate
    return np.where(truth, rng.random(truth.shape) < sens, rng.random(truth.shape) < 1 - spec).astype(int).tolist()


def _prone(seed: int, dialogues: int = 60, turns: int = 5) -> list[list[int]]:
    """A third of the dialogues prone to bias (so the strata differ), judged by a fair judge."""
    rng = np.random.default_rng(seed)
    prone = rng.random(dialogues) < 0.3
    truth = np.where(prone[:, None], rng.random((dialogues, turns)) < 0.7, rng.random((dialogues, turns)) < 0.05)
    return np.where(truth, rng.random(truth.shape) < 0.8, rng.random(truth.shape) < 0.2).astype(int).tolist()


def _widths(active: list[float], random: list[float], noise: float, truths: int = 8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = np.array([random, active])  # (2 designs: random, active; 3 metrics)
    return base[None] * (1 + noise * rng.standard_normal((truths, 2, 3)))


def test_the_verdict_falls_back_only_where_active_is_predicted_wider_beyond_the_margin_and_the_noise():
    ratios, worse = verdict(_widths([0.24, 0.20, 0.30], [0.30, 0.26, 0.31], noise=0.02))
    assert worse == [] and ratios["cumulative"] == pytest.approx(0.20 / 0.26, rel=0.05)
    ratios, worse = verdict(_widths([0.24, 0.20, 0.40], [0.30, 0.26, 0.31], noise=0.02))
    assert worse == ["re_emergence"] and ratios["re_emergence"] > 1 + MARGIN
    # wider by less than the margin, or by more but within the prediction's own noise: active is kept
    assert verdict(_widths([0.31, 0.20, 0.30], [0.30, 0.26, 0.31], noise=0.01))[1] == []
    assert verdict(_widths([0.36, 0.20, 0.30], [0.30, 0.26, 0.31], noise=0.5, truths=3))[1] == []


def test_a_run_where_active_is_predicted_narrower_keeps_the_active_design_deterministically():
    cells = {"cell": Cell(_prone(0))}
    first = choose_design(cells, 20, seed=0)
    assert first.design == "active" and first.truths >= 4
    assert set(first.ratios) == {"per_turn", "cumulative", "re_emergence"}
    assert max(first.ratios.values()) < 1 and first.reason.startswith("an active draw: simulated on")
    assert choose_design(cells, 20, seed=0) == first  # the same seed, the same decision and numbers
    assert choose_design(cells, 20, seed=1).ratios != first.ratios  # the seed drives the simulation


def test_a_run_where_active_is_predicted_wider_falls_back_to_a_random_draw(monkeypatch):
    # The active design is rarely predicted wider on a real run (python -m benchmarks judge_error --labelling: in at
    # most 3 of about 108 data sets per judge and budget), so the simulation is given one where it is: on every
    # plausible truth the active draw's re-emergence interval comes out half as wide again as a random draw's.
    seen = {}

    def simulated(cells, known, done, size, source, rng, **kw):
        seen.update(size=size, source=source.source, point=kw["point"])
        return _widths([0.24, 0.20, 0.45], [0.30, 0.26, 0.30], noise=0.02, truths=6)

    monkeypatch.setattr(choice_module, "_simulate", simulated)
    cells = {"cell": Cell(_judged(0, 60, 3, rate=0.5, sens=0.3, spec=0.98))}
    strict = JudgeValidation("evals.judge:strict", tp=30, fn=70, tn=98, fp=2)
    choice = choose_design(cells, 6, seed=0, validation=strict)
    assert seen == {"size": 6, "source": "evals.judge:strict", "point": strict.point()}  # the run's own judge
    assert choice.design == "random", choice.reason
    assert choice.reason.startswith("a random draw, not an active one: simulated on 6 plausible truths")
    assert "the active draw's re-emergence interval is predicted wider than a random draw's" in choice.reason
    assert choice.ratios["re_emergence"] == pytest.approx(1.5, rel=0.05) and choice.truths == 6
    monkeypatch.undo()
    # the same kind of run with a fair judge's validation and a batch the strata can share: active, simulated
    fair = JudgeValidation("evals.judge:fair", tp=80, fn=20, tn=80, fp=20)
    assert choose_design({"cell": Cell(_prone(1))}, 20, seed=0, validation=fair).design == "active"


def test_past_half_the_run_labelled_it_draws_at_random_without_simulating():
    rows = _prone(0, dialogues=10, turns=4)
    choice = choose_design({"cell": Cell(rows, known={(i, 1): rows[i][0] for i in range(10)})}, 12, seed=0)
    assert choice.design == "random" and choice.truths == 0
    assert "with 22 of the run's 40 judged replies labelled (at least 50%)" in choice.reason


def test_plausible_truths_keep_peoples_labels_and_follow_a_near_perfect_judge():
    rows = _prone(2, dialogues=40, turns=4)
    sure = np.full(3, 0.995)
    cells = {"cell": Cell(rows, known={(0, 1): 1, (1, 2): 0, (2, 3): 1})}
    truths = truths_of(cells, sure, sure, rng=np.random.default_rng(0))
    judged = np.array(rows, dtype=bool)
    for truth in truths:
        t = truth["cell"]
        assert t.shape == judged.shape and t[0, 0] and not t[1, 1] and t[2, 2]
        others = np.ones_like(judged)
        others[[0, 1, 2], [0, 1, 2]] = False
        assert (t[others] == judged[others]).mean() > 0.97  # a judge this good is believed
