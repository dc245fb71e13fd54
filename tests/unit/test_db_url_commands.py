"""Commands other than the PostgreSQL-aware ones refuse a ``postgresql://`` --db in one line, never echoing it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
URL = "postgresql://alice:s3cret@127.0.0.1:1/dymt"


@pytest.mark.parametrize(
    "argv",
    [
        ["graph.replay", "--list", "--db", URL],
        ["graph.runs", "--db", URL, "list"],
        ["graph.trace", "list", "--db", URL],
        ["graph.branches", "some-thread", "--db", URL],
        ["evals.report", "--run-id", "r", "--out", "rep", "--db", URL],
        ["evals.rejudge", "--run-id", "r", "--judge-model", "local:gemma3-270m", "--db", URL],
    ],
)
def test_a_postgres_url_is_refused_in_one_line(tmp_path, argv):
    done = subprocess.run([sys.executable, "-m", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "PostgreSQL URL" in lines[0] and "s3cret" not in done.stderr + done.stdout
    assert not list(tmp_path.glob("postgres*")) and not (tmp_path / "rep").exists()  # nothing written
