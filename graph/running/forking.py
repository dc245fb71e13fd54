"""Counterfactual continuations: fork a stored dialogue just before turn K, change one thing, play on.

How a fork is made, with no model call and nothing written to the parent:

1. Walk the parent thread's checkpoints from its newest one back through its parents (a thread
   resumed after a failure or edited at a pause holds abandoned checkpoints too) and take the one
   whose next node is the user node and whose state holds K-1 user messages: the state just before
   turn K's user message (``fork_checkpoint_id``; graph.running.fork_points).
2. Write that state into a new thread with ``aupdate_state(..., as_node="termination")``: one update
   per turn boundary, so the branch has its own checkpoint before each of its turns 1..K and can be
   branched again anywhere; the change goes into the last update (a new seed statement, mode or
   turn count; a fixed turn-K message as ``next_user_message``, or in the script of a baseline).
3. Record the branch in ``dialogues`` (parent_thread_id, fork_turn, fork_checkpoint_id, change) and
   stream it from its newest checkpoint to the end with :func:`graph.running.playing.play_dialogue`, which mirrors
   every step into the store. The nodes after the fork run as usual; turns 1..K-1 are never re-run.

Every ``graph.branch`` invocation is its own run (a ``runs`` row of kind "branch" holding the
branch's models and settings), so a run's summary never mixes its dialogues with their branches.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

import prompts
from checkpoints.branching import describe_change
from checkpoints.store import Writer, now
from checkpoints.vocabulary import ROLES
from graph.config.run_config import ConfigError, ModelBuildError, ModelChoice, RunConfig
from graph.config.stored import stored_run_config
from graph.running.fork_points import USER_NODES, ForkError, ForkPoint, Lineage, is_turn_boundary, read_lineage
from graph.running.playing import DialogueOutcome, ProgressCallback, StoreWriter, dialogue_config, play_dialogue
from graph.running.run_records import package_versions
from graph.running.swaps import swap_terms
from nodes.context import Models, RunContext
from nodes.modes import DYNAMIC_MODES
from nodes.state import new_messages

CHANGE_KINDS: tuple[str, ...] = (
    "user_message",
    "swap",
    "target_model",
    "judge_model",
    "mode",
    "seed_statement",
    "rerun",
)


# --------------------------------------------------------------------------- the change


@dataclass(frozen=True)
class Change:
    """The one thing a branch changes at its fork turn (``rerun`` changes nothing but the sampling)."""

    kind: str
    user_message: str | None = None
    swaps: tuple[tuple[str, str], ...] = ()
    model: str | None = None  # target_model / judge_model
    mode: str | None = None
    seed_statement: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in CHANGE_KINDS:
            raise ForkError(f"unknown change {self.kind!r}: use one of {', '.join(CHANGE_KINDS)}")

    @property
    def role(self) -> str | None:
        """The role whose model this change replaces, if any."""
        return {"target_model": "target", "judge_model": "judge"}.get(self.kind)


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class BranchPlan:
    """Everything needed to create one branch, decided before anything is written."""

    branch_id: str
    parent: dict[str, Any]  # the parent's dialogues row
    fork: ForkPoint
    turns: int
    seed: dict[str, Any]
    mode: str
    updates: list[dict[str, Any]]  # state updates that rebuild the prefix; the change is in the last
    change: dict[str, Any]  # the JSON record stored in dialogues.change


def given_message(values: dict[str, Any], turn: int, text: str) -> dict[str, Any]:
    """The state update that makes ``text`` turn ``turn``'s user message without a model call."""
    script = values.get("script")
    if script:
        # A baseline replays its script: the scripted user sends whatever the script says.
        return {"script": [text if i == turn - 1 else line for i, line in enumerate(script)]}
    return {"next_user_message": text}


def _turn_message(fork: ForkPoint) -> str | None:
    """The user message the parent sent (or was about to send) at the fork turn."""
    if fork.turn_message is not None:
        return fork.turn_message
    if fork.values.get("next_user_message") is not None:
        return fork.values["next_user_message"]
    script = fork.values.get("script") or []
    return script[fork.turn - 1] if fork.turn <= len(script) else None


