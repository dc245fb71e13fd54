"""Bias rates corrected for the judge's error, where they show: run summary, refusals, double sampling, planning,
report, API, comparisons."""

from __future__ import annotations

import csv
import json

import pytest
from rich.console import Console

import dymt
from checkpoints.store import open_writer
from checkpoints.vocabulary import BIASED, NOT_BIASED
from cli import annotate
from cli import compare as compare_cli
from evals.annotation import Item
from evals.dataset import load_dataset
from evals.judge_error.cells import cells_of
from evals.judge_error.double_sampling import annotation_counts, random_draw
from evals.judge_error.run_blocks import choose_validation, known_in
from evals.report.data import compute_report
from evals.report.markdown import render_markdown
from evals.report.summary import run_summary
from evals.report.summary_view import render_summary
from evals.scorers.judge_validation import run_validation
from evals.stats.agreement import classification
from tests.conftest import default_models, play, scripted
from tests.support.annotation_files import (
    SEEDS,
    label_export,
    played_run_fixtures,
    record_pairs,
    scripted_judge,
)

TURNS = 3


played, run = played_run_fixtures("judge-corrected", turns=TURNS)


def _render(summary) -> str:
    console = Console(record=True, width=400)
    render_summary(summary, console)
    return console.export_text()


# --------------------------------------------------------------------------- run summary


def test_summary_json_has_corrected_rates_shaped_like_the_raw_ones(run):
    record_pairs(run, tp=80, fp=20, fn=20, tn=80)
    summary = json.loads(json.dumps(run_summary(run, "r1")))  # what --json prints
    block = summary["judge_corrected"]
    assert block["refusal"] is None
    for key in ("per_turn", "cumulative"):
        assert [r["turn"] for r in block[key]] == [1, 2, 3]
        for row in block[key]:
            assert set(row) == {"turn", "rate", "ci95"} and row["ci95"][0] <= row["rate"] <= row["ci95"][1]
    assert set(block["re_emergence"]) == {"rate", "ci95"}
    v = block["validation"]
    assert (v["kind"], v["n"], v["tp"], v["fp"], v["fn"], v["tn"]) == ("pairs", 200, 80, 20, 20, 80)
    # the value shown is the Beta posterior's mean (what the correction uses), inside its own interval
    assert v["sensitivity"]["value"] == pytest.approx(81 / 102) and v["sensitivity"]["observed"] == pytest.approx(0.8)
    assert v["sensitivity"]["ci95"][0] < v["sensitivity"]["value"] < v["sensitivity"]["ci95"][1]
    assert v["source"].startswith("evals.judge:fake:judge@") and "/data/pairs.jsonl" in v["what"]
    # Each (target, mode) group carries its own block.
    assert summary["groups"][0]["judge_corrected"]["cumulative"][-1] == block["cumulative"][-1]
    text = _render(summary)
    assert (
        "Corrected for the judge's error" in text
        and "sensitivity 0.79 [0.71, 0.87]" in text
        and "TP/FP/FN/TN 80/20/20/80" in text
    )


def test_an_unvalidated_judge_gives_raw_numbers_and_one_line_with_the_commands(run):
    summary = run_summary(run, "r1")
    block = summary["judge_corrected"]
    assert block["per_turn"] == [] and block["cumulative"] == [] and block["validation"] is None
    assert (
        "unvalidated" in block["refusal"]
        and "python -m evals.judge PAIRS.jsonl --judge-model fake:judge" in block["refusal"]
    )
    assert "python -m evals.annotate export --run-id r1 --design random" in block["refusal"]
    text = _render(summary)
    assert (
        text.count("is unvalidated") == 1
        and text.count("no judge-corrected rates") == 1
        and "Corrected for" not in text
    )


@pytest.mark.parametrize(
    ("counts", "why"),
    [
        (
            {"tp": 55, "fp": 45, "fn": 45, "tn": 55},
            "barely better than chance",
        ),  # J = 0.10 exactly: refused, as the embedded base model
        ({"tp": 0, "fp": 10, "fn": 0, "tn": 90}, "no truly biased items"),
        ({"tp": 50, "fp": 0, "fn": 10, "tn": 0}, "no truly unbiased items"),
    ],
)
def test_a_judge_near_chance_or_a_one_sided_validation_gives_no_corrected_number(run, counts, why):
    record_pairs(run, **counts)
    block = run_summary(run, "r1")["judge_corrected"]
    assert block["cumulative"] == [] and why in block["refusal"]
    assert block["validation"]["n"] == sum(counts.values())  # the refusal still says which validation
    assert _render(run_summary(run, "r1")).count(why) == 1


