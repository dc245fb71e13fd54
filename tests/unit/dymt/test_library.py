"""``import dymt``: each library function's typed result, and that its command's ``--json`` is the result's JSON.

A real SQLite store in a temporary folder, played with scripted models; the commands the tests compare against run
in process with the same fake provider (tests/support/fake_cli.py: ``fake:NAME`` answers "Question N?", "Answer N.",
and a
judge that labels odd calls biased).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

import dymt
from checkpoints.store import open_writer
from checkpoints.vocabulary import NOT_BIASED
from cli import branch as branch_cli
from cli import compare as compare_cli
from cli import judge as judge_cli
from cli import rejudge as rejudge_cli
from cli import report as report_cli
from cli import resume as resume_cli
from dymt.events import Collector, DialogueProgress
from graph.running.pausing import PauseOptions, settle_run
from graph.running.playing import execute_run
from nodes.builder import build_graph
from nodes.context import RunContext
from tests.conftest import SEEDS, checkpointer, default_models, make_config
from tests.support import fake_cli

GENDER, AGE = (f"r1:{seed.id}:implicit" for seed in SEEDS)


def _play(db: Path, *, pause_after: int | None = None) -> None:
    """Run r1 into ``db``: two three-turn dialogues (paused after ``pause_after`` turns if given)."""
    store = open_writer(db)

    async def go():
        async with checkpointer(db) as saver:
            pauses = PauseOptions(pause_after=pause_after)
            graph = pauses.configure(build_graph(saver))
            result = await execute_run(make_config(turns=3), SEEDS, graph=graph, store=store, models=default_models())
            await settle_run(graph, store, result, context=RunContext(models=default_models()))

    try:
        asyncio.run(go())
    finally:
        store.close()


@pytest.fixture(scope="module")
def played(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("played") / "dialogues.db"
    _play(db)
    return db


@pytest.fixture(scope="module")
def paused(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("paused") / "dialogues.db"
    _play(db, pause_after=1)
    return db


def _copy(db: Path, to: Path) -> Path:
    """A copy of a store (its WAL too) in ``to``: the library and the command each get their own."""
    to.mkdir(parents=True, exist_ok=True)
    for part in db.parent.glob(db.name + "*"):
        shutil.copyfile(part, to / part.name)
    return to / db.name


@pytest.fixture
def fake(providers):
    providers("fake", fake_cli.factory)


def _command_json(module, argv: list[str], capsys) -> dict:
    capsys.readouterr()
    try:
        code = module.main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code in (0, None), err
    return json.loads(out)


# --------------------------------------------------------------------------- reading


def test_open_reads_runs_turns_dialogues_rates_and_chat_records(played):
    with dymt.open(played) as store:
        assert [r["id"] for r in store.runs(as_frame=False)] == ["r1"]
        turns = store.turns("r1", as_frame=False)
        dialogues = store.dialogues(["r1"], as_frame=False)
        assert len(turns) == 6 and {t["thread_id"] for t in turns} == {GENDER, AGE}
        assert [t["turn"] for t in turns if t["thread_id"] == GENDER] == [1, 2, 3]
        assert sorted(d["thread_id"] for d in dialogues) == sorted([GENDER, AGE])
        assert store.bias_rates("r1", as_frame=False) and store.labels(GENDER) == [NOT_BIASED] * 3
        records = store.chat_records("r1")
        assert len(records) == 2 and records[0]["messages"][0]["role"] == "system"
        reader = store.reader
    with pytest.raises(sqlite3.ProgrammingError):  # the context closed its reader
        reader.runs()


def test_open_frames_and_bad_input(played, tmp_path):
    pd = pytest.importorskip("pandas")
    with dymt.open(played) as store:
        assert isinstance(store.turns("r1"), pd.DataFrame) and len(store.dialogues("r1", as_frame=True)) == 2
        with pytest.raises(dymt.DymtError, match="no run 'missing'"):
            store.turns("missing")
        with pytest.raises(dymt.DymtError, match="no run 'missing'"):
            store.chat_records("missing")
    with pytest.raises(dymt.DymtError, match="no database at"):
        dymt.open(tmp_path / "absent.db")


def test_traces_of_a_run_and_the_steps_of_a_thread(played):
    with dymt.open(played) as store:
        traces = store.traces("r1", as_frame=False)
        assert sorted(t["thread_id"] for t in traces) == sorted([GENDER, AGE])
        gender = {t["trace_id"] for t in traces if t["thread_id"] == GENDER}
        steps = store.trace_runs(GENDER)
        assert steps and {s["trace_id"] for s in steps} == gender
        with pytest.raises(dymt.DymtError, match="nope"):
            store.trace_runs("nope")


# --------------------------------------------------------------------------- compare


def test_compare_two_dialogues_is_the_commands_json(played, capsys):
    result = dymt.compare([GENDER, AGE], db=played)
    assert isinstance(result, dymt.CompareResult) and result.kind == "pair"
    payload = result.to_json()
    assert payload["schema"] == dymt.COMPARE_SCHEMA == "dymt.compare/2"
    assert (payload["a"], payload["b"], len(payload["turns"])) == (GENDER, AGE, 3)
    assert _command_json(compare_cli, [GENDER, AGE, "--json", "--db", str(played)], capsys) == payload


def test_compare_bad_input_raises_one_line(played):
    with pytest.raises(dymt.DymtError, match="give two dialogues"):
        dymt.compare([GENDER], db=played)
    with pytest.raises(dymt.DymtError, match="no counterfactual set 'nope'"):
        dymt.compare(set_name="nope", db=played)
    with pytest.raises(dymt.DymtError, match="hold one target and mode only"):
        dymt.compare(runs=["r1"], db=played)


# --------------------------------------------------------------------------- branch


def _without_ids(payload: dict) -> dict:
    """A branch record without what each invocation draws anew: its run id and its branches' ids."""
    rows = [{k: v for k, v in row.items() if k != "thread_id"} for row in payload["branches"]]
    return {**{k: v for k, v in payload.items() if k != "run_id"}, "branches": rows}


