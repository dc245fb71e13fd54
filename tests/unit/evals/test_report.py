"""``python -m evals.report`` on runs played with scripted models: files, tables, numbers, bad input."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import pytest

from checkpoints.store import open_writer
from cli import report
from evals.dataset import load_dataset
from evals.report.data import compute_report
from evals.report.exports import DATA_FILES, PLOTS
from evals.report.markdown import render_markdown
from evals.report.tables import TableData, markdown_table
from evals.scorers.coherence_jobs import pending_dialogues, score_dialogues
from evals.scorers.label_sets import register_set
from evals.scorers.refusal_jobs import classify_refusals, pending_refusals
from evals.scorers.rejudge_jobs import pending_turns, rejudge
from tests.conftest import default_models, play, scripted

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SECTIONS = (
    "# DyMT-ESB bias-dynamics report",
    "## Bias, coherence and refusal by model and mode",
    "## Cumulative bias by turn",
    "## Per-turn bias",
    "## Bias by category",
    "## Re-emergence",
    "## Coherence",
    "## Refusal",
    "## Agreement between label sets",
    "## Provenance",
    "### Runs",
    "### Models",
    "### Label sets",
    "### Prompts",
    "## Data files",
)


def _judge() -> object:
    # Biased only on turn 2 of the gender dialogue (it is played first, so its replies are
    # "number 1..3"): gender = N B N, age = N N N.
    def respond(messages, n):
        text = messages[-1].content
        biased = "Women" in text and "answer number 2." in text.split("Reply under review:")[-1]
        return f"Rationale: r{n}.\nLabel: {'biased' if biased else 'not biased'}"

    return scripted(respond, spec="fake:judge")


def _play(db: Path, run_id: str = "r1", mode: str = "implicit"):
    _, store = play(db, default_models(judge=_judge()), turns=3, run_id=run_id, mode=mode)
    return store


def _model(reply: str, spec: str = "fake:labeller"):
    return scripted(lambda m, n: reply, spec=spec)


def _add_refusals(store, run_id: str = "r1", name: str = "rc", reply: str = "Refused: no"):
    model = _model(reply)
    register_set(
        store, run_id, "refusal", name, model=model, prompt="refusal", prompt_hash="0" * 64, content_free_p_yes=None
    )
    jobs, _ = pending_refusals(store, run_id, name)
    asyncio.run(classify_refusals(store, jobs, model, classifier=name, content_free_p_yes=None))


def _add_coherence(store, run_id: str = "r1", name: str = "sc", reply: str = "Score: 4"):
    model = _model(reply)
    register_set(
        store, run_id, "coherence", name, model=model, prompt="coherence", prompt_hash="1" * 64, content_free_p_yes=None
    )
    jobs, _ = pending_dialogues(store, run_id, name)
    asyncio.run(score_dialogues(store, jobs, model, scorer=name))


def _report(db: Path, out: Path, *runs: str, extra: tuple[str, ...] = ()) -> int:
    argv = [a for r in runs for a in ("--run-id", r)] + ["--out", str(out), "--db", str(db), "--n-boot", "100", *extra]
    return report.main(argv)


def test_report_files_sections_and_numbers(db, tmp_path, capsys):
    store = _play(db)
    _add_refusals(store)
    _add_coherence(store)
    out = tmp_path / "report"
    assert _report(db, out, "r1") == 0

    text = (out / "report.md").read_text()
    positions = [text.index(heading) for heading in SECTIONS]
    assert positions == sorted(positions)
    # gender N B N, age N N N: bias by the last turn 1/2, biased replies 1/6, no re-emergence;
    # coherence 4 for both; no refusal
    assert (
        "| fake:target | implicit | 2 | 3 | 50% [0–100] | 17% [0–33] | – | 0% [0–0] | 4.00 [4.00–4.00] | 0% [0–0] |"
        in text
    )
    # cumulative by turn: 0/2, 1/2, 1/2; per turn: 0/2, 1/2, 0/2
    assert "| 1 | 0% [0–0] (0/2) |" in text and "| 2 | 50% [0–100] (1/2) |" in text
    assert "| 3 | 0% [0–0] (0/2) |" in text
    assert "| gender | fake:target | implicit | 1 | 3 | 0 | 100% [100–100] | 33% [33–33] | 0% [0–0] |" in text
    for png in PLOTS.values():
        assert f"]({png})" in text
        data = (out / png).read_bytes()
        assert data.startswith(PNG_MAGIC) and data[12:16] == b"IHDR" and len(data) > 5000
    # provenance: the run, its models, the label sets used and the prompt hashes
    assert "| r1 | implicit | 3 | 2/2 | fake:user | fake:target | fake:judge |" in text
    assert "| r1 | refusal | rc | fake:labeller | refusal | 000000000000 |  | yes |" in text
    assert f"| judge_bias | {store.get_run('r1')['prompt_hashes']['judge_bias'][:12]} |" in text
    assert "label set `primary` (each run's own judge: fake:judge)" in text
    assert "2 dialogues in 1 run(s); 6 replies, 6 labelled, 0 unparsed" in text

    with (out / "turns.csv").open() as handle:
        turns = list(csv.DictReader(handle))
    assert len(turns) == 6
    assert [r["label"] for r in turns if r["category"] == "gender"] == ["not_biased", "biased", "not_biased"]
    assert {r["refusal"] for r in turns} == {"not_refused"}
    lines = (out / "turns.jsonl").read_text().splitlines()
    assert [json.loads(line)["turn"] for line in lines] == [r["turn"] and int(r["turn"]) for r in turns]
    with (out / "dialogues.csv").open() as handle:
        dialogues = {r["category"]: r for r in csv.DictReader(handle)}
    assert dialogues["gender"]["first_bias_turn"] == "2" and dialogues["gender"]["any_bias"] == "1"
    assert dialogues["age"]["first_bias_turn"] == "" and dialogues["age"]["coherence"] == "4.0"
    assert dialogues["age"]["refusal_turns_1_5"] == "0"
    for name in DATA_FILES:
        assert oct((out / name).stat().st_mode & 0o777) == oct(0o600)

    terminal = capsys.readouterr().out
    assert "Bias, coherence and refusal by model and mode" in terminal
    assert f"report written to {out / 'report.md'} (" in terminal  # the path on one line, however long


def test_report_without_coherence_or_refusal_says_how_to_compute_them(db, tmp_path):
    _play(db)
    out = tmp_path / "r"
    assert _report(db, out, "r1") == 0
    text = (out / "report.md").read_text()
    assert "Run `python -m evals.coherence --run-id r1 --db " in text  # with the database: it runs as printed
    assert "Run `python -m evals.refusal --run-id r1 --db " in text
    assert "Only one label set exists" in text
    assert "| fake:target | implicit | 2 | 3 | 50% [0–100] | 17% [0–33] | – | 0% [0–0] | – | – |" in text


def test_report_of_two_runs_groups_by_model_and_mode(db, tmp_path):
    _play(db, "r1", "implicit")
    _play(db, "r2", "assessment")
    out = tmp_path / "r"
    assert _report(db, out, "r1", "r2") == 0
    text = (out / "report.md").read_text()
    assert "| fake:target | assessment | 2 | 3 |" in text and "| fake:target | implicit | 2 | 3 |" in text
    assert "| turn | fake:target · assessment | fake:target · implicit |" in text
    with (out / "dialogues.csv").open() as handle:
        assert sorted(r["run_id"] for r in csv.DictReader(handle)) == ["r1", "r1", "r2", "r2"]


def test_report_on_a_rejudged_label_set_with_agreement(db, tmp_path):
    store = _play(db)
    new = scripted(lambda m, n: "Label: biased", spec="fake:judge2")
    from evals.scorers.posthoc import prompt_hash

    register_set(
        store,
        "r1",
        "bias",
        "second",
        model=new,
        prompt="judge_bias",
        prompt_hash=prompt_hash("judge_bias", "chat"),
        content_free_p_yes=None,
    )
    jobs, _ = pending_turns(store, "r1", "second")
    asyncio.run(rejudge(store, jobs, new, label_set="second"))
    out = tmp_path / "r"
    assert _report(db, out, "r1", extra=("--label-set", "second")) == 0
    text = (out / "report.md").read_text()
    assert "label set `second`" in text
    # every reply biased under "second": bias by the last turn 100%, biased replies 100%
    assert "| fake:target | implicit | 2 | 3 | 100% [100–100] | 100% [100–100] |" in text
    # second vs primary: 1 of 6 turns agree (gender turn 2)
    assert "| second | primary | 6 | 6 | 0.17" in text
    with (out / "turns.csv").open() as handle:
        assert {r["label_set"] for r in csv.DictReader(handle)} == {"second"}


def test_unparsed_labels_are_counted_and_excluded(db, tmp_path):
    judge = scripted(lambda m, n: "Label: biased" if n == 1 else "no verdict", spec="fake:judge")
    play(db, default_models(judge=judge), turns=2)
    store = open_writer(db)
    dataset = load_dataset(store, ["r1"])
    data = compute_report(dataset, n_boot=50, seed=0)
    (row,) = data.bias
    # one labelled reply (biased) and three unparsed: every rate is over the one labelled reply
    assert (row.n_labelled, row.n_unparsed) == (1, 3)
    assert row.pooled.value == 1.0
    # cumulative at the last turn: only the dialogue with a labelled reply counts -> 1/1
    assert row.bias_at_end.value == 1.0
    assert "3 unparsed (excluded from every rate)" in render_markdown(data, db=db, generated_at="now")


def test_report_is_reproducible_with_its_seed(db):
    _play(db)
    dataset = load_dataset(open_writer(db), ["r1"])
    first = compute_report(dataset, n_boot=200, seed=7)
    again = compute_report(dataset, n_boot=200, seed=7)
    assert render_markdown(first, db=db, generated_at="t") == render_markdown(again, db=db, generated_at="t")


def test_markdown_cells_cannot_break_the_table():
    table = TableData("t", ("a", "b"), (("x|y", "two\nlines"),), left=1)
    assert markdown_table(table).splitlines()[-1] == "| x\\|y | two lines |"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (("--run-id", "nope"), "no run 'nope'"),
        (("--run-id", "r1", "--label-set", "other"), "no label set 'other'"),
        (("--run-id", "r1", "--refusals", "rc"), "no refusal labels named 'rc'"),
        (("--run-id", "r1", "--run-id", "r1"), "given twice"),
    ],
)
def test_report_bad_input_is_one_line_exit_2_and_writes_nothing(db, tmp_path, capsys, extra, expected):
    _play(db)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        report.main([*extra, "--out", str(out), "--db", str(db)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]
    assert not out.exists()


def test_report_needs_a_choice_between_several_classifiers(db, tmp_path, capsys):
    store = _play(db)
    _add_refusals(store, name="a")
    _add_refusals(store, name="b", reply="Refused: yes")
    out = tmp_path / "out"
    with pytest.raises(SystemExit):
        _report(db, out, "r1")
    assert "several models (a, b): pass --refusals NAME" in capsys.readouterr().err
    assert _report(db, out, "r1", extra=("--refusals", "b")) == 0
    assert "| fake:target | implicit | 2 | 2 | 2 | 0 | 100% [100–100] |" in (out / "report.md").read_text()


def test_report_out_must_be_a_folder(db, tmp_path, capsys):
    _play(db)
    target = tmp_path / "file.md"
    target.write_text("keep me")
    with pytest.raises(SystemExit) as exit_info:
        _report(db, target, "r1")
    assert exit_info.value.code == 2 and "is a file" in capsys.readouterr().err
    assert target.read_text() == "keep me"


def test_a_failed_report_leaves_the_folder_as_it_was(db, tmp_path, monkeypatch):
    _play(db)
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("old report")

    def broken(*args, **kwargs):
        raise RuntimeError("no plotting today")

    monkeypatch.setattr("evals.report.writer.plot_categories", broken)
    with pytest.raises(RuntimeError):
        _report(db, out, "r1")
    assert (out / "report.md").read_text() == "old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dialogues.db",
        "dialogues.db-shm",
        "dialogues.db-wal",
        "out",
    ] or all(not p.name.startswith(".out.") for p in tmp_path.iterdir())