def plan_branch(
    fork: ForkPoint,
    parent: dict[str, Any],
    change: Change,
    *,
    turns: int | None = None,
    branch_id: str,
    record: dict[str, Any] | None = None,
) -> BranchPlan:
    """Validate a change against a fork point and compute the state updates of the new thread."""
    values = fork.values
    k = fork.turn
    n = turns or int(values["max_turns"])
    if n < k:
        raise ForkError(f"turns={n} ends before the fork turn {k}: give turns={k} or more")
    state_change: dict[str, Any] = {"max_turns": n}
    seed = dict(values["seed"])
    mode = values["mode"]
    sent = _turn_message(fork)
    details: dict[str, Any] = {"kind": change.kind}
    if change.kind == "user_message":
        text = (change.user_message or "").strip()
        if not text:
            raise ForkError("user_message= is empty: give the text of turn K's user message")
        state_change |= given_message(values, k, text)
        details |= {"user_message": text, "replaces": sent}
    elif change.kind == "swap":
        statement = swap_terms(seed["statement"], change.swaps)
        message = swap_terms(sent, change.swaps) if sent is not None else None
        if statement == seed["statement"] and message == sent:
            where = f"the seed statement {seed['statement']!r}" + (
                f" or turn {k}'s message" if sent is not None else ""
            )
            raise ForkError(f"swap={_swaps_text(change.swaps)} matches no whole word in {where}: check the terms")
        details |= {
            "swaps": _swaps_text(change.swaps),
            "seed_statement": statement,
            "replaces_statement": seed["statement"],
        }
        seed["statement"] = statement
        state_change["seed"] = seed
        if message is not None:
            state_change |= given_message(values, k, message)
            details |= {"user_message": message, "replaces": sent}
    elif change.kind == "seed_statement":
        text = (change.seed_statement or "").strip()
        if not text:
            raise ForkError("seed_statement= is empty: give the new stereotype statement")
        if text == seed["statement"]:
            raise ForkError(f"seed_statement= is the statement the dialogue already has ({text!r})")
        details |= {"seed_statement": text, "replaces_statement": seed["statement"]}
        seed["statement"] = text
        state_change["seed"] = seed
    elif change.kind == "mode":
        if change.mode not in DYNAMIC_MODES:
            raise ForkError(f"mode={change.mode!r} is not a simulated-user mode: use {' or '.join(DYNAMIC_MODES)}")
        if change.mode == mode:
            raise ForkError(f"the dialogue is already in mode={mode}: choose the other mode or rerun=")
        details |= {"mode": change.mode, "replaces_mode": mode}
        mode = change.mode
        state_change["mode"] = mode
        if values.get("script"):
            state_change["script"] = None  # from here on the simulator writes the user turns
    script = state_change.get("script", values.get("script"))
    if script and n > len(script):
        raise ForkError(
            f"turns={n} is longer than the dialogue's script ({len(script)} turns): give turns={len(script)} or less"
        )
    return BranchPlan(
        branch_id=branch_id,
        parent=parent,
        fork=fork,
        turns=n,
        seed=seed,
        mode=mode,
        updates=prefix_updates(values, state_change),
        change={**details, **(record or {}), "turns": n},
    )


def _swaps_text(swaps: Sequence[tuple[str, str]]) -> str:
    return " ".join(f"{old}={new}" for old, new in swaps)


def prefix_updates(values: dict[str, Any], change: dict[str, Any]) -> list[dict[str, Any]]:
    """State updates that rebuild ``values`` turn by turn in an empty thread, ``change`` applied last.

    The first update carries the settings with no messages (the state before turn 1); each
    further update adds one finished turn, so every update leaves a checkpoint before a turn.
    """
    records = sorted(values.get("turns", []), key=lambda t: t["index"])
    groups: list[list[dict[str, Any]]] = []
    for message in values.get("messages", []):
        if message["role"] == "user" or not groups:
            groups.append([])
        groups[-1].append(message)
    if len(groups) != len(records) or [t["index"] for t in records] != list(range(1, len(records) + 1)):
        raise ForkError("the fork checkpoint is not at a turn boundary: its messages and turns disagree")
    base = {key: value for key, value in values.items() if key not in ("messages", "turns")}
    base |= {
        "messages": [],
        "turns": [],
        "stop_reason": None,
        "error": None,
        "failed_node": None,
        "error_class": None,
        "next_user_message": None,
    }
    updates: list[dict[str, Any]] = [base]
    updates += [{"messages": new_messages(*group), "turns": [record]} for group, record in zip(groups, records)]  # type: ignore[arg-type]
    last = dict(updates[-1])
    if values.get("next_user_message") is not None:
        last["next_user_message"] = values["next_user_message"]  # a branch of a branch keeps its given message
    last.update(change)
    updates[-1] = last
    return updates


