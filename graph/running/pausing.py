"""Pause a dialogue and resume it later, in this process or another one.

Two LangGraph interrupts stop a dialogue, and both leave everything in its checkpoints:

- ``--pause-after K``: the run's configurable carries ``dymt_pause_after``; the user simulator calls
  ``interrupt()`` first thing when it is about to write turn K+1 (before any model call), so the
  newest checkpoint waits for the user node.
- ``--interactive``: a static breakpoint before ``target`` (``interrupt_before``): the simulated
  message is in the checkpoint and the target has not seen it. Accepting continues the thread.
  Editing or replacing forks the thread at the checkpoint before the user node with the person's
  text as ``next_user_message`` (the simulated text stays in an abandoned checkpoint, like a
  failed attempt), and the user node sends it as a 'given' turn.

A paused dialogue has status 'paused' in ``dialogues``. ``python -m graph.resume`` continues it
(optionally with the next user message), and re-running its run id with ``graph.run`` does too.
No output here: the terminal review lives in ``graph.resume``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import StateSnapshot

from checkpoints.store import Writer
from graph.running.forking import build_settings, given_message, is_turn_boundary
from graph.running.playing import (
    DialogueOutcome,
    PlayedRun,
    ProgressCallback,
    StoreWriter,
    checkpoint_before_failure,
    dialogue_config,
    play_dialogue,
)
from nodes.context import RunContext
from nodes.modes import DYNAMIC_MODES
from nodes.state import current_turn
from nodes.user_simulator import GIVEN, PAUSE_AFTER_KEY

PAUSED = "paused"
REVIEW_BEFORE = ("target",)


class ResumeError(ValueError):
    """A dialogue that cannot be resumed as asked; the message names the fix."""


class ReviewQuit(Exception):
    """The person quit the review: every dialogue not yet finished stays paused."""


@dataclass(frozen=True)
class PauseOptions:
    """How a run pauses: before every simulated message reaches the target, and/or after turn K."""

    interactive: bool = False
    pause_after: int | None = None

    def __bool__(self) -> bool:
        return self.interactive or self.pause_after is not None

    def configure(self, graph: CompiledStateGraph) -> CompiledStateGraph:
        """A copy of ``graph`` that pauses as asked (the compiled graph itself is left as it was)."""
        if self.pause_after is not None:
            graph = graph.with_config(configurable={PAUSE_AFTER_KEY: self.pause_after})
        if self.interactive:
            graph = graph.copy(update={"interrupt_before_nodes": list(REVIEW_BEFORE)})
        return graph


def check_pause_options(*, modes: Sequence[str], turns: int, interactive: bool, pause_after: int | None) -> str | None:
    """The reason these pause flags cannot be used with this run, or None."""
    if not interactive and pause_after is None:
        return None
    scripted = [m for m in modes if m not in DYNAMIC_MODES]
    if scripted:
        given = "review=" if interactive else "pause_after="  # the keywords; each command says its flags
        return f"{given} pauses a simulated user; mode={scripted[0]} replays a script: use {' or '.join(DYNAMIC_MODES)}"
    if pause_after is not None and pause_after >= turns:
        return f"pause_after={pause_after} is not before the last turn ({turns}): give a value below turns="
    return None


# --------------------------------------------------------------------------- reading a pause


@dataclass(frozen=True)
class PendingMessage:
    """A simulated user message waiting at a review pause, with what the person needs to judge it."""

    thread_id: str
    turn: int
    max_turns: int
    message: str
    utterance_type: str | None
    previous_reply: str | None
    previous_label: str | None


@dataclass(frozen=True)
class Review:
    """What the person decided: send the message as is, send other text, or stop here."""

    action: Literal["accept", "replace", "quit"]
    message: str | None = None


Reviewer = Callable[[PendingMessage], Review]


def is_review_pause(snapshot: StateSnapshot) -> bool:
    """Stopped at the breakpoint before the target, with a user message the target has not seen."""
    return tuple(snapshot.next) == REVIEW_BEFORE and not snapshot.values.get("stop_reason")


def is_paused(snapshot: StateSnapshot) -> bool:
    """The newest checkpoint still has a node to run and the dialogue has not ended."""
    return bool(snapshot.next) and not snapshot.values.get("stop_reason")


def pending_message(thread_id: str, snapshot: StateSnapshot) -> PendingMessage:
    values = snapshot.values
    turn = current_turn(values)  # type: ignore[arg-type]
    turns = {t["index"]: t for t in values.get("turns", [])}
    pending = turns.get(turn, {})
    previous = turns.get(turn - 1, {})
    return PendingMessage(
        thread_id=thread_id,
        turn=turn,
        max_turns=int(values.get("max_turns") or turn),
        message=values["messages"][-1]["content"],
        utterance_type=pending.get("utterance_type"),
        previous_reply=previous.get("reply"),
        previous_label=previous.get("label"),
    )


async def set_next_message(graph: CompiledStateGraph, snapshot: StateSnapshot, text: str) -> RunnableConfig:
    """Make ``text`` the next user message: a new checkpoint after ``snapshot`` (a turn boundary)."""
    if not is_turn_boundary(snapshot):
        raise ResumeError(
            f"the dialogue is waiting for {', '.join(snapshot.next) or 'nothing'}, not for a user message"
        )
    update = given_message(snapshot.values, current_turn(snapshot.values) + 1, text)  # type: ignore[arg-type]
    return await graph.aupdate_state(snapshot.config, update, as_node="termination")


async def replace_pending(graph: CompiledStateGraph, snapshot: StateSnapshot, text: str) -> RunnableConfig:
    """At a review pause, send ``text`` instead of the simulated message (fork at the turn boundary)."""
    boundary = await graph.aget_state(snapshot.parent_config) if snapshot.parent_config else None
    if boundary is None:
        raise ResumeError("the paused message has no checkpoint before it: resume without --message")
    return await set_next_message(graph, boundary, text)


# --------------------------------------------------------------------------- driving with pauses


async def settle(graph: CompiledStateGraph, outcome: DialogueOutcome, *, write: StoreWriter) -> DialogueOutcome:
    """After play_dialogue(): a dialogue whose stream ended at an interrupt is 'paused', not finished."""
    if outcome.status != "finished":
        return outcome
    head = await graph.aget_state({"configurable": {"thread_id": outcome.thread_id}})
    if is_paused(head):
        await write.upsert_dialogue(outcome.thread_id, status=PAUSED, stop_reason=None, ended_at=None)
        return DialogueOutcome(outcome.thread_id, PAUSED)
    return outcome


async def review_loop(
    graph: CompiledStateGraph,
    outcome: DialogueOutcome,
    *,
    write: StoreWriter,
    context: RunContext,
    review: Reviewer,
    notify: ProgressCallback,
) -> DialogueOutcome:
    """Ask the person about each message waiting at a review pause and play on, until the dialogue ends.

    A message someone already wrote ('given': an edit, a branch's change) goes on without asking.
    Raises :class:`ReviewQuit` when the person quits; the dialogue stays paused.
    """
    thread_id = outcome.thread_id
    while outcome.status == PAUSED:
        head = await graph.aget_state({"configurable": {"thread_id": thread_id}})
        if not is_review_pause(head):
            return outcome  # a --pause-after stop: it waits for graph.resume
        pending = pending_message(thread_id, head)
        decision = Review("accept") if pending.utterance_type == GIVEN else review(pending)
        if decision.action == "quit":
            raise ReviewQuit(thread_id)
        if decision.action == "replace" and decision.message and decision.message.strip() != pending.message:
            await replace_pending(graph, head, decision.message.strip())
        config = dialogue_config(thread_id, turns=pending.max_turns)
        await write.upsert_dialogue(thread_id, status="running", ended_at=None)
        outcome = await settle(
            graph, await play_dialogue(graph, config, write=write, context=context, notify=notify), write=write
        )
    return outcome


async def settle_run(
    graph: CompiledStateGraph,
    store: Writer,
    result: PlayedRun,
    *,
    context: RunContext,
    review: Reviewer | None = None,
    notify: ProgressCallback | None = None,
) -> PlayedRun:
    """After execute_run() with a pausing graph: mark paused dialogues, review them if asked (each in the run's
    ``context``, or its grid target's), set the run's status."""
    notify = notify or (lambda *_: None)
    write = StoreWriter(store)
    try:
        result.outcomes = [await settle(graph, o, write=write) for o in result.outcomes]
        if review is not None:
            for i, outcome in enumerate(result.outcomes):
                if outcome.status == PAUSED:
                    row = store.get_dialogue(outcome.thread_id) or {}
                    own = _context_for(store, row, context)
                    try:
                        result.outcomes[i] = await review_loop(
                            graph, outcome, write=write, context=own, review=review, notify=notify
                        )
                    except ReviewQuit:
                        break
    finally:
        await write.refresh_run_status(result.run_id)
        write.close()
    return result


def _context_for(store: Writer, dialogue: dict[str, Any], context: RunContext) -> RunContext:
    """The run's context, or one rebuilt for a dialogue of a grid run played against another target."""
    target = dialogue.get("target")
    if not target or target == context.models.target.spec:
        return context
    return build_settings(store, dialogue).context()


async def resume_dialogue(
    graph: CompiledStateGraph,
    store: Writer,
    thread_id: str,
    *,
    write: StoreWriter,
    context: RunContext,
    message: str | None = None,
    review: Reviewer | None = None,
    notify: ProgressCallback | None = None,
) -> DialogueOutcome:
    """Continue a paused, failed or interrupted dialogue from its newest checkpoint to its end (or next pause).

    With ``message``, that text is the next user message (instead of the pending simulated one).
    """
    notify = notify or (lambda *_: None)
    row = store.get_dialogue(thread_id)
    if row is None:
        raise ResumeError(
            f"no dialogue {thread_id!r} in {store.path}: check the thread id (python -m graph.replay --list)"
        )
    head = await graph.aget_state({"configurable": {"thread_id": thread_id}})
    values = head.values or {}
    if not values:
        raise ResumeError(f"thread {thread_id} has no checkpoints in {store.path}: it never started")
    if values.get("stop_reason") == "max_turns":
        raise ResumeError(
            f"thread {thread_id} is finished ({values['max_turns']} turns): branch it to go on (python -m graph.branch)"
        )
    start = head
    if values.get("stop_reason") == "error":
        start = await graph.aget_state(await checkpoint_before_failure(graph, head.config))
    if message is not None:
        text = message.strip()
        if not text:
            raise ResumeError("--message is empty: give the text of the next user message")
        if values.get("mode") not in DYNAMIC_MODES and not values.get("script"):
            raise ResumeError(
                f"--message needs a dialogue with a user turn to replace; {thread_id} has mode {values.get('mode')}"
            )
        if is_review_pause(start):
            await replace_pending(graph, start, text)
        else:
            await set_next_message(graph, start, text)
        config = dialogue_config(thread_id, turns=int(values["max_turns"]), run_id=row.get("run_id"))
    elif start is head:
        config = dialogue_config(thread_id, turns=int(values["max_turns"]), run_id=row.get("run_id"))
    else:
        config = {
            **dialogue_config(thread_id, turns=int(values["max_turns"]), run_id=row.get("run_id")),
            "configurable": dict(start.config["configurable"]),
        }
    notify("started", thread_id, sum(1 for t in values.get("turns", []) if "label" in t))
    if review is not None and message is None and start is head and is_review_pause(head):
        outcome = DialogueOutcome(thread_id, PAUSED)  # the person has not seen the waiting message yet
    else:
        await write.upsert_dialogue(thread_id, status="running", stop_reason=None, error=None, ended_at=None)
        outcome = await settle(
            graph, await play_dialogue(graph, config, write=write, context=context, notify=notify), write=write
        )
    if review is not None:
        outcome = await review_loop(graph, outcome, write=write, context=context, review=review, notify=notify)
    return outcome


def resumable(store: Writer, run_id: str) -> list[str]:
    """Threads of a run that did not finish: paused, failed, interrupted or left running by a crash."""
    return [d["thread_id"] for d in store.dialogues(run_id) if d["status"] != "finished"]


__all__ = [
    "PAUSED",
    "PauseOptions",
    "PendingMessage",
    "ResumeError",
    "Review",
    "ReviewQuit",
    "Reviewer",
    "check_pause_options",
    "is_paused",
    "is_review_pause",
    "pending_message",
    "replace_pending",
    "resumable",
    "resume_dialogue",
    "review_loop",
    "set_next_message",
    "settle",
    "settle_run",
]
