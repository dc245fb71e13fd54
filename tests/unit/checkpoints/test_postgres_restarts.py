"""The real PostgreSQL server restarted (fast) or crashed (immediate) under workers and under graph.run: nothing fails.

These stop, crash and restart a PostgreSQL server of their own (``.ci/postgres start``, once for the module), so the
rest of the suite, in other test workers, keeps the shared test server; they run where the shared one does
(DYMT_ESB_TEST_PG). The trials' random moments replay with DYMT_ESB_OUTAGE_SEED=<seed> (printed on failure).
"""

from __future__ import annotations

import glob
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from cli.run import main as run_main
from tests.support.stub_server import StubServer
from tests.unit.graph.test_workers import ROOT, TURNS, _assert_exactly_once, _last_play_finished, _run_flags

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("postgres_restarts")]  # one server of its own
SERVER: dict[str, str] = {}  # the module's own server: its directory ("dir"), as .ci/postgres start made it


@pytest.fixture(scope="module")
def pg_server(pg_server: str) -> Iterator[str]:
    """A PostgreSQL server of this module's own, started like the shared one (.ci/postgres), stopped and removed
    after."""
    started = subprocess.run([str(ROOT / ".ci" / "postgres"), "start"], capture_output=True, text=True, timeout=300)
    if started.returncode != 0:
        message = f".ci/postgres start failed (these tests restart a server of their own): {started.stderr[-2000:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(f"NOT TESTED: {message}")
    exported = dict(line.removeprefix("export ").split("=", 1) for line in started.stdout.splitlines() if "=" in line)
    SERVER["dir"] = exported["DYMT_ESB_PG_DIR"]
    try:
        yield exported["DYMT_ESB_TEST_PG"]
    finally:
        subprocess.run([str(ROOT / ".ci" / "postgres"), "stop", SERVER.pop("dir")], timeout=120, check=False)


def _pg_ctl(*args: str, timeout: float = 120) -> None:
    """Run pg_ctl on the module's server's data directory (as its owner: `postgres` when we are root)."""
    pg_dir = SERVER["dir"]
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    pg_ctl = bins[-1] if bins else "pg_ctl"
    command = [pg_ctl, "-D", f"{pg_dir}/data", "-l", f"{pg_dir}/server.log", *args]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)


def _restart(mode: str) -> None:
    """``pg_ctl restart -m fast`` (a clean restart) or ``-m immediate`` (a crash, then crash recovery on start)."""
    _pg_ctl("-w", "-t", "60", "-m", mode, "restart")


@pytest.fixture
def durable_pg_url(pg_url: str) -> str:
    """``pg_url`` with PostgreSQL's default durability: the test server runs with synchronous_commit=off (speed), under
    which a crash loses the last commits it acknowledged; a real server keeps them, and so does this database."""
    from psycopg import conninfo, sql

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("alter database {} set synchronous_commit = on").format(
                sql.Identifier(conninfo.conninfo_to_dict(pg_url)["dbname"])
            )
        )
    return pg_url


def _drop_connections(url: str) -> None:
    """Every connection to the database dropped by the server (the server itself stays up)."""
    _rows(
        url,
        "select count(pg_terminate_backend(pid)) from pg_stat_activity "
        "where datname = current_database() and pid <> pg_backend_pid()",
    )


def _stop() -> None:
    _pg_ctl("-w", "-m", "fast", "stop")


def _start() -> None:
    """Start the stopped server with the options it last ran with (its postmaster.opts)."""
    opts = shlex.split(Path(SERVER["dir"], "data", "postmaster.opts").read_text())
    args = [a for i, a in enumerate(opts[1:], 1) if a != "-D" and opts[i - 1] != "-D"]
    _pg_ctl("-w", "-t", "60", "-o", shlex.join(args), "start")


