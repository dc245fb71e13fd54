"""Every reader and command on a PostgreSQL store reads what it reads on SQLite; ``runs export --to`` copies a run
offline.

The same fake-model run is played into a SQLite file and into a fresh PostgreSQL database (a real server:
``pg_url``, skipped loudly without one); replay, branches, trace list, runs list and the report must agree,
apart from times and where the store is. Branch and resume write through LangGraph's PostgreSQL saver.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import forked

REPO = Path(__file__).resolve().parents[3]
RUN = [
    "--user-model",
    "fake:u",
    "--target-model",
    "fake:t",
    "--judge-model",
    "fake:j",
    "--turns",
    "3",
    "--categories",
    "age",
    "gender",
    "--run-id",
    "r1",
]
THREAD = "r1:builtin-age-07:implicit"
# ISO and display timestamps, durations, and the time-ordered trace ids (UUIDv7) differ between two plays.
TIMES = re.compile(
    r"\d{4}-\d\d-\d\dT?\s*[\d:.]+(\+00:00|Z)?|\b\d+(\.\d+)?(ms|s)\b|[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}"
)


def cli(cwd: Path, *args: str, module: str = "tests.support.fake_cli") -> str:
    env = {k: v for k, v in os.environ.items() if k != "DYMT_ESB_DB" and not k.endswith("_API_KEY")}
    env |= {"PYTHONPATH": str(REPO), "COLUMNS": "200"}
    done = forked.run(module, *args, cwd=cwd, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def graph(cwd: Path, command: str, *args: str) -> str:
    return cli(cwd, command, *args)


def same(text: str, db: str | Path) -> str:
    """``text`` without times and with the store's name as DB."""
    return TIMES.sub("T", text.replace(str(db), "DB"))


def outputs(cwd: Path, db: str | Path) -> dict[str, str]:
    """What the readers print and the report writes for run r1 in ``db``."""
    db = str(db)
    out = {
        "replay --list": cli(cwd, "--list", "--db", db, module="graph.replay"),
        "replay --print": cli(cwd, "--print", THREAD, "--db", db, module="graph.replay"),
        "branches": graph(cwd, "branches", THREAD, "--db", db),
        # columns as wide as their longest time: compared word by word
        "trace list": " ".join(
            re.sub(
                r"[─━]+", " ", TIMES.sub("T", cli(cwd, "list", "--run-id", "r1", "--db", db, module="graph.trace"))
            ).split()
        ),
        # the table's title is the store's name, wrapped to the table's width
        "runs list": "┏" + cli(cwd, "--db", db, "list", module="graph.runs").split("┏", 1)[1],
    }
    report = cwd / f"report-{len(list(cwd.glob('report-*')))}"
    cli(cwd, "--run-id", "r1", "--out", str(report), "--db", db, module="evals.report")
    for name in ("report.md", "turns.csv", "dialogues.csv", "turns.jsonl"):
        out[name] = (report / name).read_text(encoding="utf-8")
    return {k: same(v, db) for k, v in out.items()}


@pytest.fixture
def played(tmp_path: Path, pg_url: str) -> tuple[Path, str]:
    """Run r1 played by the fake models into a SQLite file and into PostgreSQL."""
    sqlite = tmp_path / "d.db"
    graph(tmp_path, "run", *RUN, "--db", str(sqlite))
    graph(tmp_path, "run", *RUN, "--db", pg_url)
    return sqlite, pg_url


@pytest.mark.slow
def test_every_reader_reads_a_postgres_run_as_it_reads_the_same_run_on_sqlite(tmp_path: Path, played):
    sqlite, url = played
    on_sqlite, on_postgres = outputs(tmp_path, sqlite), outputs(tmp_path, url)
    assert (
        "Answer 1." in on_postgres["replay --print"] and "r1:builtin-gender-07:implicit" in on_postgres["replay --list"]
    )
    assert on_postgres["turns.csv"].count("\n") == 1 + 2 * 3
    for name, text in on_sqlite.items():
        assert on_postgres[name] == text, name


@pytest.mark.slow
def test_branch_compare_and_resume_write_through_the_postgres_saver(tmp_path: Path, pg_url: str):
    graph(tmp_path, "run", *RUN, "--pause-after", "2", "--db", pg_url)
    listed = cli(tmp_path, "--list", "--db", pg_url, module="graph.replay")
    assert listed.count("paused") == 2
    resumed = graph(tmp_path, "resume", "--run-id", "r1", "--db", pg_url)
    assert THREAD in resumed
    listed = cli(tmp_path, "--list", "--db", pg_url, module="graph.replay")
    assert listed.count("finished") == 2 and "paused" not in listed
    child = graph(tmp_path, "branch", THREAD, "--turn", "2", "--rerun", "--name", "again", "--db", pg_url).split()[0]
    assert child.startswith(THREAD + "/t2-")
    tree = graph(tmp_path, "branches", THREAD, "--db", pg_url)
    assert child in tree and "turn 2" in tree
    printed = cli(tmp_path, "--print", child, "--db", pg_url, module="graph.replay")
    assert "Turn 3 of 3" in printed
    assert "Counterfactual set again" in graph(tmp_path, "compare", "--set", "again", "--db", pg_url)
    assert "Answer" in graph(tmp_path, "compare", THREAD, child, "--db", pg_url)


@pytest.mark.slow
def test_runs_export_to_a_sqlite_file_replays_and_reports_the_same_offline(tmp_path: Path, played):
    _, url = played
    copy = tmp_path / "copy.db"
    said = cli(tmp_path, "--db", url, "export", "r1", "--to", str(copy), module="graph.runs")
    assert "dialogues 2" in said and "checkpoints" in said
    assert copy.stat().st_mode & 0o077 == 0  # owner-only, as every store holding generated text
    assert outputs(tmp_path, copy) == outputs(tmp_path, url)
    # Its checkpoints are in the SQLite saver's format: a branch continues from them offline.
    child = graph(tmp_path, "branch", THREAD, "--turn", "3", "--rerun", "--db", str(copy)).split()[0]
    assert "Turn 3 of 3" in cli(tmp_path, "--print", child, "--db", str(copy), module="graph.replay")


@pytest.mark.slow
def test_export_refuses_an_existing_file_and_an_unknown_run_and_writes_nothing(tmp_path: Path, played):
    sqlite, url = played
    for args, message in (
        (["r1", "--to", str(sqlite)], "exists"),
        (["nope", "--to", str(tmp_path / "new.db")], "no run 'nope'"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "graph.runs", "--db", url, "export", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=120,
        )
        assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "new.db").exists() and not list(tmp_path.glob(".*.partial*"))
