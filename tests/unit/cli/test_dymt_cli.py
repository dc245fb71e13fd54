"""``dymt COMMAND``: every ``python -m`` entry point is a subcommand running the same main()."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cli import dymt
from tests.support.replay_fixtures import build_replay_db

REPO = Path(__file__).resolve().parents[3]


def _python_m_modules() -> set[str]:
    """Every module a user can run with ``python -m``: a main() and a ``__main__`` guard."""
    found = set()
    for folder in ("cli", "benchmarks"):
        for path in (REPO / folder).glob("*.py"):
            text = path.read_text(encoding="utf-8")
            if re.search(r"^def main\(", text, re.M) and 'if __name__ == "__main__"' in text:
                found.add(f"{folder}.{path.stem}")
    return found - {"cli.dymt"}


def test_every_python_m_entry_point_has_a_dymt_command():
    modules = {module for module, _ in dymt.COMMANDS.values()}
    missing = _python_m_modules() - modules
    assert not missing, f"add these to cli.dymt.COMMANDS: {sorted(missing)}"
    assert {
        "run",
        "replay",
        "branch",
        "branches",
        "compare",
        "resume",
        "trace",
        "runs",
        "report",
        "rejudge",
        "judge",
        "refusal",
        "coherence",
        "annotate",
        "filter",
    } <= set(dymt.COMMANDS)


def test_console_script_is_declared_and_resolves_to_dymt_main():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module_name, _, attr = scripts["dymt"].partition(":")
    assert getattr(importlib.import_module(module_name), attr) is dymt.main


@pytest.mark.parametrize("name", [n for n in dymt.COMMANDS if n != "benchmarks"])
def test_subcommand_help_is_the_python_m_help(name, capsys):
    module = importlib.import_module(dymt.COMMANDS[name][0])
    with pytest.raises(SystemExit) as direct:
        module.main(["--help"])
    expected = capsys.readouterr().out
    with pytest.raises(SystemExit) as via_dymt:
        dymt.main([name, "--help"])
    assert via_dymt.value.code == direct.value.code == 0
    assert capsys.readouterr().out == expected
    assert "usage:" in expected


def test_overview_lists_every_command_and_its_python_m_form(capsys):
    assert dymt.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, (module, _) in dymt.COMMANDS.items():
        assert re.search(rf"^  {name}\s+.*\[python -m {re.escape(module.removesuffix('.__main__'))}\]$", out, re.M)


def test_no_command_prints_usage_to_stderr_and_exits_2(capsys):
    assert dymt.main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "usage: dymt COMMAND" in captured.err


def test_unknown_command_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        dymt.main(["rnu", "--mode", "implicit"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown command 'rnu'" in err and "run, resume" in err


def test_bad_input_keeps_the_commands_one_line_error_and_status(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        dymt.main(["runs", "--db", str(tmp_path / "missing.db"), "list"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no database at") and err.count("\n") == 1
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.slow
def test_dymt_process_gives_the_same_output_as_python_m(tmp_path):
    db = build_replay_db(tmp_path / "d.db")
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120", "NO_COLOR": "1"}
    direct = subprocess.run(
        [sys.executable, "-m", "cli.runs", "--db", str(db), "list"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    via = subprocess.run(
        [sys.executable, "-m", "cli.dymt", "runs", "--db", str(db), "list"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert direct.returncode == via.returncode == 0, via.stderr
    assert via.stdout == direct.stdout
    assert "r1" in via.stdout and "r2" in via.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "cli.dymt", "replay", "--db", str(db), "no-such-thread", "--print"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and bad.stderr.count("\n") == 1
