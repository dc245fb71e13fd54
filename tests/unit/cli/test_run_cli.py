"""``python -m graph.run`` on bad input: one line saying what to fix, exit status 2, nothing written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support import forked
from tests.support.backends import Db, dump_all, execute, written


def run_cli(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(env_extra or {})
    return forked.run("graph.run", *args, cwd=REPO, env=env, timeout=120)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--mode", "sneaky"], "unknown --mode 'sneaky'"),
        (["--turns", "0"], "--turns"),
        (["--seeds", "/nonexistent/seeds.jsonl"], "seeds.jsonl"),
        (["--categories", "height"], "height"),
        (["--target-model", "acme:super-llm"], "unknown model provider 'acme'"),
        (["--target-model", "gemma3-270m"], "provider:model"),
        (["--judge-model", "openai:gpt-4o-mini"], "OPENAI_API_KEY"),
        (["--user-model", "google_genai:gemini-2.5-flash-lite"], "GOOGLE_API_KEY"),
        (["--bogus-flag"], "unrecognized arguments"),
    ],
)
@pytest.mark.slow
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, backend_db: Db, args, expected):
    db = tmp_path / "out" / "d.db" if isinstance(backend_db, Path) else backend_db
    result = run_cli(*args, "--db", str(db))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert result.stdout == ""
    assert not written(db)
    if isinstance(db, Path):
        assert not db.parent.exists()


@pytest.mark.slow
def test_bad_seed_file_contents(tmp_path: Path, backend_db: Db):
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text('{"id": "a", "category": "gender"}\n')
    db = backend_db
    result = run_cli("--seeds", str(seeds), "--db", str(db))
    assert result.returncode == 2
    assert "statement" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not written(db)


# SQLite only: about what a --db path points at (a directory, a file that is not SQLite).
@pytest.mark.slow
def test_db_path_that_is_a_directory_or_not_sqlite(tmp_path: Path):
    result = run_cli("--db", str(tmp_path))
    assert result.returncode == 2 and "is a directory" in result.stderr
    not_sqlite = tmp_path / "notes.db"
    not_sqlite.write_text("hello")
    result = run_cli("--db", str(not_sqlite))
    assert result.returncode == 2 and "not a SQLite database" in result.stderr
    assert not_sqlite.read_text() == "hello"


@pytest.mark.slow
def test_help_lists_the_flags():
    result = run_cli("--help")
    assert result.returncode == 0
    for flag in (
        "--mode",
        "--turns",
        "--seeds",
        "--per-category",
        "--categories",
        "--limit",
        "--user-model",
        "--target-model",
        "--judge-model",
        "--db",
        "--run-id",
        "--json",
    ):
        assert flag in result.stdout


def _register_fake_provider(providers):
    from tests.conftest import ScriptedChatModel

    def factory(name, role, sampling):
        replies = {
            "user": lambda m, n: f"Question {n}?",
            "target": lambda m, n: f"Answer {n}.",
            # Turn parity decides the label, so the summary has something to count.
            "judge": lambda m, n: f"Rationale: r{n}.\nLabel: {'biased' if n % 2 else 'not biased'}",
        }
        return ScriptedChatModel(respond=replies[role], calls=[]), f"fake:{name}", "chat"

    providers("fake", factory)


@pytest.mark.slow
def test_json_summary_and_resume_in_process(backend_db: Db, capsys, providers):
    from cli import run

    _register_fake_provider(providers)
    db = backend_db
    argv = [
        "--user-model",
        "fake:u",
        "--target-model",
        "fake:t",
        "--judge-model",
        "fake:j",
        "--turns",
        "3",
        "--db",
        str(db),
        "--run-id",
        "demo",
        "--json",
    ]
    assert run.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dialogues"] == 6 and summary["finished"] == 6
    # Each fake judge is fresh per process... here one judge serves all 6 dialogues in order:
    # calls 1..18, odd calls biased; so turn 1 of dialogue 1 is biased, turn 2 clean, turn 3 biased...
    assert [t["labelled"] for t in summary["per_turn"]] == [6, 6, 6]
    assert sum(t["biased"] for t in summary["per_turn"]) == 9
    assert summary["cumulative"][-1]["rate"] >= summary["cumulative"][0]["rate"]
    assert summary["failed"] == [] and summary["unparsed_labels"] == 0
    if isinstance(db, Path):  # a SQLite file is private to its owner
        assert oct(db.stat().st_mode & 0o777) == oct(0o600)

    assert run.main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["skipped_this_time"] == 6 and again["per_turn"] == summary["per_turn"]

    conflicting = [a if a != "3" else "4" for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        run.main(conflicting)
    assert exit_info.value.code == 2
    assert "--turns 4 contradicts run demo, stored with 3: drop --turns" in capsys.readouterr().err


def _snapshot(db: Db) -> bytes | dict[str, list[str]]:
    """A SQLite file's bytes (after its WAL is folded in); every row of every table of a PostgreSQL database."""
    if not isinstance(db, Path):
        return dump_all(db)
    import sqlite3

    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return db.read_bytes()


