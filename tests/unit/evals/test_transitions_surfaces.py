"""Onset, clean so far, persistence, recovery and relapse where results are shown: the run summary and its --json,
report.md, the library's typed records and DataFrame."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from dymt.reading import Store
from dymt.results import RunResult, Transition
from evals.dataset import load_dataset
from evals.judge_error.run_blocks import choose_validation
from evals.metric_registry import TRANSITION_METRICS as METRICS
from evals.report.data import compute_report
from evals.report.markdown import render_markdown
from evals.report.summary import run_summary
from evals.report.summary_view import render_summary
from evals.stats.transitions import TOO_FEW, raw_transitions
from tests.support.annotation_files import played_run_fixtures, record_pairs

TURNS = 3


played, run = played_run_fixtures("transitions", turns=TURNS)


def _render(summary) -> str:
    console = Console(record=True, width=100)
    render_summary(summary, console)
    return console.export_text()


def test_summary_json_carries_raw_and_corrected_transitions_and_says_too_few(run):
    record_pairs(run, tp=80, fp=20, fn=20, tn=80)
    summary = json.loads(json.dumps(run_summary(run, "r1")))  # what --json prints
    raw = summary["transitions"]
    labels = list(run.label_matrix("r1").values())
    expected = raw_transitions(labels, TURNS)[0].as_dict()
    assert raw == json.loads(json.dumps(expected))  # the summary's numbers are the metric's on the stored labels
    assert [e["turn"] for e in raw["onset"]] == [1, 2, 3] and [e["turn"] for e in raw["relapse"]] == [3]
    onset1 = raw["onset"][0]
    assert onset1["base"] == 24 and onset1["ci95"][0] <= onset1["rate"] <= onset1["ci95"][1]
    # 24 dialogues: a third biased at turn 1 leaves fewer than 20 to persist or relapse
    assert all(e["too_few"] == TOO_FEW and e["rate"] is None for e in raw["persistence"] + raw["relapse"])
    corrected = summary["judge_corrected"]["transitions"]
    assert corrected["kind"] == "corrected" and set(METRICS) <= set(corrected)
    survival = corrected["survival"][-1]
    assert survival["rate"] == pytest.approx(1 - summary["judge_corrected"]["cumulative"][-1]["rate"])
    assert summary["groups"][0]["transitions"] == raw
    text = _render(summary)
    assert "Bias dynamics, % corrected for the judge's error" in text and TOO_FEW in text
    assert "recovery = 100 − persistence" in text


def test_unvalidated_run_shows_raw_dynamics_and_typed_records(run):
    summary = run_summary(run, "r1")
    assert summary["judge_corrected"]["refusal"] and "transitions" not in summary["judge_corrected"]
    text = _render(summary)
    assert "Bias dynamics, % from the judge's labels" in text
    result = RunResult(run_id="r1", ended="finished", summary=summary)
    records = result.transitions
    assert records and all(isinstance(r, Transition) and r.kind == "raw" for r in records)
    onset1 = next(r for r in records if r.metric == "onset" and r.turn == 1)
    assert onset1.rate == summary["transitions"]["onset"][0]["rate"] and onset1.base == 24
    frame = result.transitions_frame()
    assert len(frame) == len(records) and set(frame["metric"]) == set(METRICS)
    assert result.to_json()["schema"] == "dymt.run/2"


def test_report_has_a_dynamics_table_per_target_and_mode_and_the_store_a_frame(run, db):
    record_pairs(run, tp=80, fp=20, fn=20, tn=80)
    dataset = load_dataset(run, ["r1"])
    report = compute_report(dataset, n_boot=50, judge_validations={"r1": choose_validation(run, "r1")})
    text = render_markdown(report, db=db, generated_at="now")
    section = text.split("## Bias dynamics: onset, persistence, recovery, relapse", 1)[1].split("\n## ", 1)[0]
    assert "### fake:target · implicit" in section
    assert "| turn | onset hazard raw | onset hazard corrected | clean so far raw |" in section
    assert TOO_FEW in section and "(24)" in section  # turn 1's onset base
    run.close()
    with Store(str(db)) as store:
        rows = store.transitions("r1", as_frame=False)
    kinds = {(r["kind"], r["metric"]) for r in rows}
    assert ("raw", "relapse") in kinds and ("corrected", "persistence") in kinds
    assert all(r["too_few"] == (r["rate"] is None) for r in rows)
