"""Benchmark: paper-scale runs. Store KB per turn at 5/10/20 turns, and harness CPU ÷ the design floor.

Every default of ``python -m graph.run`` is on (a checkpoint at every node step, the
store mirror, tracing, the response cache) and the three roles are ``openai:`` specs
pointed at the stub server (tests/support/stub_server.py, its own process, so its CPU is not
counted), through the real provider path.

* **Writer.** ``DIALOGUES`` dialogues at 5, 10 and 20 turns; the file's size after VACUUM
  divided by the turns played, with the share of each table (from SQLite's ``dbstat``).
  Linear growth keeps KB/turn flat as turns grow. Target ≤ 10 KB/turn at 10 turns.
* **CPU.** The same dialogues played by the harness, then the very same model calls
  (messages, stop sequences, same langchain-openai client objects, read back from the
  trace) made bare at the same concurrency, each dialogue's calls in order, then LangGraph's
  own four-node loop with instant nodes on its stock ``AsyncSqliteSaver``
  (benchmarks/langgraph_floor.py), same dialogues, turns and concurrency. Process CPU (all
  threads) per turn: the harness ÷ (bare client + LangGraph floor), the design floor, in
  five rounds of all three back to back; the median round is reported. Target ≤ 1.2.
* ``--paper``: the paper grid's shape (2,880 dialogues × 10 turns, 100 ms latency,
  concurrency 64): wall time against the floor, peak RSS and store size. Long; never in tests.
"""

from __future__ import annotations

import asyncio
import resource
import sqlite3
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import play_run, run_async, scratch_dir, synthetic_seeds
from benchmarks.concurrency import StubProcess
from benchmarks.langgraph_floor import langgraph_floor
from checkpoints.cache import ResponseCache
from checkpoints.traces.tables import stored_runs
from graph.running.gc_settings import playing_collector
from models.call_policy import CallPolicy
from models.registry import Sampling, create_role_model
from models.retries import RetryPolicy
from nodes.context import Models

STORE_TURNS = (5, 10, 20)
STORE_DIALOGUES = 24
STORE_TARGET_KB = 10.0
CPU_DIALOGUES = 48
CPU_TURNS = 10
CPU_CONCURRENCY = 32
CPU_LATENCY = 0.05
CPU_TARGET = 1.2
# Paired rounds of harness, bare client and floor; the median round's ratio is reported. One round's ratio moves
# by ±0.05 from round to round on a quiet 2-core machine (1.14–1.27 in one run): three left the median as loose.
ROUNDS = 5
PAPER = {"dialogues": 2880, "turns": 10, "latency": 0.1, "concurrency": 64, "rss_mb": 1024, "store_mb": 300}


def _models(url: str, db: Path) -> tuple[Models, CallPolicy]:
    policy = CallPolicy(retry=RetryPolicy(attempts=3, timeout=60), cache=ResponseCache(db))
    models = Models(
        **{
            role: create_role_model(
                f"openai:stub-{role}", role=role, sampling=Sampling(base_url=url, seed=0), policy=policy
            )
            for role in ("user", "target", "judge")
        }
    )
    return models, policy


async def _harness(
    url: str, db: Path, *, dialogues: int, turns: int, concurrency: int, trace: bool = True, cache: bool = True
) -> tuple[Models, Any]:
    models, policy = _models(url, db)
    if not cache:
        for role in ("user", "target", "judge"):
            getattr(models, role).chat.response_cache = None
    result, timing = await play_run(
        db, models, synthetic_seeds(dialogues), turns=turns, concurrency=concurrency, trace=trace
    )
    failed = [o for o in result.outcomes if o.status not in ("finished", "skipped")]  # skipped: done in an earlier run
    if failed:
        # As a user would: rerun the run id, which resumes what failed. Reported, not hidden.
        print(f"  ({len(failed)} dialogues failed, first: {failed[0].error}; resuming them)", flush=True)
        result, again = await play_run(
            db, models, synthetic_seeds(dialogues), turns=turns, concurrency=concurrency, trace=trace
        )
        timing.cpu += again.cpu
        timing.wall += again.wall
        failed = [o for o in result.outcomes if o.status not in ("finished", "skipped")]
    policy.cache.close()  # type: ignore[union-attr]
    if failed:
        raise RuntimeError(f"{len(failed)} dialogues failed, first: {failed[0].error}")
    return models, timing


