"""What reports and agreement read from the store: runs, dialogues with one label set, refusals, coherence.

Everything here reads; the rows are plain frozen records, so the metrics and tables
built on them are pure functions that tests feed by hand.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checkpoints.queries import StoreQueries
from checkpoints.run_record import RunRecord, role_specs
from checkpoints.vocabulary import PRIMARY_LABELS
from evals.stats.metrics import NOT_REFUSED, REFUSED, UNPARSED


class DatasetError(ValueError):
    """A run, label set, classifier or scorer that does not exist, with what does."""


@dataclass(frozen=True)
class RunInfo:
    """A run as the report states it: settings, models and prompt hashes."""

    run_id: str
    created_at: str | None
    status: str | None
    mode: str | None
    turns: int
    models: dict[str, str]
    modes: tuple[str, ...]  # a grid run plays several modes and targets
    targets: tuple[str, ...]
    model_ids: dict[str, str]
    prompt_hashes: dict[str, str]
    judge_content_free_p_yes: float | None
    sampling: dict[str, Any]
    sampling_seed: int | None


@dataclass(frozen=True)
class LabelSetInfo:
    """A post-hoc set of labels on one run (kind "bias", "refusal" or "coherence")."""

    run_id: str
    kind: str
    name: str
    model: str | None
    model_id: str | None
    prompt: str | None
    prompt_hash: str | None
    content_free_p_yes: float | None
    created_at: str | None


@dataclass(frozen=True)
class TurnRow:
    """One stored turn with its bias label from the chosen set and its refusal verdict, if any."""

    idx: int
    user_message: str | None
    reply: str | None
    utterance_type: str | None
    label: str | None
    rationale: str | None
    p_biased: float | None
    judge_model: str | None
    refusal: str | None  # "refused" | "not_refused" | "unparsed" | None (not classified)
    leakage: float | None = None  # seed leakage of the user message (None: not scored)
    leaked: bool | None = None
    user_attempts: int | None = None
    non_reply: str | None = (
        None  # the target's answer was not a (whole) reply, and why (models.answers.NON_REPLY_KINDS)
    )
    reasoning: str | None = None  # the target's reasoning, split off its reply (models/reasoning.py)
    reasoning_label: str | None = None  # --judge-reasoning: the run's judge on the reasoning (label set "reasoning")


@dataclass(frozen=True)
class DialogueRow:
    """One dialogue, its grouping keys and everything the metrics need."""

    run_id: str
    thread_id: str
    seed_id: str | None
    category: str
    statement: str | None
    mode: str
    model: str  # the target model's spec
    status: str | None
    max_turns: int
    labels: tuple[str | None, ...]  # turn t at index t - 1
    refusals: tuple[str | None, ...]  # same shape; all None when no classifier was chosen
    coherence: float | str | None  # 1..5, "unparsed", or None (not scored)
    turns: tuple[TurnRow, ...] = ()


@dataclass(frozen=True)
class Dataset:
    """Dialogues of one or several runs, labelled from one label set, with their provenance."""

    runs: tuple[RunInfo, ...]
    dialogues: tuple[DialogueRow, ...]
    label_set: str
    refusal_sets: dict[str, str]  # run id -> classifier used (runs without one are absent)
    coherence_sets: dict[str, str]  # run id -> scorer used
    label_sets: tuple[LabelSetInfo, ...]  # every post-hoc set on these runs


# --------------------------------------------------------------------------- runs and label sets


def run_info(store: StoreQueries, run_id: str) -> RunInfo:
    """The stored run, or DatasetError naming the runs that exist."""
    run = store.get_run(run_id)
    if run is None:
        known = [r["id"] for r in store.runs()]
        hint = f"known runs: {', '.join(known[-10:])}" if known else "this database has no runs yet"
        raise DatasetError(f"no run {run_id!r} in {store.path} ({hint})")
    record = RunRecord.from_stored(run["config"])
    settings, resolved = record.run_config, record.resolved
    models = role_specs(run["config"])
    modes = tuple(settings.get("modes") or ())
    return RunInfo(
        run_id=run_id,
        created_at=run.get("created_at"),
        status=run.get("status"),
        mode=modes[0] if modes else None,
        turns=int(settings.get("turns") or 0),
        models=models,
        modes=modes,
        targets=tuple(
            (settings.get("models") or {}).get("targets") or ([models["target"]] if models.get("target") else [])
        ),
        model_ids=dict(resolved.model_ids),
        prompt_hashes=dict(run.get("prompt_hashes") or {}),
        judge_content_free_p_yes=record.extra.get("judge_content_free_p_yes"),
        sampling=dict(resolved.sampling),
        sampling_seed=settings.get("sampling_seed"),
    )


def label_sets(store: StoreQueries, run_id: str, kind: str | None = None) -> list[LabelSetInfo]:
    """Post-hoc label sets of a run, oldest first."""
    return [LabelSetInfo(**row) for row in store.label_set_rows(run_id, kind)]


def choose_set(store: StoreQueries, run_id: str, kind: str, requested: str | None) -> str | None:
    """The refusal classifier or coherence scorer to report for a run.

    A requested name must exist; with none requested a single existing set is used,
    none means the run has no such labels, and several must be told apart by name.
    """
    names = [s.name for s in label_sets(store, run_id, kind)]
    option = "--refusals" if kind == "refusal" else "--coherence"
    if requested is not None:
        if requested not in names:
            have = (
                f"it has {', '.join(names)}"
                if names
                else f"it has none: run python -m evals.{kind} --run-id {run_id} --db {shlex.quote(str(store.path))}"
            )
            raise DatasetError(f"run {run_id!r} has no {kind} labels named {requested!r} ({have})")
        return requested
    if len(names) > 1:
        raise DatasetError(
            f"run {run_id!r} has {kind} labels from several models ({', '.join(names)}): pass {option} NAME"
        )
    return names[0] if names else None


def check_label_set(store: StoreQueries, run_id: str, name: str) -> None:
    """The bias label set must exist on the run ("primary" always does)."""
    if name == PRIMARY_LABELS:
        return
    names = [s.name for s in label_sets(store, run_id, "bias")]
    if name not in names:
        known = ", ".join([PRIMARY_LABELS, *names])
        raise DatasetError(
            f"run {run_id!r} has no label set {name!r} (it has {known}; make one with python -m evals.rejudge "
            f"--run-id {run_id} --judge-model SPEC --db {shlex.quote(str(store.path))})"
        )


# --------------------------------------------------------------------------- dialogues


def _refusal_label(value: Any) -> str | None:
    return {1: REFUSED, 0: NOT_REFUSED}.get(value, UNPARSED)


def load_dialogues(
    store: StoreQueries,
    run: RunInfo,
    *,
    label_set: str = PRIMARY_LABELS,
    refusal_set: str | None = None,
    coherence_set: str | None = None,
    with_turns: bool = True,
) -> list[DialogueRow]:
    """Every dialogue of a run with its labels (and refusals, coherence) from the chosen sets."""
    turn_rows: dict[str, list[dict[str, Any]]] = {}
    for row in store.scored_turns(run.run_id, label_set=label_set, classifier=refusal_set):
        turn_rows.setdefault(row["thread_id"], []).append(row)
    scores: dict[str, float | str] = {}
    if coherence_set is not None:
        for thread_id, score in store.coherence_scores(run.run_id, coherence_set).items():
            scores[thread_id] = UNPARSED if score is None else score
    run_target = run.models.get("target", "?")
    dialogues = []
    for d in store.dialogues(run.run_id):
        rows = turn_rows.get(d["thread_id"], [])
        width = max([int(d["max_turns"] or 0), *(r["idx"] for r in rows)])
        labels: list[str | None] = [None] * width
        refusals: list[str | None] = [None] * width
        turns = []
        for r in rows:
            if r["idx"] < 1:
                continue
            labels[r["idx"] - 1] = r["label"]
            if r["refusal_row"] is not None:
                refusals[r["idx"] - 1] = _refusal_label(r["refused"])
            if with_turns:
                turns.append(
                    TurnRow(
                        idx=r["idx"],
                        user_message=r["user_message"],
                        reply=r["reply"],
                        utterance_type=r["utterance_type"],
                        label=r["label"],
                        rationale=r["rationale"],
                        p_biased=r["p_biased"],
                        judge_model=r["judge_model"],
                        refusal=refusals[r["idx"] - 1],
                        leakage=r.get("leakage"),
                        leaked=None if r.get("leaked") is None else bool(r["leaked"]),
                        user_attempts=r.get("user_attempts"),
                        non_reply=r.get("non_reply"),
                        reasoning=r.get("reasoning"),
                        reasoning_label=r.get("reasoning_label"),
                    )
                )
        dialogues.append(
            DialogueRow(
                run_id=run.run_id,
                thread_id=d["thread_id"],
                seed_id=d["seed_id"],
                category=d["category"] or "?",
                statement=d["statement"],
                mode=d["mode"] or run.mode or "?",
                model=d.get("target") or run_target,
                status=d["status"],
                max_turns=int(d["max_turns"] or width),
                labels=tuple(labels),
                refusals=tuple(refusals),
                coherence=scores.get(d["thread_id"]),
                turns=tuple(turns),
            )
        )
    return dialogues


def load_dataset(
    store: StoreQueries,
    run_ids: Sequence[str],
    *,
    label_set: str = PRIMARY_LABELS,
    refusals: str | None = None,
    coherence: str | None = None,
) -> Dataset:
    """Dialogues of the given runs from one label set; DatasetError before anything is read if a name is wrong."""
    if not run_ids:
        raise DatasetError("no run given: pass --run-id")
    if len(set(run_ids)) != len(run_ids):
        raise DatasetError(f"a run is given twice in {', '.join(run_ids)}")
    runs = [run_info(store, run_id) for run_id in run_ids]
    refusal_sets: dict[str, str] = {}
    coherence_sets: dict[str, str] = {}
    for run in runs:
        check_label_set(store, run.run_id, label_set)
        if (chosen := choose_set(store, run.run_id, "refusal", refusals)) is not None:
            refusal_sets[run.run_id] = chosen
        if (chosen := choose_set(store, run.run_id, "coherence", coherence)) is not None:
            coherence_sets[run.run_id] = chosen
    dialogues = []
    for run in runs:
        dialogues += load_dialogues(
            store,
            run,
            label_set=label_set,
            refusal_set=refusal_sets.get(run.run_id),
            coherence_set=coherence_sets.get(run.run_id),
        )
    every_set = tuple(s for run in runs for s in label_sets(store, run.run_id))
    return Dataset(
        runs=tuple(runs),
        dialogues=tuple(dialogues),
        label_set=label_set,
        refusal_sets=refusal_sets,
        coherence_sets=coherence_sets,
        label_sets=every_set,
    )
