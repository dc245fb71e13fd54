"""One store location: a SQLite file or a ``postgresql://`` URL, parsed once from --db, an experiment file's ``db`` or
``$DYMT_ESB_DB``; one shared ``--db`` that every command takes in the same places, before or after its subcommand."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import checkpoints.paths
from checkpoints.location import PostgresURL, default_db, locate_db
from checkpoints.paths import ENV_DB, default_db_path
from cli import annotate, runs
from cli import trace as trace_cli
from graph.config.experiment import ExperimentError, load_experiment
from graph.config.run_config import RunConfig
from tests.conftest import default_models, play

ROOT = Path(__file__).resolve().parents[3]
URL = "postgresql://alice@127.0.0.1:1/dymt"


def test_db_goes_before_or_after_the_subcommand(db: Path, tmp_path: Path, capsys):
    play(db, default_models(), turns=1, run_id="r1")
    capsys.readouterr()
    outs = []
    for argv in (["--db", str(db), "list"], ["list", "--db", str(db)]):
        assert runs.main(argv) == 0
        outs.append(capsys.readouterr().out)
    assert "r1" in outs[0] and outs[0] == outs[1]
    before, after = tmp_path / "before.jsonl", tmp_path / "after.jsonl"
    assert runs.main(["--db", str(db), "export", "r1", "--out", str(before)]) == 0
    assert runs.main(["export", "r1", "--out", str(after), "--db", str(db)]) == 0
    assert before.read_text() == after.read_text() and json.loads(before.read_text().splitlines()[0])
    capsys.readouterr()
    shown = []
    for argv in (["--db", str(db), "list", "--run-id", "r1"], ["list", "--run-id", "r1", "--db", str(db)]):
        assert trace_cli.main(argv) == 0
        shown.append(capsys.readouterr().out)
    assert "r1" in shown[0] and shown[0] == shown[1]


@pytest.mark.parametrize(
    "argv",
    [
        ["--db", "A.db", "export", "--run-id", "r", "--sample", "1", "--out", "o.csv"],
        ["export", "--run-id", "r", "--sample", "1", "--out", "o.csv", "--db", "A.db"],
    ],
)
def test_a_subcommand_keeps_the_db_given_on_either_side(argv):
    assert annotate.build_parser().parse_args(argv).db == Path("A.db")
    assert trace_cli.build_parser().parse_args(["show", "T", "--db", URL]).db == PostgresURL(URL)
    assert trace_cli.build_parser().parse_args(["show", "T"]).db is None  # then $DYMT_ESB_DB, else the default file


def test_every_command_takes_the_one_shared_db_option():
    """No command writes its own --db: each calls cli.store_option.add_db_option (and with its subcommands, if any)."""
    own, shared = [], []
    for path in sorted((ROOT / "cli").glob("*.py")):
        text = path.read_text()
        if re.search(r'add_argument\([^)]*"--db"', text) and path.name != "store_option.py":
            own.append(path.name)
        if "add_db_option(" in text or "LabellingCommand(" in text:  # cli/labelling.py's commands add it there
            shared.append(path.stem)
    assert not own
    dymt = ast.parse((ROOT / "cli" / "dymt.py").read_text())
    commands = {
        elt.elts[0].value.removeprefix("cli.")
        for node in ast.walk(dymt)
        if isinstance(node, ast.Dict)
        for elt in node.values
        if isinstance(elt, ast.Tuple) and elt.elts[0].value.startswith("cli.")
    }
    # every dymt command's module; `reference` reads no store, `status` is cli/runs.py's subcommand
    assert commands - {"judge", "reference", "status"} <= set(shared) and {"judge", "runs"} <= set(shared)


def test_the_environment_variable_is_read_in_one_place(monkeypatch, tmp_path: Path):
    readers = [
        path.relative_to(ROOT).as_posix()
        for folder in ("checkpoints", "models", "nodes", "graph", "evals", "viewer", "cli")
        for path in (ROOT / folder).rglob("*.py")
        if re.search(r"environ[^\n]*(ENV_DB|DYMT_ESB_DB)", path.read_text())
    ]
    assert readers == ["checkpoints/location.py"]
    monkeypatch.setenv(ENV_DB, str(tmp_path / "env.db"))
    assert default_db_path() != tmp_path / "env.db"  # the default file is only the default
    assert default_db() == tmp_path / "env.db" == locate_db(None)
    assert locate_db(None, configured=Path("file.db")) == Path("file.db")  # an experiment file's db beats the variable
    assert locate_db(Path("flag.db"), configured=Path("file.db")) == Path("flag.db")  # and --db beats both
    monkeypatch.setenv(ENV_DB, URL)
    assert default_db() == PostgresURL(URL)


def test_an_experiment_files_db_is_a_path_or_a_postgresql_url(tmp_path: Path):
    exp = tmp_path / "exp.toml"
    exp.write_text(f'db = "{URL}"\n')
    assert load_experiment(exp).options["db"] == PostgresURL(URL)
    assert RunConfig.from_toml(exp).store_location() == PostgresURL(URL)
    exp.write_text('db = "runs/d.db"\n')
    assert RunConfig.from_toml(exp).store_location() == tmp_path / "runs" / "d.db"  # relative to the file
    exp.write_text('db = "postgresql://alice:s3cret@127.0.0.1/dymt"\n')
    with pytest.raises(ExperimentError, match=r"exp.toml:1: db carries a password") as caught:
        load_experiment(exp)
    assert "s3cret" not in str(caught.value)


def test_graph_run_checks_the_sqlite_file_once(db: Path, monkeypatch, capsys, providers):
    """The location is parsed once and the file checked once, where the writer opens it."""
    from cli import run
    from tests.support.fake_cli import factory

    providers("fake", factory)
    checked = []
    real = checkpoints.paths.check_db_path

    def spy(path, **kwargs):
        checked.append(Path(path))
        return real(path, **kwargs)

    for module in ("checkpoints.store", "checkpoints.readers", "dymt.preparing"):
        monkeypatch.setattr(f"{module}.check_db_path", spy)
    argv = [
        "--db",
        str(db),
        "--turns",
        "1",
        "--limit",
        "1",
        "--user-model",
        "fake:u",
        "--target-model",
        "fake:t",
        "--judge-model",
        "fake:j",
        "--json",
        "--no-trace",
        "--run-id",
        "once",
    ]
    assert run.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["finished"] == 1
    assert checked == [db]
