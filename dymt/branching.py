"""Branching: fork stored dialogues before turn K, change one thing, and play them on (``dymt.branch``).

Turns 1..K-1 are copied from the parent, never regenerated; the parent is not touched. Each branch that ends is a
``DialogueProgress`` event; the result is a :class:`dymt.results.BranchResult`, whose JSON is
``python -m graph.branch --json``. Everything is checked before the first write: bad input writes nothing.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checkpoints.ids import branch_thread_id, new_run_id
from checkpoints.serde import UnsafeCheckpointError
from checkpoints.store import Writer
from dymt.arguments import string
from dymt.errors import DymtError
from dymt.events import DialogueProgress, EventSink, ignore
from dymt.results import BranchResult
from dymt.running import run_coroutine
from dymt.stores import Db, writer
from graph.running.forking import (
    BranchRun,
    BranchSettings,
    Change,
    ForkError,
    build_settings,
    change_record,
    plan_branch,
    play_branches,
    read_lineage,
)
from graph.running.playing import open_graph
from graph.running.swaps import check_swaps, mentions, parse_swap
from nodes.modes import DYNAMIC_MODES

Swap = str | tuple[str, str]


@dataclass(frozen=True)
class _Ask:
    """What to branch: one thread or a run's dialogues, at which turn, for how many turns."""

    thread: str | None
    run_id: str | None
    turn: int
    turns: int | None


def branch(
    thread: str | None = None,
    *,
    turn: int,
    run_id: str | None = None,
    user_message: str | None = None,
    swap: str | Sequence[Swap] | None = None,
    target_model: str | None = None,
    judge_model: str | None = None,
    mode: str | None = None,
    seed_statement: str | None = None,
    rerun: bool = False,
    turns: int | None = None,
    name: str | None = None,
    sampling_seed: int | None = None,
    base_url: str | None = None,
    db: Db = None,
    on_event: EventSink = ignore,
) -> BranchResult:
    """Fork ``thread`` (or every dialogue of ``run_id``) before turn ``turn`` with one change, and play it on.

    The change is one of ``user_message``, ``swap=["women=men"]``, ``target_model``, ``judge_model``, ``mode``,
    ``seed_statement`` or ``rerun=True`` (a new sampling seed). ``name`` groups the branches as a counterfactual set.
    """
    if (thread is None) == (run_id is None):
        raise DymtError("give the thread to branch, or run_id= to branch every dialogue of a run (not both)")
    thread = None if thread is None else string(thread, "thread")
    run_id = None if run_id is None else string(run_id, "run_id")
    swap = [swap] if isinstance(swap, str) else swap  # swap="women=men" is one swap
    ask = _Ask(thread, run_id, _positive(turn, "turn"), None if turns is None else _positive(turns, "turns"))
    change = _change(
        user_message=user_message,
        swap=swap,
        target_model=target_model,
        judge_model=judge_model,
        mode=mode,
        seed_statement=seed_statement,
        rerun=rerun,
    )
    if name is not None and not re.fullmatch(r"[\w.:@=+-]+", name):
        raise DymtError(f"name={name!r}: use letters, digits and . : @ = + - _ (no spaces)")
    store = writer(db)
    try:
        return _branch_in(
            store, ask, change, name=name, sampling_seed=sampling_seed, base_url=base_url, on_event=on_event
        )
    finally:
        store.close()


def _branch_in(
    store: Writer,
    ask: _Ask,
    change: Change,
    *,
    name: str | None,
    sampling_seed: int | None,
    base_url: str | None,
    on_event: EventSink,
) -> BranchResult:
    if name and store.get_set(name):
        raise DymtError(f"counterfactual set {name!r} already exists in {store.path}: choose another name=")
    parents = _parents(store, ask, change)
    models = {d.get("target") for d in parents}
    if len(models) > 1:
        raise DymtError(
            f"run {ask.run_id} played several targets ({', '.join(sorted(map(str, models)))}): "
            "branch them one thread at a time"
        )
    if sampling_seed is None and change.kind == "rerun":
        sampling_seed = secrets.randbelow(2**31)
    try:
        role, model = change.role, change.model  # a model change (_change) always names its model
        settings = build_settings(
            store,
            parents[0],
            overrides={role: model} if role and model is not None else None,
            sampling_seed=sampling_seed,
            base_url=base_url,
        )
    except ForkError as exc:
        raise DymtError(str(exc)) from None
    set_name = name or (_default_set_name(store, ask, change) if ask.run_id else None)
    try:
        made, skipped = run_coroutine(_play(store, parents, change, ask, settings, set_name, on_event))
    except (ForkError, UnsafeCheckpointError) as exc:
        raise DymtError(str(exc)) from None
    rows = tuple(
        {
            "thread_id": plan.branch_id,
            "parent_thread_id": plan.fork.thread_id,
            "fork_turn": plan.fork.turn,
            "fork_checkpoint_id": plan.fork.checkpoint_id,
            "status": outcome.status,
            "error": outcome.error,
            "labels": store.labels(plan.branch_id),
            "change": plan.change,
        }
        for plan, outcome in zip(made.plans, made.outcomes)
    )
    return BranchResult(
        run_id=made.run_id, set_name=made.set_name, branches=rows, skipped=tuple(skipped), db=str(store.path)
    )


