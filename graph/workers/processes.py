"""Play one run's dialogues in N processes on one SQLite file: every core, no server.

The parent owns the queue of dialogues, the progress callback and the run's record; it
forks N children, each of which opens its own store, checkpointer and models (``setup``,
called in the child) and plays up to its share of ``--max-concurrency`` dialogues at once (the shares add up to it)
with the one-process code (:func:`graph.running.playing.play_dialogue`). A child asks for a
dialogue whenever it has a free slot and reports progress and outcomes over its pipe.

Exactly once: the parent hands each dialogue to one child, and the child claims it in the
store (:mod:`checkpoints.process_claims`) before playing it. A child that dies (SIGKILL, a
crash) has its dialogues put back at the head of the queue for another child, which plays
them on from their last checkpoint (the store's writes are upserts keyed by dialogue and
turn, so nothing is counted twice); a replacement child is started while dialogues remain.
Children die with the parent (``PR_SET_PDEATHSIG`` on Linux, and the pipe closing).
SQLite in WAL mode with a busy timeout serialises the writers; a write that still meets
"database is locked" is retried (:func:`retry_locked`).

Outages, as in one process: each child reports its circuits' outages (models/circuit.py) over its pipe and the
parent mirrors them on its own call policy, so its progress display shows a provider outage while it lasts and
the run exits 75 past its budget. A full or read-only disk in a child (:class:`StoreUnwritable`) is sent to the
parent, which stops the other children in order and raises it: one line from the command, exit 75.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import connection, get_context
from pathlib import Path
from typing import Any, TypeVar

from checkpoints import process_claims
from checkpoints.outages import StoreUnwritable, store_fault
from checkpoints.paths import connect, is_busy
from checkpoints.store import Writer, open_writer
from nodes.context import Models
from nodes.modes import ModeScripts, scripts_for
from graph.config.run_config import RunConfig
from graph.running.gc_settings import playing_collector
from graph.running.store_writer import StoreWriter
from graph.running.playing import (
    DialogueOutcome,
    ProgressCallback,
    RunResult,
    DialogueSlots,
    plan_dialogues,
    play_dialogue,
    record_run,
    run_contexts,
    dialogue_thread_id,
)
from models.call_policy import CallPolicy
from models.circuit import CircuitReport
from models.registry import RoleModel, computes_here
from seeds import Seed

T = TypeVar("T")
OutageMirror = Callable[[object, list[CircuitReport]], None]  # (a child, its circuits' outage reports)
_RESPAWNS_PER_CHILD = 3
_LOCKED_RETRIES = 20
_CLAIM_POLL_S = 0.5
_OUTAGE_REPORT_S = 0.5


@dataclass
class ChildModels:
    """What a child builds for itself after the fork: the run's models, their call policy and reseeding."""

    models: Models
    targets: list[RoleModel]
    policy: CallPolicy
    reseed: Callable[[int], tuple[Models, Sequence[RoleModel]]] | None = None


def process_count(requested: int | None, *, dialogues: int, concurrency: int, models: Sequence[RoleModel],
                  single: bool) -> int:
    """How many processes play a run: ``requested`` (--processes), else one per core when every model answers from
    a server or an API; one when a model computes in this process (the embedded llama.cpp model's threads already
    use every core) or the run needs one process (``single``); never more than its dialogues or than it plays at once
    (``concurrency``, --max-concurrency: each process plays at least one)."""
    if requested is None:
        here = any(computes_here(m.spec, m.sampling) for m in models)
        requested = 1 if single or here else cores()
    return max(1, min(requested, dialogues, concurrency))


def cores() -> int:
    """The cores this process may run on (its CPU affinity, where the system tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def retry_locked(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args)``, tried again (with a growing pause) while SQLite says the database is locked or busy.

    The busy timeout already waits for the writer; SQLite still returns SQLITE_BUSY at once when
    waiting could deadlock (a read transaction that wants to write after another process wrote).
    """
    for attempt in range(_LOCKED_RETRIES):
        try:
            return fn(*args, **kwargs)
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or attempt == _LOCKED_RETRIES - 1:
                raise
            time.sleep(min(1.0, 0.01 * 2**attempt))
    raise AssertionError("unreachable")