def store_size(db: Path, turns_played: int) -> dict[str, Any]:
    """KB per turn of the file after VACUUM, and per table (indexes counted with their table)."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        tables: dict[str, float] = {}
        try:
            owner = dict(conn.execute("select name, tbl_name from sqlite_master where type in ('table', 'index')"))
            for name, size in conn.execute("select name, sum(pgsize) from dbstat group by name"):
                table = owner.get(name, name)
                tables[table] = tables.get(table, 0.0) + size / 1024 / turns_played
        except sqlite3.OperationalError:
            tables = {}  # this SQLite has no dbstat: the total still stands
    finally:
        conn.close()
    empty = _empty_store_bytes()
    return {
        "kb_per_turn": db.stat().st_size / 1024 / turns_played,
        "file_kb": db.stat().st_size / 1024,
        "empty_kb": empty / 1024,
        "marginal_kb_per_turn": (db.stat().st_size - empty) / 1024 / turns_played,
        "tables": dict(sorted(tables.items(), key=lambda kv: -kv[1])),
    }


def _empty_store_bytes() -> int:
    """The size of a store with every table and index but no dialogue (one page each, whatever the run's size)."""
    from checkpoints.store import open_writer

    with scratch_dir() as tmp:
        path = tmp / "empty.db"
        open_writer(path).close()
        conn = sqlite3.connect(path)
        conn.execute("VACUUM")
        conn.close()
        return path.stat().st_size


async def measure_store(url: str) -> dict[str, Any]:
    rows = {}
    for turns in STORE_TURNS:
        with scratch_dir() as tmp:
            db = tmp / "scale.db"
            await _harness(url, db, dialogues=STORE_DIALOGUES, turns=turns, concurrency=STORE_DIALOGUES)
            rows[turns] = store_size(db, STORE_DIALOGUES * turns)
    return rows  # type: ignore[return-value]


def recorded_calls(db: Path) -> list[list[tuple[str, list[Any], list[str] | None]]]:
    """Each dialogue's model calls in order, as (role, messages, stop), read back from its trace."""
    from langchain_core.load import load

    from checkpoints.readers import open_reader

    reader = open_reader(db)
    traces = reader.db
    try:
        by_thread: dict[str, list[tuple[str, str, list[Any], list[str] | None]]] = {}
        for run in stored_runs(traces):  # type: ignore[arg-type]
            if run["run_type"] != "llm":
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # load() is marked beta
                messages = load(run["inputs"]["messages"][0], allowed_objects="messages")
            stop = ((run["extra"] or {}).get("invocation_params") or {}).get("stop")
            by_thread.setdefault(run["thread_id"], []).append((run["start_time"], run["role"], messages, stop))
    finally:
        traces.conn.close()
    return [
        [(role, messages, stop) for _, role, messages, stop in sorted(calls, key=lambda c: c[0])]
        for _, calls in sorted(by_thread.items())
    ]


async def bare_calls(
    models: Models, dialogues: Sequence[Sequence[tuple[str, list[Any], list[str] | None]]], concurrency: int
) -> tuple[float, float]:
    """(wall s, CPU s) of the same calls on the bare langchain-openai clients, same concurrency."""
    clients = {role: getattr(models, role).chat.inner for role in ("user", "target", "judge")}
    limiter = asyncio.Semaphore(concurrency)

    async def one(calls):
        async with limiter:
            for role, messages, stop in calls:
                await clients[role].ainvoke(messages, stop=stop)

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(calls) for calls in dialogues))
    return time.perf_counter() - wall, time.process_time() - cpu


