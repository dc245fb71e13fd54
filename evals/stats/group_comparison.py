"""Paired comparisons of groups of dialogues played on the same seeds: targets, modes or runs.

A grid plays every seed in every mode against every target, so two groups (say two targets in
one mode) hold one dialogue each per seed (and per repeated sample): the dialogues are paired on
(seed, sample). At every turn t, for cumulative bias (a biased reply in turns 1..t) and for
per-turn bias (the reply at turn t), each comparison gives the rates of both sides over the pairs
whose labels are both defined, the difference B − A with a paired bootstrap 95% interval that
resamples seeds (all samples of a seed together), and McNemar's exact test on the discordant
pairs. When more than one comparison is made, the p-values of each (measure, turn) are Holm
adjusted over the comparisons. Unparsed and missing labels drop a pair from that turn, never guessed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from checkpoints.vocabulary import BIASED, NOT_BIASED
from evals.stats.metrics import PARSED, Label
from evals.stats.primitives import McNemarResult, PairedDiff, holm, mcnemar_exact, paired_test_dict

MEASURES = ("cumulative", "per_turn")
DIMENSIONS = ("run", "target", "mode")


@dataclass(frozen=True)
class Group:
    """Dialogues of one run played with one target model in one mode."""

    run_id: str
    target: str
    mode: str

    def describe(self, *, with_run: bool) -> str:
        return f"{self.target} · {self.mode}" + (f" · {self.run_id}" if with_run else "")


@dataclass(frozen=True)
class Unit:
    """One dialogue as a comparison sees it: its group, seed, sample and labels (turn t at index t - 1)."""

    group: Group
    seed_id: str
    sample: int
    labels: tuple[Label, ...]


@dataclass(frozen=True)
class PairedRow:
    """One measure at one turn of one comparison (B − A)."""

    measure: str  # "cumulative" | "per_turn"
    turn: int
    n_pairs: int  # pairs with both labels defined
    n_seeds: int  # distinct seeds among them (the bootstrap resamples these)
    n_dropped: int  # pairs with an unparsed or missing label on either side
    rate_a: float | None
    rate_b: float | None
    diff: PairedDiff
    mcnemar: McNemarResult  # b: A biased, B not; c: A not, B biased
    p_holm: float


@dataclass(frozen=True)
class Comparison:
    a: Group
    b: Group
    varies: tuple[str, ...]  # the dimensions in which A and B differ ("target", "mode", "run")
    n_pairs: int  # (seed, sample) pairs present in both groups
    n_seeds: int
    unpaired_a: int  # dialogues of A with no counterpart in B
    unpaired_b: int
    rows: tuple[PairedRow, ...]

    def row(self, measure: str, turn: int) -> PairedRow | None:
        return next((r for r in self.rows if r.measure == measure and r.turn == turn), None)


def cumulative_label(labels: Sequence[Label], turn: int) -> Label:
    """'biased' if a reply in turns 1..turn is biased, 'not_biased' if one is labelled and none biased, else None.

    The same eligibility as ``evals.stats.metrics.cumulative_bias``: a dialogue with no parsed label
    yet is not counted.
    """
    window = [x for x in labels[:turn] if x in PARSED]
    if not window:
        return None
    return BIASED if BIASED in window else NOT_BIASED


def turn_label(labels: Sequence[Label], turn: int) -> Label:
    label = labels[turn - 1] if 1 <= turn <= len(labels) else None
    return label if label in PARSED else None


def _differences(a: Group, b: Group) -> tuple[str, ...]:
    fields = {"run": "run_id", "target": "target", "mode": "mode"}
    return tuple(d for d in DIMENSIONS if getattr(a, fields[d]) != getattr(b, fields[d]))


def choose_pairs(groups: Sequence[Group]) -> list[tuple[Group, Group]]:
    """Which groups to compare: two groups with each other; more, every two that differ in exactly one of run, target,
    mode."""
    ordered = list(dict.fromkeys(groups))
    if len(ordered) == 2:
        return [(ordered[0], ordered[1])]
    return [(a, b) for a, b in combinations(ordered, 2) if len(_differences(a, b)) == 1]


@functools.lru_cache(maxsize=32)
def _resample_weights(m: int, n_boot: int, seed: int) -> np.ndarray:
    """How many times each of m clusters is drawn in each of n_boot resamples (m draws with replacement).

    Shared by every row with m clusters: which cluster gets which column does not matter, the
    draws are exchangeable, and reusing them keeps a comparison's rows on the same resamples.
    """
    draws = np.random.default_rng(seed).integers(0, m, size=(n_boot, m))
    weights = np.zeros((n_boot, m))
    np.add.at(weights, (np.arange(n_boot)[:, None], draws), 1.0)
    weights.flags.writeable = False
    return weights


def paired_diff_interval(
    pairs: Sequence[tuple[bool, bool]],
    clusters: Sequence[str],
    *,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> PairedDiff:
    """Mean of (after − before) with a percentile bootstrap interval that resamples clusters (seeds) with all their
    pairs.

    The same estimator as ``evals.stats.primitives.paired_bootstrap_diff(..., clusters=...)``, vectorised: a
    resample's difference is the sum of its clusters' differences over the sum of their pairs, so
    a grid of 36 comparisons × 20 turn rows × 2000 resamples takes seconds, not minutes. One pair
    per cluster is the plain paired bootstrap.
    """
    if n_boot < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"need n_boot >= 1 and 0 < level < 1, got {n_boot!r}, {level!r}")
    if len(pairs) != len(clusters):
        raise ValueError(f"clusters ({len(clusters)}) and pairs ({len(pairs)}) differ in length")
    if not pairs:
        return PairedDiff(diff=None, low=None, high=None, n=0)
    index = {c: i for i, c in enumerate(dict.fromkeys(clusters))}
    sums = np.zeros(len(index))
    counts = np.zeros(len(index))
    for (before, after), cluster in zip(pairs, clusters):
        sums[index[cluster]] += int(bool(after)) - int(bool(before))
        counts[index[cluster]] += 1
    weights = _resample_weights(len(index), n_boot, seed)
    # einsum, not BLAS: a matrix-vector product through a threaded BLAS is 20 times slower on a busy machine.
    values = np.einsum("ij,j->i", weights, sums) / np.einsum("ij,j->i", weights, counts)  # no resample is empty
    alpha = (1.0 - level) / 2.0
    low, high = np.percentile(values, [100 * alpha, 100 * (1 - alpha)])  # linear, as evals.stats.primitives.percentile
    return PairedDiff(diff=float(sums.sum() / counts.sum()), low=float(low), high=float(high), n=len(pairs))


def _row(measure: str, turn: int, matched: Sequence[tuple[str, Unit, Unit]], *, n_boot: int, seed: int) -> PairedRow:
    read = cumulative_label if measure == "cumulative" else turn_label
    kept: list[tuple[bool, bool]] = []
    clusters: list[str] = []
    for seed_id, ua, ub in matched:
        la, lb = read(ua.labels, turn), read(ub.labels, turn)
        if la is None or lb is None:
            continue
        kept.append((la == BIASED, lb == BIASED))
        clusters.append(seed_id)
    n = len(kept)
    return PairedRow(
        measure=measure,
        turn=turn,
        n_pairs=n,
        n_seeds=len(set(clusters)),
        n_dropped=len(matched) - n,
        rate_a=sum(x for x, _ in kept) / n if n else None,
        rate_b=sum(y for _, y in kept) / n if n else None,
        diff=paired_diff_interval(kept, clusters, n_boot=n_boot, seed=seed),
        mcnemar=mcnemar_exact(kept),
        p_holm=1.0,  # set over the family in compare_groups
    )


def compare_two(
    a: Group, b: Group, units: Sequence[Unit], *, turns: int, n_boot: int = 2000, seed: int = 0
) -> Comparison:
    """Paired statistics of B against A at every turn 1..turns (p_holm unadjusted: see compare_groups)."""
    side_a = {(u.seed_id, u.sample): u for u in units if u.group == a}
    side_b = {(u.seed_id, u.sample): u for u in units if u.group == b}
    keys = sorted(side_a.keys() & side_b.keys())
    matched = [(k[0], side_a[k], side_b[k]) for k in keys]
    rows = tuple(
        _row(measure, t, matched, n_boot=n_boot, seed=seed) for measure in MEASURES for t in range(1, turns + 1)
    )
    rows = tuple(_with_holm(r, r.mcnemar.p_value) for r in rows)
    return Comparison(
        a=a,
        b=b,
        varies=_differences(a, b),
        n_pairs=len(keys),
        n_seeds=len({k[0] for k in keys}),
        unpaired_a=len(side_a) - len(keys),
        unpaired_b=len(side_b) - len(keys),
        rows=rows,
    )


def _with_holm(row: PairedRow, p: float) -> PairedRow:
    return PairedRow(**{**row.__dict__, "p_holm": p})


def compare_groups(
    units: Sequence[Unit],
    *,
    turns: int | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    pairs: Sequence[tuple[Group, Group]] | None = None,
) -> list[Comparison]:
    """Every chosen comparison (``choose_pairs`` unless ``pairs`` is given), Holm-adjusted per measure and turn."""
    turns = turns or max([1, *(len(u.labels) for u in units)])
    chosen = list(pairs) if pairs is not None else choose_pairs([u.group for u in units])
    results = [compare_two(a, b, units, turns=turns, n_boot=n_boot, seed=seed) for a, b in chosen]
    if len(results) < 2:
        return results
    adjusted: dict[int, list[PairedRow]] = {i: list(c.rows) for i, c in enumerate(results)}
    for j in range(len(results[0].rows)):
        family = [adjusted[i][j] for i in range(len(results))]
        for i, p in enumerate(holm([r.mcnemar.p_value for r in family])):
            adjusted[i][j] = _with_holm(adjusted[i][j], p)
    return [Comparison(**{**c.__dict__, "rows": tuple(adjusted[i])}) for i, c in enumerate(results)]


def needs_run_names(groups: Sequence[Group]) -> bool:
    """Whether two groups share target and mode, so that only the run tells them apart."""
    seen = [(g.target, g.mode) for g in dict.fromkeys(groups)]
    return len(seen) != len(set(seen))


def comparisons_dict(comparisons: Sequence[Comparison]) -> list[dict]:
    """Plain data for ``--json``."""

    def group(g: Group) -> dict:
        return {"run_id": g.run_id, "target": g.target, "mode": g.mode}

    return [
        {
            "a": group(c.a),
            "b": group(c.b),
            "varies": list(c.varies),
            "pairs": c.n_pairs,
            "seeds": c.n_seeds,
            "unpaired": {"a": c.unpaired_a, "b": c.unpaired_b},
            "rows": [
                {
                    "measure": r.measure,
                    "turn": r.turn,
                    "pairs": r.n_pairs,
                    "seeds": r.n_seeds,
                    "dropped": r.n_dropped,
                    "rate_a": r.rate_a,
                    "rate_b": r.rate_b,
                    **paired_test_dict(r.diff, r.mcnemar),
                    "p_holm": r.p_holm,
                }
                for r in c.rows
            ],
        }
        for c in comparisons
    ]
