"""graph.run stopped by a signal, in words: SIGTERM as Ctrl-C (one line, the resume command, exit 143, nothing lost),
and ``runs status`` / ``runs list`` telling a run that plays from one nothing plays any more and from one that
failed."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from checkpoints.readers import open_reader
from checkpoints.store import open_writer
from cli import runs
from cli.run_outcome import interrupted_line
from evals.report.status import run_status
from tests.conftest import REPO, default_models, play, scripted
from tests.support import forked
from tests.support.provider_outage import run_flags, start_run
from tests.support.stub_server import StubServer


def _rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(query).fetchall()


def _flags(stub: StubServer, db: Path, run_id: str, *, concurrency: int) -> list[str]:
    """A run of 12 dialogues × 3 turns on the stub, traced, its progress as log lines."""
    flags = run_flags(stub.url, db, run_id, turns=3, per_category=2, concurrency=concurrency)
    return [f for f in flags if f not in ("--no-trace", "--json")]


def _wait_for_turns(db: Path, run, n: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if _rows(db, "select count(*) from turns where reply is not null")[0][0] >= n:
                return
        except sqlite3.OperationalError:  # the file not made yet
            pass
        assert time.monotonic() < deadline and run.poll() is None, run.stderr.read()
        time.sleep(0.05)


@pytest.mark.slow
def test_sigterm_stops_a_run_as_ctrl_c_does_with_one_line_and_the_printed_command_finishes_it(tmp_path: Path):
    """As a batch scheduler stops a job: exit 143, the run and its unfinished dialogues marked interrupted, every
    call the server answered or was asked traced, one line (no traceback) whose command resumes and finishes the run
    with every turn played once."""
    db = tmp_path / "term.db"
    with StubServer(latency=0.2) as stub:
        run = start_run(*_flags(stub, db, "term", concurrency=4))
        _wait_for_turns(db, run, 3)
        run.send_signal(signal.SIGTERM)
        asked = time.monotonic()
        code = run.wait(timeout=60)
        took = time.monotonic() - asked
        err = run.stderr.read()
        asked_of_server = len(stub.requests)
        said = [line for line in err.splitlines() if line.strip()]
        assert code == 143, err
        assert "Traceback" not in err and took < 15, (took, err)
        assert said[-1].startswith("Stopped by SIGTERM: ") and "of run term unfinished" in said[-1], said[-1]
        assert _rows(db, "select status from runs") == [("interrupted",)]
        statuses = dict(_rows(db, "select status, count(*) from dialogues group by 1"))
        assert "running" not in statuses and statuses.get("interrupted"), statuses
        # Traces flushed: every call made before the stop is in the trace store, those cut in flight included.
        (traced,) = _rows(db, "select coalesce(sum(model_calls), 0) from trace_index where run_id = 'term'")[0]
        # A call cut before its request reached the server (its thread lagging under load) is traced too: at most one
        # per dialogue playing at once (concurrency 4); a call the server saw and the trace lost would fail this.
        assert asked_of_server <= traced <= asked_of_server + 4, (traced, asked_of_server)
        resume = said[-1].split("Resume with: ", 1)[1]
        argv = shlex.split(resume)
        assert argv[:3] == ["python", "-m", "graph.run"]
        again = forked.run(argv[2], *argv[3:], cwd=REPO, timeout=180)
    assert again.returncode == 0, again.stderr[-2000:]
    assert _rows(db, "select status from runs") == [("finished",)]
    per_dialogue = _rows(db, "select thread_id, count(*), count(distinct idx) from turns group by 1")
    assert len(per_dialogue) == 12 and all(n == distinct == 3 for _, n, distinct in per_dialogue), per_dialogue
    assert _rows(db, "select count(*) from scores where scorer = 'primary' and key = 'bias'") == [(36,)]


def test_a_stop_after_every_dialogue_finished_says_so_not_unfinished(db):
    play(db, default_models(), turns=2, run_id="done")
    line = interrupted_line(db, "done", resume="python -m graph.run --run-id done", signal_name="SIGINT", again="X")
    assert line.startswith("Interrupted after every dialogue of run done had finished") and line.endswith("X")
    assert "unfinished" not in line
    store = open_writer(db)
    store.upsert_dialogue(store.threads_of_run("done")[0], status="interrupted")
    store.close()
    line = interrupted_line(db, "done", resume="RESUME", signal_name="SIGTERM", again="X")
    assert line.startswith("Stopped by SIGTERM: 1 of ") and "unfinished" in line
    assert line.endswith("Resume with: RESUME")


@pytest.mark.slow
def test_a_killed_run_is_interrupted_not_playing_and_failures_are_told_from_plays(tmp_path: Path, capsys):
    """SIGKILL leaves the run stored as running: status and list tell that nothing plays it (interrupted, with the
    command that resumes it), list nothing as failed that did not fail, and a live run names who plays it."""
    db = tmp_path / "killed.db"
    with StubServer(latency=0.3) as stub:
        run = start_run(*_flags(stub, db, "gone", concurrency=3))
        _wait_for_turns(db, run, 2)
        assert runs.main(["--db", str(db), "status", "gone", "--json"]) == 0
        live = json.loads(capsys.readouterr().out)
        assert runs.main(["--db", str(db), "list"]) == 0
        listed = " ".join(capsys.readouterr().out.split())
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
    assert live["state"] == "playing" and f"pid {run.pid}" in live["players"], live
    assert live["failed"] == [] and live["dialogues"].get("failed", 0) == 0, live
    assert f"playing: graph.run (pid {run.pid}" in listed, listed
    assert _rows(db, "select status from runs") == [("running",)]  # as SIGKILL left it
    assert runs.main(["--db", str(db), "status", "gone", "--json"]) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["state"] == "interrupted" and after["players"] is None and after["eta_s"] is None, after
    assert after["dialogues"].get("running", 0) == 0 and after["dialogues"]["interrupted"] >= 1, after
    assert after["failed"] == [] and "--run-id gone" in after["resume"]
    assert runs.main(["--db", str(db), "status", "gone"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "run gone (interrupted" in text and "playing" not in text, text
    assert runs.main(["--db", str(db), "list"]) == 0
    assert "interrupted" in capsys.readouterr().out


def test_failed_dialogues_are_failed_and_the_run_too(db, capsys):
    def judge(messages, n):
        raise RuntimeError("the judge is down")

    play(db, default_models(judge=scripted(judge, spec="fake:judge")), turns=2, run_id="bad")
    assert runs.main(["--db", str(db), "status", "bad", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["state"] == "failed" and status["dialogues"]["failed"] == status["planned"], status
    assert status["failed"] and all("the judge is down" in (f["error"] or "") for f in status["failed"]), status


def test_the_eta_is_the_measured_pace_of_labelled_turns(db, monkeypatch):
    """A label every 2 s and 10 turns left: about 20 s; the same 40 s after the last label: the pace has slowed, and
    the ETA says so before the next label comes."""
    import evals.report.status as status_module
    from checkpoints.players import Activity

    play(db, default_models(), turns=2, run_id="pace")
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    with sqlite3.connect(db) as conn:
        ids = [i for (i,) in conn.execute("select rowid from scores where scorer = 'primary' order by rowid")]
        assert len(ids) == 4
        for i, rowid in enumerate(ids):  # one label every 2 s, the last 2 s ago
            when = now - timedelta(seconds=2 * (4 - i))
            conn.execute("update scores set created_at = ? where rowid = ?", [when.isoformat(), rowid])
    monkeypatch.setattr(status_module, "activity", lambda *_: Activity(plays=("host:1",)))  # a worker plays it now
    with open_reader(db) as reader:
        status = run_status(reader, "pace", planned=7, now=now)
        later = run_status(reader, "pace", planned=7, now=now + timedelta(seconds=40))
    assert status is not None and later is not None and status["state"] == "playing"
    assert status["turns"] == {"done": 4, "planned": 14}
    assert status["eta_s"] == pytest.approx(20, rel=0.01), status["eta_s"]
    assert later["eta_s"] == pytest.approx(10 * 48 / 4, rel=0.01), later["eta_s"]