async def measure_cpu(url: str) -> dict[str, Any]:
    """Harness CPU per turn against the floor, in ROUNDS paired rounds: each round plays the harness with every
    default, replays its model calls on the bare clients and runs LangGraph's floor loop, back to back; the ratio
    is each round's, and the median of the rounds is reported (a drift in the machine's speed moves both sides)."""
    turns = CPU_DIALOGUES * CPU_TURNS
    with scratch_dir() as tmp:
        # Warm-up first (imports, HTTP pools, SSL and pydantic set-up are paid once per process).
        models, _ = await _harness(url, tmp / "warm.db", dialogues=4, turns=2, concurrency=4)
        await bare_calls(models, recorded_calls(tmp / "warm.db"), 4)
        variants = {}
        for name, trace, cache in (("no tracing, no cache", False, False), ("no tracing", False, True)):
            _, timing = await _harness(
                url,
                tmp / f"cpu-{trace}-{cache}.db",
                dialogues=CPU_DIALOGUES,
                turns=CPU_TURNS,
                concurrency=CPU_CONCURRENCY,
                trace=trace,
                cache=cache,
            )
            variants[name] = {"cpu_ms_per_turn": 1000 * timing.cpu / turns, "wall_s": timing.wall}
        rounds = []
        for i in range(ROUNDS):
            db = tmp / f"cpu-default-{i}.db"
            models, timing = await _harness(
                url, db, dialogues=CPU_DIALOGUES, turns=CPU_TURNS, concurrency=CPU_CONCURRENCY
            )
            dialogues = recorded_calls(db)
            # The bare client and the floor run under the collector settings the harness plays under
            # (graph/running/gc_settings.py): what the harness saves there, they save too.
            with playing_collector():
                bare_wall, bare_cpu = await bare_calls(models, dialogues, CPU_CONCURRENCY)
                floor_wall, floor_cpu = await langgraph_floor(
                    tmp / f"floor-{i}.db", dialogues=CPU_DIALOGUES, turns=CPU_TURNS, concurrency=CPU_CONCURRENCY
                )
            rounds.append(
                {
                    "harness_cpu_ms_per_turn": 1000 * timing.cpu / turns,
                    "harness_wall_s": timing.wall,
                    "bare_cpu_ms_per_turn": 1000 * bare_cpu / turns,
                    "bare_wall_s": bare_wall,
                    "langgraph_cpu_ms_per_turn": 1000 * floor_cpu / turns,
                    "langgraph_wall_s": floor_wall,
                    "calls": sum(len(d) for d in dialogues),
                }
            )
        for r in rounds:
            r["ratio"] = r["harness_cpu_ms_per_turn"] / (r["bare_cpu_ms_per_turn"] + r["langgraph_cpu_ms_per_turn"])
            r["ratio_to_bare"] = r["harness_cpu_ms_per_turn"] / r["bare_cpu_ms_per_turn"]
    median = sorted(rounds, key=lambda r: r["ratio"])[len(rounds) // 2]
    variants["every default (tracing, cache)"] = {
        "cpu_ms_per_turn": median["harness_cpu_ms_per_turn"],
        "wall_s": median["harness_wall_s"],
    }
    return {
        "dialogues": CPU_DIALOGUES,
        "turns": CPU_TURNS,
        "concurrency": CPU_CONCURRENCY,
        "latency_s": CPU_LATENCY,
        **median,
        "variants": variants,
        "rounds": [round(r["ratio"], 3) for r in rounds],
    }


def _harness_processes(url: str, db: Path, *, dialogues: int, turns: int, concurrency: int, processes: int) -> Any:
    """The same run played by ``processes`` forked players (graph.run --processes); CPU of this process and its
    children."""
    from benchmarks.common import Timing, run_config
    from checkpoints.store import open_writer
    from graph.workers.processes import ChildModels, play_in_processes

    def setup() -> ChildModels:
        models, policy = _models(url, db)
        return ChildModels(models=models, targets=[models.target], policy=policy)

    store = open_writer(db)
    models, _ = _models(url, db)
    config = run_config("bench", turns=turns, concurrency=concurrency, models=models)
    timing = Timing()
    wall, cpu = time.perf_counter(), _cpu_with_children()
    result = play_in_processes(
        config,
        synthetic_seeds(dialogues),
        record=config.stored_record(models, [models.target]),
        store=store,
        processes=processes,
        setup=setup,
        targets=[models.target.spec],
        trace=True,
    )
    timing.wall, timing.cpu = time.perf_counter() - wall, _cpu_with_children() - cpu
    store.db.conn.close()
    failed = [o for o in result.outcomes if o.status not in ("finished", "skipped")]
    if failed:
        raise RuntimeError(f"{len(failed)} dialogues failed, first: {failed[0].error}")
    return timing


def _cpu_with_children() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


async def measure_paper(url: str, db: Path | None, dialogues: int, processes: int = 1) -> dict[str, Any]:
    async def go(path: Path) -> dict[str, Any]:
        if processes > 1:
            timing = await asyncio.to_thread(
                _harness_processes,
                url,
                path,
                dialogues=dialogues,
                turns=PAPER["turns"],  # type: ignore[arg-type]
                concurrency=PAPER["concurrency"],  # type: ignore[arg-type]
                processes=processes,
            )
        else:
            _, timing = await _harness(
                url,
                path,
                dialogues=dialogues,
                turns=PAPER["turns"],  # type: ignore[arg-type]
                concurrency=PAPER["concurrency"],  # type: ignore[arg-type]
            )
        waves = -(-dialogues // PAPER["concurrency"])
        floor = waves * PAPER["turns"] * 3 * PAPER["latency"]
        size = store_size(path, dialogues * PAPER["turns"])  # type: ignore[arg-type]
        return {
            "dialogues": dialogues,
            "processes": processes,
            "wall_s": timing.wall,
            "cpu_s": timing.cpu,
            "floor_s": floor,
            "ratio": timing.wall / floor,
            "store_mb": path.stat().st_size / 1024 / 1024,
            "kb_per_turn": size["kb_per_turn"],
            "peak_rss_mb": max(
                resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
            )
            / 1024,
        }

    if db is not None:  # a path given: rerunning the same command resumes the same run
        return await go(db)
    with scratch_dir() as tmp:
        return await go(tmp / "paper.db")


def run(
    *, paper: bool = False, paper_db: Path | None = None, paper_dialogues: int | None = None, processes: int = 1
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    stub = StubProcess(CPU_LATENCY if not paper else PAPER["latency"])
    try:
        if paper:
            result["paper"] = run_async(
                measure_paper(stub.url, paper_db, paper_dialogues or PAPER["dialogues"], processes)  # type: ignore[arg-type]
            )
        else:

            async def both():
                return await measure_store(stub.url), await measure_cpu(stub.url)

            result["store"], result["cpu"] = run_async(both())
    finally:
        stub.stop()
    return result


def report(result: dict[str, Any]) -> list[str]:
    lines = []
    if "store" in result:
        lines.append(
            f"Store after VACUUM, {STORE_DIALOGUES} dialogues, every default on (target ≤ {STORE_TARGET_KB:g} KB/turn "
            "at 10 turns, flat as turns grow):"
        )
        for turns, row in result["store"].items():
            top = ", ".join(f"{name} {kb:.1f}" for name, kb in list(row["tables"].items())[:5])
            marginal = row.get("marginal_kb_per_turn", row["kb_per_turn"])
            verdict = "" if int(turns) != 10 else ("  ok" if marginal <= STORE_TARGET_KB else "  ABOVE TARGET")
            lines.append(
                f"  {int(turns):>2} turns: {marginal:6.2f} KB/turn{verdict} beyond the empty store's "
                f"{row.get('empty_kb', 0):.0f} KB; file {row['kb_per_turn']:.2f} KB/turn   ({top})"
            )
    if "cpu" in result:
        c = result["cpu"]
        lines.append(
            f"CPU, {c['dialogues']} dialogues × {c['turns']} turns at concurrency {c['concurrency']}, "
            f"stub latency {1000 * c['latency_s']:.0f} ms, {c['calls']} model calls:"
        )
        floor = c["bare_cpu_ms_per_turn"] + c["langgraph_cpu_ms_per_turn"]
        lines.append(
            f"  harness {c['harness_cpu_ms_per_turn']:.1f} ms/turn (wall {c['harness_wall_s']:.1f} s); "
            f"bare langchain-openai {c['bare_cpu_ms_per_turn']:.1f} ms/turn (wall {c['bare_wall_s']:.1f} s) + "
            f"LangGraph's four-node loop on its AsyncSqliteSaver {c['langgraph_cpu_ms_per_turn']:.1f} ms/turn "
            f"(wall {c['langgraph_wall_s']:.1f} s) = floor {floor:.1f} ms/turn"
        )
        verdict = "ok" if c["ratio"] <= CPU_TARGET else "ABOVE TARGET"
        each = (
            f" (the median of {len(c['rounds'])} paired rounds: {', '.join(f'{r:.2f}' for r in c['rounds'])})"
            if c.get("rounds")
            else ""
        )
        lines.append(
            f"  harness ÷ floor {c['ratio']:.2f}{each} (target ≤ {CPU_TARGET}; {verdict}); "
            f"harness ÷ bare client alone {c['ratio_to_bare']:.2f}"
        )
        for name, row in c.get("variants", {}).items():
            lines.append(
                f"    harness, {name:<32} {row['cpu_ms_per_turn']:5.1f} ms/turn CPU "
                f"(×{row['cpu_ms_per_turn'] / floor:.2f} the floor)"
            )
    if "paper" in result:
        p = result["paper"]
        lines.append(
            f"Paper grid shape: {p['dialogues']} dialogues × {PAPER['turns']} turns, "
            f"{1000 * PAPER['latency']:.0f} ms latency, concurrency {PAPER['concurrency']}, "
            f"{p.get('processes', 1)} process(es) (target ≤ 3× the floor):"
        )
        lines.append(
            f"  wall {p['wall_s']:.0f} s against a {p['floor_s']:.0f} s floor (ratio {p['ratio']:.2f}); "
            f"CPU {p['cpu_s']:.0f} s (with the players'); peak RSS {p['peak_rss_mb']:.0f} MB (target ≤ "
            f"{PAPER['rss_mb']}); "
            f"store {p['store_mb']:.0f} MB, {p['kb_per_turn']:.1f} KB/turn, "
            f"{p['store_mb'] * PAPER['dialogues'] / p['dialogues']:.0f} MB for {PAPER['dialogues']} dialogues "
            f"(target ≤ {PAPER['store_mb']} MB)"
        )
    return lines
