"""Workers that stay live on a real PostgreSQL server, under real signals: a paused worker (SIGSTOP, then SIGCONT), a
worker asked to stop while its dialogues outlast ``--stalled-after`` (SIGTERM), and one told twice (double SIGTERM).

Whatever happens, every dialogue is played exactly once (its turns once each, one label each), no two plays of a
dialogue overlap, no slot waits on a lock longer than the bound (``LOCK_WAIT_S`` plus a poll), and no log holds a
traceback.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import pytest

from cli.run import main as run_main
from graph.workers.job_worker import LOCK_WAIT_S
from tests.support import forked
from tests.support.stub_server import StubServer
from tests.unit.graph.test_workers import _rows, _run_flags, _stop_and_read

pytestmark = pytest.mark.slow
TURNS = 3  # as tests.unit.graph.test_workers plays them
SLACK_S = 2.0  # a lock poll (0.5 s), a job fetch, a loaded machine


def _worker(url: str, *extra: str) -> forked.ForkedRun:
    return forked.popen("graph.worker", "--db", url, *extra, env={**os.environ})


def _open_plays(url: str, pid: int) -> int:
    return _rows(url, f"select count(*) from dialogue_plays where worker like '%:{pid}' and ended_at is null")[0][0]


def _left(url: str) -> int:
    return _rows(url, "select count(*) from procrastinate_jobs where status <> 'succeeded'")[0][0]


def _wait(condition, *, timeout: float, workers=(), url: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for w in workers:
            assert w.poll() is None, _stop_and_read(w)
        if time.monotonic() >= deadline:
            state = (
                _rows(
                    url,
                    "select id, status::text, attempts, worker_id from procrastinate_jobs where status <> 'succeeded'",
                )
                if url
                else None
            )
            plays = (
                _rows(
                    url,
                    "select thread_id, worker, job_id, outcome, ended_at is null from dialogue_plays "
                    "order by id desc limit 12",
                )
                if url
                else None
            )
            sessions = (
                _rows(
                    url,
                    "select application_name, state, wait_event_type, wait_event, left(query, 80) from "
                    "pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()",
                )
                if url
                else None
            )
            raise AssertionError(
                f"timed out: jobs {state}, plays {plays}, sessions {sessions}, "
                f"logs {[_stop_and_read(w) for w in workers]}"
            )
        time.sleep(0.05)


def _stop(*workers) -> list[str]:
    """SIGINT twice (stop now) and the stderr of each, once it has exited."""
    for w in workers:
        os.kill(w.pid, signal.SIGCONT)
        w.send_signal(signal.SIGINT)
    time.sleep(0.3)
    for w in workers:
        w.send_signal(signal.SIGINT)
    return [w.communicate(timeout=60)[1] for w in workers]


def _assert_exactly_once(url: str, n: int) -> None:
    assert _rows(url, "select count(*) from dialogues where status = 'finished'") == [(n,)]
    per_dialogue = _rows(url, "select thread_id, count(*), count(reply), min(idx), max(idx) from turns group by 1")
    wrong = [row for row in per_dialogue if row[1:] != (TURNS, TURNS, 1, TURNS)]
    assert len(per_dialogue) == n and not wrong, wrong
    labels = _rows(url, "select count(*), count(distinct (thread_id, idx)) from scores where scorer = 'primary'")
    assert labels == [(n * TURNS, n * TURNS)]


def _assert_plays_never_overlap(url: str) -> None:
    """One player at a time per dialogue, every play closed, and the last play of each finished it."""
    plays = _rows(url, "select thread_id, started_at, ended_at, outcome from dialogue_plays order by started_at, id")
    assert all(end is not None for _, _, end, _ in plays), [p for p in plays if p[2] is None]
    by_thread: dict[str, list[tuple]] = {}
    for thread, start, end, outcome in plays:
        by_thread.setdefault(thread, []).append((start, end, outcome))
    for thread, spans in by_thread.items():
        assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:])), (thread, spans)
        played = [span for span in spans if span[2] != "handed on"]  # a play that found its job handed on plays nothing
        assert played and played[-1][2] in ("finished", "skipped"), (thread, spans)


def _lock_waits(url: str) -> list[float]:
    """Seconds each job attempt waited before its dialogue's lock was taken or it moved on: from its 'started' event
    to its play's start, or to the job's next event (handed back, done)."""
    events = _rows(url, "select job_id, type::text, at from procrastinate_events order by job_id, at, id")
    plays = _rows(url, "select job_id, started_at from dialogue_plays order by started_at")
    waits = []
    for i, (job, kind, at) in enumerate(events):
        if kind != "started":
            continue
        later = [start for j, start in plays if j == job and start >= at]
        following = [e_at for j, k, e_at in events[i + 1 :] if j == job and k != "scheduled"]
        ends = [t for t in (later[:1] + following[:1]) if t is not None]
        if ends:
            waits.append((min(ends) - at) / timedelta(seconds=1))
    return waits


def test_a_paused_worker_stalls_nothing_and_every_dialogue_is_played_once(pg_url: str):
    """SIGSTOP one of two workers mid-play: past --stalled-after the other ends the paused one's claims session
    (freeing its locks) and plays its dialogues on, never waiting on them; SIGCONT: the woken one finds them handed
    on, says so in one line each, and plays the next run's dialogues."""
    with StubServer(latency=0.1) as stub:
        assert run_main([*_run_flags(pg_url, stub, per_category=4), "--enqueue"]) == 0
        sleeper = _worker(pg_url, "--concurrency", "4", "--stalled-after", "3")
        _wait(lambda: _open_plays(pg_url, sleeper.pid) == 4, timeout=60, workers=[sleeper])
        os.kill(sleeper.pid, signal.SIGSTOP)  # stalled, not dead: its connections and locks live on
        paused_at = time.monotonic()
        other = _worker(pg_url, "--concurrency", "4", "--stalled-after", "3")
        try:
            _wait(lambda: _left(pg_url) == 0, timeout=120, workers=[other], url=pg_url)  # while the sleeper sleeps
            finished_in = time.monotonic() - paused_at
            [other_log] = _stop(other)
            os.kill(sleeper.pid, signal.SIGCONT)
            # Woken, it finds its jobs handed on and is live: it alone plays the next run.
            assert run_main([*_run_flags(pg_url, stub, run_id="r2"), "--enqueue"]) == 0
            _wait(lambda: _left(pg_url) == 0, timeout=120, workers=[sleeper], url=pg_url)
        finally:
            [sleeper_log] = _stop(sleeper)
            if other.poll() is None:
                _stop(other)
    assert finished_in < 60, finished_in  # the paused worker's 4 dialogues never waited for it to wake
    unfinished = _rows(pg_url, "select thread_id, status from dialogues where status <> 'finished'")
    assert not unfinished, unfinished  # no late write of the paused worker undid what the other one finished
    _assert_exactly_once(pg_url, 30)
    _assert_plays_never_overlap(pg_url)
    by_sleeper = _rows(
        pg_url,
        f"select run_id, outcome, count(*) from dialogue_plays where worker like '%:{sleeper.pid}' group by 1, 2 "
        "order by 1, 2",
    )
    # No second play of r1's four: woken, a slot that still had one of their jobs takes its lock, finds the job handed
    # on, and plays nothing (its row says so).
    played = [row for row in by_sleeper if row[1] != "handed on"]
    assert played == [("r1", "fenced", 4), ("r2", "finished", 6)], by_sleeper
    assert all(run == "r1" for run, outcome, _ in by_sleeper if outcome == "handed on"), by_sleeper
    waits = _lock_waits(pg_url)
    assert waits and max(waits) <= LOCK_WAIT_S + SLACK_S, sorted(waits)[-5:]
    assert sleeper_log.count("was handed to another worker while this one was stalled") == 4, sleeper_log
    assert all("Traceback" not in log for log in (sleeper_log, other_log)), (sleeper_log, other_log)