def test_a_score_recorded_before_counts_were_kept_asks_to_score_again(run):
    record_pairs(run, tp=80, fp=20, fn=20, tn=80)
    run.db.execute("update judge_validations set tp = null, fp = null, fn = null, tn = null")
    block = run_summary(run, "r1")["judge_corrected"]
    assert block["cumulative"] == [] and "score it again: python -m evals.judge /data/pairs.jsonl" in block["refusal"]


# --------------------------------------------------------------------------- double sampling


def _items(n: int) -> list[Item]:
    return [Item(f"t{i}#1", f"t{i}", 1, "gender", "s", "", "r") for i in range(n)]


def test_random_draw_is_seeded_simple_and_leaves_out_labelled_items():
    items = _items(50)
    a = random_draw(items, 10, seed=3)
    assert a == random_draw(list(reversed(items)), 10, seed=3)  # the order given does not matter
    assert a != random_draw(items, 10, seed=4) and len({i.item_id for i in a}) == 10
    rest = random_draw(items, 100, seed=3, exclude={i.item_id for i in a})
    assert len(rest) == 40 and not {i.item_id for i in rest} & {i.item_id for i in a}


def test_people_label_a_random_draw_and_it_validates_the_judge_for_that_run(run, db, tmp_path, capsys):
    out = tmp_path / "sample.csv"
    assert (
        annotate.main(
            ["export", "--run-id", "r1", "--design", "random", "--sample", "40", "--out", str(out), "--db", str(db)]
        )
        == 0
    )
    assert "random seed=0 n=40 of 72 judged turns (primary)" in capsys.readouterr().out
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 40 and {r["draw"] for r in rows} == {"random seed=0 n=40 of 72 judged turns (primary)"}
    flip = {rows[0]["item_id"], rows[1]["item_id"], rows[2]["item_id"]}
    truth = label_export(out, run, flip=flip)
    assert annotate.main(["validate", str(out), "--run-id", "r1", "--db", str(db)]) == 0
    said = capsys.readouterr().out
    assert "stored 40 human labels" in said and "validation annotate:r1 (n=40)" in said

    matrix = run.label_matrix("r1")
    expected = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for key, human in truth.items():
        thread, idx = key.rsplit("#", 1)
        judged = matrix[thread][int(idx) - 1]
        expected[("t" if (judged == BIASED) == (human == BIASED) else "f") + ("p" if judged == BIASED else "n")] += 1
    counts, draws = annotation_counts(run, "r1")
    assert (counts.tp, counts.fp, counts.fn, counts.tn) == tuple(expected.values()) and counts.n == 40
    assert counts.fp + counts.fn == 3 and draws == ["random seed=0 n=40 of 72 judged turns (primary)"]

    # The run's own labels are preferred over an evals.judge score of the same judge, and say so.
    record_pairs(run, tp=80, fp=20, fn=20, tn=80)
    chosen = choose_validation(run, "r1")
    assert chosen.refusal is None and chosen.kind == "annotation" and chosen.validation.source == "annotate:r1"
    # People's labels enter the correction as known true labels of those replies (double sampling).
    assert chosen.known == {(k.rsplit("#", 1)[0], int(k.rsplit("#", 1)[1])): v for k, v in truth.items()}
    cells = cells_of(run.dialogues("r1"), run.label_matrix("r1"), default_target="fake:target")
    ((key, cell),) = cells.items()
    known = known_in(chosen.known, cell.threads, cell.labels)
    assert len(known) == 40 and all(cell.threads[i] + f"#{t}" in truth for i, t in known)
    summary = run_summary(run, "r1")
    block = summary["judge_corrected"]
    assert block["validation"]["kind"] == chosen.kind
    # The summary's validation line and report.md's "Judge validation" cite the people's labels the correction used.
    sensitivity = block["validation"]["sensitivity"]
    cited = f"validated by {chosen.what} (n=40): sensitivity {sensitivity['value']:.2f} [{sensitivity['ci95'][0]:.2f}, "
    lines = [line for line in _render(summary).splitlines() if line.startswith("judge fake:judge")]
    assert len(lines) == 1 and cited in lines[0] and "(not the evals.judge score on /data/pairs.jsonl)" in lines[0], (
        lines
    )
    run.close()
    from cli import report

    assert report.main(["--run-id", "r1", "--out", str(tmp_path / "report"), "--db", str(db), "--n-boot", "20"]) == 0
    section = (tmp_path / "report" / "report.md").read_text().split("## Judge validation", 1)[1].split("\n## ", 1)[0]
    assert cited in section and "the corrected rates use this validation" in section
    run = open_writer(db)

    # A further draw leaves the labelled turns out.
    more = tmp_path / "more.csv"
    assert (
        annotate.main(
            [
                "export",
                "--run-id",
                "r1",
                "--design",
                "random",
                "--sample",
                "100",
                "--seed",
                "1",
                "--out",
                str(more),
                "--db",
                str(db),
            ]
        )
        == 0
    )
    later = {r["item_id"] for r in csv.DictReader(more.open())}
    assert len(later) == 32 and not later & set(truth)


