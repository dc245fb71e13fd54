"""``graph.run --processes``: its default and the flags it cannot combine with (one line, exit 2, nothing written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_run_cli import run_cli


@pytest.mark.parametrize("extra", [["--pause-after", "1"], ["--interactive"], ["--max-cost", "1", "--pricing", "examples/pricing.toml"]])
def test_processes_with_a_single_process_flag_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, extra: list[str]) -> None:
    db = tmp_path / "d.db"
    result = run_cli("--processes", "2", "--db", str(db), *extra)
    assert result.returncode == 2
    assert "--processes" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not db.exists()