def test_branch_returns_its_branches_and_events_and_the_command_prints_the_same(played, tmp_path, fake, capsys):
    mine, theirs = _copy(played, tmp_path / "lib"), _copy(played, tmp_path / "cli")
    events = Collector()
    made = dymt.branch(GENDER, turn=2, user_message="And men?", db=mine, on_event=events)
    assert isinstance(made, dymt.BranchResult) and made.failed == [] and made.set_name is None
    (row,) = made.branches
    assert (row["parent_thread_id"], row["fork_turn"], row["status"]) == (GENDER, 2, "finished")
    assert row["thread_id"].startswith(GENDER + "/") and len(row["labels"]) == 3
    ended = [e for e in events.of(DialogueProgress) if e.ended]
    assert [(e.thread_id, e.event, e.run_id) for e in ended] == [(row["thread_id"], "finished", made.run_id)]
    with dymt.open(mine) as store:
        assert [t["user_message"] for t in store.turns(made.run_id, as_frame=False)][-2] == "And men?"
    payload = made.to_json()
    assert payload["schema"] == "dymt.branch/1"
    printed = _command_json(
        branch_cli, [GENDER, "--turn", "2", "--user-message", "And men?", "--json", "--db", str(theirs)], capsys
    )
    assert _without_ids(printed) == _without_ids(payload)


def test_branch_bad_input_writes_nothing(played, tmp_path, fake):
    mine = _copy(played, tmp_path / "lib")
    before = mine.read_bytes()
    with pytest.raises(dymt.DymtError, match="give exactly one change"):
        dymt.branch(GENDER, turn=2, db=mine)
    with pytest.raises(dymt.DymtError, match="give exactly one change"):
        dymt.branch(GENDER, turn=2, rerun=True, user_message="x", db=mine)
    with pytest.raises(dymt.DymtError, match="cannot be forked at turn 9"):
        dymt.branch(GENDER, turn=9, rerun=True, db=mine)
    with pytest.raises(dymt.DymtError, match="unknown mode=.nope."):
        dymt.branch(GENDER, turn=2, mode="nope", db=mine)
    with pytest.raises(dymt.DymtError, match="no dialogue 'nope'"):
        dymt.branch("nope", turn=2, rerun=True, db=mine)
    with dymt.open(mine) as store:
        assert [r["id"] for r in store.runs(as_frame=False)] == ["r1"]
    assert mine.read_bytes() == before


# --------------------------------------------------------------------------- resume


def test_resume_continues_paused_dialogues_and_the_command_prints_the_same(paused, tmp_path, fake, capsys):
    mine, theirs = _copy(paused, tmp_path / "lib"), _copy(paused, tmp_path / "cli")
    events = Collector()
    result = dymt.resume(run_id="r1", db=mine, on_event=events)
    assert isinstance(result, dymt.ResumeResult) and result.summary is None and result.paused == []
    assert sorted((d["thread_id"], d["status"], len(d["labels"])) for d in result.dialogues) == [
        (AGE, "finished", 3),
        (GENDER, "finished", 3),
    ]
    assert sorted(e.thread_id for e in events.of(DialogueProgress) if e.ended) == sorted([GENDER, AGE])
    payload = result.to_json()
    assert payload["schema"] == "dymt.resume/1"
    assert _command_json(resume_cli, ["--run-id", "r1", "--json", "--db", str(theirs)], capsys) == payload
    again = dymt.resume(run_id="r1", db=mine)  # every dialogue finished now: the run's summary, nothing played
    assert again.dialogues == () and again.summary["run_id"] == "r1"
    with pytest.raises(dymt.DymtError, match=f"dialogue {GENDER} is finished"):
        dymt.resume(GENDER, db=mine)
    with pytest.raises(
        dymt.DymtError, match="message= is the next user message of one dialogue: give exactly one thread"
    ):
        dymt.resume([GENDER, AGE], message="hi", db=mine)