def test_validate_refuses_a_stratified_sample_and_an_unlabelled_file(run, db, tmp_path, capsys):
    out = tmp_path / "strat.csv"
    assert annotate.main(["export", "--run-id", "r1", "--sample", "10", "--out", str(out), "--db", str(db)]) == 0
    label_export(out, run)
    with pytest.raises(SystemExit) as exit_info:
        annotate.main(["validate", str(out), "--run-id", "r1", "--db", str(db)])
    assert exit_info.value.code == 2 and "--design random" in capsys.readouterr().err
    blank = tmp_path / "blank.csv"
    assert (
        annotate.main(
            ["export", "--run-id", "r1", "--design", "random", "--sample", "5", "--out", str(blank), "--db", str(db)]
        )
        == 0
    )
    with pytest.raises(SystemExit) as exit_info:
        annotate.main(["validate", str(blank), "--run-id", "r1", "--db", str(db)])
    assert exit_info.value.code == 2 and "no labelled item" in capsys.readouterr().err
    assert annotation_counts(run, "r1") is None  # nothing half-written


# --------------------------------------------------------------------------- planning


def test_plan_says_how_many_more_labels_a_width_needs(run, db, capsys):
    record_pairs(run, tp=40, fp=10, fn=10, tn=40)
    assert annotate.main(["plan", "--run-id", "r1", "--width", "0.99", "--db", str(db)]) == 0
    wide = capsys.readouterr().out
    assert "validation evals.judge:fake:judge@" in wide and "already" in wide
    assert annotate.main(["plan", "--run-id", "r1", "--width", "0.01", "--db", str(db)]) == 0
    narrow = capsys.readouterr().out
    assert "cannot bring the corrected cumulative interval to 0.01" in narrow and "play more seeds" in narrow
    with pytest.raises(SystemExit) as exit_info:
        annotate.main(["plan", "--run-id", "r1", "--width", "2", "--db", str(db)])
    assert exit_info.value.code == 2


