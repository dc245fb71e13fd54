"""``graph.run --processes``: its default and the flags it cannot combine with (one line, exit 2, nothing written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from graph.processes import default_processes
from tests.unit.test_run_cli import run_cli


def test_the_default_is_a_process_per_core_for_remote_models_only() -> None:
    remote = ["openai:gpt-4o-mini", "openai:gpt-4o", "google_genai:gemini-2.0-flash"]
    assert default_processes(remote, max_concurrency=64, dialogues=100, cores=8) == 8
    assert default_processes(remote, max_concurrency=3, dialogues=100, cores=8) == 3  # never above the concurrency
    assert default_processes(remote, max_concurrency=64, dialogues=2, cores=8) == 2  # nor the dialogues
    assert default_processes([*remote, "local:gemma3-270m"], max_concurrency=64, dialogues=100, cores=8) == 1
    assert default_processes(["hf:some/model"] * 3, max_concurrency=64, dialogues=100, cores=8) == 1


@pytest.mark.parametrize("extra", [["--pause-after", "1"], ["--interactive"], ["--max-cost", "1", "--pricing", "examples/pricing.toml"]])
def test_processes_with_a_single_process_flag_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, extra: list[str]) -> None:
    db = tmp_path / "d.db"
    result = run_cli("--processes", "2", "--db", str(db), *extra)
    assert result.returncode == 2
    assert "--processes" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not db.exists()
