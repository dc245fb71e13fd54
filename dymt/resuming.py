"""Resuming: continue paused, failed or interrupted dialogues from their newest checkpoint (``dymt.resume``).

Works in any process: everything a dialogue needs is in its checkpoints and its run's record (the models are
rebuilt from the specs the run stored). Each dialogue that ends is a ``DialogueProgress`` event; the result is a
:class:`dymt.results.ResumeResult`, whose JSON is ``python -m graph.resume --json``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence

from checkpoints.serde import UnsafeCheckpointError
from checkpoints.store import Writer
from dymt.arguments import string, strings
from dymt.errors import DymtError
from dymt.events import DialogueProgress, EventSink, ignore
from dymt.results import ResumeResult
from dymt.running import run_coroutine
from dymt.stores import Db, writer
from evals.report.summary import run_summary
from graph.running.forking import BranchSettings, ForkError, build_settings
from graph.running.pausing import (
    PAUSED,
    PauseOptions,
    PendingMessage,
    ResumeError,
    Review,
    ReviewQuit,
    resumable,
    resume_dialogue,
)
from graph.running.playing import StoreWriter, open_graph

Reviewer = Callable[[PendingMessage], Review]


def resume(
    threads: str | Sequence[str] = (),
    *,
    run_id: str | None = None,
    message: str | None = None,
    review: Reviewer | None = None,
    base_url: str | None = None,
    db: Db = None,
    on_event: EventSink = ignore,
) -> ResumeResult:
    """Continue ``threads`` (or every unfinished dialogue of ``run_id``) to their end.

    ``message`` is the next user message of one dialogue; ``review(pending)`` sees each simulated user message before
    the target does and returns a ``Review`` (accept, replace, quit). A run whose dialogues all finished returns its
    summary (``result.summary``) and plays nothing.
    """
    threads = list(dict.fromkeys(strings(threads, "threads")))
    run_id = None if run_id is None else string(run_id, "run_id")
    if bool(threads) == bool(run_id):
        raise DymtError("give the thread(s) to continue, or run_id= for every unfinished dialogue of a run (not both)")
    if message is not None and len(threads) != 1:
        raise DymtError("message= is the next user message of one dialogue: give exactly one thread")
    if message is not None and not message.strip():
        raise DymtError("message= is empty: give the text of the next user message")
    store = writer(db)
    try:
        if run_id:
            if store.get_run(run_id) is None:
                raise DymtError(f"no run {run_id!r} in {store.path}: check the run id")
            threads = resumable(store, run_id)
            if not threads:
                return ResumeResult(dialogues=(), run_id=run_id, summary=run_summary(store, run_id), db=str(store.path))
        rows = _rows(store, threads)
        settings = _settings(store, rows, base_url)
        try:
            outcomes = run_coroutine(_resume(store, rows, settings, message=message, review=review, on_event=on_event))
        except (ResumeError, UnsafeCheckpointError) as exc:
            raise DymtError(str(exc)) from None
        dialogues = tuple({"thread_id": t, "status": s, "labels": store.labels(t)} for t, s in outcomes)
        return ResumeResult(dialogues=dialogues, run_id=run_id, db=str(store.path))
    finally:
        store.close()


def _rows(store: Writer, threads: list[str]) -> list[dict]:
    rows = []
    for thread_id in threads:
        row = store.get_dialogue(thread_id)
        if row is None:
            raise DymtError(
                f"no dialogue {thread_id!r} in {store.path}: check the thread id "
                f"(python -m graph.replay --list --db {shlex.quote(str(store.path))})"
            )
        if row["status"] == "finished":
            raise DymtError(
                f"dialogue {thread_id} is finished: nothing to resume "
                f"(branch it with python -m graph.branch {shlex.quote(thread_id)} --turn K ...)"
            )
        rows.append(row)
    return rows


def _settings(store: Writer, rows: list[dict], base_url: str | None) -> dict[tuple, BranchSettings]:
    """The models and context of each (run, target) the dialogues belong to, rebuilt from the run's record."""
    settings: dict[tuple, BranchSettings] = {}
    for row in rows:
        key = (row["run_id"], row.get("target"))
        if key not in settings:
            try:
                settings[key] = build_settings(store, row, base_url=base_url)
            except ForkError as exc:
                raise DymtError(str(exc)) from None
    return settings


async def _resume(
    store: Writer,
    rows: list[dict],
    settings: dict,
    *,
    message: str | None,
    review: Reviewer | None,
    on_event: EventSink,
) -> list[tuple[str, str]]:
    done: list[tuple[str, str]] = []
    async with open_graph(store.path) as graph:
        for row in rows:  # read-only checks first: a bad thread stops before any write
            head = await graph.aget_state({"configurable": {"thread_id": row["thread_id"]}})
            if not head.values:
                raise ResumeError(f"thread {row['thread_id']} has no checkpoints in {store.path}: it never started")
        if review is not None:
            graph = PauseOptions(interactive=True).configure(graph)
        write = StoreWriter(store)
        try:
            for row in rows:
                context = settings[(row["run_id"], row.get("target"))].context()
                try:
                    outcome = await resume_dialogue(
                        graph, store, row["thread_id"], write=write, context=context, message=message, review=review
                    )
                except ReviewQuit:
                    done.append((row["thread_id"], PAUSED))
                    break
                done.append((outcome.thread_id, outcome.status))
                on_event(
                    DialogueProgress(
                        run_id=row["run_id"] or "",
                        thread_id=outcome.thread_id,
                        event=outcome.status,
                        turns_done=len(store.labels(outcome.thread_id)),
                    )
                )
        finally:
            for run_id in sorted({r["run_id"] for r in rows if r.get("run_id")}):
                await write.refresh_run_status(run_id)
            write.close()
    return done