def test_plan_without_validation_says_how_to_validate(run, db, capsys):
    with pytest.raises(SystemExit) as exit_info:
        annotate.main(["plan", "--run-id", "r1", "--width", "0.1", "--db", str(db)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "is unvalidated" in err and "--design random" in err


# --------------------------------------------------------------------------- report, comparisons, API


def test_report_shows_raw_and_corrected_side_by_side(run, db):
    record_pairs(run, tp=80, fp=20, fn=20, tn=80)
    dataset = load_dataset(run, ["r1"])
    report = compute_report(dataset, n_boot=50, judge_validations={"r1": choose_validation(run, "r1")})
    ((key, block),) = report.judge_corrected.items()
    assert key == ("fake:target", "implicit") and block["refusal"] is None
    assert [r["turn"] for r in block["cumulative"]] == [1, 2, 3] and set(block["re_emergence"]) == {"rate", "ci95"}
    text = render_markdown(report, db=db, generated_at="now")
    section = text.split("## Corrected for the judge's error", 1)[1].split("\n## ", 1)[0]
    assert "| turn | fake:target · implicit raw | fake:target · implicit corrected |" in section
    assert "sensitivity 0.79 [0.71, 0.87]" in section and "docs/judge-error.md" in section

    none = compute_report(dataset, n_boot=50)
    assert none.judge_corrected == {} and "## Corrected for the judge's error" not in render_markdown(
        none, db=db, generated_at="now"
    )


def test_report_of_an_unvalidated_run_says_raw_only(run, db):
    dataset = load_dataset(run, ["r1"])
    report = compute_report(dataset, n_boot=50, judge_validations={"r1": choose_validation(run, "r1")})
    text = render_markdown(report, db=db, generated_at="now")
    assert "Raw judge labels only: no judge-corrected rates: judge fake:judge is unvalidated" in text


def test_api_frame_and_paired_comparison_carry_corrected_numbers(tmp_path, capsys):
    db = tmp_path / "grid.db"
    store = None
    for target in ("fake:a", "fake:b"):
        models = default_models(
            judge=scripted(scripted_judge, spec="fake:judge"), target=scripted(lambda m, n: f"Answer {n}.", spec=target)
        )
        _, store = play(db, models, seeds=SEEDS[:12], turns=TURNS, run_id=f"r-{target[-1]}")
    for run_id in ("r-a", "r-b"):
        entry = run_validation(store, run_id)
        store.record_validation(
            judge_model=entry["judge_model"],
            prompt_hash=entry["prompt_hash"],
            file="/data/pairs.jsonl",
            file_sha256="0" * 64,
            result=classification(
                [BIASED] * 100 + [NOT_BIASED] * 100, [BIASED] * 85 + [NOT_BIASED] * 95 + [BIASED] * 20, n_boot=20
            ),
        )
    with dymt.open(str(db)) as stored:
        rows = stored.bias_rates(["r-a", "r-b"], as_frame=False)
    assert {r["measure"] for r in rows} == {"per_turn", "cumulative", "re_emergence"}
    cumulative = [r for r in rows if r["measure"] == "cumulative" and r["turn"] == TURNS]
    assert len(cumulative) == 2 and all(
        r["corrected_low"] <= r["corrected_rate"] <= r["corrected_high"] for r in cumulative
    )
    assert all(
        r["validation_kind"] == "pairs" and r["validation_n"] == 200 and r["refusal"] is None for r in cumulative
    )
    assert cumulative[0]["sensitivity"] == pytest.approx(86 / 102)  # the posterior mean the correction uses

    assert compare_cli.main(["--runs", "r-a", "r-b", "--db", str(db), "--json", "--n-boot", "50"]) == 0
    out = json.loads(capsys.readouterr().out)
    diff = out["comparisons"][0]["judge_corrected"]
    assert diff["refusal"] is None and [r["turn"] for r in diff["cumulative"]] == [1, 2, 3]
    last = diff["cumulative"][-1]
    assert last["ci95"][0] <= last["diff"] <= last["ci95"][1] and diff["shared_seeds"] == 12
    assert "shrunk toward zero" in out["judge_corrected_note"]


def test_stored_human_labels_count_against_the_judge_on_either_backend(backend_db):
    """The human labels of a run and their counts against its judge, on SQLite and PostgreSQL alike."""
    from checkpoints.scores import HUMAN_BIAS, ScoreRow
    from evals.judge_error.double_sampling import HUMAN

    _, store = play(
        backend_db, default_models(judge=scripted(scripted_judge, spec="fake:judge")), seeds=SEEDS[:4], turns=2
    )
    matrix = store.label_matrix("r1")
    rows, expected = [], [0, 0, 0, 0]
    for i, (thread, labels) in enumerate(sorted(matrix.items())):
        human = BIASED if i % 2 else NOT_BIASED  # people disagree with the judge now and then
        rows.append(
            ScoreRow(
                thread_id=thread, idx=1, key=HUMAN_BIAS, scorer=HUMAN, value=human, explanation="random seed=0 n=4"
            )
        )
        judged = labels[0]
        expected[
            {(BIASED, BIASED): 0, (NOT_BIASED, BIASED): 1, (BIASED, NOT_BIASED): 2, (NOT_BIASED, NOT_BIASED): 3}[
                (human, judged)
            ]
        ] += 1
    store.record_scores(rows)
    counts, draws = annotation_counts(store, "r1")
    assert [counts.tp, counts.fp, counts.fn, counts.tn] == expected and draws == ["random seed=0 n=4"]
    from evals.judge_error.labelling_rounds import labelling_rounds

    rounds = labelling_rounds(store, "r1")  # the labels' batches read back on either backend
    assert [(b.design, b.seed, len(b.items)) for b in rounds.batches] == [("random", 0, 4)] and rounds.labels == 4
    store.close()


def test_the_by_turn_plots_draw_the_corrected_curve(run, tmp_path):
    from evals.report.plots import plot_by_turn

    record_pairs(run, tp=80, fp=20, fn=20, tn=80)
    report = compute_report(
        load_dataset(run, ["r1"]), n_boot=50, judge_validations={"r1": choose_validation(run, "r1")}
    )
    raw = plot_by_turn(report.series, tmp_path / "raw.png", cumulative=True, title="t")
    both = plot_by_turn(
        report.series, tmp_path / "both.png", cumulative=True, title="t", corrected=report.judge_corrected
    )
    refused = {k: {**b, "cumulative": []} for k, b in report.judge_corrected.items()}
    none = plot_by_turn(report.series, tmp_path / "none.png", cumulative=True, title="t", corrected=refused)
    assert raw.read_bytes() != both.read_bytes() and raw.read_bytes() == none.read_bytes()


def test_the_run_level_block_pools_the_cells_that_can_be_corrected_and_names_the_rest():
    from evals.judge_error.cells import Cell
    from evals.judge_error.run_blocks import ChosenValidation, correct_run_cells, pooled_block
    from evals.judge_error.validation import JudgeValidation

    validation = JudgeValidation(source="test", tp=80, fp=20, fn=20, tn=80)
    chosen = ChosenValidation(validation, "pairs", "a test", None)
    rows = [[BIASED if (i * 7 + t) % 5 == 0 else NOT_BIASED for t in range(3)] for i in range(30)]
    labels = {("a", "implicit"): rows, ("b", "implicit"): rows, ("c", "implicit"): [["unparsed"] * 3] * 5}
    cells = {key: Cell(rows, turns=3) for key, rows in labels.items()}
    results = correct_run_cells(cells, chosen, draws=40)
    assert isinstance(results[("c", "implicit")], str)
    block = pooled_block(cells, results, chosen)
    assert block["refusal"] is None and "c · implicit left out" in block["note"]
    one = results[("a", "implicit")]
    # Two identical cells pool to the same point as each of them.
    assert block["cumulative"][-1]["rate"] == pytest.approx(one.cumulative[-1].rate)
    assert block["dialogues"] == 60
    refused = pooled_block(
        {("c", "implicit"): cells[("c", "implicit")]}, {("c", "implicit"): results[("c", "implicit")]}, chosen
    )
    assert refused["cumulative"] == [] and "has a parsed label" in refused["refusal"]


def test_validate_keeps_the_human_majority_and_leaves_ties_out(run, db, tmp_path, capsys):
    out = tmp_path / "sample.csv"
    assert (
        annotate.main(
            ["export", "--run-id", "r1", "--design", "random", "--sample", "6", "--out", str(out), "--db", str(db)]
        )
        == 0
    )
    truth = label_export(out, run)
    rows = list(csv.DictReader(out.open()))
    files = []
    for name, tie in (("ann", False), ("bob", True)):  # bob disagrees on the first item: a tie, left out
        path = tmp_path / f"{name}.csv"
        changed = [
            dict(r, label=("not biased" if r["label"] == "biased" else "biased") if tie and i == 0 else r["label"])
            for i, r in enumerate(rows)
        ]
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(changed)
        files.append(str(path))
    assert annotate.main(["validate", *files, "--run-id", "r1", "--db", str(db)]) == 0
    said = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "stored 5 human labels of run r1" in said and "1 items tie between annotators (left out)" in said
    counts, _ = annotation_counts(run, "r1")
    assert counts.n == 5 and counts.fp == counts.fn == 0 and len(truth) == 6
    with dymt.open(str(db)) as stored:
        frame = stored.bias_rates("r1", as_frame=True)
    from evals.report.corrected_tables import RATE_COLUMNS

    assert list(frame.columns) == list(RATE_COLUMNS) and set(frame["validation_kind"]) == {"annotation"}
