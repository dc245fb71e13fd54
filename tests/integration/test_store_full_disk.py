"""graph.run with its SQLite store on a real 2 MB filesystem (tmpfs): it fills mid-run, and one mounted read-only.

One error line naming the file, how much to free and the command that resumes; exit 75; no traceback; after
freeing exactly what the line asked, the same command finishes every dialogue with its turns and labels, and the
file passes PRAGMA integrity_check; in one process and in two (``--processes 2``). Skipped where the machine refuses
to mount a filesystem (not root, a container): tests/unit/checkpoints/test_store_full.py injects SQLite's error instead.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shlex
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.provider_outage import run_flags, start_run, stored_turns
from tests.support.stub_server import StubServer

ERROR = re.compile(
    r"^error: the dialogue database (\S+) is on a full disk \(database or disk is full\): "
    r"free at least ([\d.]+) MB on its filesystem \([^)]*\), then resume with: (python -m graph\.run .+) "
    r"\(nothing is lost\)$"
)


@contextlib.contextmanager
def small_filesystem(where: Path, megabytes: int) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(where)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(
            f"cannot mount a small filesystem here ({mounted.stderr.strip() or mounted.returncode}): "
            "tests/unit/checkpoints/test_store_full.py injects SQLite's error instead"
        )
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)  # detach it even if something holds it


def remount(where: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(where)], check=True, capture_output=True)


def finish(args: list[str]) -> tuple[int, str, str]:
    run = start_run(*args)
    out, err = run.communicate(timeout=600)
    return run.returncode, out, err


@pytest.mark.integration
@pytest.mark.parametrize("processes", [1, 2])
def test_a_full_disk_stops_the_run_in_one_line_and_freeing_what_it_says_finishes_it(tmp_path: Path, processes: int):
    """In one process or two (a child meeting the full disk tells the parent, which stops the other)."""
    with StubServer() as stub, small_filesystem(tmp_path / "small", 2) as small:
        db = small / "dialogues.db"
        # --quiet: no progress lines in the log, so the command's one line is all of stderr
        flags = run_flags(stub.url, db, "full", turns=5, per_category=8, concurrency=8) + [
            "--processes",
            str(processes),
            "--quiet",
        ]
        code, out, err = finish(flags)
        assert code == 75, err[-3000:]
        assert "Traceback" not in err
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and err.strip() == lines[0], err[
            -3000:
        ]  # one line from the command, whatever its players
        match = ERROR.match(lines[0])
        assert match, lines[0]
        assert match.group(1) == str(db)
        with contextlib.closing(sqlite3.connect(db)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # Free what the line asked for, no more: the filesystem grows by exactly that.
        remount(small, f"size={2 + math.ceil(float(match.group(2)))}m")
        code, out, err = finish(shlex.split(match.group(3))[3:])
        assert code == 0, err[-3000:]
        summary = json.loads(out)
        assert summary["finished"] == summary["dialogues"] == 48 and summary["failed"] == []
        turns = stored_turns(db, "full")
        assert len(turns) == 48 and all(t == [(i, True, True) for i in range(1, 6)] for t in turns.values())
        with contextlib.closing(sqlite3.connect(db)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.integration
@pytest.mark.parametrize("processes", [1, 2])
def test_a_read_only_store_is_one_line_and_exit_75_and_the_same_command_finishes_once_writable(
    tmp_path: Path, processes: int
):
    with StubServer() as stub, small_filesystem(tmp_path / "small", 16) as small:
        db = small / "dialogues.db"
        assert finish(run_flags(stub.url, db, "first", turns=2, per_category=1, concurrency=6))[0] == 0
        remount(small, "ro")
        flags = run_flags(stub.url, db, "second", turns=2, per_category=1, concurrency=6) + [
            "--processes",
            str(processes),
            "--quiet",
        ]
        code, out, err = finish(flags)
        assert code == 75 and "Traceback" not in err
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert (
            len(lines) == 1
            and err.strip() == lines[0]
            and lines[0].startswith(f"error: the dialogue database {db} is read-only")
        )
        assert "then resume with: python -m graph.run " in lines[0] and out == ""
        remount(small, "rw")
        code, out, err = finish(flags)
        assert code == 0, err[-3000:]
        assert json.loads(out)["finished"] == 6