def play_in_processes(
    config: RunConfig,
    seeds: Sequence[Seed],
    *,
    record: dict[str, Any],
    store: Writer,
    processes: int,
    setup: Callable[[], ChildModels],
    targets: Sequence[str],
    on_progress: ProgressCallback | None = None,
    scripts: ModeScripts | None = None,
    trace: bool = True,
    merge_stats: Callable[[dict[str, Any]], None] | None = None,
    mirror_outages: OutageMirror | None = None,
) -> RunResult:
    """Play (or resume) every dialogue of a run in ``processes`` children; the outcomes in plan order.

    ``record`` is the run as stored (:meth:`RunConfig.run_record`); ``store`` is the parent's writer of the run's SQLite file; ``setup`` runs in each child
    and builds its models; ``merge_stats`` receives each child's call counters when it ends; ``mirror_outages``
    (:meth:`CallPolicy.mirror_outages`) each child's provider outages as they change. A full or read-only store,
    here or in a child, stops every child and raises :class:`StoreUnwritable`.
    """
    modes = config.modes
    by_mode = {
        mode: scripts if scripts is not None and len(modes) == 1 else scripts_for(mode, seeds, fairmt_dir=config.fairmt_source)
        for mode in modes
    }
    path = Path(store.path)
    with _faults_raised(path):
        record_run(store, record, by_mode, planned=len(plan_dialogues(config, seeds, by_mode, list(targets))))
        conn = connect(path)
        try:
            process_claims.ensure_table(conn)
        finally:
            conn.close()
    jobs = plan_dialogues(config, seeds, by_mode, list(targets))
    notify = on_progress or (lambda *_: None)
    mirror = _OutageMirrors(mirror_outages)
    concurrency = max(1, config.max_concurrency or 1)
    processes = max(1, min(processes, len(jobs), concurrency))
    # Each child's share of --max-concurrency (they add up to it); a replacement child takes the share of the one it replaces.
    shares = [concurrency // processes + (1 if k < concurrency % processes else 0) for k in range(processes)]
    share_of: dict[Any, int] = {}
    context = get_context("fork")
    queue = deque(range(len(jobs)))
    outcomes: dict[int, DialogueOutcome] = {}
    children: dict[Any, tuple[Any, set[int]]] = {}  # pipe -> (process, jobs in its hands)
    spawns = {"left": processes * _RESPAWNS_PER_CHILD}

    def spawn() -> None:
        mine, theirs = context.Pipe()
        share_of[mine] = shares.pop()
        child = context.Process(
            target=_child_main, name="dymt-play",
            args=(theirs, config, jobs, by_mode, path, setup, share_of[mine], trace, processes), daemon=False,
        )
        child.start()
        theirs.close()
        children[mine] = (child, set())

    for _ in range(processes):
        spawn()
    try:
        while children:
            ready = connection.wait(list(children) + [c.sentinel for c, _ in children.values()])
            for pipe in list(children):
                child, held = children[pipe]
                if pipe in ready or child.sentinel in ready:
                    if not _serve(pipe, held, queue, outcomes, notify, merge_stats, mirror):
                        pipe.close()
                        child.join()
                        del children[pipe]
                        shares.append(share_of.pop(pipe))
                        mirror.gone(pipe)
                        lost = sorted(held - outcomes.keys())
                        queue.extendleft(reversed(lost))  # played on from their checkpoints, first
                        if queue and (lost or child.exitcode != 0):
                            if spawns["left"] > 0:
                                spawns["left"] -= 1
                                spawn()
                        if not children and queue:
                            if spawns["left"] > 0:
                                spawns["left"] -= 1
                                spawn()
                            else:
                                for i in queue:
                                    outcomes[i] = DialogueOutcome(
                                        dialogue_thread_id(config, *jobs[i]), "failed",
                                        f"its player process died (exit status {child.exitcode})")
                                queue.clear()
    except BaseException as exc:
        for child, _ in children.values():
            if child.is_alive():
                os.kill(child.pid, signal.SIGINT)  # the children record their dialogues as interrupted
        for pipe, (child, _) in children.items():
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
            _drain(pipe, mirror)
        fault = store_fault(exc, path)
        try:
            with _faults_raised(path):
                retry_locked(store.finish_run, config.run_id, "interrupted")
        except StoreUnwritable as again:  # a full or read-only store cannot take this row either
            fault = fault or again
        if fault is not None:
            raise fault from None  # one line for the command: which file, what to do; nothing lost
        raise
    result = RunResult(run_id=config.run_id, outcomes=[outcomes[i] for i in range(len(jobs))])
    failed = any(o.status == "failed" for o in result.outcomes)
    with _faults_raised(path):
        retry_locked(store.finish_run, config.run_id, "failed" if failed else "finished")
    return result


@contextmanager
def _faults_raised(path: Path) -> Iterator[None]:
    """SQLite's error for a full or read-only store, raised as :class:`StoreUnwritable` (never a raw traceback)."""
    try:
        yield
    except Exception as exc:
        if (fault := store_fault(exc, path)) is not None:
            raise fault from None
        raise


class _OutageMirrors:
    """The children's latest outage reports, passed on to the parent's call policy; a child gone leaves no open outage."""

    def __init__(self, mirror: OutageMirror | None) -> None:
        self._mirror = mirror
        self._last: dict[Any, list[CircuitReport]] = {}

    def __call__(self, pipe: Any, reports: list[CircuitReport]) -> None:
        self._last[pipe] = reports
        if self._mirror is not None:
            self._mirror(pipe, reports)

    def gone(self, pipe: Any) -> None:
        if (last := self._last.pop(pipe, None)) and self._mirror is not None:
            self._mirror(pipe, [r.closed() for r in last])


def _drain(pipe: Any, mirror: _OutageMirrors) -> None:
    """What a stopped child sent last (its final outage reports), read without serving it anything."""
    try:
        while pipe.poll():
            kind, *body = pipe.recv()
            if kind == "outages":
                mirror(pipe, body[0])
    except (EOFError, OSError):
        pass
    mirror.gone(pipe)


def _serve(pipe: Any, held: set[int], queue: deque[int], outcomes: dict[int, DialogueOutcome],
           notify: ProgressCallback, merge_stats: Callable[[dict[str, Any]], None] | None,
           mirror: _OutageMirrors) -> bool:
    """Answer everything a child has sent; False once it has gone (its pipe closed). A child's full or read-only
    store is raised here as :class:`StoreUnwritable`."""
    try:
        while pipe.poll():
            kind, *body = pipe.recv()
            if kind == "want":
                if queue:
                    job = queue.popleft()
                    held.add(job)
                    pipe.send(("job", job))
                else:
                    pipe.send(("none", None))
            elif kind == "progress":
                notify(*body)
            elif kind == "outcome":
                job, thread_id, status, error = body
                outcomes[job] = DialogueOutcome(thread_id, status, error)
                held.discard(job)
            elif kind == "stats" and merge_stats is not None:
                merge_stats(body[0])
            elif kind == "outages":
                mirror(pipe, body[0])
            elif kind == "fault":
                path, fault_kind, detail = body
                raise StoreUnwritable(Path(path), fault_kind, detail)
    except (EOFError, OSError):
        return False
    return True


def merge_call_stats(stats: Any, counts: dict[str, Any]) -> None:
    """Add a child's call counters (as :func:`_child` sends them) to the parent's :class:`CallStats`."""
    for name in ("cache_hits", "cache_misses", "cache_unstorable", "retries", "gave_up", "outage_waits", "calls"):
        for key, n in counts.get(name, {}).items():
            stats.add(name, key, n)
    stats.waited(counts.get("rate_limited_seconds", 0.0))
    stats.dialogues_at_once += int(counts.get("reached") or 0)  # each process's most at once, added: at most that many


def _claim(store: Writer, thread_id: str, owner: process_claims.Owner) -> process_claims.Owner | None:
    """On the child's store thread (one connection, one thread): claim a dialogue."""
    return retry_locked(process_claims.claim, store.db.conn, thread_id, owner)


def _release(store: Writer, thread_id: str, owner: process_claims.Owner) -> None:
    retry_locked(process_claims.release, store.db.conn, thread_id, owner)


# --- the child ------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (elsewhere the closed pipe ends it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _child_main(pipe: Any, config: RunConfig, jobs: Sequence[Any], by_mode: Mapping[str, ModeScripts], path: Path,
                setup: Callable[[], ChildModels], slots: int, trace: bool, sharers: int) -> None:
    _die_with_parent()
    os.setpgrp()  # a terminal's Ctrl-C reaches the parent only, which stops the children in order
    code = 0
    try:
        asyncio.run(_child(pipe, config, jobs, by_mode, path, setup, slots, trace, sharers))
    except KeyboardInterrupt:
        code = 130
    except BaseException as exc:  # noqa: BLE001 - the parent hands this child's dialogues to another
        if (fault := store_fault(exc, path)) is not None:
            pipe.send(("fault", str(fault.path), fault.kind, fault.detail))  # the parent stops the run: one line, exit 75
            code = 75
        else:
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        try:
            pipe.close()
        finally:
            os._exit(code)  # nothing inherited from the parent (its SQLite connections) is touched on the way out


