"""One child of a run played in processes (graph/workers/processes.py): its models, its slots, its pipe to the parent.

The child builds its own store, checkpointer and models after the fork (``setup``), asks the parent for a dialogue
whenever one of its slots is free, claims it in the store (:mod:`checkpoints.process_claims`), plays it with the
one-process code and sends back progress, outcomes, its call counters and its circuits' outages.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoints import process_claims
from checkpoints.outages import store_fault
from checkpoints.paths import retry_locked
from checkpoints.store import Writer, open_writer
from graph.config.run_config import RunConfig
from graph.running.gc_settings import playing_collector
from graph.running.playing import (
    DialogueSlots,
    RunDialogue,
    dialogue_thread_id,
    open_graph,
    play_dialogue,
    run_contexts,
)
from graph.running.store_writer import StoreWriter
from models.call_policy import CallPolicy
from models.circuit import CircuitReport
from models.registry import RoleModel
from nodes.context import Models
from nodes.modes import ModeScripts

_CLAIM_POLL_S = 0.5
_OUTAGE_REPORT_S = 0.5


@dataclass
class ChildModels:
    """What a child builds for itself after the fork: the run's models, their call policy and reseeding."""

    models: Models
    targets: list[RoleModel]
    policy: CallPolicy
    reseed: Callable[[int], tuple[Models, Sequence[RoleModel]]] | None = None


def _claim(store: Writer, thread_id: str, owner: process_claims.Owner) -> process_claims.Owner | None:
    """On the child's store thread (one connection, one thread): claim a dialogue."""
    return retry_locked(process_claims.claim, store.db.conn, thread_id, owner)


