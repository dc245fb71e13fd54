"""Dialogues handed to procrastinate workers on a real PostgreSQL server: exactly once per dialogue, even when a worker
dies."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cli.run import main as run_main
from tests.support import forked
from tests.support.stub_server import Faults, StubServer

ROOT = Path(__file__).resolve().parents[3]
TURNS = 3


def _run_flags(url: str, stub: StubServer, run_id: str = "r1", per_category: int = 1) -> list[str]:
    return [
        "--db",
        url,
        "--run-id",
        run_id,
        "--user-model",
        "openai:u",
        "--judge-model",
        "openai:j",
        "--target-model",
        "openai:t",
        "--base-url",
        stub.url,
        "--turns",
        str(TURNS),
        "--per-category",
        str(per_category),
        "--no-trace",
    ]


def _rows(url: str, query: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(query).fetchall()


def _worker(url: str, *extra: str) -> forked.ForkedRun:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return forked.popen("graph.worker", "--db", url, "--concurrency", "2", *extra, cwd=ROOT, env=env)


def _assert_exactly_once(url: str, n_dialogues: int) -> None:
    """Every dialogue finished with exactly its turns, each with one reply and one primary label; no job left
    running."""
    assert _rows(url, "select status, count(*) from procrastinate_jobs group by status") == [("succeeded", n_dialogues)]
    assert _rows(url, "select count(*) from dialogues where status = 'finished'") == [(n_dialogues,)]
    per_dialogue = _rows(
        url, "select thread_id, count(*), count(reply), min(idx), max(idx) from turns group by thread_id"
    )
    assert len(per_dialogue) == n_dialogues
    assert all(n == TURNS and replies == TURNS and (lo, hi) == (1, TURNS) for _, n, replies, lo, hi in per_dialogue), (
        per_dialogue
    )
    labels = _rows(
        url,
        "select thread_id, idx, count(*) from scores where key = 'bias' and scorer = 'primary' group by thread_id, idx",
    )
    assert len(labels) == n_dialogues * TURNS and {n for *_, n in labels} == {1}


def test_enqueueing_twice_makes_one_job_per_dialogue(pg_url: str, capsys: pytest.CaptureFixture[str]):
    with StubServer() as stub:
        assert run_main([*_run_flags(pg_url, stub), "--enqueue"]) == 0
        assert "6 dialogue(s) enqueued, 0 already" in " ".join(capsys.readouterr().err.split())
        assert run_main([*_run_flags(pg_url, stub), "--enqueue"]) == 0
        assert "0 dialogue(s) enqueued, 6 already" in " ".join(capsys.readouterr().err.split())
    jobs = _rows(
        pg_url, "select lock, queueing_lock, args->>'thread_id', status::text from procrastinate_jobs order by id"
    )
    assert len(jobs) == 6 and len({j[2] for j in jobs}) == 6
    assert all(lock == queueing == thread and status == "todo" for lock, queueing, thread, status in jobs)
    assert _rows(pg_url, "select id, status from runs") == [("r1", "running")]


def test_enqueue_and_wait_refuse_a_sqlite_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    for flag in ("--enqueue", "--wait"):
        with pytest.raises(SystemExit) as exit_:
            run_main(["--db", str(tmp_path / "d.db"), "--run-id", "r1", flag])
        assert exit_.value.code == 2 and "needs a PostgreSQL database" in capsys.readouterr().err
    assert not (tmp_path / "d.db").exists()


@pytest.mark.slow
def test_two_workers_play_every_dialogue_exactly_once_and_wait_prints_the_summary(
    pg_url: str, capsys: pytest.CaptureFixture[str]
):
    with StubServer(latency=0.05) as stub:
        assert run_main([*_run_flags(pg_url, stub, per_category=2), "--enqueue"]) == 0
        workers = [_worker(pg_url, "--drain") for _ in range(2)]
        assert run_main(["--db", pg_url, "--run-id", "r1", "--wait", "--json"]) == 0
        for w in workers:
            assert w.wait(timeout=60) == 0, w.stderr.read()
    summary = json.loads(capsys.readouterr().out)
    assert (summary["dialogues"], summary["finished"], summary["failed"]) == (12, 12, [])
    _assert_exactly_once(pg_url, 12)
    assert _rows(pg_url, "select status from runs") == [("finished",)]


@pytest.mark.slow
def test_a_worker_killed_mid_run_leaves_the_rest_to_the_other(pg_url: str):
    with StubServer(latency=0.1) as stub:
        assert run_main([*_run_flags(pg_url, stub, per_category=2), "--enqueue"]) == 0
        doomed = _worker(pg_url, "--stalled-after", "2")
        deadline = time.monotonic() + 60
        while not _rows(pg_url, "select 1 from turns limit 1"):  # it is playing: some turns are written
            assert time.monotonic() < deadline and doomed.poll() is None
            time.sleep(0.1)
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()
        assert _rows(pg_url, "select count(*) from procrastinate_jobs where status = 'doing'")[0][0] > 0
        survivor = _worker(pg_url, "--stalled-after", "2")
        try:
            while _rows(pg_url, "select count(*) from procrastinate_jobs where status <> 'succeeded'")[0][0]:
                assert time.monotonic() < deadline + 60 and survivor.poll() is None, _stop_and_read(survivor)
                time.sleep(0.2)
        finally:
            survivor.send_signal(signal.SIGINT)
            survivor.wait(timeout=30)
    _assert_exactly_once(pg_url, 12)
    # The killed worker's dialogues were retried (from their checkpoints: still exactly their turns, above).
    assert _rows(pg_url, "select count(*) from procrastinate_jobs where attempts > 0")[0][0] >= 1


def _plays(url: str) -> list[tuple]:
    return _rows(
        url, "select thread_id, worker, started_at, ended_at, outcome from dialogue_plays order by started_at, id"
    )


def _open_play_of(url: str, pid: int) -> bool:
    return bool(_rows(url, f"select 1 from dialogue_plays where worker like '%:{pid}' and ended_at is null limit 1"))


@pytest.mark.slow
def test_workers_sigkilled_at_random_moments_finish_every_dialogue_once_and_never_share_one(pg_url: str):
    """≥ 10 trials: each enqueues a run, then SIGKILLs one of the two workers at a random moment of its play."""
    seed = int(os.environ.get("DYMT_ESB_CRASH_SEED") or time.time_ns() % 10**6)
    rng = random.Random(seed)
    trials, killed_at = 10, {}  # worker pid → when it was killed (wall clock)
    runs = [f"crash{i}" for i in range(trials)]
    with StubServer(latency=0.05) as stub:
        workers = [_worker(pg_url, "--stalled-after", "2") for _ in range(2)]
        every = list(workers)  # every worker started, the killed ones too: their logs for a failure's report
        try:
            for run_id in runs:
                assert run_main([*_run_flags(pg_url, stub, run_id=run_id, per_category=2), "--enqueue"]) == 0
                victim = rng.randrange(2)
                pid = workers[victim].pid
                deadline = time.monotonic() + 20
                while (
                    not _open_play_of(pg_url, pid) and time.monotonic() < deadline
                ):  # idle if the other took every job
                    assert workers[victim].poll() is None, workers[victim].stderr.read()
                    time.sleep(0.02)
                time.sleep(rng.uniform(0.0, 0.6))
                killed_at[pid] = datetime.now(UTC)
                os.kill(pid, signal.SIGKILL)
                workers[victim].wait()
                workers[victim] = _worker(pg_url, "--stalled-after", "2")
                every.append(workers[victim])
            for run_id in runs:
                if run_main(["--db", pg_url, "--run-id", run_id, "--wait", "--json"]) != 0:
                    pytest.fail(_unfinished_report(pg_url, run_id, every, f"seed {seed}"), pytrace=False)
        finally:
            for w in workers:
                w.send_signal(signal.SIGINT)
            for w in workers:
                w.wait(timeout=30)
    _assert_exactly_once(pg_url, 12 * trials)
    assert _rows(pg_url, "select status, count(*) from runs group by status") == [("finished", trials)]
    plays = _plays(pg_url)
    died = [p for p in plays if p[3] is None]
    assert len(died) >= trials // 2, (seed, died)  # the kills did land mid-play
    assert died and all(int(worker.rsplit(":", 1)[1]) in killed_at for _, worker, *_ in died), (seed, died)
    by_thread: dict[str, list[tuple]] = {}
    for thread, worker, start, end, outcome in plays:
        by_thread.setdefault(thread, []).append(
            (start, end or killed_at[int(worker.rsplit(":", 1)[1])], worker, outcome)
        )
    assert len(by_thread) == 12 * trials
    for thread, spans in by_thread.items():  # one player at a time, and the last play finished the dialogue
        assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:])), (seed, thread, spans)
        assert _last_play_finished(pg_url, thread, spans), (seed, thread, spans)


def _unfinished_report(url: str, run_id: str, workers: list[forked.ForkedRun], headline: str) -> str:
    """A failure's report, a line per fact: the run's dialogues that did not finish, with their jobs and plays, then
    the end of every worker's log."""
    lines = [f"{headline}: run {run_id} did not finish"]
    for thread, status, reason, error in _rows(
        url,
        "select thread_id, status, stop_reason, error from dialogues "
        f"where run_id = '{run_id}' and status <> 'finished'",
    ):
        lines.append(f"dialogue {thread}: {status} ({reason}) {str(error)[:300]}")
        lines += [
            f"  job {row}"
            for row in _rows(
                url,
                "select id, status::text, attempts, worker_id from procrastinate_jobs "
                f"where args->>'thread_id' = '{thread}'",
            )
        ]
        lines += [
            f"  play {row}"
            for row in _rows(
                url,
                "select id, worker, job_id, started_at, ended_at, outcome from dialogue_plays "
                f"where thread_id = '{thread}' order by id",
            )
        ]
        lines += [
            f"  event {row}"
            for row in _rows(
                url,
                "select e.job_id, e.type::text, e.at from procrastinate_events e join procrastinate_jobs j "
                f"on j.id = e.job_id where j.args->>'thread_id' = '{thread}' order by e.id",
            )
        ]
    for w in workers:
        tail = w.stderr.read().splitlines()[-25:]
        lines.append(f"----- worker {w.pid} (exit {w.poll()}), its last {len(tail)} lines:")
        lines += [line[:400] for line in tail]
    return "\n".join(lines)