@pytest.mark.slow
def test_newer_schema_and_bad_input_leave_an_existing_database_as_it_was(backend_db: Db, capsys, providers):
    from cli import run

    _register_fake_provider(providers)
    db = backend_db
    fakes = ["--user-model", "fake:u", "--target-model", "fake:t", "--judge-model", "fake:j"]
    assert run.main([*fakes, "--turns", "1", "--limit", "1", "--db", str(db), "--run-id", "a", "--json"]) == 0
    before = _snapshot(db)
    for bad in (
        ["--mode", "nope"],
        ["--turns", "0"],
        ["--categories", "height"],
        ["--target-model", "x:y"],
        ["--run-id", "a", "--turns", "2"],
    ):
        result = run_cli(*bad, "--db", str(db)) if "--run-id" not in bad else None
        if result is not None:
            assert result.returncode == 2
        else:
            with pytest.raises(SystemExit):
                run.main([*fakes, *bad, "--limit", "1", "--db", str(db)])
        assert _snapshot(db) == before, bad

    execute(db, "insert into _migrations values ('m999_from_the_future', 'x')")
    before = _snapshot(db)
    result = run_cli("--db", str(db), "--limit", "1")
    assert result.returncode == 2
    assert "newer than this DyMT-ESB" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert _snapshot(db) == before


@pytest.mark.slow
def test_a_run_id_alone_shows_a_finished_run_again_and_resumes_an_unfinished_one(tmp_path: Path):
    """``--run-id R --db D`` and nothing else: the stored settings (models, turns, base URL) play the rest of an
    unfinished run, a finished run shows its summary again without a model call, and only a flag that contradicts
    the run is refused."""
    from tests.support.stub_server import StubServer

    db = tmp_path / "d.db"
    again = ["--run-id", "r", "--db", str(db), "--json"]
    with StubServer() as stub:
        first = run_cli(
            "--user-model",
            "openai:u",
            "--target-model",
            "openai:t",
            "--judge-model",
            "openai:j",
            "--base-url",
            stub.url,
            "--turns",
            "2",
            "--categories",
            "gender",
            "race",
            "--no-trace",
            "--pause-after",
            "1",
            *again,
        )
        assert first.returncode == 0, first.stderr
        paused = json.loads(first.stdout)
        assert len(paused["paused"]) == 2 and paused["finished"] == 0
        resumed = run_cli(*again)  # models, turns, categories and the server's URL come from the run
        assert resumed.returncode == 0, resumed.stderr
        played = json.loads(resumed.stdout)
        assert played["finished"] == played["dialogues"] == 2 and played["turns"] == 2
        assert played["models"]["judge"] == "openai:j" and [t["labelled"] for t in played["per_turn"]] == [2, 2]
        calls = len(stub.requests)
    shown = run_cli(*again)  # the server is gone: showing the finished run again calls no model
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["per_turn"] == played["per_turn"] and calls > 0
    agreeing = run_cli("--run-id", "r", "--db", str(db), "--turns", "2", "--max-concurrency", "3")
    assert agreeing.returncode == 0 and "Run r" in agreeing.stdout, agreeing.stderr
    for flag, value, stored in (
        ("--turns", "3", "2"),
        ("--judge-model", "openai:other", "openai:j"),
        ("--categories", "age", "gender race"),
    ):
        refused = run_cli("--run-id", "r", "--db", str(db), flag, value)
        err = refused.stderr.strip()
        assert refused.returncode == 2 and len(err.splitlines()) == 1, err
        assert f"{flag} {value} contradicts run r, stored with {stored}: drop {flag}" in err


def test_the_summary_fits_80_columns_without_cutting_a_model_spec(db: Path, capsys, providers):
    from rich.console import Console

    from cli import run
    from evals.report.summary_view import render_summary

    _register_fake_provider(providers)
    targets = ["fake:a-rather-long-target-model-2026-01-15", "fake:another-long-target-model-2026-02-01"]
    assert (
        run.main(
            [
                "--user-model",
                "fake:u",
                "--judge-model",
                "fake:j",
                "--target-model",
                *targets,
                "--mode",
                "implicit",
                "assessment",
                "--turns",
                "2",
                "--categories",
                "gender",
                "--db",
                str(db),
                "--run-id",
                "grid",
                "--json",
                "--no-trace",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    console = Console(record=True, width=80, file=open("/dev/null", "w"))
    render_summary(summary, console)
    text = console.export_text()
    # every line fits but a command printed to be copied whole (on a line of its own) and the line naming the store's
    # path, which is never broken either (a path cut at 80 columns would not copy)
    whole = ("    python -m ", f"stored in {db} ")
    assert not [line for line in text.splitlines() if len(line) > 80 and not line.startswith(whole)], text
    assert "…" not in text
    for i, spec in enumerate(targets, start=1):
        assert f"T{i} = {spec}" in text.splitlines() or f"  T{i} = {spec}" in text.splitlines(), text
    table = text.split("by target and mode", 1)[1]
    rows = [line.split() for line in table.splitlines()]
    assert [r[:2] for r in rows if r[:1] in (["T1"], ["T2"]) and r[1] != "="] == [
        ["T1", "assessment"],
        ["T1", "implicit"],
        ["T2", "assessment"],
        ["T2", "implicit"],
    ]  # each target by its key, whole modes
