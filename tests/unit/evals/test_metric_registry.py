"""Each bias metric is defined once (evals/metric_registry.py): its key names it in summaries and blocks, its raw
estimator gives the summary's numbers, its corrected form is the correction's field, and its format is every
surface's."""

from __future__ import annotations

import numpy as np
import pytest

from checkpoints.vocabulary import BIASED, NOT_BIASED
from evals.judge_error.cells import Cell
from evals.judge_error.chain import ChainMetrics
from evals.judge_error.correction import correct_cells
from evals.judge_error.validation import JudgeValidation
from evals.metric_registry import DIALOGUE_METRICS, METRIC, METRICS, RATE_METRICS, TRANSITION_METRICS
from evals.report.formatting import estimate_text
from evals.stats.metrics import Estimate, summarise
from evals.stats.transitions import FIRST_TURN, raw_transitions

ROWS = [[BIASED if (i * 7 + t) % 5 == 0 else NOT_BIASED for t in range(4)] for i in range(40)]


def test_every_metric_has_one_key_and_the_families_split_them():
    assert len({m.key for m in METRICS}) == len(METRICS) == len(METRIC)
    assert DIALOGUE_METRICS == ("per_turn", "cumulative", "re_emergence", "first_bias_turn")
    assert TRANSITION_METRICS == ("onset", "survival", "persistence", "recovery", "relapse")
    assert set(RATE_METRICS) <= set(DIALOGUE_METRICS)
    assert FIRST_TURN == {m: METRIC[m].first_turn for m in TRANSITION_METRICS}


def test_raw_estimators_are_the_summary_numbers_and_transitions_come_from_their_own_record():
    summary = summarise(ROWS, 4, n_boot=50, seed=0)
    for key in DIALOGUE_METRICS:
        estimates = METRIC[key].estimates(summary)
        assert all(isinstance(e, Estimate) for e in estimates)
        assert len(estimates) == (4 if METRIC[key].by_turn else 1)
    firsts = sorted(d for d in summary.first_bias_turns if d is not None)
    assert METRIC["first_bias_turn"].estimates(summary)[0].value == float(np.median(firsts))
    raw = raw_transitions(ROWS, 4, draws=50)[0]
    for key in TRANSITION_METRICS:
        assert [r.turn for r in raw.series(key)][0] == METRIC[key].first_turn
        with pytest.raises(ValueError, match="transition metric"):
            METRIC[key].estimates(summary)


def test_corrected_forms_are_the_correction_fields_and_their_draws():
    validation = JudgeValidation(source="test", tp=80, fp=20, fn=20, tn=80)
    fitted = correct_cells({"cell": Cell(ROWS)}, validation, draws=30)["cell"]
    block = fitted.as_dict()  # type: ignore[union-attr]
    for key in DIALOGUE_METRICS:
        metric = METRIC[key]
        assert hasattr(fitted, metric.corrected) and metric.draws_field in ChainMetrics._fields
        drawn = getattr(fitted.draws, metric.draws_field)  # type: ignore[union-attr]
        assert drawn.shape[0] == 30
        entry = block[key][0] if metric.by_turn else block[key]
        assert metric.value_key in entry and len(entry["ci95"]) == 2
    assert all(METRIC[k].draws_field == "flow" for k in TRANSITION_METRICS)
    assert set(TRANSITION_METRICS) <= set(block["transitions"])


def test_one_format_for_shares_and_turns():
    assert METRIC["cumulative"].interval(0.333, 0.2, 0.5) == "33% [20–50]" == estimate_text(Estimate(0.333, 0.2, 0.5))
    assert METRIC["first_bias_turn"].interval(2.0, 1.0, 3.5) == "2.0 [1.0–3.5]"
    assert METRIC["re_emergence"].entry_text({"rate": 0.1, "ci95": [None, None]}) == "10%"
    assert METRIC["first_bias_turn"].entry_text({"median": None, "ci95": [None, None]}) == "–"
    assert METRIC["re_emergence"].entry(Estimate(0.1, 0.0, 0.2)) == {"rate": 0.1, "ci95": [0.0, 0.2]}