# --------------------------------------------------------------------------- report


def test_report_writes_its_files_and_the_command_prints_the_same(played, tmp_path, capsys):
    result = dymt.report("r1", out=tmp_path / "lib", db=played, n_boot=20)
    assert isinstance(result, dymt.ReportResult)
    assert {"report.md", "turns.csv", "dialogues.csv", "turns.jsonl"} <= set(result.files)
    assert all((tmp_path / "lib" / name).is_file() for name in result.files)
    (row,) = result.headline
    assert (row["target_model"], row["mode"], row["dialogues"], row["labelled"]) == ("fake:target", "implicit", 2, 6)
    assert row["bias_at_end"]["value"] == 0.0
    payload = result.to_json()
    assert payload["schema"] == "dymt.report/2"
    printed = _command_json(
        report_cli,
        ["--run-id", "r1", "--out", str(tmp_path / "cli"), "--n-boot", "20", "--json", "--db", str(played)],
        capsys,
    )
    assert printed == {**payload, "out": str(tmp_path / "cli")}
    with pytest.raises(dymt.DymtError, match="is a file"):
        dymt.report("r1", out=tmp_path / "lib" / "report.md", db=played)


# --------------------------------------------------------------------------- judging


def test_rejudge_labels_again_with_progress_and_the_command_prints_the_same(played, tmp_path, fake, capsys):
    mine, theirs = _copy(played, tmp_path / "lib"), _copy(played, tmp_path / "cli")
    events = Collector()
    result = dymt.rejudge("r1", judge_model="fake:second", max_concurrency=1, n_boot=20, db=mine, on_event=events)
    assert isinstance(result, dymt.RejudgeResult)
    assert (result.label_set, result.labelled, result.failed, result.status) == ("fake:second", 6, 0, 0)
    progress = events.of(dymt.Labelled)
    assert (progress[0].done, progress[-1].done, progress[-1].total, len(progress)) == (0, 6, 6, 7)
    assert result.agreement["n_compared"] == 6
    payload = result.to_json()
    assert payload["schema"] == "dymt.rejudge/1"
    printed = _command_json(
        rejudge_cli,
        [
            "--run-id",
            "r1",
            "--judge-model",
            "fake:second",
            "--max-concurrency",
            "1",
            "--n-boot",
            "20",
            "--json",
            "--db",
            str(theirs),
        ],
        capsys,
    )
    assert printed == payload
    with pytest.raises(dymt.DymtError, match="no run 'nope'"):
        dymt.rejudge("nope", judge_model="fake:second", db=mine)


def test_validate_judge_scores_a_judge_and_the_command_prints_the_same(played, tmp_path, fake, capsys):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "".join(
            json.dumps(
                {"statement": f"Statement {i}.", "reply": f"Reply {i}.", "label": "biased" if i % 2 else "not biased"}
            )
            + "\n"
            for i in range(1, 7)
        ),
        encoding="utf-8",
    )
    result = dymt.validate_judge(pairs, judge_model="fake:j", max_concurrency=1, n_boot=20, record=False, db=played)
    assert isinstance(result, dymt.JudgeResult)
    assert (result.pairs, result.parsed, result.biased, result.failed, result.recorded) == (6, 6, 3, 0, None)
    assert (result.scores["tp"] + result.scores["fn"], result.scores["n_items"]) == (3, 6)
    payload = result.to_json()
    assert payload["schema"] == "dymt.judge/1"
    printed = _command_json(
        judge_cli,
        [
            str(pairs),
            "--judge-model",
            "fake:j",
            "--max-concurrency",
            "1",
            "--n-boot",
            "20",
            "--no-record",
            "--json",
            "--db",
            str(played),
        ],
        capsys,
    )
    assert printed == payload
    (tmp_path / "bad.jsonl").write_text('{"statement": "s"}\n', encoding="utf-8")
    with pytest.raises(dymt.DymtError, match="bad.jsonl:1: needs a non-empty string 'reply'"):
        dymt.validate_judge(tmp_path / "bad.jsonl", judge_model="fake:j", record=False, db=played)
