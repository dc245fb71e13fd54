"""Comparing dialogues: two side by side, a counterfactual set's paired statistics, or targets and modes on the same
seeds. ``dymt.compare(...)`` returns a :class:`CompareResult`; its JSON is ``python -m graph.compare --json``."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from checkpoints.queries import StoreQueries
from dymt.arguments import string, strings
from dymt.errors import DymtError
from dymt.results import CompareResult
from dymt.stores import Db, reader
from evals.dataset import DatasetError, load_dataset
from evals.judge_error.run_blocks import SHARED_ERROR_NOTE, choose_validation
from evals.report.corrected_tables import correct_report
from evals.report.data import comparison_units
from evals.report.transition_tables import set_transitions
from evals.stats.counterfactual import compare_pairs, set_comparison_dict, set_pairs
from evals.stats.group_comparison import compare_groups
from evals.stats.group_comparison import comparisons_dict as comparisons_as_dict
from viewer.side_by_side import pair_data


def compare(
    threads: str | Sequence[str] = (),
    *,
    set_name: str | None = None,
    runs: str | Sequence[str] | None = None,
    label_set: str = "primary",
    n_boot: int = 2000,
    seed: int = 0,
    db: Db = None,
) -> CompareResult:
    """Two dialogues (``threads=(A, B)``), a counterfactual set (``set_name``) or runs on the same seeds (``runs``: a
    grid run's id alone, or several run ids; one string is one id)."""
    threads, runs = strings(threads, "threads"), strings(runs, "runs")
    if set_name is not None:
        set_name = string(set_name, "set_name")
    if sum(bool(x) for x in (threads, set_name is not None, runs)) > 1:
        raise DymtError("give either two dialogues, set_name= or runs=, not several")
    if set_name is None and not runs and len(threads) != 2:
        raise DymtError("give two dialogues (threads=[A, B]), a set (set_name=) or runs (runs=)")
    with reader(db) as store:
        if set_name is not None:
            return _compare_set(store, set_name, n_boot=n_boot, seed=seed)
        if runs:
            return _compare_runs(store, runs, label_set=label_set, n_boot=n_boot, seed=seed)
        return _compare_pair(store, *threads)


def _compare_pair(store: StoreQueries, a: str, b: str) -> CompareResult:
    for thread_id in (a, b):
        if store.get_dialogue(thread_id) is None:
            raise DymtError(
                f"no dialogue {thread_id!r} in {store.path}: check the thread id "
                f"(python -m graph.replay --list --db {_quoted(store.path)})"
            )
    start = store.divergence_turn(a, b)
    return CompareResult(kind="pair", data=pair_data(store, a, b, start), db=str(store.path), detail={"start": start})


def _compare_runs(store: StoreQueries, runs: list[str], *, label_set: str, n_boot: int, seed: int) -> CompareResult:
    try:
        dataset = load_dataset(store, runs, label_set=label_set)
    except DatasetError as exc:
        raise DymtError(str(exc)) from None
    units = comparison_units(dataset)
    groups = list(dict.fromkeys(u.group for u in units))
    if len(groups) < 2:
        only = f"{groups[0].target} · {groups[0].mode}" if groups else "no dialogue with a seed"
        raise DymtError(
            f"run(s) {', '.join(runs)} hold one target and mode only ({only}): "
            "give a grid run (several target_model= or mode=) or two runs on the same seeds"
        )
    comparisons = compare_groups(units, n_boot=n_boot, seed=seed)
    if not comparisons:
        raise DymtError(
            "no two groups differ in exactly one of target, mode or run: compare runs that share a target or a mode"
        )
    if all(c.n_pairs == 0 for c in comparisons):
        raise DymtError(
            f"run(s) {', '.join(runs)} share no seed between the groups compared: "
            "play the same seeds (seeds=, sample_seed=)"
        )
    validations = {run.run_id: choose_validation(store, run.run_id, label_set=label_set) for run in dataset.runs}
    corrected = correct_report(dataset, validations, comparisons, seed=seed).differences
    rows = [{**row, "judge_corrected": diff} for row, diff in zip(comparisons_as_dict(comparisons), corrected)]
    data = {
        "runs": runs,
        "label_set": label_set,
        "n_boot": n_boot,
        "comparisons": rows,
        "judge_corrected_note": SHARED_ERROR_NOTE,
    }
    detail = {"groups": groups, "comparisons": comparisons, "corrected": corrected, "validations": validations}
    return CompareResult(kind="runs", data=data, db=str(store.path), detail=detail)


def _compare_set(store: StoreQueries, set_name: str, *, n_boot: int, seed: int) -> CompareResult:
    info = store.get_set(set_name)
    if info is None:
        known = (
            ", ".join(store.set_names()) or "none yet (python -m graph.branch --run-id R --turn K --swap A=B makes one)"
        )
        raise DymtError(f"no counterfactual set {set_name!r} in {store.path}: known sets: {known}")
    pairs = set_pairs(store, set_name)
    if not pairs:
        raise DymtError(f"counterfactual set {set_name!r} has no branches")
    result = compare_pairs(pairs, n_boot=n_boot, seed=seed)
    data = {
        "set": set_name,
        "change": info["change"],
        "run_id": info["run_id"],
        **set_comparison_dict(result),
        "members": [{"parent": p.parent, "branch": p.branch, "fork_turn": p.fork_turn} for p in pairs],
        "transitions": set_transitions(pairs, choose_validation(store, info["run_id"]), n_boot=n_boot, seed=seed),
    }
    return CompareResult(kind="set", data=data, db=str(store.path), detail={"info": info, "result": result})


def _quoted(path: Any) -> str:
    return shlex.quote(str(path))