def _last_play_finished(url: str, thread: str, spans: list[tuple]) -> bool:
    """Whether the last play of ``thread`` that played (not one that found, under the lock, its job handed on) finished
    it: its outcome says so, or it was fenced (its worker taken for stalled) after its last write had finished the
    dialogue, so that nothing was left for the next player."""
    played = [span for span in spans if span[3] != "handed on"]
    if not played:
        return False
    start, end, _worker, outcome = played[-1]
    if outcome in ("finished", "skipped"):
        return True
    ended = _rows(url, f"select ended_at from dialogues where thread_id = '{thread}' and status = 'finished'")
    return outcome == "fenced" and bool(ended) and start <= datetime.fromisoformat(ended[0][0]) <= end


@pytest.mark.slow
def test_a_failed_dialogue_fails_its_job_which_is_retried_from_its_checkpoint_with_the_runs_retry_settings(pg_url: str):
    # --retries 0 is stored with the run: were the worker to use its default (5), the 500s would never fail a dialogue.
    flags = ["--limit", "1", "--retries", "0"]
    with StubServer(script=["ok", "ok", "500"]) as stub:  # the first turn's judge call fails
        assert run_main([*_run_flags(pg_url, stub), *flags, "--enqueue"]) == 0
        worker = _worker(pg_url, "--drain")
        assert worker.wait(timeout=120) == 0, worker.stderr.read()
    assert _rows(pg_url, "select status::text, attempts from procrastinate_jobs") == [("succeeded", 2)]
    assert [p[4] for p in _plays(pg_url)] == ["failed", "finished"]
    _assert_exactly_once(pg_url, 1)
    # The three attempts fail on a per-call error that spends a retry (three 500s in a row would be a provider outage,
    # ridden out by the circuit of models/circuit.py; a malformed answer spends none, models/answers.py): the job
    # fails; enqueuing again plays it on.
    with StubServer(script=["429"] * 3, faults=Faults(retry_after=0.01)) as stub:
        assert run_main([*_run_flags(pg_url, stub, run_id="r2"), *flags, "--enqueue"]) == 0
        worker = _worker(pg_url, "--drain")
        assert worker.wait(timeout=120) == 0, worker.stderr.read()
        assert _rows(pg_url, "select status::text from procrastinate_jobs where args->>'run_id' = 'r2'") == [
            ("failed",)
        ]
        assert _rows(pg_url, "select status from dialogues where run_id = 'r2'") == [("failed",)]
        assert run_main([*_run_flags(pg_url, stub, run_id="r2"), *flags, "--enqueue"]) == 0
        worker = _worker(pg_url, "--drain")
        assert worker.wait(timeout=120) == 0, worker.stderr.read()
    assert _rows(pg_url, "select status from dialogues where run_id = 'r2'") == [("finished",)]
    assert [p[4] for p in _plays(pg_url) if p[0].startswith("r2")] == ["failed", "failed", "failed", "finished"]