def _release(store: Writer, thread_id: str, owner: process_claims.Owner) -> None:
    retry_locked(process_claims.release, store.db.conn, thread_id, owner)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (elsewhere the closed pipe ends it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass(frozen=True)
class ChildRun:
    """What every child of a run is handed as it forks: the run, its dialogues and their scripts, its SQLite file,
    how a child builds its models (``setup``, after the fork) and whether it traces."""

    config: RunConfig
    jobs: Sequence[Any]
    by_mode: Mapping[str, ModeScripts]
    path: Path
    setup: Callable[[], ChildModels]
    trace: bool


def _child_main(pipe: Any, run: ChildRun, slots: int, sharers: int) -> None:
    _die_with_parent()
    os.setpgrp()  # a terminal's Ctrl-C reaches the parent only, which stops the children in order
    # The parent's handlers (its event loop's Ctrl-C handler, a command's SIGTERM) act on the parent's loop, not this
    # one: with Python's own back, asyncio's handler stops this child's dialogues in order when the parent sends SIGINT.
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    code = 0
    try:
        asyncio.run(_child(pipe, run, slots, sharers))
    except KeyboardInterrupt:
        code = 130
    except BaseException as exc:  # noqa: BLE001 - the parent hands this child's dialogues to another
        if (fault := store_fault(exc, run.path)) is not None:
            pipe.send(
                ("fault", str(fault.path), fault.kind, fault.detail)
            )  # the parent stops the run: one line, exit 75
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


async def _child(pipe: Any, run: ChildRun, slots: int, sharers: int) -> None:
    await _ChildPlayer(pipe, run, run.setup(), slots=slots, sharers=sharers).play()


class _ChildPlayer:
    """A child's slots playing the dialogues its parent hands it, and what it reports back over its pipe."""

    def __init__(
        self,
        pipe: Any,
        run: ChildRun,
        built: ChildModels,
        *,
        slots: int,
        sharers: int,
    ) -> None:
        self.pipe, self.run, self.built = pipe, run, built
        self.config, self.jobs, self.by_mode = run.config, run.jobs, run.by_mode
        self.slots = slots
        built.policy.share_among(sharers)  # the run's rate limits are the total of all its processes
        if (adapt := built.policy.adapting) is not None:  # this process's share of the run's adaptive concurrency
            start, ceiling = adapt
            built.policy.adapt_concurrency(max(1, min(slots, -(-start * slots // ceiling))), slots)
        self.gate = DialogueSlots(slots, built.policy.concurrency_allowed if adapt is not None else None)
        self.store = open_writer(run.path)
        self.owner = process_claims.Owner.me()
        self.loop = asyncio.get_running_loop()
        self.answers: deque[asyncio.Future] = deque()
        self.stopping = asyncio.Event()
        self.sent: list[CircuitReport] = []
        self.calls_sent: dict[str, int] = {}

    # --- the parent's answers ----------------------------------------------------------------

    def read(self) -> None:
        """On a thread of its own (a blocked recv must not hold up the loop's shutdown): the parent's answers."""
        while True:
            try:
                kind, value = self.pipe.recv()
            except (EOFError, OSError):  # the parent has gone
                self.loop.call_soon_threadsafe(self._stop_waiting)
                return
            self.loop.call_soon_threadsafe(self._answer, value if kind == "job" else None)

    def _answer(self, value: int | None) -> None:
        self.answers.popleft().set_result(value)

    def _stop_waiting(self) -> None:
        self.stopping.set()
        while self.answers:
            self.answers.popleft().set_result(None)

    async def ask(self) -> int | None:
        if self.stopping.is_set():
            return None
        answer = self.loop.create_future()
        self.answers.append(answer)
        self.pipe.send(("want",))
        return await answer

    # --- reports to the parent ---------------------------------------------------------------

    def notify(self, event: str, thread_id: str, done: int) -> None:
        if event == "failed":
            # an endpoint refused as a wrong setting reaches the parent before the failures it causes
            self.report_outages()
        self.pipe.send(("progress", event, thread_id, done))

    def report_calls(self) -> None:
        """The calls answered since the last report (the parent's progress log counts calls per minute)."""
        now = dict(self.built.policy.stats.calls)
        if delta := {
            role: n - self.calls_sent.get(role, 0) for role, n in now.items() if n != self.calls_sent.get(role, 0)
        }:
            self.pipe.send(("stats", {"calls": delta}))
            self.calls_sent.update(now)

    def report_outages(self) -> None:
        """The circuits' outages, sent when they change (the parent mirrors them: display, summary, exit 75)."""
        if (reports := self.built.policy.outage_reports()) != self.sent:
            self.pipe.send(("outages", reports))
            self.sent = reports

    async def watch_outages(self) -> None:
        while True:
            self.report_outages()
            self.report_calls()
            await asyncio.sleep(_OUTAGE_REPORT_S)

    def report_stats(self) -> None:
        """The child's call counters as it ends (graph/workers/processes.py ``merge_call_stats`` adds them up)."""
        stats = self.built.policy.stats
        self.pipe.send(
            (
                "stats",
                {
                    "cache_hits": dict(stats.cache_hits),
                    "cache_misses": dict(stats.cache_misses),
                    "cache_unstorable": dict(stats.cache_unstorable),
                    "retries": dict(stats.retries),
                    "gave_up": dict(stats.gave_up),
                    "outage_waits": dict(stats.outage_waits),
                    "rate_limited_seconds": stats.rate_limited_seconds,
                    "reached": self.gate.reached,
                },
            )
        )

    # --- playing -----------------------------------------------------------------------------

    async def play(self) -> None:
        async with open_graph(self.run.path) as graph:
            contexts = run_contexts(self.config, self.built.models, self.built.targets, self.built.reseed)
            write = StoreWriter(self.store, trace=self.run.trace)

            async def slot() -> None:
                while True:
                    async with self.gate:  # fewer at once while a provider asks to slow down (models/concurrency.py)
                        if not await self.play_one(graph, write, contexts):
                            return

            threading.Thread(target=self.read, name="dymt-pipe", daemon=True).start()
            watcher = asyncio.ensure_future(self.watch_outages())
            slots_played = [asyncio.ensure_future(slot()) for _ in range(self.slots)]
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
                await self.close(write)

    async def play_one(self, graph: Any, write: StoreWriter, contexts: dict[Any, Any]) -> bool:
        """Ask for a dialogue and play it; False when the parent has none left."""
        if (job := await self.ask()) is None:
            return False
        seed, mode, target, sample = self.jobs[job]
        thread_id = dialogue_thread_id(self.config, seed, mode, target, sample)
        # Another live process playing it (a second command on the same run): wait for it, as on PostgreSQL.
        while await asyncio.wrap_future(write.submit(_claim, thread_id, self.owner)) is not None:
            await asyncio.sleep(_CLAIM_POLL_S)
        try:
            outcome = await play_dialogue(
                graph,
                RunDialogue(self.config, seed, mode, target, sample, script=self.by_mode[mode].script(seed.id)),
                write=write,
                context=contexts[(sample, target)],
                notify=self.notify,
            )
        finally:
            await asyncio.wrap_future(write.submit(_release, thread_id, self.owner))
        self.pipe.send(("outcome", job, outcome.thread_id, outcome.status, outcome.error))
        return True

    async def close(self, write: StoreWriter) -> None:
        # Off the loop: a checkpoint write still finishing (checkpoints/saver.py commits a started one in one job on
        # its connection's thread) holds the file's write lock that these closes' last writes wait for.
        await asyncio.to_thread(write.close)
        if self.built.policy.cache is not None:
            await asyncio.to_thread(self.built.policy.cache.close)
        self.report_outages()
        self.report_calls()
        self.report_stats()
        self.store.db.conn.close()
