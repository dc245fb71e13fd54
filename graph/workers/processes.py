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
"database is locked" is retried (:func:`checkpoints.paths.retry_locked`). A child's side:
graph/workers/process_child.py.

Outages, as in one process: each child reports its circuits' outages (models/circuit.py) over its pipe and the
parent mirrors them on its own call policy, so its progress display shows a provider outage while it lasts and
the run exits 75 past its budget. A full or read-only disk in a child (:class:`StoreUnwritable`) is sent to the
parent, which stops the other children in order and raises it: one line from the command, exit 75.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from multiprocessing import connection, get_context
from pathlib import Path
from typing import Any

from checkpoints import process_claims
from checkpoints.outages import StoreUnwritable, store_fault
from checkpoints.paths import connect, retry_locked
from checkpoints.run_record import RunRecord
from checkpoints.store import Writer
from graph.config.run_config import RunConfig
from graph.running.playing import (
    DialogueOutcome,
    PlayedRun,
    ProgressCallback,
    dialogue_thread_id,
    plan_dialogues,
    run_id_of,
    scripts_by_mode,
)
from graph.running.run_records import record_run
from graph.workers.process_child import ChildModels, ChildRun, _child_main
from models.circuit import CircuitReport
from models.registry import RoleModel, computes_here
from nodes.modes import ModeScripts
from seeds import Seed

Job = tuple[Seed, str, str, int]  # (seed, mode, target spec, sample): one dialogue of the run's plan
OutageMirror = Callable[[object, list[CircuitReport]], None]  # (a child, its circuits' outage reports)
_RESPAWNS_PER_CHILD = 3
_STOP_POLL_S = 0.25  # how often the parent asks whether the run is stopping


def process_count(
    requested: int | None, *, dialogues: int, concurrency: int, models: Sequence[RoleModel], single: bool
) -> int:
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


