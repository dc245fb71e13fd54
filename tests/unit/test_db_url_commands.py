"""Every command takes a ``postgresql://`` --db (or DYMT_ESB_DB); a URL with a password is refused in one line, never echoed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
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
    return subprocess.run([sys.executable, "-m", *(a.format(url=url) for a in argv)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env})


def _one_line_and_nothing_written(done: subprocess.CompletedProcess, tmp_path: Path) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "s3cret" not in done.stderr + done.stdout
    assert not list(tmp_path.glob("postgres*")) and not (tmp_path / "rep").exists() and not (tmp_path / "copy.db").exists()
    return lines[0]


@pytest.mark.parametrize("argv", COMMANDS)
def test_a_url_with_a_password_is_refused_in_one_line(tmp_path, argv):
    line = _one_line_and_nothing_written(_run(tmp_path, argv, SECRET_URL), tmp_path)
    assert "password" in line and "~/.pgpass" in line


@pytest.mark.parametrize("argv", COMMANDS)
def test_a_url_is_accepted_and_an_unreachable_server_is_one_line(tmp_path, argv):
    line = _one_line_and_nothing_written(_run(tmp_path, argv, NO_SERVER_URL), tmp_path)
    assert "cannot connect to PostgreSQL at postgresql://alice@127.0.0.1:1/dymt" in line


def test_dymt_esb_db_may_be_a_url_too(tmp_path):
    line = _one_line_and_nothing_written(_run(tmp_path, ["graph.runs", "list"], "", DYMT_ESB_DB=SECRET_URL), tmp_path)
    assert line.startswith("error: DYMT_ESB_DB carries a password")
    line = _one_line_and_nothing_written(_run(tmp_path, ["graph.runs", "list"], "", DYMT_ESB_DB=NO_SERVER_URL), tmp_path)
    assert "cannot connect to PostgreSQL" in line


def test_a_password_among_unrecognised_arguments_is_masked(tmp_path):
    line = _one_line_and_nothing_written(_run(tmp_path, ["graph.runs", "list", "--db", "{url}"], SECRET_URL), tmp_path)
    assert "unrecognized arguments" in line and "alice:***@" in line
