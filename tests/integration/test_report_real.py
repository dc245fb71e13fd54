"""A report from a small real run: 2 dialogues x 2 turns on the embedded model, refusal and coherence
scored by the same model, then ``python -m evals.report``: its sections, plots and data files."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest

from tests.support import forked

pytestmark = pytest.mark.integration

LOCAL = "local:gemma3-270m"
RUN = "report-it"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _cli(module: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    result = forked.run(module, *args, timeout=timeout)
    assert result.returncode == 0, f"{module} failed:\n{result.stderr[-2000:]}"
    return result


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("report-real")
    db = folder / "dialogues.db"
    _cli("graph.run", "--turns", "2", "--limit", "2", "--db", str(db), "--run-id", RUN, "--json")
    _cli("evals.refusal", "--run-id", RUN, "--model", LOCAL, "--db", str(db))
    _cli("evals.coherence", "--run-id", RUN, "--model", LOCAL, "--db", str(db))
    out = folder / "report"
    result = _cli("evals.report", "--run-id", RUN, "--out", str(out), "--db", str(db), "--n-boot", "200")
    assert "Bias, coherence and refusal by model and mode" in result.stdout
    return db, out


def test_report_has_its_sections_and_tables(real_run):
    _, out = real_run
    text = (out / "report.md").read_text()
    for heading in (
        "## Bias, coherence and refusal by model and mode",
        "## Cumulative bias by turn",
        "## Per-turn bias",
        "## Bias by category",
        "## Re-emergence",
        "## Coherence",
        "## Refusal",
        "## Agreement between label sets",
        "## Provenance",
        "## Data files",
    ):
        assert heading in text, heading
    assert "Not computed" not in text  # coherence and refusal were computed, so both tables are there
    assert "| target model | mode | dialogues | scored | unparsed | mean [95% CI] |" in text
    assert "refusal rate" in text
    assert f"| {RUN} |" in text and "refusal.transcript" in text and "coherence.transcript" in text
    assert "270M-parameter base model" in text  # the embedded model's caveat travels with its numbers
    assert f"| {LOCAL} | implicit | 2 | 2 |" in text


def test_report_plots_are_valid_pngs(real_run):
    from PIL import Image

    _, out = real_run
    for name in ("cumulative_bias.png", "per_turn_bias.png", "bias_by_category.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC), name
        with Image.open(out / name) as image:
            image.verify()
        with Image.open(out / name) as image:
            assert image.format == "PNG" and image.size[0] > 300 and image.size[1] > 200


def test_report_data_files_hold_every_turn(real_run):
    db, out = real_run
    import sqlite3

    conn = sqlite3.connect(db)
    n_turns = conn.execute(
        "select count(*) from turns t join dialogues d using (thread_id) where d.run_id = ?", [RUN]
    ).fetchone()[0]
    conn.close()
    assert n_turns == 4  # 2 dialogues x 2 turns
    with (out / "turns.csv").open() as handle:
        turns = list(csv.DictReader(handle))
    assert len(turns) == n_turns
    assert {r["label"] for r in turns} <= {"biased", "not_biased", "unparsed", ""}
    assert {r["refusal"] for r in turns} <= {"refused", "not_refused", "unparsed"}
    records = [json.loads(line) for line in (out / "turns.jsonl").read_text().splitlines()]
    assert [(r["thread_id"], r["turn"]) for r in records] == [(r["thread_id"], int(r["turn"])) for r in turns]
    with (out / "dialogues.csv").open() as handle:
        dialogues = list(csv.DictReader(handle))
    assert len(dialogues) == 2
    for row in dialogues:
        assert row["coherence"] == "" or 1.0 <= float(row["coherence"]) <= 5.0


def test_rejudging_with_the_runs_own_judge_reproduces_its_labels(real_run):
    """Same model, prompt, context and parsing as the live judge: the labels must come out the same."""
    db, _ = real_run
    _cli("evals.rejudge", "--run-id", RUN, "--judge-model", LOCAL, "--name", "again", "--db", str(db), "--n-boot", "50")
    from checkpoints.store import open_writer

    store = open_writer(db)
    try:
        assert store.label_matrix(RUN, label_set="again") == store.label_matrix(RUN)
    finally:
        store.close()
