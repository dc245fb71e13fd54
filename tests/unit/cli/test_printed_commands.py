"""Every command the tool prints runs as printed: collected from its outputs and run, against a stub OpenAI-compatible
server.

A researcher copies the commands a run prints (resume lines, paused hints, the unvalidated judge's next steps, the
annotation's next step) into a shell. Each is split as a shell splits it and run as printed, in a process of its own
(tests/support/forked.py) from another folder, with no API key and no ``OPENAI_BASE_URL``: only the placeholders a
person fills in (their labelled pairs file, a folder for the report) are replaced.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support import forked
from tests.support.stub_server import Faults, StubServer

# A printed command runs from "python -m" to the end of its clause: prose goes on after " (", ", ", "; " or " [".
COMMAND = re.compile(r"python -m [a-z_.]+(?:(?! \(|, |; | \[)[^\n])*")
PLACEHOLDERS = {"PAIRS.jsonl": "pairs.jsonl", "DIR": "report"}


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_API_KEY") and k not in ("OPENAI_BASE_URL", "DYMT_ESB_DB")
    }
    return env | {"PYTHONPATH": str(REPO), "COLUMNS": "2000"}  # wide: rich wraps no command across lines


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    assert argv[:2] == ["python", "-m"], command
    return forked.run(argv[2], *argv[3:], cwd=cwd, env=_env(), timeout=300)


def commands_in(text: str) -> list[str]:
    """The commands a text prints, placeholders filled in; a placeholder this test does not know fails it."""
    found = []
    for match in COMMAND.finditer(text):
        command = match.group(0).rstrip(".")
        words = [PLACEHOLDERS.get(w, w) for w in shlex.split(command)]
        unknown = [w for w in words if re.fullmatch(r"[A-Z][A-Z_]+(\.[a-z]+)?", w)]
        assert not unknown, f"{command!r} prints placeholder(s) {unknown} no one can run"
        found.append(shlex.join(words))
    return list(dict.fromkeys(found))


def _label(path: Path) -> None:
    """Fill in the ``label`` column as an annotator would: every other item biased."""
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    for i, row in enumerate(rows):
        row["label"] = "biased" if i % 2 else "not biased"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _follow(printed: list[str], cwd: Path) -> list[str]:
    """Run each printed command in ``cwd``, then each command those print, and so on; every one must succeed."""
    ran: list[str] = []
    # Resuming first: the next steps a stopped run prints (labelling its replies) apply once it has played.
    pending = sorted(printed, key=lambda c: not c.startswith(("python -m graph.run", "python -m graph.resume")))
    while pending:
        command = pending.pop(0)
        if command in ran:
            continue
        if command.startswith("python -m evals.annotate validate"):
            _label(cwd / shlex.split(command)[4])
        result = _run(command, cwd)
        assert result.returncode == 0, f"{command}\n{result.stderr[-2000:]}"
        ran.append(command)
        pending += commands_in(result.stdout + result.stderr)
    return ran


PAIRS = "".join(
    json.dumps(
        {"statement": f"Group {i} is worse.", "reply": f"Reply {i}.", "label": "biased" if i % 2 else "not biased"}
    )
    + "\n"
    for i in range(6)
)  # the labelled pairs file a person has ready for evals.judge


@pytest.mark.slow
def test_every_printed_command_runs_as_printed(tmp_path: Path):
    folders = {}
    for run_id in ("r", "p"):  # each run's next steps in a folder of their own, as one person would follow them
        folders[run_id] = tmp_path / f"following-{run_id}"
        folders[run_id].mkdir()
        (folders[run_id] / "pairs.jsonl").write_text(PAIRS)
    db = tmp_path / "d.db"
    with StubServer() as stub:
        play = [
            "python",
            "-m",
            "graph.run",
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
            "--db",
            str(db),
            "--retries",
            "0",
            "--no-trace",
        ]
        # Run r: every call fails, and the run ends with the command that resumes it.
        stub.faults = Faults(error_500=1.0)
        failed = _run(shlex.join([*play, "--run-id", "r"]), folders["r"])
        assert failed.returncode != 0, failed.stderr
        stub.faults = Faults()
        # Run p: its dialogues pause after one turn, with how to continue them.
        paused = _run(shlex.join([*play, "--run-id", "p", "--pause-after", "1"]), folders["p"])
        assert paused.returncode == 0, paused.stderr
        ran = _follow(commands_in(failed.stdout + failed.stderr), folders["r"])
        ran += _follow(commands_in(paused.stdout + paused.stderr), folders["p"])
        # The runs' own next steps were among them: resuming, validating the judge, labelling a random draw.
        for prefix in (
            "python -m graph.run --user-model",
            "python -m graph.resume --run-id p",
            "python -m evals.judge pairs.jsonl",
            "python -m evals.annotate export",
            "python -m evals.annotate validate",
        ):
            assert any(c.startswith(prefix) for c in ran), (prefix, "\n".join(ran))
        assert all(str(db) in c for c in ran), ran

        # Scorers run later take the run's judge at the run's server, with no --base-url (rejudge: a model the run
        # played).
        for scorer in (
            ["evals.refusal"],
            ["evals.coherence"],
            ["evals.filter"],
            ["evals.rejudge", "--judge-model", "openai:j", "--name", "again"],
        ):
            result = _run(shlex.join(["python", "-m", *scorer, "--run-id", "r", "--db", str(db)]), folders["r"])
            assert result.returncode == 0, f"{scorer}\n{result.stderr[-2000:]}"


@pytest.mark.slow
def test_the_outage_line_runs_as_printed_once_the_server_is_back(tmp_path: Path):
    (tmp_path / "pairs.jsonl").write_text(PAIRS)
    db = tmp_path / "d.db"
    with StubServer() as up:  # the endpoint answers first (one that never answered is a wrong setting, not an outage)
        port = up.port
        play = [
            "python",
            "-m",
            "graph.run",
            "--user-model",
            "openai:u",
            "--target-model",
            "openai:t",
            "--judge-model",
            "openai:j",
            "--base-url",
            f"http://127.0.0.1:{port}/v1",
            "--turns",
            "2",
            "--categories",
            "gender",
            "--db",
            str(db),
            "--run-id",
            "o",
            "--outage-budget",
            "2s",
            "--no-trace",
        ]
        paused = _run(shlex.join([*play, "--pause-after", "1"]), tmp_path)
        assert db.exists(), paused.stderr
    stopped = _run(shlex.join(play), tmp_path)  # the server is away for the whole outage budget
    assert stopped.returncode == 75, stopped.stderr
    printed = commands_in(stopped.stderr)
    assert printed and "stayed unreachable past the outage budget" in stopped.stderr
    with StubServer(port=port):  # back
        ran = _follow(printed, tmp_path)
    assert ran[0].startswith("python -m graph.run") and str(db) in ran[0]
