"""Every command takes a ``postgresql://`` --db (or DYMT_ESB_DB); a URL with a password is refused in one line, never
echoed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import forked

REPO = Path(__file__).resolve().parents[3]
SECRET_URL = "postgresql://alice:s3cret@127.0.0.1:1/dymt"
NO_SERVER_URL = "postgresql://alice@127.0.0.1:1/dymt"  # port 1: nothing listens there

COMMANDS = [
    ["graph.replay", "--list", "--db", "{url}"],
    ["graph.runs", "--db", "{url}", "list"],
    ["graph.runs", "--db", "{url}", "export", "r", "--to", "copy.db"],
    ["graph.trace", "list", "--db", "{url}"],
    ["graph.branches", "some-thread", "--db", "{url}"],
    ["graph.compare", "thread-a", "thread-b", "--db", "{url}"],
    ["graph.resume", "some-thread", "--db", "{url}"],
    ["graph.branch", "some-thread", "--turn", "1", "--rerun", "--db", "{url}"],
    ["evals.report", "--run-id", "r", "--out", "rep", "--db", "{url}"],
    ["evals.rejudge", "--run-id", "r", "--judge-model", "local:gemma3-270m", "--db", "{url}"],
]


def _run(tmp_path: Path, argv: list[str], url: str, **env: str) -> subprocess.CompletedProcess:
    module, *args = (a.format(url=url) for a in argv)
    return forked.run(
        module,
        *args,
        cwd=tmp_path,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
    )


def _one_line_and_nothing_written(done: subprocess.CompletedProcess, tmp_path: Path) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "s3cret" not in done.stderr + done.stdout
    assert (
        not list(tmp_path.glob("postgres*")) and not (tmp_path / "rep").exists() and not (tmp_path / "copy.db").exists()
    )
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("argv", COMMANDS)
def test_a_url_with_a_password_is_refused_in_one_line(tmp_path, argv):
    line = _one_line_and_nothing_written(_run(tmp_path, argv, SECRET_URL), tmp_path)
    assert "password" in line and "~/.pgpass" in line


@pytest.mark.slow
@pytest.mark.parametrize("argv", COMMANDS)
def test_a_url_is_accepted_and_an_unreachable_server_is_one_line(tmp_path, argv):
    line = _one_line_and_nothing_written(_run(tmp_path, argv, NO_SERVER_URL), tmp_path)
    assert "cannot connect to PostgreSQL at postgresql://alice@127.0.0.1:1/dymt" in line


@pytest.mark.slow
def test_dymt_esb_db_may_be_a_url_too(tmp_path):
    line = _one_line_and_nothing_written(_run(tmp_path, ["graph.runs", "list"], "", DYMT_ESB_DB=SECRET_URL), tmp_path)
    assert line.startswith("error: DYMT_ESB_DB carries a password")
    line = _one_line_and_nothing_written(
        _run(tmp_path, ["graph.runs", "list"], "", DYMT_ESB_DB=NO_SERVER_URL), tmp_path
    )
    assert "cannot connect to PostgreSQL" in line


@pytest.mark.slow
def test_a_password_among_unrecognised_arguments_is_masked(tmp_path):
    line = _one_line_and_nothing_written(
        _run(tmp_path, ["graph.runs", "list", "--database", "{url}"], SECRET_URL), tmp_path
    )
    assert "unrecognized arguments" in line and "alice:***@" in line
    # --db after the subcommand is the shared option (no longer unrecognised): its password is refused, never echoed.
    line = _one_line_and_nothing_written(_run(tmp_path, ["graph.runs", "list", "--db", "{url}"], SECRET_URL), tmp_path)
    assert "carries a password" in line and "~/.pgpass" in line


@pytest.mark.slow
def test_evals_judge_refuses_a_url_with_a_password_in_db_or_dymt_esb_db(tmp_path):
    (tmp_path / "pairs.jsonl").write_text('{"statement": "S", "reply": "R", "label": "biased"}\n')
    argv = ["evals.judge", "pairs.jsonl", "--judge-model", "local:gemma3-270m", "--db", "{url}"]
    line = _one_line_and_nothing_written(_run(tmp_path, argv, SECRET_URL), tmp_path)
    assert "password" in line and "~/.pgpass" in line
    line = _one_line_and_nothing_written(_run(tmp_path, argv[:-2], "", DYMT_ESB_DB=SECRET_URL), tmp_path)
    assert line.startswith("error: DYMT_ESB_DB carries a password")


def test_evals_judge_records_its_score_in_a_postgres_store_and_the_run_summary_cites_it(tmp_path, pg_url, providers):
    from checkpoints.readers import open_reader
    from cli import judge as judge_cli
    from cli import run as run_cli
    from evals.scorers.judge_validation import run_validation
    from tests.support.fake_cli import factory

    providers("fake", factory)
    assert (
        run_cli.main(
            [
                "--user-model",
                "fake:u",
                "--target-model",
                "fake:t",
                "--judge-model",
                "fake:j",
                "--turns",
                "1",
                "--categories",
                "age",
                "--run-id",
                "r1",
                "--no-trace",
                "--db",
                pg_url,
            ]
        )
        == 0
    )
    with open_reader(pg_url) as reader:
        assert run_validation(reader, "r1")["validation"] is None
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        '{"statement": "S", "reply": "R", "label": "biased"}\n{"statement": "S", "reply": "Q", "label": "not biased"}\n'
    )
    assert judge_cli.main([str(pairs), "--judge-model", "fake:j", "--n-boot", "20", "--db", pg_url]) == 0
    with open_reader(pg_url) as reader:
        validation = run_validation(reader, "r1")["validation"]
    assert validation is not None and validation["n_items"] == 2 and validation["file"].endswith("pairs.jsonl")
    assert not (tmp_path / "postgresql:").exists()