def play_in_processes(
    config: RunConfig,
    seeds: Sequence[Seed],
    *,
    record: RunRecord | Mapping[str, Any],
    store: Writer,
    processes: int,
    setup: Callable[[], ChildModels],
    targets: Sequence[str],
    on_progress: ProgressCallback | None = None,
    scripts: ModeScripts | None = None,
    trace: bool = True,
    merge_stats: Callable[[dict[str, Any]], None] | None = None,
    mirror_outages: OutageMirror | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> PlayedRun:
    """Play (or resume) every dialogue of a run in ``processes`` children; the outcomes in plan order.

    ``record`` is the run as stored (:meth:`RunConfig.stored_record`); ``store`` is the parent's writer of the run's
    SQLite file; ``setup`` runs in each child
    and builds its models; ``merge_stats`` receives each child's call counters when it ends; ``mirror_outages``
    (:meth:`CallPolicy.mirror_outages`) each child's provider outages as they change. A full or read-only store,
    here or in a child, stops every child and raises :class:`StoreUnwritable`. ``stopping()`` is asked a few times a
    second: once it says yes (the caller's task was cancelled: Ctrl-C, SIGTERM), the children stop in order and the
    run is marked interrupted, as when this process is interrupted.
    """
    by_mode = scripts_by_mode(config, seeds, scripts)
    path = Path(str(store.path))  # one SQLite file (--processes refuses PostgreSQL)
    jobs = plan_dialogues(config, seeds, by_mode, list(targets))
    with _faults_raised(path):
        record_run(store, record, by_mode, planned=len(jobs))
        conn = connect(path)
        try:
            process_claims.ensure_table(conn)
        finally:
            conn.close()
    children = _Children(
        ChildRun(config, jobs, by_mode, path, setup, trace),
        processes=processes,
        notify=on_progress or (lambda *_: None),
        merge_stats=merge_stats,
        mirror=_OutageMirrors(mirror_outages),
        stopping=stopping,
    )
    children.start()
    try:
        children.serve()
    except BaseException as exc:
        children.stop()
        fault = store_fault(exc, path)
        try:
            with _faults_raised(path):
                retry_locked(store.mark_interrupted, [dialogue_thread_id(config, *job) for job in jobs])
                retry_locked(store.finish_run, config.run_id, "interrupted")
        except StoreUnwritable as again:  # a full or read-only store cannot take this row either
            fault = fault or again
        if fault is not None:
            raise fault from None  # one line for the command: which file, what to do; nothing lost
        raise
    result = PlayedRun(run_id=run_id_of(config), outcomes=[children.outcomes[i] for i in range(len(jobs))])
    failed = any(o.status == "failed" for o in result.outcomes)
    with _faults_raised(path):
        retry_locked(store.finish_run, config.run_id, "failed" if failed else "finished")
    return result


class _Children:
    """The parent's side of the children: the queue of dialogues, who holds which, their outcomes, and respawns."""

    def __init__(
        self,
        run: ChildRun,
        *,
        processes: int,
        notify: ProgressCallback,
        merge_stats: Callable[[dict[str, Any]], None] | None,
        mirror: _OutageMirrors,
        stopping: Callable[[], bool],
    ) -> None:
        self.run, self.config, self.jobs = run, run.config, run.jobs
        self.notify, self.merge_stats, self.mirror, self.stopping = notify, merge_stats, mirror, stopping
        concurrency = max(1, self.config.max_concurrency or 1)
        self.processes = max(1, min(processes, len(self.jobs), concurrency))
        # Each child's share of --max-concurrency (they add up to it); a replacement child takes the share of the one
        # it replaces.
        self.shares = [
            concurrency // self.processes + (1 if k < concurrency % self.processes else 0)
            for k in range(self.processes)
        ]
        self.share_of: dict[Any, int] = {}
        self.context = get_context("fork")
        self.queue = deque(range(len(self.jobs)))
        self.outcomes: dict[int, DialogueOutcome] = {}
        self.children: dict[Any, tuple[Any, set[int]]] = {}  # pipe -> (process, jobs in its hands)
        self.spawns_left = self.processes * _RESPAWNS_PER_CHILD

    def spawn(self) -> None:
        mine, theirs = self.context.Pipe()
        self.share_of[mine] = self.shares.pop()
        child = self.context.Process(
            target=_child_main,
            name="dymt-play",
            args=(theirs, self.run, self.share_of[mine], self.processes),
            daemon=False,
        )
        child.start()
        theirs.close()
        self.children[mine] = (child, set())

    def start(self) -> None:
        for _ in range(self.processes):
            self.spawn()

    def serve(self) -> None:
        """Serve the children until every dialogue has its outcome (or none may be played)."""
        while self.children:
            ready = connection.wait(
                list(self.children) + [c.sentinel for c, _ in self.children.values()], timeout=_STOP_POLL_S
            )
            if self.stopping():
                raise asyncio.CancelledError  # the caller's stop() stops the children in order
            for pipe in list(self.children):
                child, held = self.children[pipe]
                if pipe in ready or child.sentinel in ready:
                    if not _serve(pipe, held, self.queue, self.outcomes, self.notify, self.merge_stats, self.mirror):
                        self._gone(pipe)

    def _gone(self, pipe: Any) -> None:
        """A child has ended: its unfinished dialogues go back to the head of the queue, for a replacement child."""
        child, held = self.children[pipe]
        pipe.close()
        child.join()
        del self.children[pipe]
        self.shares.append(self.share_of.pop(pipe))
        self.mirror.gone(pipe)
        lost = sorted(held - self.outcomes.keys())
        self.queue.extendleft(reversed(lost))  # played on from their checkpoints, first
        if self.stopping():
            return  # the run is stopping (a child stopped by the same Ctrl-C): nothing is played on
        if self.queue and (lost or child.exitcode != 0):
            self._respawn()
        if not self.children and self.queue and not self._respawn():
            for i in self.queue:
                self.outcomes[i] = DialogueOutcome(
                    dialogue_thread_id(self.config, *self.jobs[i]),
                    "failed",
                    f"its player process died (exit status {child.exitcode})",
                )
            self.queue.clear()

    def _respawn(self) -> bool:
        if self.spawns_left <= 0:
            return False
        self.spawns_left -= 1
        self.spawn()
        return True

    def stop(self) -> None:
        """Stop the children in order (they record their dialogues as interrupted), then any that will not stop."""
        for child, _ in self.children.values():
            if child.is_alive():
                os.kill(child.pid, signal.SIGINT)
        for pipe, (child, _) in self.children.items():
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
            _drain(pipe, self.mirror)


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
    """The children's latest outage reports, passed on to the parent's call policy; a child gone leaves no open
    outage."""

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


def _serve(
    pipe: Any,
    held: set[int],
    queue: deque[int],
    outcomes: dict[int, DialogueOutcome],
    notify: ProgressCallback,
    merge_stats: Callable[[dict[str, Any]], None] | None,
    mirror: _OutageMirrors,
) -> bool:
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
