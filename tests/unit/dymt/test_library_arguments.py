"""The library as a notebook calls it: one string where a list is taken, the wrong type a one-line DymtError naming
the keyword argument (never an AttributeError or a database error), an experiment file as ``dymt.run``'s config, a
paused dialogue's progress said as paused; and the command saying the same errors in its flags."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import dymt
from cli import run as run_cli
from cli.flag_words import flag_words, flags_of
from dymt.events import Collector, DialogueProgress, Paused
from tests.unit.dymt.test_library import GENDER, _copy, fake, played  # noqa: F401 - the fixtures


def _fake_run(db: Path, **options) -> dict:
    return dict(
        db=str(db),
        user_model="fake:u",
        judge_model="fake:j",
        target_model=["fake:t"],
        categories=["gender"],
        turns=2,
        **options,
    )


def test_compare_takes_one_run_id_as_a_string(played):  # noqa: F811 - the fixture
    with pytest.raises(dymt.DymtError, match=r"no run 'ab'"):
        dymt.compare(runs="ab", db=played)  # one run called ab, not the runs a and b
    with pytest.raises(dymt.DymtError, match=r"^runs=\[1, 2\]: 1 is not a string$"):
        dymt.compare(runs=[1, 2], db=played)
    with pytest.raises(dymt.DymtError, match=r"^runs=5: give a string or a list of strings$"):
        dymt.compare(runs=5, db=played)


def test_branch_takes_one_swap_as_a_string(played, tmp_path, fake):  # noqa: F811 - the fixture
    mine = _copy(played, tmp_path / "lib")
    made = dymt.branch(GENDER, turn=2, swap="women=men", db=mine)
    (row,) = made.branches
    assert row["status"] == "finished" and row["change"]["swaps"] == "women=men"
    with pytest.raises(dymt.DymtError, match=r"^swap=3: give 'OLD=NEW' or a pair of strings"):
        dymt.branch(GENDER, turn=2, swap=[3], db=mine)
    with pytest.raises(dymt.DymtError, match=r"^swap='women' is not OLD=NEW"):
        dymt.branch(GENDER, turn=2, swap="women", db=mine)
    with pytest.raises(dymt.DymtError, match=r"^turn='2' must be a whole number"):
        dymt.branch(GENDER, turn="2", swap="women=men", db=mine)


def test_rejudge_of_a_list_says_to_give_one_run_id(played):  # noqa: F811 - the fixture
    with pytest.raises(dymt.DymtError, match=r"^run_id=\['pilot'\]: give one id as a string \(run_id='pilot'\)$"):
        dymt.rejudge(["pilot"], judge_model="fake:j", db=played)
    with pytest.raises(dymt.DymtError, match=r"^run_id=None: give one id"):
        dymt.rejudge(None, judge_model="fake:j", db=played)


def test_resume_of_a_wrong_type_is_one_line(played):  # noqa: F811 - the fixture
    with pytest.raises(dymt.DymtError, match=r"^threads=7: give a string or a list of strings$"):
        dymt.resume(7, db=played)


def test_run_takes_an_experiment_file_and_refuses_other_types(tmp_path, fake):  # noqa: F811 - the fixture
    experiment = tmp_path / "exp.toml"
    experiment.write_text(
        'turns = 2\ncategories = ["gender"]\n[models]\nuser = "fake:u"\njudge = "fake:j"\ntargets = ["fake:t"]\n'
    )
    db = tmp_path / "d.db"
    result = dymt.run(str(experiment), db=str(db), run_id="fromfile")
    assert result.ended == "finished" and result.summary["finished"] == 1
    with dymt.open(db) as store:
        assert store.runs(as_frame=False)[0]["id"] == "fromfile"
    with pytest.raises(dymt.DymtError, match=r"^config=42: give a RunConfig, the path of an experiment file"):
        dymt.run(42, db=str(db))
    with pytest.raises(dymt.DymtError, match="exp.toml|no such|not found|does not exist"):
        dymt.run(str(tmp_path / "missing.toml"), db=str(db))


def test_a_paused_dialogue_says_paused_and_status_is_a_deprecated_alias(tmp_path, fake):  # noqa: F811
    events = Collector()
    result = dymt.run(**_fake_run(tmp_path / "p.db", pause_after=1, run_id="p"), on_event=events)
    ended = [e.event for e in events.of(DialogueProgress) if e.ended]
    assert ended == ["paused"] and len(events.of(Paused)) == 1 and result.paused and result.ended == "finished"
    with pytest.warns(DeprecationWarning, match="RunResult.ended"):
        assert result.status == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert result.ended == "finished"  # no warning for the new name


def test_errors_name_keyword_arguments_and_the_command_says_its_flags(tmp_path, capsys):
    with pytest.raises(dymt.DymtError) as caught:
        dymt.run(db=str(tmp_path / "x.db"), turns="five")
    assert str(caught.value) == "turns='five' is a wrong value (input should be a valid integer)"
    with pytest.raises(dymt.DymtError, match=r"^max_cost= needs pricing="):
        dymt.run(db=str(tmp_path / "x.db"), max_cost=1.0)
    flags = flags_of(run_cli.build_parser())
    assert flag_words(str(caught.value), flags) == "--turns 'five' is a wrong value (input should be a valid integer)"
    assert flag_words("drop review=, pause_after= and max_cost= (or the file's max_cost)", flags) == (
        "drop --interactive, --pause-after and --max-cost (or the file's max_cost)"
    )
    assert flag_words("swap='women=men' in run r=1", {"swap": "--swap"}) == "--swap 'women=men' in run r=1"
    with pytest.raises(SystemExit) as stopped:
        run_cli.main(["--db", str(tmp_path / "x.db"), "--max-cost", "1"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --max-cost needs --pricing") and "=" not in err.split("(")[0]
    assert not (tmp_path / "x.db").exists()


def test_a_new_run_id_outside_the_safe_alphabet_is_one_line_and_old_ones_stay_readable(tmp_path, capsys):
    import asyncio

    from checkpoints.store import open_writer
    from cli import runs as runs_cli
    from graph.running.pausing import PauseOptions, settle_run
    from graph.running.playing import execute_run, open_graph
    from nodes.context import RunContext
    from tests.conftest import SEEDS, default_models, make_config

    for bad in ("a b", "a:b", "x/y", "-x", "r#1", "x" * 65):
        with pytest.raises(dymt.DymtError, match=r"^run_id=.*: a new run's id uses letters, digits"):
            dymt.Invocation(db=str(tmp_path / "new.db"), run_id=bad)
    with pytest.raises(SystemExit):
        run_cli.main(["--db", str(tmp_path / "new.db"), "--run-id", "a:b"])
    assert capsys.readouterr().err.startswith("error: --run-id 'a:b': a new run's id uses")
    assert not (tmp_path / "new.db").exists()
    # a store made with an id outside it (before the alphabet): read, resumed by its id, its commands quoted
    folder = tmp_path / "my runs"
    folder.mkdir()
    db = folder / "d.db"
    store = open_writer(db)

    async def play() -> None:
        async with open_graph(db) as graph:
            graph = PauseOptions(pause_after=1).configure(graph)
            config = make_config("old run:1", turns=3).model_copy(update={"seeds": "builtin"})  # resolvable again
            result = await execute_run(config, SEEDS, graph=graph, store=store, models=default_models())
            await settle_run(graph, store, result, context=RunContext(models=default_models()))

    try:
        asyncio.run(play())
    finally:
        store.close()
    with dymt.open(db) as reader:
        assert [r["id"] for r in reader.runs(as_frame=False)] == ["old run:1"]
    assert dymt.Invocation(db=str(db), run_id="old run:1").stored  # its own id: not refused
    capsys.readouterr()
    assert runs_cli.main(["status", "old run:1", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "python -m evals.annotate" in line]
    assert len(lines) == 2, out
    for line in lines:  # each whole on its line (never wrapped at 80 columns), each word quoted for a shell
        assert "--run-id 'old run:1' " in line and line.rstrip().endswith(f"--db '{db}'"), out


def test_list_options_take_one_string_and_refuse_other_types(tmp_path):
    db = str(tmp_path / "e.db")
    assert dymt.estimate(db=db, categories="age")["dialogues"] == 1  # one category, as categories=["age"]
    for keyword, value in (("mode", 5), ("target_model", 5), ("categories", [1]), ("rate_limit", 3)):
        with pytest.raises(
            dymt.DymtError, match=rf"^{keyword}={re.escape(repr(value))}: give a string or a list of strings$"
        ):
            dymt.estimate(db=db, **{keyword: value})
    with pytest.raises(dymt.DymtError, match=r"^ids=5: give a string or a list of strings$"):
        dymt.report(5, out=tmp_path / "r", db=db)
    with pytest.raises(dymt.DymtError, match=r"^file=5: give the path of a JSONL file"):
        dymt.validate_judge(5, judge_model="local:gemma3-270m", db=db)
    assert not (tmp_path / "e.db").exists()


def test_the_single_process_rule_is_said_in_keywords_and_in_flags(tmp_path, capsys):
    db = str(tmp_path / "s.db")
    with pytest.raises(dymt.DymtError, match=r"^processes= plays on one SQLite file .* drop review=, pause_after= and"):
        dymt.run(db=db, processes=2, pause_after=1)
    with pytest.raises(SystemExit):
        run_cli.main(["--db", db, "--processes", "2", "--pause-after", "1"])
    assert capsys.readouterr().err == (
        "error: --processes plays on one SQLite file without pauses or a cost cap: drop --interactive, --pause-after "
        "and --max-cost (or the experiment file's max_cost), or use a PostgreSQL --db with python -m graph.worker\n"
    )