def _stop_and_read(worker: subprocess.Popen) -> str:
    """A worker's stderr for a failure message: stopped first, as reading a live one's would wait for ever."""
    worker.kill()
    return (worker.communicate(timeout=30)[1] or "")[-3000:]


@pytest.mark.slow
def test_a_queue_made_by_another_procrastinate_version_is_refused_with_what_to_do(
    pg_url: str, capsys: pytest.CaptureFixture[str]
):
    from graph.workers.dialogue_jobs import SCHEMA_STAMP, queue_schema_version

    with StubServer() as stub:
        assert run_main([*_run_flags(pg_url, stub), "--enqueue"]) == 0
        assert _rows(pg_url, "select obj_description('procrastinate_jobs'::regclass, 'pg_class')") == [
            (SCHEMA_STAMP + queue_schema_version(),)
        ]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"comment on table procrastinate_jobs is '{SCHEMA_STAMP}02.00.00'")
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            run_main([*_run_flags(pg_url, stub, run_id="r2"), "--enqueue"])
    err = capsys.readouterr().err
    assert (
        exit_.value.code == 2 and "procrastinate schema 02.00.00" in err and "apply procrastinate's migrations" in err
    )
    assert _rows(pg_url, "select count(*) from procrastinate_jobs") == [(6,)] and _rows(
        pg_url, "select id from runs"
    ) == [("r1",)]
    worker = _worker(pg_url, "--drain")
    assert worker.wait(timeout=60) == 2 and "02.00.00" in worker.stderr.read()