def test_sigterm_drains_within_the_grace_renewing_its_claims_and_hands_the_rest_back(pg_url: str):
    """Dialogues of 1 s calls outlast --stalled-after (3 s) and the grace (4 s): the drain ends within the grace, the
    worker is never taken for stalled meanwhile, and what did not finish goes back to the queue for the other."""
    with StubServer(latency=1.0) as stub:
        assert run_main([*_run_flags(pg_url, stub), "--limit", "3", "--enqueue"]) == 0
        leaving = _worker(pg_url, "--concurrency", "3", "--stalled-after", "3", "--grace", "4")
        _wait(lambda: _open_plays(pg_url, leaving.pid) == 3, timeout=60, workers=[leaving])
        staying = _worker(pg_url, "--concurrency", "3", "--stalled-after", "3")
        leaving.send_signal(signal.SIGUSR1)  # what its tasks wait on, logged; it plays on
        time.sleep(0.5)
        leaving.send_signal(signal.SIGTERM)
        asked = time.monotonic()
        code = leaving.wait(timeout=30)
        took = time.monotonic() - asked
        said = leaving.stderr.read()
        try:
            _wait(lambda: _left(pg_url) == 0, timeout=120, workers=[staying], url=pg_url)
        finally:
            [other_log] = _stop(staying)
    assert code == 0 and took < 4 + SLACK_S * 2, (code, took, said)
    assert "Stopping:" in said and "went back to the queue" in said and "Traceback" not in said, said
    waiting = said.split("task(s) now:", 1)[1].split("Stopping:", 1)[0]
    assert waiting.count("play_through_outages (store_outage.py") == 3, said  # each slot, where it plays
    assert waiting.count("play_dialogue (playing.py") == 3, said
    handed = dict(
        _rows(pg_url, f"select outcome, count(*) from dialogue_plays where worker like '%:{leaving.pid}' group by 1")
    )
    assert handed.get("stopped", 0) >= 1 and set(handed) <= {"stopped", "finished"}, handed
    assert "retried job" not in other_log and "Traceback" not in other_log, other_log  # never taken for stalled
    _assert_exactly_once(pg_url, 3)
    _assert_plays_never_overlap(pg_url)
    waits = _lock_waits(pg_url)
    assert waits and max(waits) <= LOCK_WAIT_S + SLACK_S, sorted(waits)[-5:]


