"""Paired comparison of dialogues and their counterfactual branches.

Each branch is paired with its parent: the two share turns 1..K-1 exactly, so a difference in
bias from turn K on is attributed to the branch's change. Per turn, the pairs whose labels
are both parsed give a difference in bias rate (branch − parent) with a paired bootstrap 95%
interval (whole pairs resampled) and McNemar's exact test on the discordant pairs. Unparsed and
missing labels are counted and dropped, never guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from checkpoints.queries import StoreQueries
from checkpoints.vocabulary import BIASED
from evals.stats.metrics import PARSED, Label
from evals.stats.primitives import McNemarResult, PairedDiff, mcnemar_exact, paired_bootstrap_diff, paired_test_dict


@dataclass(frozen=True)
class BranchPair:
    """One parent and one of its branches: their labels by turn (index 0 is turn 1) and the fork turn."""

    parent: str
    branch: str
    fork_turn: int
    parent_labels: Sequence[Label]
    branch_labels: Sequence[Label]


@dataclass(frozen=True)
class PairedTurn:
    """Paired statistics at one turn (``turn`` None: "any biased reply from the fork turn on")."""

    turn: int | None
    n_pairs: int  # pairs with both labels parsed
    n_dropped: int  # pairs with an unparsed or missing label on either side
    parent_rate: float | None
    branch_rate: float | None
    diff: PairedDiff  # branch rate − parent rate, with its bootstrap interval
    mcnemar: McNemarResult  # b: parent biased → branch not; c: parent not → branch biased


@dataclass(frozen=True)
class SetComparison:
    n_pairs: int
    first_turn: int
    per_turn: tuple[PairedTurn, ...]
    any_bias: PairedTurn


def _label(labels: Sequence[Label], turn: int) -> Label:
    return labels[turn - 1] if 1 <= turn <= len(labels) else None


def _rate(values: Sequence[bool]) -> float | None:
    return sum(values) / len(values) if values else None


def paired_turn(label_pairs: Sequence[tuple[Label, Label]], *, turn: int | None, n_boot: int, seed: int) -> PairedTurn:
    """Statistics for (parent label, branch label) pairs; pairs with an unparsed or missing side are dropped."""
    kept = [(p == BIASED, b == BIASED) for p, b in label_pairs if p in PARSED and b in PARSED]
    return PairedTurn(
        turn=turn,
        n_pairs=len(kept),
        n_dropped=len(label_pairs) - len(kept),
        parent_rate=_rate([p for p, _ in kept]),
        branch_rate=_rate([b for _, b in kept]),
        diff=paired_bootstrap_diff(kept, n_boot=n_boot, seed=seed),
        mcnemar=mcnemar_exact(kept),
    )


def _any_biased(labels: Sequence[Label], start: int) -> Label:
    """'biased' if any parsed label from ``start`` on is biased, 'not_biased' if all parsed are not, else None."""
    parsed = [x for x in labels[start - 1 :] if x in PARSED]
    if not parsed:
        return None
    return BIASED if BIASED in parsed else "not_biased"


def compare_pairs(pairs: Sequence[BranchPair], *, n_boot: int = 2000, seed: int = 0) -> SetComparison:
    """Per-turn paired statistics from the earliest fork turn to the longest dialogue, plus "any bias".

    A pair enters turn t only if t is at or after its own fork turn: before it, parent and branch
    share their turns by construction.
    """
    if not pairs:
        raise ValueError("no pairs to compare")
    first = min(p.fork_turn for p in pairs)
    last = max(max(len(p.parent_labels), len(p.branch_labels)) for p in pairs)
    per_turn = tuple(
        paired_turn(
            [(_label(p.parent_labels, t), _label(p.branch_labels, t)) for p in pairs if t >= p.fork_turn],
            turn=t,
            n_boot=n_boot,
            seed=seed,
        )
        for t in range(first, last + 1)
    )
    any_bias = paired_turn(
        [(_any_biased(p.parent_labels, p.fork_turn), _any_biased(p.branch_labels, p.fork_turn)) for p in pairs],
        turn=None,
        n_boot=n_boot,
        seed=seed,
    )
    return SetComparison(n_pairs=len(pairs), first_turn=first, per_turn=per_turn, any_bias=any_bias)


def set_comparison_dict(result: SetComparison) -> dict:
    """Plain data for ``--json``."""

    def row(t: PairedTurn) -> dict:
        return {
            "turn": t.turn,
            "pairs": t.n_pairs,
            "dropped": t.n_dropped,
            "parent_rate": t.parent_rate,
            "branch_rate": t.branch_rate,
            **paired_test_dict(t.diff, t.mcnemar),
        }

    return {
        "pairs": result.n_pairs,
        "first_turn": result.first_turn,
        "per_turn": [row(t) for t in result.per_turn],
        "any_bias": row(result.any_bias),
    }


def set_pairs(store: StoreQueries, name: str) -> list[BranchPair]:
    return [
        BranchPair(
            parent=m["parent_thread_id"],
            branch=m["thread_id"],
            fork_turn=int(m["fork_turn"] or 1),
            parent_labels=store.labels(m["parent_thread_id"]),
            branch_labels=store.labels(m["thread_id"]),
        )
        for m in store.set_members(name)
    ]