@pytest.mark.slow
def test_a_bad_worker_rate_limit_is_one_line(pg_url: str):
    worker = _worker(pg_url, "--rate-limit", "openai=fast")
    assert worker.wait(timeout=60) == 2
    err = worker.stderr.read().strip()
    assert len(err.splitlines()) == 1 and "--rate-limit 'openai=fast' is not NAME=RPM" in err


@pytest.mark.slow
def test_ctrl_c_finishes_the_dialogues_in_play_and_a_second_ctrl_c_stops_now(pg_url: str):
    with StubServer(latency=0.3) as stub:
        assert run_main([*_run_flags(pg_url, stub), "--limit", "2", "--enqueue"]) == 0
        gentle, hasty = _worker(pg_url, "--concurrency", "1"), _worker(pg_url, "--concurrency", "1")
        deadline = time.monotonic() + 60
        while not (_open_play_of(pg_url, gentle.pid) and _open_play_of(pg_url, hasty.pid)):
            assert time.monotonic() < deadline and gentle.poll() is None and hasty.poll() is None
            time.sleep(0.02)
        gentle.send_signal(signal.SIGINT)
        hasty.send_signal(signal.SIGINT)
        time.sleep(0.3)
        hasty.send_signal(signal.SIGINT)
        assert hasty.wait(timeout=10) == 130 and "Stopped now" in hasty.stderr.read()
        assert gentle.wait(timeout=60) == 0 and "finishing the dialogues in play" in gentle.stderr.read()
        assert _rows(pg_url, f"select outcome from dialogue_plays where worker like '%:{gentle.pid}'") == [
            ("finished",)
        ]
        # Stopped at once, its play is closed and its job back in the queue, for the next worker to play on.
        assert _rows(pg_url, f"select outcome from dialogue_plays where worker like '%:{hasty.pid}'") == [("stopped",)]
        survivor = _worker(pg_url, "--drain")
        assert survivor.wait(timeout=60) == 0, survivor.stderr.read()
    _assert_exactly_once(pg_url, 2)


@pytest.mark.slow
def test_deleting_a_run_played_by_workers_leaves_no_job_or_play_of_it(pg_url: str, capsys: pytest.CaptureFixture[str]):
    from cli.runs import main as runs_main

    with StubServer() as stub:
        for run_id in ("keep", "gone"):
            assert run_main([*_run_flags(pg_url, stub, run_id=run_id), "--limit", "2", "--enqueue"]) == 0
        worker = _worker(pg_url, "--drain")
        assert worker.wait(timeout=120) == 0, worker.stderr.read()
    assert runs_main(["--db", pg_url, "delete", "gone", "--yes"]) == 0
    assert _rows(pg_url, "select args->>'run_id', count(*) from procrastinate_jobs group by 1") == [("keep", 2)]
    assert _rows(pg_url, "select run_id, count(*) from dialogue_plays group by 1") == [("keep", 2)]
    assert _rows(
        pg_url,
        "select count(*) from procrastinate_events e left join procrastinate_jobs j on j.id = e.job_id "
        "where j.id is null",
    ) == [(0,)]


