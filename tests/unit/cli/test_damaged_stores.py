"""Damaged and unusable stores in one line: a truncated or overwritten SQLite file names itself, what is wrong and the
command that recovers it (exit 2, the file untouched); a read-only store stops a writer with the run's exit-75 line;
an older store is upgraded only after a line and a copy; a report page with no label to correct still writes."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from checkpoints.store import open_writer
from checkpoints.upgrades import ENV_NO_BACKUP
from cli import branch, replay, report, runs, trace
from tests.conftest import REPO, default_models, play, scripted
from tests.support import forked

PAGE = 4096


@pytest.fixture(scope="module")
def intact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("intact") / "dialogues.db"
    _, store = play(db, default_models(), turns=3, run_id="r1")
    store.close()
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db


def _truncated(db: Path) -> None:
    os.truncate(db, db.stat().st_size // 2)


def _schema_overwritten(db: Path) -> None:
    with db.open("r+b") as f:  # the pages after the first: the schema's and the first tables'
        f.seek(PAGE * 2)
        f.write(bytes(range(256)) * (PAGE * 4 // 256))


def _table_overwritten(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        (root,) = conn.execute("select rootpage from sqlite_master where name = 'turns'").fetchone()
    with db.open("r+b") as f:  # only the turns table: opening works, reading the dialogues fails
        f.seek((root - 1) * PAGE + 200)
        f.write(b"\xff" * 3000)


DAMAGES = {
    "truncated": _truncated,
    "schema overwritten": _schema_overwritten,
    "a table overwritten": _table_overwritten,
}


def _thread(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("select thread_id from dialogues order by thread_id limit 1").fetchone()[0]
    finally:
        conn.close()


def _commands(db: Path, thread: str, out: Path) -> dict[str, tuple[Callable[[list[str]], int], list[str]]]:
    where = ["--db", str(db)]
    return {
        "runs list": (runs.main, [*where, "list"]),
        "runs status": (runs.main, [*where, "status", "r1"]),
        "replay --print": (replay.main, [*where, "--print", thread]),
        "report": (report.main, [*where, "--run-id", "r1", "--out", str(out)]),
        "branch": (branch.main, [*where, "--turn", "2", "--rerun", thread]),
        "trace show": (trace.main, [*where, "show", thread]),
    }


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_store_is_one_line_naming_it_and_the_recovery_in_every_command(intact, tmp_path, damage, capsys):
    db = tmp_path / "dialogues.db"
    shutil.copy(intact, db)
    thread = _thread(db)
    DAMAGES[damage](db)
    before = db.read_bytes()
    for name, (main, argv) in _commands(db, thread, tmp_path / "report").items():
        if damage == "a table overwritten" and name in ("runs list", "branch", "trace show"):
            continue  # none reads a turn (the runs listed, the branch its models first, the trace its own tables)
        with pytest.raises(SystemExit) as stopped:
            main(argv)
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert stopped.value.code == 2, (name, err)
        assert len(lines) == 1 and "Traceback" not in err, (name, err)
        assert lines[0].startswith(f"error: {db} is damaged (") and f"sqlite3 {db} .dump | sed " in lines[0], lines
    assert db.read_bytes() == before  # nothing written to it, by readers or writers
    assert not (tmp_path / "report").exists()


def test_graph_run_on_a_truncated_store_says_so_in_one_line_and_exit_2(intact, tmp_path):
    db = tmp_path / "dialogues.db"
    shutil.copy(intact, db)
    _truncated(db)
    done = forked.run("graph.run", "--db", str(db), "--run-id", "r1", "--mode", "implicit", cwd=REPO, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"{db} is damaged (database disk image is malformed)" in lines[0] and f"sqlite3 {db} .dump" in lines[0]


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="NOT TESTED: the sqlite3 command-line shell is not here")
def test_the_printed_recovery_command_works_as_printed_and_recovers_the_dialogues(intact, tmp_path, capsys):
    db = tmp_path / "dialogues.db"
    shutil.copy(intact, db)
    with sqlite3.connect(db) as conn:  # a few pages of the scores table lost: the dialogues themselves are intact
        (root,) = conn.execute("select rootpage from sqlite_master where name = 'scores'").fetchone()
    with db.open("r+b") as f:
        f.seek((root - 1) * PAGE)
        f.write(b"\x0d\xff" * (PAGE // 2))
    with pytest.raises(SystemExit):
        runs.main(["--db", str(db), "check"])
    line = capsys.readouterr().err.strip()
    assert "is damaged (" in line, line
    command = line.split("into a new file with ", 1)[1].split(" and pass --db ", 1)[0]
    recovered = Path(shlex.split(line.split(" and pass --db ", 1)[1].split(",", 1)[0])[0])
    subprocess.run(command, shell=True, check=True, capture_output=True, timeout=60)
    assert runs.main(["--db", str(recovered), "check"]) == 0
    assert runs.main(["--db", str(recovered), "list"]) == 0
    assert "r1" in capsys.readouterr().out
    count = "select count(*) from turns"
    with sqlite3.connect(recovered) as conn, sqlite3.connect(intact) as original:  # the dialogues whole; labels lost
        assert conn.execute(count).fetchone()[0] == original.execute(count).fetchone()[0] > 0


def test_runs_check_reads_every_page(intact, tmp_path, capsys):
    """Damage no open notices (an index's page) is found by ``runs check``; an intact file passes."""
    db = tmp_path / "dialogues.db"
    shutil.copy(intact, db)
    assert runs.main(["--db", str(db), "check"]) == 0
    with sqlite3.connect(db) as conn:
        index = "select rootpage from sqlite_master where type = 'index' and tbl_name = 'turns'"
        (root,) = conn.execute(index).fetchone()
    with db.open("r+b") as f:
        f.seek((root - 1) * PAGE)
        f.write(b"\x0a\x7f" * (PAGE // 2))
    assert runs.main(["--db", str(db), "list"]) == 0  # reading the runs does not touch that index
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        runs.main(["--db", str(db), "check"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1 and f"{db} is damaged (" in err, err


def _read_only_folder(folder: Path) -> Callable[[], object]:
    """Make ``folder`` read-only for real: a read-only tmpfs as root, else permissions (root ignores them)."""
    if os.geteuid() == 0:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True)
        if mounted.returncode != 0:
            pytest.skip(f"NOT TESTED: cannot mount a tmpfs here ({mounted.stderr.decode().strip()})")
        return lambda: subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
    return lambda: folder.chmod(0o500)


def test_branch_and_writers_on_a_read_only_store_give_the_runs_exit_75_line(intact, tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    make_read_only = _read_only_folder(folder)
    try:
        db = folder / "dialogues.db"
        shutil.copy(intact, db)
        thread = _thread(db)
        make_read_only()
        for main, argv in (
            (branch.main, ["--db", str(db), "--turn", "2", "--rerun", thread]),
            (runs.main, ["--db", str(db), "delete", "r1", "--yes"]),
        ):
            assert main(argv) == 75
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "Traceback" not in err, err
            assert f"the dialogue database {db} is read-only" in err and "make it and its folder writable" in err
            assert f"then run again: python -m {'graph.branch' if main is branch.main else 'graph.runs'} --db" in err
        assert runs.main(["--db", str(db), "list"]) == 0  # readers still read it
    finally:
        if os.geteuid() == 0 and subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)  # a file still open: detach it
        else:
            folder.chmod(0o700)


def _older(db: Path) -> None:
    """The store as a DyMT-ESB before its last two migrations left it."""
    with sqlite3.connect(db) as conn:
        conn.executescript(
            "drop index response_cache_run; alter table response_cache drop column run_id; drop table run_players;"
            "delete from _migrations where name in ('m070_run_players', 'm071_response_cache_run');"
        )


def test_an_older_store_is_upgraded_after_one_line_and_a_copy_of_it(intact, tmp_path, caplog, monkeypatch):
    db = tmp_path / "dialogues.db"
    shutil.copy(intact, db)
    _older(db)
    before = sqlite3.connect(db).execute("select count(*) from turns").fetchone()[0]
    with caplog.at_level(logging.WARNING, logger="checkpoints.migrations"):
        open_writer(db).close()
        open_writer(db).close()  # up to date now: no line, no copy
    copy = tmp_path / "dialogues.db.pre-m070.bak"
    assert [r.getMessage() for r in caplog.records] == [
        f"Upgrading {db} for this DyMT-ESB: 2 schema migrations (m070_run_players to m071_response_cache_run); the "
        f"store as it was is kept in {copy} (delete it once you no longer need an older DyMT-ESB; "
        "--no-backup or DYMT_ESB_NO_BACKUP=1 skips the copy)"
    ]
    with sqlite3.connect(copy) as conn:
        names = {name for (name,) in conn.execute("select name from _migrations")}
        assert "m069_turn_reasoning" in names and "m070_run_players" not in names
        assert conn.execute("select count(*) from turns").fetchone()[0] == before
    assert oct(copy.stat().st_mode & 0o777) == "0o600"
    with sqlite3.connect(db) as conn:
        assert "m071_response_cache_run" in {name for (name,) in conn.execute("select name from _migrations")}
    # Without a copy when asked, still said; a new store is never announced.
    caplog.clear()
    other = tmp_path / "other.db"
    shutil.copy(intact, other)
    _older(other)
    monkeypatch.setenv(ENV_NO_BACKUP, "1")
    with caplog.at_level(logging.WARNING, logger="checkpoints.migrations"):
        open_writer(other).close()
        open_writer(tmp_path / "new.db").close()
    assert [r.getMessage() for r in caplog.records] == [
        f"Upgrading {other} for this DyMT-ESB: 2 schema migrations (m070_run_players to m071_response_cache_run), "
        "in place (DYMT_ESB_NO_BACKUP=1: no copy kept)"
    ]
    assert not list(tmp_path.glob("other.db.pre-*"))


@pytest.mark.parametrize(
    "command",
    ["graph.runs clear-cache", "graph.runs delete", "graph.run", "evals.annotate validate"],
)
def test_no_backup_upgrades_in_place_for_that_command_only(intact, tmp_path, caplog, providers, command):
    from cli import annotate
    from cli import run as run_cli
    from tests.unit.cli.test_run_cli import _register_fake_provider

    _register_fake_provider(providers)
    db = tmp_path / "dialogues.db"
    shutil.copy(intact, db)
    _older(db)
    where = ["--db", str(db)]
    fakes = ["--user-model", "fake:u", "--target-model", "fake:t", "--judge-model", "fake:j", "--no-trace"]
    labels = tmp_path / "labels.csv"
    if command == "evals.annotate validate":  # a random draw (read-only: no upgrade yet), labelled
        assert (
            annotate.main(
                ["export", "--run-id", "r1", "--design", "random", "--sample", "2", "--out", str(labels), *where]
            )
            == 0
        )
        import csv

        with labels.open(newline="") as f:
            rows = [{**row, "label": "biased"} for row in csv.DictReader(f)]
        with labels.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    main, argv = {
        "graph.runs clear-cache": (runs.main, ["clear-cache", "--no-backup", *where]),
        "graph.runs delete": (runs.main, ["delete", "r1", "--yes", "--no-backup", *where]),
        "graph.run": (run_cli.main, [*fakes, "--turns", "1", "--limit", "1", "--no-backup", "--json", *where]),
        "evals.annotate validate": (annotate.main, ["validate", str(labels), "--run-id", "r1", "--no-backup", *where]),
    }[command]
    with caplog.at_level(logging.WARNING, logger="checkpoints.migrations"):
        try:
            main(argv)
        except SystemExit:
            pass
    upgraded = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Upgrading")]
    assert upgraded == [
        f"Upgrading {db} for this DyMT-ESB: 2 schema migrations (m070_run_players to m071_response_cache_run), "
        "in place (DYMT_ESB_NO_BACKUP=1: no copy kept)"
    ], caplog.records
    assert not list(tmp_path.glob("dialogues.db.pre-*"))
    assert ENV_NO_BACKUP not in os.environ  # for that command only: the next one keeps its copy
    other = tmp_path / "other.db"
    shutil.copy(intact, other)
    _older(other)
    open_writer(other).close()
    assert list(tmp_path.glob("other.db.pre-*"))


def test_the_html_report_of_a_run_with_no_label_to_correct_is_written_with_its_raw_numbers(tmp_path, capsys):
    def judge(messages, n):
        raise RuntimeError("the judge is down")

    db = tmp_path / "dialogues.db"
    play(db, default_models(judge=scripted(judge, spec="fake:judge")), turns=2, run_id="bad")[1].close()
    out = tmp_path / "report"
    assert report.main(["--db", str(db), "--run-id", "bad", "--out", str(out), "--html"]) == 0
    page = (out / "report.html").read_bytes()
    assert b"bad" in page and (out / "report.md").exists()
    assert "Traceback" not in capsys.readouterr().err