def test_a_second_sigterm_stops_at_once_closing_its_plays_and_handing_them_back(pg_url: str):
    with StubServer(latency=1.0) as stub:
        assert run_main([*_run_flags(pg_url, stub), "--limit", "2", "--enqueue"]) == 0
        hasty = _worker(pg_url, "--concurrency", "2", "--stalled-after", "3")
        _wait(lambda: _open_plays(pg_url, hasty.pid) == 2, timeout=60, workers=[hasty])
        hasty.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        hasty.send_signal(signal.SIGTERM)
        asked = time.monotonic()
        code = hasty.wait(timeout=30)
        took = time.monotonic() - asked
        said = hasty.stderr.read()
        assert _rows(pg_url, "select count(*) from dialogue_plays where ended_at is null") == [(0,)]
        assert _rows(pg_url, "select status::text, count(*) from procrastinate_jobs group by 1") == [("todo", 2)]
        survivor = _worker(pg_url, "--drain")
        assert survivor.wait(timeout=120) == 0
        survivor_log = survivor.stderr.read()
    assert code == 143 and took < 5 and "Stopped now" in said and "Traceback" not in said, (code, took, said)
    assert "Traceback" not in survivor_log, survivor_log
    assert _rows(pg_url, f"select outcome from dialogue_plays where worker like '%:{hasty.pid}'") == [
        ("stopped",),
        ("stopped",),
    ]
    _assert_exactly_once(pg_url, 2)
    _assert_plays_never_overlap(pg_url)