@pytest.mark.slow
def test_a_worker_holds_its_dialogue_locks_on_one_connection_whatever_its_concurrency(pg_url: str):
    with StubServer(latency=0.5) as stub:
        assert run_main([*_run_flags(pg_url, stub, per_category=2), "--enqueue"]) == 0
        worker = _worker(pg_url, "--concurrency", "12")
        try:
            deadline = time.monotonic() + 60
            while _rows(pg_url, "select count(*) from dialogue_plays where ended_at is null")[0][0] < 12:
                assert time.monotonic() < deadline and worker.poll() is None, worker.stderr and worker.stderr.read()
                time.sleep(0.05)
            sessions = _rows(
                pg_url,
                "select count(*) from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()",
            )[0][0]
            holders = _rows(  # this test's database only: tests on other workers share the server
                pg_url,
                "select count(distinct pid) from pg_locks where locktype = 'advisory' and granted and database = "
                "(select oid from pg_database where datname = current_database())",
            )[0][0]
        finally:
            worker.send_signal(signal.SIGINT)
            worker.wait(timeout=60)
    assert holders == 1  # twelve dialogues in play, their twelve locks on one session
    assert sessions <= 10, sessions  # the saver's pool, the queue's pool, the store, the cache, the claims


def test_live_workers_are_those_with_a_recent_heartbeat(pg_url: str):
    """The count each worker divides a run's rate limits by."""
    import asyncio

    from checkpoints.location import parse_db
    from graph.workers.dialogue_jobs import ensure_queue_schema, live_workers, queue_app

    url = parse_db(pg_url)
    ensure_queue_schema(url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "insert into procrastinate_workers (last_heartbeat) values (now()), (now() - interval '5 seconds'), "
            "(now() - interval '10 minutes')"
        )

    async def count(seconds: float) -> int:
        app = queue_app(url)
        async with app.open_async():
            return await live_workers(app, seen_within_s=seconds)

    assert asyncio.run(count(30)) == 2 and asyncio.run(count(1)) == 1 and asyncio.run(count(3600)) == 3


