"""People's labels through the library: ``dymt.export_annotations`` writes a draw whole and says what it drew,
``dymt.validate_annotations`` stores the labels (all or none), ``dymt.annotation_agreement`` and
``dymt.plan_annotations`` return their numbers; bad input is one DymtError line naming the keyword, with nothing
written, and the command says the same line in its flags."""

from __future__ import annotations

import csv
import shutil
import sqlite3
from pathlib import Path

import pytest

import dymt
from cli import annotate
from tests.support.annotation_files import label_export, played_run_fixtures

played, run = played_run_fixtures("annotating", turns=3)


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open()))


def _human(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("select count(*) from scores where scorer = 'human'").fetchone()[0]


def _labelled(run, db: Path, out: Path, *, sample: int, seed: int = 0, flip=frozenset()) -> dict[str, str]:
    dymt.export_annotations("r1", out=out, design="random", sample=sample, seed=seed, db=db)
    return label_export(out, run, flip=flip)


def test_a_random_export_writes_the_draw_whole_and_returns_what_it_drew(run, db, tmp_path):
    out = tmp_path / "draw.csv"
    result = dymt.export_annotations("r1", out=out, design="random", sample=10, seed=3, db=db)
    rows = _rows(out)
    assert isinstance(result, dymt.ExportResult)
    assert (result.written, result.population, result.drawn_by) == (10, 72, "random")  # 24 dialogues × 3 turns
    assert len(rows) == 10 and sum(result.per_category.values()) == 10
    assert {r["draw"] for r in rows} == {result.draw} and result.draw.startswith("random seed=3 n=10 of 72")
    assert "label" in rows[0] and not any(r["label"] for r in rows)  # the judge's labels are not in it
    assert out.stat().st_mode & 0o777 == 0o600 and result.db == str(db)
    again = dymt.export_annotations("r1", out=tmp_path / "again.csv", design="random", sample=10, seed=3, db=db)
    assert _rows(tmp_path / "again.csv") == rows and again.draw == result.draw  # seeded


def test_a_stratified_export_spreads_over_categories(run, db, tmp_path):
    result = dymt.export_annotations("r1", out=tmp_path / "s.csv", sample=12, db=db)
    assert result.drawn_by == "stratified" and result.population == 72 and result.written == 12
    assert len(result.per_category) == 6 and set(result.per_category.values()) == {2}


@pytest.mark.parametrize(
    "options, said, flag_said",
    [
        ({"design": "active"}, "design=active needs budget=N", "--design active needs --budget N"),
        ({"design": "active", "budget": 9, "sample": 3}, "not sample=", "not --sample"),
        ({"sample": 3, "batch": 2}, "budget=, batch= and compare= belong to design=active", None),
        ({"sample": 0}, "sample=0: give a whole number", None),
        ({"design": "cluster", "sample": 3}, "design='cluster' is unknown", None),
        ({"sample": 3, "label_set": "nope", "design": "random"}, "has no label set 'nope'", None),
        ({"design": "active", "budget": 9, "compare": ("x", "y")}, "compare=x y: give two targets", None),
        ({"design": "active", "budget": 9, "compare": "x"}, "compare='x': give two targets or two modes", None),
    ],
)
def test_bad_export_options_are_one_line_naming_the_keyword_and_write_nothing(
    run, db, tmp_path, options, said, flag_said, capsys
):
    out = tmp_path / "x.csv"
    with pytest.raises(dymt.DymtError) as refused:
        dymt.export_annotations("r1", out=out, db=db, **options)
    assert said in str(refused.value) and "\n" not in str(refused.value)
    assert not out.exists() and not list(tmp_path.glob(".x.csv.*"))
    if flag_said:
        argv = ["export", "--run-id", "r1", "--out", str(out), "--db", str(db)]
        for key, value in options.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        with pytest.raises(SystemExit) as stopped:
            annotate.main(argv)
        assert stopped.value.code == 2 and flag_said in capsys.readouterr().err


def test_an_existing_file_or_an_unknown_run_is_refused(run, db, tmp_path):
    out = tmp_path / "kept.csv"
    out.write_text("mine\n")
    with pytest.raises(dymt.DymtError, match="pass force= to overwrite it or choose another out="):
        dymt.export_annotations("r1", out=out, sample=3, db=db)
    assert out.read_text() == "mine\n"
    assert dymt.export_annotations("r1", out=out, sample=3, force=True, db=db).written == 3
    with pytest.raises(dymt.DymtError, match="no run 'nope'"):
        dymt.export_annotations("nope", out=tmp_path / "n.csv", sample=3, db=db)


def test_an_active_export_spends_the_budget_in_batches(run, db, tmp_path):
    first = dymt.export_annotations("r1", out=tmp_path / "a.csv", design="active", budget=30, batch=10, db=db)
    assert first.written == 10 and first.spent == 0 and first.left == 20 and first.reason
    assert len(_rows(tmp_path / "a.csv")) == 10
    if first.drawn_by == "active":
        assert sum(s.drawn for s in first.allocation) == 10
        assert all(0 < s.inclusion <= 1 for s in first.allocation)
    else:
        assert first.drawn_by == "random" and first.allocation == ()
    label_export(tmp_path / "a.csv", run)
    dymt.validate_annotations(tmp_path / "a.csv", run_id="r1", db=db)
    second = dymt.export_annotations("r1", out=tmp_path / "b.csv", design="active", budget=30, seed=1, db=db)
    assert second.spent == 10 and second.written == 20 and second.left == 0
    with pytest.raises(dymt.DymtError, match="its budget=10 is spent: raise budget= to draw more"):
        dymt.export_annotations("r1", out=tmp_path / "c.csv", design="active", budget=10, db=db)


def test_validate_stores_every_label_and_says_what_they_validate(run, db, tmp_path):
    out = tmp_path / "draw.csv"
    _labelled(run, db, out, sample=30)
    result = dymt.validate_annotations(out, run_id="r1", db=db)
    assert isinstance(result, dymt.ValidationResult)
    assert (result.stored, result.ties, result.rounds.labels) == (30, 0, 30) and _human(db) == 30
    assert any("against people" in n.text for n in result.notes)
    assert {n.level for n in result.notes} <= {"info", "warning", "hint"}


def test_validate_refuses_a_stratified_file_and_stores_nothing(run, db, tmp_path):
    out = tmp_path / "strat.csv"
    dymt.export_annotations("r1", out=out, sample=6, db=db)
    label_export(out, run)
    with pytest.raises(dymt.DymtError, match="not a random one"):
        dymt.validate_annotations([out], run_id="r1", db=db)
    assert _human(db) == 0
    with pytest.raises(dymt.DymtError, match="files=\\[\\]"):
        dymt.validate_annotations([], run_id="r1", db=db)


def test_agreement_among_annotators_and_with_the_judge(run, db, tmp_path):
    alice, bob = tmp_path / "alice.csv", tmp_path / "bob.csv"
    labels = _labelled(run, db, alice, sample=20)
    shutil.copyfile(alice, bob)
    label_export(bob, run, flip=set(list(labels)[:4]))
    result = dymt.annotation_agreement([alice, bob], run_id="r1", n_boot=50, db=db)
    assert isinstance(result, dymt.AgreementResult)
    assert result.items == 20 and [a.name for a in result.annotators] == ["alice", "bob"]
    assert [(a.labelled, a.items) for a in result.annotators] == [(20, 20), (20, 20)]
    pair = next(r for r in result.rows if r.name == "alice vs bob")
    assert pair.n_compared == 20 and pair.percent.value == pytest.approx(16 / 20)
    assert result.ties == 4 and result.judge is not None and result.judge.n_compared == 16  # ties: no majority
    assert result.judge.accuracy.value == 1.0  # the majority where they agree is the judge's own label
    with pytest.raises(dymt.DymtError, match="or run_id= to compare one annotator"):
        dymt.annotation_agreement(alice)


def test_plan_returns_how_many_labels_a_width_needs(run, db, tmp_path):
    with pytest.raises(dymt.DymtError):  # no validation of this run's judge yet: nothing to plan from
        dymt.plan_annotations("r1", width=0.1, db=db)
    out = tmp_path / "draw.csv"
    labels = _labelled(run, db, out, sample=40)
    label_export(out, run, flip=set(list(labels)[:3]))
    dymt.validate_annotations(out, run_id="r1", db=db)
    result = dymt.plan_annotations("r1", width=0.1, db=db)
    assert isinstance(result, dymt.PlanResult) and result.spent == 40 and result.random.labelled == 40
    assert result.random.unlabelled == 72 - 40
    assert result.extra_labels is None or result.extra_labels > 0  # ±5 points needs more than 40 labels of 72 turns
    wide = dymt.plan_annotations("r1", width=0.99, db=db)
    assert wide.extra_labels == 0 and wide.active.extra_labels == 0
    for bad in (0, 1.5, "0.1"):
        with pytest.raises(dymt.DymtError, match="width="):
            dymt.plan_annotations("r1", width=bad, db=db)


def test_the_command_prints_what_the_library_returns(run, db, tmp_path, capsys):
    out = tmp_path / "cli.csv"
    argv = ["export", "--run-id", "r1", "--design", "random", "--sample", "8", "--out", str(out), "--db", str(db)]
    assert annotate.main(argv) == 0
    printed = "".join(capsys.readouterr().out.split())
    assert f"wrote8of72turnsto{out}" in printed and "annotatevalidate" in printed
    label_export(out, run)
    assert annotate.main(["validate", str(out), "--run-id", "r1", "--db", str(db)]) == 0
    said = "".join(capsys.readouterr().out.split())  # the console wraps a long path
    assert f"stored8humanlabelsofrunr1in{db}" in said


def test_a_directory_named_dot_is_said_as_the_flag_and_its_value(run, db, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(dymt.DymtError, match=r"^out=\. is a directory"):
        dymt.export_annotations("r1", out=".", sample=3, db=db)
    with pytest.raises(SystemExit):
        annotate.main(["export", "--run-id", "r1", "--sample", "3", "--out", ".", "--db", str(db)])
    assert "error: --out . is a directory: give a file path such as annotation.csv" in capsys.readouterr().err
