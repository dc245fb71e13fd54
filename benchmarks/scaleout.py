"""Benchmark 6, scale-out: 64 dialogues × 5 turns played by 1, then 2 ``graph.worker`` processes on one PostgreSQL
store.

Each round runs on a fresh database (CREATE DATABASE on the given server; if its user may not, a fresh run id
in the given database): ``python -m graph.run --enqueue`` hands the dialogues out, then N workers
(``python -m graph.worker``, the same ``--concurrency`` each, a user's defaults: tracing and the response
cache on), started and idle beforehand as long-lived workers are, play them against the stub server
(tests/support/stub_server.py, its own process). Throughput is turns ÷ the span from the first job's start to the
last one's end. Afterwards every dialogue must
have finished exactly once: one job each, started once and succeeded, its turns 1..T, a reply and one
primary label per turn. The 200 ms stub is latency-bound (target 2 ÷ 1 workers ≥ 1.8); the 0 ms stub is
CPU-bound, by the cores this machine shares between the workers, the stub and PostgreSQL (no target).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg import errors, sql

from benchmarks.common import synthetic_seeds
from benchmarks.concurrency import StubProcess
from checkpoints.location import is_postgres_url, parse_postgres_url
from checkpoints.paths import ENV_DB, StoreError

ROOT = Path(__file__).resolve().parents[1]
ENV_TEST_PG = "DYMT_ESB_TEST_PG"
DIALOGUES = 64
TURNS = 5
CONCURRENCY = 4  # per worker: at 200 ms one worker stays latency-bound on 2 cores (8 measured: see README)
LATENCIES = (0.2, 0.0)  # latency-bound, then CPU-bound
TARGET_RATIO = 1.8
WORKER_TIMEOUT_S = 1800.0
HOW_TO = (
    "skipped: no PostgreSQL server: pass --db postgresql://USER@HOST/DB, set DYMT_ESB_DB or DYMT_ESB_TEST_PG, "
    "or run under a throwaway one: .ci/postgres run python -m benchmarks scaleout"
)


def server_url(db: str | None = None) -> str | None:
    """The PostgreSQL URL to benchmark on: ``--db``, else $DYMT_ESB_DB if it is a URL, else $DYMT_ESB_TEST_PG."""
    if db is not None:
        if not is_postgres_url(db):
            raise StoreError(f"scaleout needs a PostgreSQL URL, not {db!r}: --db postgresql://USER@HOST/DB")
        return parse_postgres_url(db).url
    for name in (ENV_DB, ENV_TEST_PG):
        candidate = os.environ.get(name)
        if candidate and is_postgres_url(candidate):
            return parse_postgres_url(candidate, source=name).url
    return None


@contextmanager
def fresh_database(url: str) -> Iterator[tuple[str, bool]]:
    """A new database on ``url``'s server, dropped afterwards: (its URL, True); (``url``, False) if we may not create
    one."""
    name = f"dymt_scaleout_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    except errors.InsufficientPrivilege:
        created = False
    else:
        created = True
    if not created:
        yield url, False
        return
    try:
        yield urlsplit(url)._replace(path=f"/{name}").geturl(), True
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def write_seeds(path: Path, n: int) -> Path:
    """``n`` distinct synthetic seeds as a JSONL file for ``graph.run --seeds`` (distinct requests: no cache hits)."""
    path.write_text(
        "".join(
            json.dumps({"id": s.id, "category": s.category, "statement": s.statement}) + "\n"
            for s in synthetic_seeds(n)
        )
    )
    return path


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def enqueue(url: str, run_id: str, *, stub_url: str, seeds: Path, turns: int) -> None:
    """``python -m graph.run --enqueue`` as a user runs it (tracing and the response cache on)."""
    cmd = [
        sys.executable,
        "-m",
        "graph.run",
        "--db",
        url,
        "--run-id",
        run_id,
        "--seeds",
        str(seeds),
        "--turns",
        str(turns),
        "--user-model",
        "openai:stub-user",
        "--judge-model",
        "openai:stub-judge",
        "--target-model",
        "openai:stub-target",
        "--base-url",
        stub_url,
        "--enqueue",
    ]
    done = subprocess.run(
        cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300
    )
    if done.returncode != 0:
        raise RuntimeError(f"graph.run --enqueue exited {done.returncode}: {done.stderr.strip()[-500:]}")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def running_workers(url: str, *, workers: int, concurrency: int) -> Iterator[dict[str, float]]:
    """``workers`` workers started and registered (idle, waiting for jobs); on exit stopped with Ctrl-C, their CPU
    seconds set."""
    with tempfile.TemporaryDirectory(prefix="dymt-scaleout-") as tmp:
        logs = [Path(tmp) / f"worker{i}.log" for i in range(workers)]
        cmd = [sys.executable, "-m", "graph.worker", "--db", url, "--concurrency", str(concurrency)]
        cpu = _children_cpu()
        procs = [
            subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=log.open("w")) for log in logs
        ]
        timing: dict[str, float] = {}
        try:
            deadline = time.monotonic() + 120
            while _registered(url) < workers:
                failed = [(p.returncode, log) for p, log in zip(procs, logs) if p.poll() is not None]
                if failed or time.monotonic() > deadline:
                    detail = failed[0][1].read_text().strip()[-500:] if failed else "not registered within 120 s"
                    raise RuntimeError(f"a worker did not start: {detail}")
                time.sleep(0.1)
            yield timing
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            for p in procs:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        timing["worker_cpu_s"] = _children_cpu() - cpu


def _registered(url: str) -> int:
    """Workers with a heartbeat in procrastinate's table (0 before the first worker made the queue's schema)."""
    with psycopg.connect(url) as conn:
        if conn.execute("select to_regclass('procrastinate_workers')").fetchone()[0] is None:  # type: ignore[index]
            return 0
        return conn.execute("select count(*) from procrastinate_workers").fetchone()[0]  # type: ignore[index]


def wait_for_jobs(url: str, run_id: str, dialogues: int, *, timeout_s: float = WORKER_TIMEOUT_S) -> None:
    """Until every job of the run has ended (succeeded or failed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with psycopg.connect(url) as conn:
            ended = conn.execute(
                "select count(*) from procrastinate_jobs where args->>'run_id' = %s "  # type: ignore[index]
                "and status not in ('todo', 'doing')",
                (run_id,),
            ).fetchone()[0]
        if ended >= dialogues:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{ended}/{dialogues} jobs ended after {timeout_s:.0f} s")
        time.sleep(0.2)


def check_exactly_once(url: str, run_id: str, *, dialogues: int, turns: int) -> dict[str, Any]:
    """Count what the run left: every dialogue finished once, with its turns 1..T, a reply and one label each."""
    with psycopg.connect(url) as conn:

        def one(query: str) -> int:
            return conn.execute(query, {"run": run_id}).fetchone()[0]  # type: ignore[index]

        # A job a worker took is 'started' once; a retried or stalled-and-retaken one more often.
        jobs = conn.execute(
            "select j.status::text, count(*), count(*) filter (where (select count(*) from procrastinate_events e "
            "where e.job_id = j.id and e.type = 'started') <> 1) from procrastinate_jobs j "
            "where j.args->>'run_id' = %(run)s group by j.status",
            {"run": run_id},
        ).fetchall()
        finished = one("select count(*) from dialogues where run_id = %(run)s and status = 'finished'")
        in_run = "thread_id in (select thread_id from dialogues where run_id = %(run)s)"
        per_dialogue = conn.execute(
            f"select count(*), count(reply), min(idx), max(idx) from turns where {in_run} group by thread_id",
            {"run": run_id},
        ).fetchall()
        labels = conn.execute(
            f"select count(*) from scores where {in_run} and key = 'bias' and scorer = 'primary' "
            "group by thread_id, idx",
            {"run": run_id},
        ).fetchall()
    by_status = {status: n for status, n, _ in jobs}
    counts = {
        "dialogues_finished": finished,
        "jobs_succeeded": by_status.get("succeeded", 0),
        "jobs_other": sum(n for status, n in by_status.items() if status != "succeeded"),
        "jobs_retried": sum(retried for *_, retried in jobs),
        "turns": sum(n for n, *_ in per_dialogue),
        "replies": sum(r for _, r, *_ in per_dialogue),
        "labels": sum(n for (n,) in labels),
    }
    problems = [f"{counts['dialogues_finished']}/{dialogues} dialogues finished"] if finished != dialogues else []
    if counts["jobs_succeeded"] != dialogues or counts["jobs_other"]:
        problems.append(f"jobs: {by_status} (want {dialogues} succeeded)")
    if counts["jobs_retried"]:
        problems.append(f"{counts['jobs_retried']} job(s) not started exactly once")
    if len(per_dialogue) != dialogues or any(
        (n, r, lo, hi) != (turns, turns, 1, turns) for n, r, lo, hi in per_dialogue
    ):
        problems.append(
            f"{counts['turns']} turns and {counts['replies']} replies over {len(per_dialogue)} dialogues "
            f"(want {turns} each over {dialogues})"
        )
    if len(labels) != dialogues * turns or any(n != 1 for (n,) in labels):
        problems.append(
            f"{counts['labels']} primary labels on {len(labels)} turns (want one on each of {dialogues * turns})"
        )
    return {**counts, "ok": not problems, "problems": problems}


def play_span(url: str, run_id: str) -> tuple[float, float]:
    """Epoch seconds of the run's first job start and last job success (the server's clock, this machine's)."""
    with psycopg.connect(url) as conn:
        first, last = conn.execute(  # type: ignore[misc]
            "select extract(epoch from min(e.at) filter (where e.type = 'started')), "
            "extract(epoch from max(e.at) filter (where e.type = 'succeeded')) from procrastinate_events e "
            "join procrastinate_jobs j on j.id = e.job_id where j.args->>'run_id' = %s",
            (run_id,),
        ).fetchone()
    return float(first or 0), float(last or 0)


def play_round(
    url: str, run_id: str, *, stub_url: str, seeds: Path, workers: int, concurrency: int, dialogues: int, turns: int
) -> dict[str, Any]:
    """Start the workers, enqueue the run, wait for its jobs, and check it: throughput, CPU, exactly-once counts.

    Workers are long-lived (started once, on any machine), so the round measures running workers: they are
    started and idle before the run is enqueued, and throughput is turns ÷ the play span, from the first
    job's start to the last one's end. The wall time from the enqueue command's start is shown too.
    """
    with running_workers(url, workers=workers, concurrency=concurrency) as timing:
        started = time.time()
        enqueue(url, run_id, stub_url=stub_url, seeds=seeds, turns=turns)
        wait_for_jobs(url, run_id, dialogues)
        wall = time.time() - started
    check = check_exactly_once(url, run_id, dialogues=dialogues, turns=turns)
    first, last = play_span(url, run_id)
    span = max(last - first, 1e-9)
    return {
        "workers": workers,
        "run_id": run_id,
        "wall_s": wall,
        "play_s": span,
        "worker_cpu_s": timing["worker_cpu_s"],
        "enqueue_s": first - started,
        "turns_per_s": dialogues * turns / span,
        "check": check,
    }


def run(
    db: str | None = None,
    *,
    dialogues: int = DIALOGUES,
    turns: int = TURNS,
    concurrency: int = CONCURRENCY,
    latencies: Sequence[float] = LATENCIES,
    worker_counts: Sequence[int] = (1, 2),
) -> dict[str, Any]:
    """Each stub latency: one round per worker count, on fresh databases; the throughput ratio last ÷ first."""
    url = server_url(db)
    if url is None:
        return {"skipped": HOW_TO}
    variants: dict[str, Any] = {}
    fresh_databases = True
    with tempfile.TemporaryDirectory(prefix="dymt-scaleout-") as tmp:
        seeds = write_seeds(Path(tmp) / "seeds.jsonl", dialogues)
        for latency in latencies:
            stub = StubProcess(latency)
            try:
                rounds = []
                for workers in worker_counts:
                    with fresh_database(url) as (round_url, fresh):
                        fresh_databases &= fresh
                        run_id = f"scaleout-{int(latency * 1000)}ms-{workers}w-{uuid.uuid4().hex[:6]}"
                        rounds.append(
                            play_round(
                                round_url,
                                run_id,
                                stub_url=stub.url,
                                seeds=seeds,
                                workers=workers,
                                concurrency=concurrency,
                                dialogues=dialogues,
                                turns=turns,
                            )
                        )
            finally:
                stub.stop()
            variants[f"{int(latency * 1000)} ms"] = {
                "latency_s": latency,
                "rounds": rounds,
                "ratio": rounds[-1]["turns_per_s"] / rounds[0]["turns_per_s"],
                "wall_ratio": rounds[0]["wall_s"] / rounds[-1]["wall_s"],
                "target_ratio": TARGET_RATIO if latency > 0 else None,
            }
    return {
        "dialogues": dialogues,
        "turns": turns,
        "concurrency": concurrency,
        "worker_counts": list(worker_counts),
        "fresh_databases": fresh_databases,
        "cpus": os.cpu_count(),
        "variants": variants,
        "exactly_once": all(r["check"]["ok"] for v in variants.values() for r in v["rounds"]),
    }


def report(result: dict[str, Any]) -> list[str]:
    if "skipped" in result:
        return [f"  {result['skipped']}"]
    where = "a fresh database per round" if result["fresh_databases"] else "one database, a fresh run id per round"
    lines = [
        f"{result['dialogues']} dialogues × {result['turns']} turns, --concurrency {result['concurrency']} per worker, "
        f"{where}; workers started before the enqueue; throughput = turns ÷ the span from the first job's start "
        "to the last one's end"
    ]
    for name, variant in result["variants"].items():
        lines.append(f"  stub {name}:")
        for r in variant["rounds"]:
            busy = r["worker_cpu_s"] / r["wall_s"]
            lines.append(
                f"    {r['workers']} worker(s): {r['turns_per_s']:6.2f} turns/s (play {r['play_s']:5.1f} s; "
                f"{r['wall_s']:5.1f} s from the enqueue command, whose start-up took {r['enqueue_s']:.1f} s; "
                f"workers' CPU {r['worker_cpu_s']:.1f} s = {busy:.2f} cores busy)"
            )
        if variant["target_ratio"] is not None:
            verdict = "ok" if variant["ratio"] >= variant["target_ratio"] else "BELOW TARGET"
            lines.append(
                f"    ratio {variant['ratio']:.2f} (target ≥ {variant['target_ratio']}: {verdict}); "
                f"{variant['wall_ratio']:.2f} counting the enqueue command"
            )
        else:
            lines.append(
                f"    ratio {variant['ratio']:.2f} ({variant['wall_ratio']:.2f} counting the enqueue command); no "
                "target: "
                f"CPU-bound, by the {result['cpus']} cores this machine shares between the workers, the stub and "
                "PostgreSQL"
            )
    for variant in result["variants"].values():
        for r in variant["rounds"]:
            c = r["check"]
            state = "exactly once" if c["ok"] else "EXACTLY-ONCE VIOLATED: " + "; ".join(c["problems"])
            lines.append(
                f"  {r['run_id']}: {c['dialogues_finished']}/{result['dialogues']} dialogues finished, "
                f"{c['turns']}/{result['dialogues'] * result['turns']} turns, {c['labels']} labels, "
                f"{c['jobs_succeeded']} jobs succeeded ({c['jobs_retried']} retried): {state}"
            )
    if not result["exactly_once"]:
        lines.append("  !!! EXACTLY-ONCE VIOLATED in at least one round (above) !!!")
    return lines