def test_waiting_on_an_unreachable_server_is_one_line(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_:
        run_main(["--db", "postgresql://nobody@127.0.0.1:1/x", "--run-id", "r1", "--wait"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and "cannot connect to PostgreSQL" in err


def test_a_stalled_job_another_worker_put_back_first_is_skipped_not_fatal(pg_url: str):
    """Two workers found the same stalled job: the second retry is refused by the queue, and the worker goes on."""
    import asyncio

    from checkpoints.location import parse_db
    from graph.workers.dialogue_jobs import QUEUE, TASK, ensure_queue_schema, queue_app
    from graph.workers.job_worker import retry_stalled_jobs

    url = parse_db(pg_url)
    ensure_queue_schema(url)

    async def race() -> tuple[int, int]:
        app = queue_app(url)
        async with app.open_async():
            await app.configure_task(TASK, queue=QUEUE, lock="t1").defer_async(run_id="r", thread_id="t1")
            with psycopg.connect(pg_url, autocommit=True) as conn:  # its worker took it, then fell silent
                worker = conn.execute(
                    "insert into procrastinate_workers (last_heartbeat) values (now() - interval '10 minutes') "
                    "returning id"
                ).fetchone()[0]
                conn.execute("update procrastinate_jobs set status = 'doing', worker_id = %s", [worker])
            found = list(await app.job_manager.get_stalled_jobs(queue=QUEUE, seconds_since_heartbeat=60))
            first = await retry_stalled_jobs(app, stalled_after_s=60)  # the other worker, first
            manager = app.job_manager

            async def as_found(**_: Any) -> list:  # this worker had found the job before the other put it back
                return found

            manager.get_stalled_jobs = as_found  # type: ignore[method-assign,assignment]
            second = await retry_stalled_jobs(app, stalled_after_s=60)
            return first, second

    assert asyncio.run(race()) == (1, 0)
    assert _rows(pg_url, "select status, attempts from procrastinate_jobs") == [("todo", 1)]


def test_a_worker_never_fences_itself_and_puts_back_a_job_it_once_fetched_that_another_worker_stalled_on(pg_url: str):
    """Worker w:1 fetched a job; it was handed to w:2 (w:1 had stalled), which stalled in turn while w:1, awake again,
    held the dialogue's lock. w:1's look for stalled jobs leaves its own session alone (no self-fence) and, once it
    holds the lock no more, puts the job back; its own play's end is then not taken for the job's outcome, even once
    the job's next worker is taken for dead and the job has no worker."""
    import asyncio

    from procrastinate.jobs import Status

    from checkpoints.location import parse_db
    from checkpoints.postgres.claims import DialogueClaims, fence
    from checkpoints.store import open_writer
    from checkpoints.store_outage import StoreOutage
    from graph.workers.dialogue_jobs import QUEUE, TASK, ensure_queue_schema, queue_app
    from graph.workers.job_worker import retry_stalled_jobs

    url = parse_db(pg_url)
    ensure_queue_schema(url)
    store = open_writer(url)
    store.db["runs"].insert({"id": "r", "status": "running"})
    store.close()

    async def scene() -> tuple[object, ...]:
        app = queue_app(url, outage=StoreOutage(url))
        async with app.open_async():
            await app.configure_task(TASK, queue=QUEUE, lock="t1").defer_async(run_id="r", thread_id="t1")
            with psycopg.connect(pg_url, autocommit=True) as conn:
                me, other = (
                    conn.execute(
                        f"insert into procrastinate_workers (last_heartbeat) values ({at}) returning id"
                    ).fetchone()[0]
                    for at in ("now()", "now() - interval '10 minutes'")
                )
            job = await app.job_manager.fetch_job(queues=[QUEUE], worker_id=me)
            assert job is not None and job.id is not None
            with psycopg.connect(pg_url, autocommit=True) as conn:  # handed to the other, which fell silent
                conn.execute("update procrastinate_jobs set worker_id = %s", [other])
            claims = DialogueClaims(url, worker="w:1")
            async with claims.claim("t1", run_id="r", job_id=job.id) as play:
                itself = await fence(app.connector.execute_query_all_async, "t1", job_id=job.id, own="w:1")
                while_held = await retry_stalled_jobs(app, stalled_after_s=60, me=me, worker="w:1")
                await claims.confirm("t1")  # its lock and session live on
                play.outcome = "finished"
            put_back = await retry_stalled_jobs(app, stalled_after_s=60, me=me, worker="w:1")
            status = _rows(pg_url, "select status::text, attempts from procrastinate_jobs")
            with psycopg.connect(pg_url, autocommit=True) as conn:  # fetched again, by a worker then taken for dead
                conn.execute("update procrastinate_jobs set status = 'doing', worker_id = null")
            await app.job_manager.finish_job(job, status=Status.SUCCEEDED, delete_job=False)
            await claims.close()
            return itself, while_held, put_back, status

    itself, while_held, put_back, status = asyncio.run(scene())
    assert (itself, while_held, put_back) == (False, 0, 1)
    assert status == [("todo", 1)]
    # w:1's own play's end is left out: the job is the next worker's, though no worker holds its row now
    assert _rows(pg_url, "select status::text from procrastinate_jobs") == [("doing",)]


@pytest.mark.parametrize("no_backup", [False, True], ids=["a copy", "--no-backup"])
def test_a_worker_upgrading_an_older_store_keeps_a_copy_unless_told_not_to(pg_url: str, no_backup: bool):
    """A worker is often the first of a new DyMT-ESB to open the store: it upgrades it as graph.run would, keeping a
    copy of its tables in a schema named for the upgrade, or none with --no-backup."""
    with StubServer(latency=0.0) as stub:
        assert run_main([*_run_flags(pg_url, stub), "--enqueue"]) == 0
        with psycopg.connect(pg_url, autocommit=True) as conn:  # the store as a DyMT-ESB one migration older left it
            conn.execute("delete from _migrations where name = 'pg007_run_players'")
        worker = _worker(pg_url, "--drain", *(["--no-backup"] if no_backup else []))
        assert worker.wait(timeout=120) == 0, worker.stderr.read()
    copies = _rows(pg_url, "select nspname from pg_namespace where nspname like 'dymt_pre_%'")
    assert copies == ([] if no_backup else [("dymt_pre_pg007_run_players",)])
    _assert_exactly_once(pg_url, 6)