def _rows(url: str, query: str) -> list[tuple]:
    """The query's rows, waiting for the server while it restarts."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with psycopg.connect(url, connect_timeout=5) as conn:
                return conn.execute(query).fetchall()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _state(url: str) -> list:
    """What is left: unfinished jobs with their workers, open plays, advisory locks held (for a failure's message)."""
    return [
        _rows(
            url,
            "select id, status::text, worker_id, attempts, args->>'thread_id' from procrastinate_jobs "
            "where status <> 'succeeded'",
        ),
        _rows(url, "select id, last_heartbeat from procrastinate_workers"),
        _rows(url, "select thread_id, worker, started_at, outcome from dialogue_plays where ended_at is null"),
        _rows(url, "select pid, objid from pg_locks where locktype = 'advisory' and granted"),
    ]


def _turns(url: str) -> int:
    try:
        return _rows(url, "select count(*) from turns")[0][0]
    except psycopg.errors.UndefinedTable:  # not created yet
        return 0


def _worker(url: str, log: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "graph.worker", "--db", url, "--concurrency", "2", *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        text=True,
    )


def _plays_never_overlap(
    url: str, *, died: dict[int, datetime] | None = None, replay: object = None
) -> dict[str, list[tuple]]:
    """Every play ended (or its worker died: pid → when it could write no more), one player at a time per dialogue,
    the last one finished it; the plays by dialogue. ``replay`` (what replays a failure) goes into its message."""
    plays = _rows(
        url, "select thread_id, worker, started_at, ended_at, outcome from dialogue_plays order by started_at, id"
    )
    by_thread: dict[str, list[tuple]] = {}
    for thread, worker, start, end, outcome in plays:
        end = end or (died or {}).get(int(worker.rsplit(":", 1)[1]))
        assert end is not None, (replay, thread, worker, start, outcome)
        by_thread.setdefault(thread, []).append((start, end, worker, outcome))
    for thread, spans in by_thread.items():
        assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:])), (replay, thread, spans)
        assert _last_play_finished(url, thread, spans), (replay, thread, spans)
    return by_thread