# --------------------------------------------------------------------------- models and settings


@dataclass(frozen=True)
class BranchSettings:
    """The models and run-level settings one invocation's branches are played with."""

    models: Models
    sampling_seed: int
    leakage: str = "regenerate"
    config: RunConfig | None = None
    """The run configuration the models were built from (stored with the branch run; None: the defaults)."""

    @property
    def specs(self) -> dict[str, str]:
        return {role: getattr(self.models, role).spec for role in ROLES}

    @property
    def model_ids(self) -> dict[str, str]:
        return {role: getattr(self.models, role).model_id for role in ROLES}

    def context(self) -> RunContext:
        return RunContext(
            models=self.models,
            sampling_seed=self.sampling_seed,
            leakage=self.leakage,
            judge_reasoning=bool(self.config and self.config.judge_reasoning),
        )


def stored_config_of(store: Writer, dialogue: dict[str, Any]) -> RunConfig:
    """The stored run configuration of the run a dialogue belongs to."""
    run = store.get_run(dialogue["run_id"]) if dialogue.get("run_id") else None
    if run is None:
        raise ForkError(
            f"thread {dialogue['thread_id']} belongs to run {dialogue.get('run_id')!r}, which is not in the database"
        )
    return stored_run_config(run["config"], run_id=dialogue["run_id"])


def build_settings(
    store: Writer,
    dialogue: dict[str, Any],
    *,
    overrides: dict[str, str] | None = None,
    sampling_seed: int | None = None,
    base_url: str | None = None,
) -> BranchSettings:
    """Rebuild the models a dialogue was played with (roles in ``overrides`` replaced), as its run recorded them."""
    overrides = overrides or {}
    run_id = dialogue["run_id"]
    try:
        config = stored_config_of(store, dialogue).for_dialogue(
            target=dialogue.get("target"), overrides=overrides, base_url=base_url, sampling_seed=sampling_seed
        )
        built = config.build_models()
    except ConfigError as exc:
        raise ForkError(str(exc)) from None
    except ModelBuildError as exc:
        raise ForkError(
            f"{exc.role}_model={exc.spec!r}: {exc.reason}"
            if exc.role in overrides
            else f"{exc.role} model of run {run_id}: {exc.reason}"
        ) from None
    return BranchSettings(
        models=built.models, sampling_seed=config.sampling_seed, leakage=config.leakage, config=config
    )


# --------------------------------------------------------------------------- creating and playing


async def create_branch(
    graph: CompiledStateGraph, plan: BranchPlan, *, write: StoreWriter, run_id: str, set_name: str | None = None
) -> RunnableConfig:
    """Record the branch and write its prefix checkpoints; returns the config to play it from."""
    parent = plan.parent
    row: dict[str, Any] = {
        "run_id": run_id,
        "seed_id": plan.seed["id"],
        "category": plan.seed["category"],
        "statement": plan.seed["statement"],
        "mode": plan.mode,
        "max_turns": plan.turns,
        "status": "running",
        "started_at": now(),
        "parent_thread_id": plan.fork.thread_id,
        "fork_turn": plan.fork.turn,
        "fork_checkpoint_id": plan.fork.checkpoint_id,
        "change": json.dumps(plan.change, sort_keys=True),
    }
    if "target" in parent:  # dialogues has a per-dialogue target column
        row["target"] = (plan.change.get("models") or {}).get("target", parent.get("target"))
    await write.upsert_dialogue(plan.branch_id, **row)
    if set_name:
        await write.add_set_member(set_name, plan.branch_id, plan.fork.thread_id)
    provenance = {
        "fork_of": plan.fork.thread_id,
        "fork_turn": plan.fork.turn,
        "fork_checkpoint_id": plan.fork.checkpoint_id,
    }
    config: RunnableConfig = {"configurable": {"thread_id": plan.branch_id}, "metadata": provenance}
    for values in plan.updates:
        written = await graph.aupdate_state(config, values, as_node="termination")
        config = {**written, "metadata": provenance}
    return dialogue_config(
        plan.branch_id,
        turns=plan.turns,
        run_id=run_id,
        seed_id=plan.seed["id"],
        mode=plan.mode,
        parent_thread_id=plan.fork.thread_id,
        fork_turn=plan.fork.turn,
    )