def _pair(swap: Any) -> tuple[str, str]:
    """A swap given as a pair ``("women", "men")``; anything else raises one line."""
    if isinstance(swap, (tuple, list)) and len(swap) == 2 and all(isinstance(t, str) for t in swap):
        return swap[0], swap[1]
    raise DymtError(f"swap={swap!r}: give 'OLD=NEW' or a pair of strings (for example swap='women=men')")


def _positive(value: int, keyword: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DymtError(f"{keyword}={value!r} must be a whole number of at least 1")
    return value


def _change(
    *,
    user_message: str | None,
    swap: Sequence[Swap] | None,
    target_model: str | None,
    judge_model: str | None,
    mode: str | None,
    seed_statement: str | None,
    rerun: bool,
) -> Change:
    """The one change a branch makes; none or several is bad input."""
    given = {
        "user_message": user_message,
        "swap": swap or None,
        "target_model": target_model,
        "judge_model": judge_model,
        "mode": mode,
        "seed_statement": seed_statement,
        "rerun": rerun or None,
    }
    named = [k for k, v in given.items() if v is not None]
    if len(named) != 1:
        flags = " ".join(f"{k}=" for k in given)
        raise DymtError(f"give exactly one change ({flags}); got {', '.join(named) or 'none'}")
    if swap:
        try:
            swaps = tuple(parse_swap(s) if isinstance(s, str) else _pair(s) for s in swap)
            check_swaps(swaps)
        except ValueError as exc:
            raise DymtError(str(exc)) from None
        return Change("swap", swaps=swaps)
    if mode is not None and mode not in DYNAMIC_MODES:
        raise DymtError(
            f"unknown mode={mode!r}: a branch continues with a simulated user, {' or '.join(DYNAMIC_MODES)}"
        )
    kind = named[0]
    if kind in ("target_model", "judge_model"):
        return Change(kind, model=target_model if kind == "target_model" else judge_model)
    if kind == "user_message":
        return Change(kind, user_message=user_message)
    if kind == "mode":
        return Change(kind, mode=mode)
    if kind == "seed_statement":
        return Change(kind, seed_statement=seed_statement)
    return Change(kind)  # rerun


def _parents(store: Writer, ask: _Ask, change: Change) -> list[dict]:
    """The dialogues to branch: one thread, or a run's dialogues (those mentioning a swapped term)."""
    if ask.thread is not None:
        row = store.get_dialogue(ask.thread)
        if row is None:
            raise DymtError(
                f"no dialogue {ask.thread!r} in {store.path}: check the thread id "
                f"(python -m graph.replay --list --db {shlex.quote(str(store.path))})"
            )
        return [row]
    if store.get_run(ask.run_id) is None:
        raise DymtError(f"no run {ask.run_id!r} in {store.path}: check the run id")
    rows = store.dialogues(ask.run_id)
    if change.kind == "swap":
        rows = [r for r in rows if mentions(r["statement"] or "", (old for old, _ in change.swaps))]
        if not rows:
            terms = ", ".join(old for old, _ in change.swaps)
            raise DymtError(f"no dialogue of run {ask.run_id} has a seed that mentions {terms}: check the swap= terms")
    if not rows:
        raise DymtError(f"run {ask.run_id} has no dialogues")
    return rows


def _default_set_name(store: Writer, ask: _Ask, change: Change) -> str:
    what = "+".join(f"{old}={new}" for old, new in change.swaps) if change.swaps else change.kind
    name = re.sub(r"[^\w.:@=+-]", "_", f"{ask.run_id}-t{ask.turn}-{what}")
    while store.get_set(name):
        name = f"{name.rsplit('~', 1)[0]}~{secrets.token_hex(2)}"
    return name


async def _play(
    store: Writer,
    parents: list[dict],
    change: Change,
    ask: _Ask,
    settings: BranchSettings,
    set_name: str | None,
    on_event: EventSink,
) -> tuple[BranchRun, list[tuple[str, str]]]:
    record = change_record(change, settings, set_name=set_name)
    taken: set[str] = set()
    run_id = new_run_id("branch")
    async with open_graph(store.path) as graph:
        plans, skipped = [], []
        for parent in parents:
            try:
                fork = (await read_lineage(graph, parent["thread_id"])).fork_point(ask.turn)
                branch_id = branch_thread_id(parent["thread_id"], ask.turn)
                while branch_id in taken or store.get_dialogue(branch_id):
                    branch_id = branch_thread_id(parent["thread_id"], ask.turn)
                taken.add(branch_id)
                plans.append(plan_branch(fork, parent, change, turns=ask.turns, branch_id=branch_id, record=record))
            except ForkError as exc:
                if ask.thread is not None:
                    raise
                skipped.append((parent["thread_id"], str(exc)))
        if not plans:
            raise ForkError(f"no dialogue of run {ask.run_id} can be branched so: {skipped[0][1]}")

        def notify(event: str, thread_id: str, done: int) -> None:
            on_event(DialogueProgress(run_id=run_id, thread_id=thread_id, event=event, turns_done=done))

        made = await play_branches(
            plans, graph=graph, store=store, settings=settings, run_id=run_id, set_name=set_name, notify=notify
        )
    return made, skipped