async def _child(pipe: Any, config: RunConfig, jobs: Sequence[Any], by_mode: Mapping[str, ModeScripts], path: Path,
                 setup: Callable[[], ChildModels], slots: int, trace: bool, sharers: int) -> None:
    from checkpoints.saver import open_saver
    from nodes.builder import build_graph

    built = setup()
    built.policy.share_among(sharers)  # the run's rate limits are the total of all its processes
    if (adapt := built.policy.adapting) is not None:  # this process's share of the run's adaptive concurrency
        start, ceiling = adapt
        built.policy.adapt_concurrency(max(1, min(slots, -(-start * slots // ceiling))), slots)
    gate = DialogueSlots(slots, built.policy.concurrency_allowed if adapt is not None else None)
    store = open_writer(path)
    owner = process_claims.Owner.me()
    loop = asyncio.get_running_loop()
    answers: deque[asyncio.Future] = deque()
    stopping = asyncio.Event()

    def read() -> None:
        """On a thread of its own (a blocked recv must not hold up the loop's shutdown): the parent's answers."""
        while True:
            try:
                kind, value = pipe.recv()
            except (EOFError, OSError):  # the parent has gone
                loop.call_soon_threadsafe(_stop_waiting)
                return
            loop.call_soon_threadsafe(_answer, value if kind == "job" else None)

    def _answer(value: int | None) -> None:
        answers.popleft().set_result(value)

    def _stop_waiting() -> None:
        stopping.set()
        while answers:
            answers.popleft().set_result(None)

    async def ask() -> int | None:
        if stopping.is_set():
            return None
        answer = loop.create_future()
        answers.append(answer)
        pipe.send(("want",))
        return await answer

    def notify(event: str, thread_id: str, done: int) -> None:
        if event == "failed":
            report_outages()  # an endpoint refused as a wrong setting reaches the parent before the failures it causes
        pipe.send(("progress", event, thread_id, done))

    sent: list[CircuitReport] = []
    calls_sent: dict[str, int] = {}

    def report_calls() -> None:
        """The calls answered since the last report (the parent's progress log counts calls per minute)."""
        now = dict(built.policy.stats.calls)
        if delta := {role: n - calls_sent.get(role, 0) for role, n in now.items() if n != calls_sent.get(role, 0)}:
            pipe.send(("stats", {"calls": delta}))
            calls_sent.update(now)

    def report_outages() -> None:
        """The circuits' outages, sent when they change (the parent mirrors them: display, summary, exit 75)."""
        nonlocal sent
        if (reports := built.policy.outage_reports()) != sent:
            pipe.send(("outages", reports))
            sent = reports

    async def watch_outages() -> None:
        while True:
            report_outages()
            report_calls()
            await asyncio.sleep(_OUTAGE_REPORT_S)

    async with open_saver(path) as saver:
        graph = build_graph(saver)
        contexts = run_contexts(config, built.models, built.targets, built.reseed)
        write = StoreWriter(store, trace=trace)

        async def slot() -> None:
            while True:
                async with gate:  # fewer at once while a provider asks to slow down (models/concurrency.py)
                    if not await play_one():
                        return

        async def play_one() -> bool:
            if (job := await ask()) is None:
                return False
            seed, mode, target, sample = jobs[job]
            thread_id = dialogue_thread_id(config, seed, mode, target, sample)
            # Another live process playing it (a second command on the same run): wait for it, as on PostgreSQL.
            while await asyncio.wrap_future(write.submit(_claim, thread_id, owner)) is not None:
                await asyncio.sleep(_CLAIM_POLL_S)
            try:
                outcome = await play_dialogue(
                    config, seed, graph=graph, write=write, context=contexts[(sample, target)], notify=notify,
                    script=by_mode[mode].script(seed.id), mode=mode, target=target, sample=sample,
                )
            finally:
                await asyncio.wrap_future(write.submit(_release, thread_id, owner))
            pipe.send(("outcome", job, outcome.thread_id, outcome.status, outcome.error))
            return True

        threading.Thread(target=read, name="dymt-pipe", daemon=True).start()
        watcher = asyncio.ensure_future(watch_outages())
        slots_played = [asyncio.ensure_future(slot()) for _ in range(slots)]
        try:
            with playing_collector():
                await asyncio.gather(*slots_played)
        except BaseException:
            # A full disk in one slot (or the parent's SIGINT): the other dialogues stop before the writer closes,
            # recording themselves interrupted where the store still takes it.
            for task in slots_played:
                task.cancel()
            await asyncio.gather(*slots_played, return_exceptions=True)
            raise
        finally:
            watcher.cancel()
            # Off the loop: a checkpoint write still finishing (checkpoints/saver.py commits a started one in one job on
            # its connection's thread) holds the file's write lock that these closes' last writes wait for.
            await asyncio.to_thread(write.close)
            if built.policy.cache is not None:
                await asyncio.to_thread(built.policy.cache.close)
            report_outages()
            report_calls()
            stats = built.policy.stats
            pipe.send(("stats", {"cache_hits": dict(stats.cache_hits), "cache_misses": dict(stats.cache_misses),
                                 "cache_unstorable": dict(stats.cache_unstorable), "retries": dict(stats.retries),
                                 "gave_up": dict(stats.gave_up), "outage_waits": dict(stats.outage_waits),
                                 "rate_limited_seconds": stats.rate_limited_seconds, "reached": gate.reached}))
            store.db.conn.close()