@dataclass
class BranchRun:
    """What one ``graph.branch`` invocation made."""

    run_id: str
    set_name: str | None
    outcomes: list[DialogueOutcome] = field(default_factory=list)
    plans: list[BranchPlan] = field(default_factory=list)


async def play_branches(
    plans: Sequence[BranchPlan],
    *,
    graph: CompiledStateGraph,
    store: Writer,
    settings: BranchSettings,
    run_id: str,
    set_name: str | None = None,
    notify: ProgressCallback | None = None,
) -> BranchRun:
    """Record the invocation as a run, then create and play each branch to its end."""
    if not plans:
        raise ForkError("nothing to branch")
    notify = notify or (lambda *_: None)
    first = plans[0]
    parent_runs = sorted({p.parent.get("run_id") for p in plans if p.parent.get("run_id")})  # type: ignore[type-var]
    change = {
        k: v
        for k, v in first.change.items()
        if k not in ("user_message", "replaces", "seed_statement", "replaces_statement")
    }
    models = settings.models
    run_config = (settings.config or RunConfig()).model_copy(
        update={
            "run_id": run_id,
            "modes": [first.mode],
            "turns": max(p.turns for p in plans),
            "seeds": "branch of " + ", ".join(map(str, parent_runs)),
            "sampling_seed": settings.sampling_seed,
            "leakage": settings.leakage,
            "models": ModelChoice(user=models.user.spec, judge=models.judge.spec, targets=[models.target.spec]),
        }
    )
    config = (
        run_config.stored_record(models)
        .with_extra(
            kind="branch",
            parent_run_ids=parent_runs,
            fork_turn=first.fork.turn,
            change=change,
            set=set_name,
        )
        .to_stored()
    )
    result = BranchRun(run_id=run_id, set_name=set_name, plans=list(plans))
    write = StoreWriter(store)
    try:
        await write.start_run(run_id, config=config, prompt_hashes=prompts.all_hashes(), versions=package_versions())
        if set_name:
            await write.add_set(
                set_name,
                run_id=run_id,
                parent_run_id=parent_runs[0] if len(parent_runs) == 1 else None,
                fork_turn=first.fork.turn,
                change=change,
            )
        context = settings.context()
        for plan in plans:
            branch_config = await create_branch(graph, plan, write=write, run_id=run_id, set_name=set_name)
            notify("started", plan.branch_id, plan.fork.turn - 1)
            result.outcomes.append(
                await play_dialogue(graph, branch_config, write=write, context=context, notify=notify)
            )
    except BaseException:
        await write.finish_run(run_id, "interrupted")
        write.close()
        raise
    await write.refresh_run_status(run_id)
    write.close()
    return result


def change_record(change: Change, settings: BranchSettings, *, set_name: str | None) -> dict[str, Any]:
    """The part of a branch's change record shared by every branch of one invocation."""
    record: dict[str, Any] = {"models": settings.specs, "sampling_seed": settings.sampling_seed}
    if change.role:
        record["model"] = change.model
    if set_name:
        record["set"] = set_name
    return record


__all__ = [
    "BranchPlan",
    "BranchRun",
    "BranchSettings",
    "Change",
    "ForkError",
    "ForkPoint",
    "Lineage",
    "build_settings",
    "change_record",
    "create_branch",
    "describe_change",
    "given_message",
    "USER_NODES",
    "is_turn_boundary",
    "plan_branch",
    "play_branches",
    "prefix_updates",
    "read_lineage",
]