def _wait_for(
    condition, *, timeout: float, alive: list[subprocess.Popen], logs: list[Path], what: str, url: str = ""
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for proc, log in zip(alive, logs):
            assert proc.poll() is None, (
                f"a worker exited ({proc.returncode}) waiting for {what}: {log.read_text()[-3000:]}"
            )
        if time.monotonic() >= deadline:
            pytest.fail(_diagnosis(f"timed out waiting for {what}", alive, logs, url), pytrace=False)
        time.sleep(0.05)


def _diagnosis(headline: str, alive: list[subprocess.Popen], logs: list[Path], url: str) -> str:
    """A failure's report, a line per fact (a long line is cut short where the report is shown): what is left in the
    store, what each live worker's tasks wait on (SIGUSR1), the end of each worker's log, the server's sessions.
    Every worker's whole log goes to stderr too."""
    for proc in alive:
        if proc.poll() is None:
            proc.send_signal(signal.SIGUSR1)
    time.sleep(2)
    lines = [headline]
    if url:
        jobs, workers, plays, locks = _state(url)
        lines += [f"job {row}" for row in jobs] + [f"worker {row}" for row in workers]
        lines += [f"open play {row}" for row in plays] + [f"advisory lock {row}" for row in locks]
        sessions = _rows(
            url,
            "select application_name, state, wait_event_type, wait_event, left(query, 120), count(*) "
            "from pg_stat_activity where datname = current_database() group by 1, 2, 3, 4, 5 order by 6 desc",
        )
        lines += [f"session {row}" for row in sessions]
    for proc, log in zip(alive, logs):
        text = log.read_text()
        print(f"===== {log.name}\n{text}", file=sys.stderr)
        tail = text.splitlines()[-40:]
        lines.append(f"----- {log.name} (pid {proc.pid}, exit {proc.poll()}), its last {len(tail)} lines:")
        lines += [line[:400] for line in tail]
    return "\n".join(lines)


def _stop_workers(workers: list[subprocess.Popen], logs: list[Path], url: str) -> None:
    """SIGINT to every worker; each must leave within 60 s (its 20 s grace, then its plays stop at their checkpoints).
    One that does not fails the test with what its tasks wait on, and is killed."""
    for w in workers:
        w.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 60
    while any(w.poll() is None for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    stuck = [w for w in workers if w.poll() is None]
    if stuck:
        report = _diagnosis(f"{len(stuck)} worker(s) still running 60 s after SIGINT", workers, logs, url)
        for w in stuck:
            w.kill()
            w.wait(timeout=30)
        pytest.fail(report, pytrace=False)


def test_workers_ride_out_server_restarts_and_crashes_at_random_moments(durable_pg_url: str, tmp_path: Path):
    """≥ 5 trials under 2 workers: a fast restart, a crash or every connection dropped at a random moment of each run
    (a second one in some);
    every dialogue finished exactly once, no two plays of one dialogue at once, no failed job, no worker exits."""
    pg_url = durable_pg_url
    seed = int(os.environ.get("DYMT_ESB_OUTAGE_SEED") or time.time_ns() % 10**6)
    rng = random.Random(seed)
    trials, mid_play = 5, 0
    restarts: list[tuple[int, str, int, float]] = []
    logs = [tmp_path / "worker0.log", tmp_path / "worker1.log"]
    started = time.monotonic()
    with StubServer(latency=0.05) as stub:
        # --stalled-after 15: on a loaded CI machine a worker's loop can stall for seconds (first imports); a shorter
        # one hands live workers' jobs on, which the SIGKILL test covers (tests/unit/graph/test_workers.py), not this
        # one.
        workers = [_worker(pg_url, log, "--stalled-after", "15") for log in logs]
        try:
            for trial in range(trials):
                run_id = f"outage{trial}"
                assert run_main([*_run_flags(pg_url, stub, run_id=run_id, per_category=2), "--enqueue"]) == 0
                for _n in range(1 + (rng.random() < 0.4)):
                    _wait_for(
                        lambda run_id=run_id: (
                            _rows(pg_url, f"select count(*) from dialogue_plays where run_id = '{run_id}'")[0][0] > 0
                        ),
                        timeout=60,
                        alive=workers,
                        logs=logs,
                        what="a play",
                    )
                    time.sleep(rng.uniform(0.0, 0.8))
                    in_play = _rows(pg_url, "select count(*) from dialogue_plays where ended_at is null")[0][0]
                    mode = ("fast", "immediate", "drop")[len(restarts) % 3]
                    began = time.monotonic()
                    _drop_connections(pg_url) if mode == "drop" else _restart(mode)
                    restarts.append((trial, mode, in_play, round(time.monotonic() - began, 2)))
                    mid_play += in_play > 0
                _wait_for(
                    lambda run_id=run_id: (
                        not _rows(
                            pg_url,
                            "select count(*) from procrastinate_jobs where status <> 'succeeded' "
                            f"and args->>'run_id' = '{run_id}'",
                        )[0][0]
                    ),
                    timeout=180,
                    alive=workers,
                    logs=logs,
                    what=f"{run_id}'s jobs (seed {seed})",
                    url=pg_url,
                )
            for proc, log in zip(workers, logs):
                assert proc.poll() is None, (seed, log.read_text()[-3000:])
        finally:
            _stop_workers(workers, logs, pg_url)
    elapsed = time.monotonic() - started
    unfinished = _rows(
        pg_url,
        "select d.thread_id, d.status, d.stop_reason, d.error, p.worker, p.started_at, p.ended_at, "
        "p.outcome from dialogues d left join dialogue_plays p using (thread_id) "
        "where d.status <> 'finished' order by p.started_at",
    )
    assert not unfinished, (seed, restarts, unfinished)
    odd = _rows(
        pg_url,
        "select thread_id, count(*), count(reply), min(idx), max(idx) from turns group by thread_id "
        f"having count(*) <> {TURNS} or count(reply) <> {TURNS} or min(idx) <> 1 or max(idx) <> {TURNS}",
    )
    odd_plays = [
        p
        for t, *_ in odd
        for p in _rows(
            pg_url,
            "select worker, started_at, ended_at, outcome from dialogue_plays "
            f"where thread_id = '{t}' order by started_at",
        )
    ]
    assert not odd, (
        seed,
        restarts,
        odd,
        odd_plays,
        _rows(pg_url, "select thread_id, count(*) from turns group by 1 having count(*) < 3"),
    )
    odd_labels = _rows(
        pg_url,
        f"select thread_id, idx, scorer, subject, count(*) from scores where key = 'bias' group by 1, 2, 3, 4 "
        f"having idx < 1 or idx > {TURNS} or count(*) > 1 or scorer <> 'primary'",
    )
    assert not odd_labels, (
        seed,
        restarts,
        odd_labels,
        [
            _rows(pg_url, f"select idx, reply is not null from turns where thread_id = '{t}' order by idx")
            + _rows(
                pg_url,
                f"select worker, started_at, ended_at, outcome from dialogue_plays where thread_id = '{t}' order by 2",
            )
            for t, *_ in odd_labels
        ],
    )
    _assert_exactly_once(pg_url, 12 * trials)  # every job succeeded (none failed), every dialogue exactly its turns
    by_thread = _plays_never_overlap(pg_url, replay=(f"DYMT_ESB_OUTAGE_SEED={seed}", restarts))
    assert len(by_thread) == 12 * trials
    lost = sum(1 for spans in by_thread.values() for s in spans if s[3] == "lock lost")
    assert mid_play >= trials // 2, (seed, restarts)  # the restarts did land while dialogues were in play
    assert lost >= 1, (seed, restarts)  # and plays were cut by them, then played on
    assert {r[1] for r in restarts} == {"fast", "immediate", "drop"}
    print(
        f"\nstore outages: seed {seed}, {trials} trials, {len(restarts)} restarts {restarts}, "
        f"{lost} plays cut and played on, {elapsed:.1f} s"
    )


def test_past_the_budget_a_worker_exits_75_in_one_line_and_the_next_worker_finishes_its_dialogues(
    durable_pg_url: str, tmp_path: Path
):
    pg_url = durable_pg_url
    log = tmp_path / "worker.log"
    with StubServer(latency=0.3) as stub:
        assert run_main([*_run_flags(pg_url, stub), "--limit", "2", "--enqueue"]) == 0
        doomed = _worker(pg_url, log, "--stalled-after", "10", "--store-outage-budget", "3")
        try:
            _wait_for(
                lambda: _rows(pg_url, "select count(*) from dialogue_plays where ended_at is null")[0][0] > 0,
                timeout=60,
                alive=[doomed],
                logs=[log],
                what="a play",
            )
            _stop()
            stopped, stopped_at = time.monotonic(), datetime.now(UTC)
            try:
                assert doomed.wait(timeout=60) == 75, log.read_text()
                took = time.monotonic() - stopped
            finally:
                _start()
        finally:
            if doomed.poll() is None:
                doomed.kill()
        err = log.read_text().strip().splitlines()
        assert "Traceback" not in log.read_text(), log.read_text()
        assert err[-1].startswith("error: PostgreSQL at") and "--store-outage-budget" in err[-1], err
        assert 3 <= took < 30, took
        print(f"\nstore outage past a 3 s budget: the worker exited 75 after {took:.1f} s")
        # Its dialogues are left 'doing' for the next worker, which takes them over once its heartbeat is stale.
        assert _rows(pg_url, "select count(*) from procrastinate_jobs where status = 'doing'")[0][0] > 0
        survivor = _worker(pg_url, tmp_path / "survivor.log", "--stalled-after", "2", "--drain")
        assert survivor.wait(timeout=120) == 0, (tmp_path / "survivor.log").read_text()
    _assert_exactly_once(pg_url, 2)
    _plays_never_overlap(pg_url, died={doomed.pid: stopped_at})  # its plays stay open, as a killed worker's


def test_graph_run_on_postgresql_rides_out_a_restart_mid_run(durable_pg_url: str, tmp_path: Path):
    pg_url = durable_pg_url
    log = tmp_path / "run.log"
    with StubServer(latency=0.05) as stub:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "graph.run",
                *_run_flags(pg_url, stub, run_id="direct", per_category=2),
                "--max-concurrency",
                "4",
                "--json",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
            text=True,
        )
        try:
            _wait_for(lambda: _turns(pg_url) > 0, timeout=60, alive=[run], logs=[log], what="a turn")
            _restart("immediate")
            assert _rows(pg_url, "select count(*) from dialogues where status = 'finished'")[0][0] < 12  # mid-run
            assert run.wait(timeout=180) == 0, log.read_text()[-3000:]
        finally:
            if run.poll() is None:
                run.kill()
    assert _rows(pg_url, "select count(*) from dialogues where status = 'finished'") == [(12,)]
    per_dialogue = _rows(pg_url, "select count(*), count(reply), min(idx), max(idx) from turns group by thread_id")
    assert len(per_dialogue) == 12 and all(row == (TURNS, TURNS, 1, TURNS) for row in per_dialogue), per_dialogue
    assert _rows(pg_url, "select status from runs") == [("finished",)]
    assert "unreachable" in log.read_text()  # it did meet the outage


def test_graph_run_past_the_budget_exits_75_with_the_resume_command_and_resumes_later(
    durable_pg_url: str, tmp_path: Path
):
    """12 dialogues, 8 at once: their checkpoint writes queue for the saver's pooled connections, and still the stop
    comes within a few seconds of the budget (every waiter gives up once the budget is spent)."""
    pg_url, log = durable_pg_url, tmp_path / "run.log"
    budget, dialogues = 2, 12
    with StubServer(latency=0.1) as stub:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        flags = [
            *_run_flags(pg_url, stub, run_id="cut", per_category=2),
            "--store-outage-budget",
            str(budget),
            "--max-concurrency",
            "8",
        ]
        run = subprocess.Popen(
            [sys.executable, "-m", "graph.run", *flags, "--json"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
            text=True,
        )
        try:
            _wait_for(lambda: _turns(pg_url) >= 4, timeout=60, alive=[run], logs=[log], what="turns")
            _stop()
            stopped = time.monotonic()
            try:
                assert run.wait(timeout=300) == 75, log.read_text()[-3000:]
                took = time.monotonic() - stopped
            finally:
                _start()
        finally:
            if run.poll() is None:
                run.kill()
        text = log.read_text()
        last = text.strip().splitlines()[-1]
        assert "Traceback" not in text, text[-3000:]
        # the resume command is the command as given (graph.run's one outage line): its --run-id and --db included
        assert last.startswith("error: PostgreSQL at") and "resume with: python -m graph.run " in last, last
        assert "--run-id cut" in last.split("resume with:")[1] and pg_url in last.split("resume with:")[1], last
        print(f"\nstore outage past a {budget} s budget, 8 dialogues at once: graph.run exited 75 after {took:.1f} s")
        # the budget, one backoff step and the shutdown (a loaded machine: a few seconds), not each dialogue's
        # pool timeouts one after another
        assert budget <= took < budget + 10, took
        assert run_main(flags) == 0  # the same command plays the rest
    assert _rows(pg_url, "select count(*) from dialogues where status = 'finished'") == [(dialogues,)]
    per_dialogue = _rows(pg_url, "select count(*), count(reply), min(idx), max(idx) from turns group by thread_id")
    assert len(per_dialogue) == dialogues and all(row == (TURNS, TURNS, 1, TURNS) for row in per_dialogue), per_dialogue
