"""The post-hoc safety-filter simulation: which turns a guard would block, and the bias rate of what passes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checkpoints.scores import guard_key
from checkpoints.store import Writer
from checkpoints.vocabulary import BIASED, PARSED_LABELS
from evals.scorers.guard import score_run
from evals.scorers.loop import Tally
from models.registry import RoleModel


@dataclass(frozen=True)
class DialogueScores:
    """One dialogue's guard scores and bias labels, by turn."""

    thread_id: str
    mode: str
    scores: Mapping[int, Mapping[str, float | None]]  # turn → side → P(violation)
    labels: Mapping[int, str | None]  # turn → biased | not_biased | unparsed


def blocked_turn(scores: Mapping[int, Mapping[str, float | None]], threshold: float) -> int | None:
    """The first turn where the user message or the reply reaches the threshold (None: never blocked)."""
    for turn in sorted(scores):
        if any(s is not None and s >= threshold for s in scores[turn].values()):
            return turn
    return None


def filter_report(dialogues: Sequence[DialogueScores], *, threshold: float, turns: int) -> dict[str, Any]:
    """Per mode: the share of dialogues blocked by each turn, and the bias rate among turns that pass."""
    by_mode: dict[str, list[DialogueScores]] = defaultdict(list)
    for d in dialogues:
        by_mode[d.mode].append(d)
    report: dict[str, Any] = {}
    for mode, group in sorted(by_mode.items()):
        blocked_at = [blocked_turn(d.scores, threshold) for d in group]
        passing = [d.labels.get(t) for d, b in zip(group, blocked_at) for t in sorted(d.labels) if b is None or t < b]
        labelled = [label for label in passing if label in PARSED_LABELS]
        report[mode] = {
            "dialogues": len(group),
            "blocked_by_turn": [
                {"turn": t, "share": sum(1 for b in blocked_at if b is not None and b <= t) / len(group)}
                for t in range(1, turns + 1)
            ],
            "passing_turns": len(passing),
            "passing_labelled": len(labelled),
            "bias_rate_passing": (labelled.count(BIASED) / len(labelled)) if labelled else None,
        }
    return report


def load_scores(store: Writer, run_id: str, *, policy: str, guard_spec: str) -> tuple[list[DialogueScores], int]:
    """Stored scores and primary labels of every dialogue of a run, and its turn count."""
    dialogues, turns = [], 1
    for d in store.dialogues(run_id):
        scores: dict[int, dict[str, float | None]] = defaultdict(dict)
        for row in store.scores_of(key=guard_key(policy), scorer=guard_spec, thread_id=d["thread_id"]):
            scores[row.idx][row.subject] = row.score
        labels = {t["idx"]: t["label"] for t in store.turns(d["thread_id"])}
        turns = max(turns, int(d["max_turns"]))
        dialogues.append(DialogueScores(d["thread_id"], d["mode"], dict(scores), labels))
    return dialogues, turns


def simulate_filter(
    store: Writer,
    run_ids: Sequence[str],
    model: RoleModel,
    *,
    policy: str,
    threshold: float,
    name: str | None = None,
) -> tuple[dict[str, Any], int, Tally]:
    """Score what is not scored yet, run by run (stopping at a run whose calls failed), then the report.

    ``name`` is the guard's score set (default: its spec; a set keeps one model and prompt, SetConflictError
    otherwise). Returns the report (threshold, policy, guard model, new model calls, per-mode results), the longest
    run's turn count and the tally of the last run scored.
    """
    dialogues: list[DialogueScores] = []
    turns, calls, tally = 1, 0, Tally()
    for run_id in run_ids:
        tally = score_run(store, run_id, model, policy=policy, name=name)
        calls += tally.done
        if tally.failed:
            break
        more, n = load_scores(store, run_id, policy=policy, guard_spec=name or model.spec)
        dialogues += more
        turns = max(turns, n)
    report = {
        "threshold": threshold,
        "policy": policy,
        "guard_model": model.spec,
        "model_calls": calls,
        "modes": filter_report(dialogues, threshold=threshold, turns=turns),
    }
    return report, turns, tally
