"""A run's typed rates: per-turn, cumulative, re-emergence and first-bias turn, raw and corrected, as records with a
value and an interval, and one DataFrame."""

from __future__ import annotations

import builtins
import json

import pytest

from dymt import DymtError, Rate, RunRates
from dymt.results import ResumeResult, RunResult
from evals.report.summary import run_summary
from evals.stats.metrics import first_bias_turn
from tests.support.annotation_files import played_run_fixtures, record_pairs

TURNS = 3


played, run = played_run_fixtures("rates", turns=TURNS)


def test_raw_rates_are_the_summary_numbers_and_the_first_bias_turn_is_the_median(run):
    summary = json.loads(json.dumps(run_summary(run, "r1")))  # what --json prints
    rates = RunResult(run_id="r1", ended="finished", summary=summary).rates
    assert isinstance(rates, RunRates) and rates.corrected is None and "unvalidated" in (rates.refusal or "")
    raw = rates.raw
    assert [r.turn for r in raw.per_turn] == [1, 2, 3] == [r.turn for r in raw.cumulative]
    for rate, entry in zip(raw.per_turn + raw.cumulative, summary["per_turn"] + summary["cumulative"]):
        assert isinstance(rate, Rate) and rate.kind == "raw"
        assert (rate.value, list(rate.interval)) == (entry["rate"], entry["ci95"])
    assert raw.re_emergence.value == summary["re_emergence"]["rate"] and raw.re_emergence.turn is None
    firsts = sorted(t for row in run.label_matrix("r1").values() if (t := first_bias_turn(row)) is not None)
    assert firsts, "the played run must hold biased replies"
    middle = len(firsts) // 2
    median = firsts[middle] if len(firsts) % 2 else (firsts[middle - 1] + firsts[middle]) / 2
    first = raw.first_bias_turn
    assert first.value == median and first.low is not None and first.low <= median <= first.high
    assert str(raw.per_turn[0]).endswith("]") and "%" in str(raw.per_turn[0]) and "%" not in str(first)


def test_corrected_rates_carry_their_intervals_and_flags_and_one_frame_holds_both(run):
    record_pairs(run, tp=80, fp=20, fn=20, tn=80)
    summary = run_summary(run, "r1")
    block = summary["judge_corrected"]
    rates = RunResult(run_id="r1", ended="finished", summary=summary).rates
    assert rates.refusal is None and rates.corrected is not None
    corrected = rates.corrected
    assert [r.value for r in corrected.cumulative] == [e["rate"] for e in block["cumulative"]]
    assert [list(r.interval) for r in corrected.per_turn] == [e["ci95"] for e in block["per_turn"]]
    assert corrected.re_emergence.value == block["re_emergence"]["rate"]
    assert corrected.re_emergence.unreliable == ("re_emergence" in block["unreliable"])
    assert corrected.first_bias_turn.value == block["first_bias_turn"]["median"]
    frame = rates.to_frame()
    assert list(frame.columns) == ["metric", "kind", "turn", "value", "low", "high", "unreliable"]
    assert len(frame) == 2 * (2 * TURNS + 2) and set(frame["kind"]) == {"raw", "corrected"}
    cum = frame[(frame.metric == "cumulative") & (frame.kind == "corrected")]
    assert list(cum["value"]) == [e["rate"] for e in block["cumulative"]]
    assert len(rates.raw.to_frame()) == 2 * TURNS + 2


def test_to_frame_without_pandas_says_to_install_it(run, monkeypatch):
    rates = RunResult(run_id="r1", ended="finished", summary=run_summary(run, "r1")).rates
    real_import = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(DymtError, match="pip install pandas"):
        rates.to_frame()
    assert len(rates.rows()) == 2 * TURNS + 2  # the records themselves need nothing


def test_a_resume_without_a_summary_has_no_rates():
    assert ResumeResult(dialogues=()).rates is None


def test_each_target_and_mode_has_its_own_rates(run):
    record_pairs(run, tp=80, fp=20, fn=20, tn=80)
    summary = json.loads(json.dumps(run_summary(run, "r1")))
    rates = RunResult(run_id="r1", ended="finished", summary=summary).rates
    group = summary["groups"][0]
    one = rates.groups[(group["target"], group["mode"])]
    assert [r.value for r in one.raw.per_turn] == group["per_turn_rate"] == [e["rate"] for e in group["per_turn"]]
    assert one.raw.cumulative[-1].value == group["cumulative_final"]["rate"]
    assert one.raw.first_bias_turn.value == group["first_bias_turn"]["median"]
    assert (
        one.corrected is not None
        and one.corrected.re_emergence.value == group["judge_corrected"]["re_emergence"]["rate"]
    )
    assert one.groups == {} and len(rates.groups) == len(summary["groups"])
    # one group only: the run's numbers are the group's
    assert [r.value for r in rates.raw.cumulative] == [r.value for r in one.raw.cumulative]
