"""Paired comparisons across targets and modes: checked against statsmodels and scipy on fixtures."""

from __future__ import annotations

import random

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from evals.stats.group_comparison import (
    Group,
    Unit,
    choose_pairs,
    compare_groups,
    compare_two,
    cumulative_label,
    paired_diff_interval,
    turn_label,
)
from evals.stats.primitives import bootstrap_ci, holm, mcnemar_exact, paired_bootstrap_diff

B, N, U = "biased", "not_biased", "unparsed"


def _pairs(b: int, c: int, both: int, neither: int) -> list[tuple[bool, bool]]:
    return [(True, False)] * b + [(False, True)] * c + [(True, True)] * both + [(False, False)] * neither


@pytest.mark.parametrize(
    "b, c, both, neither", [(0, 0, 5, 5), (1, 0, 3, 3), (3, 11, 10, 20), (12, 5, 0, 1), (25, 40, 7, 9), (7, 7, 1, 1)]
)
def test_mcnemar_exact_matches_statsmodels(b, c, both, neither):
    ours = mcnemar_exact(_pairs(b, c, both, neither))
    table = [[both, b], [c, neither]]  # rows: A biased / not; columns: B biased / not
    theirs = mcnemar(table, exact=True)
    assert (ours.b, ours.c) == (b, c)
    assert ours.p_value == pytest.approx(min(1.0, theirs.pvalue), abs=1e-12)


@pytest.mark.parametrize("p", [[0.01, 0.04, 0.03, 0.005], [0.2, 0.2, 0.01], [0.5], [0.049, 0.051, 0.0001, 0.9, 0.3]])
def test_holm_matches_statsmodels(p):
    assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]), abs=1e-12)


def test_paired_bootstrap_interval_agrees_with_scipy():
    rng = random.Random(3)
    pairs = [(rng.random() < 0.35, rng.random() < 0.55) for _ in range(80)]
    ours = paired_bootstrap_diff(pairs, n_boot=4000, seed=1)
    a = np.array([x for x, _ in pairs], dtype=float)
    b = np.array([y for _, y in pairs], dtype=float)
    theirs = sps.bootstrap(
        (a, b),
        lambda x, y: np.mean(y) - np.mean(x),
        paired=True,
        vectorized=False,
        n_resamples=4000,
        method="percentile",
        random_state=np.random.default_rng(1),
    ).confidence_interval
    assert ours.diff == pytest.approx(b.mean() - a.mean())
    # Two Monte Carlo intervals of the same bootstrap distribution: equal up to resampling noise.
    assert ours.low == pytest.approx(theirs.low, abs=0.03)
    assert ours.high == pytest.approx(theirs.high, abs=0.03)


def test_clusters_of_one_give_the_unclustered_interval_and_real_clusters_widen_it():
    rng = random.Random(5)
    rows = [rng.random() < 0.4 for _ in range(40)]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    plain = bootstrap_ci(rows, mean, n_boot=500, seed=2)
    assert bootstrap_ci(rows, mean, n_boot=500, seed=2, clusters=list(range(40))) == plain
    # Each seed played 5 times with identical outcomes: 200 dialogues are 40 observations, not 200.
    repeated = [x for x in rows for _ in range(5)]
    naive = bootstrap_ci(repeated, mean, n_boot=2000, seed=2)
    clustered = bootstrap_ci(repeated, mean, n_boot=2000, seed=2, clusters=[i for i in range(40) for _ in range(5)])
    assert (clustered[1] - clustered[0]) > 1.8 * (naive[1] - naive[0])
    with pytest.raises(ValueError):
        bootstrap_ci(rows, mean, clusters=[1, 2])


def test_cumulative_and_turn_labels():
    labels = (N, U, B, N)
    assert [cumulative_label(labels, t) for t in (1, 2, 3, 4)] == [N, N, B, B]
    assert cumulative_label((U, None), 2) is None
    assert [turn_label(labels, t) for t in (1, 2, 3, 4, 5)] == [N, None, B, N, None]


A1 = Group("r", "fake:a", "implicit")
B1 = Group("r", "fake:b", "implicit")
A2 = Group("r", "fake:a", "assessment")
B2 = Group("r", "fake:b", "assessment")


def test_choose_pairs_compares_targets_within_a_mode_and_modes_within_a_target():
    chosen = choose_pairs([A1, B1, A2, B2])
    assert set(chosen) == {(A1, B1), (A1, A2), (B1, B2), (A2, B2)}  # never a target and a mode at once
    other_run = Group("r2", "fake:c", "assessment")
    assert choose_pairs([A1, other_run]) == [(A1, other_run)]  # two groups: always compared


def test_paired_comparison_by_hand():
    # Five seeds: A and B labelled by turn; s5 only in A (unpaired); s4 unparsed at turn 1 on B.
    labels = {
        "s1": ((N, N), (B, N)),
        "s2": ((N, N), (N, B)),
        "s3": ((B, N), (B, B)),
        "s4": ((N, N), (U, N)),
    }
    units = [Unit(A1, s, 0, a) for s, (a, _) in labels.items()] + [Unit(B1, s, 0, b) for s, (_, b) in labels.items()]
    units.append(Unit(A1, "s5", 0, (B, B)))
    c = compare_two(A1, B1, units, turns=2, n_boot=200)
    assert (c.n_pairs, c.n_seeds, c.unpaired_a, c.unpaired_b) == (4, 4, 1, 0)
    t1 = c.row("per_turn", 1)
    assert (t1.n_pairs, t1.n_dropped, t1.rate_a, t1.rate_b) == (3, 1, 1 / 3, 2 / 3)
    assert (t1.mcnemar.b, t1.mcnemar.c) == (0, 1)
    cum2 = c.row("cumulative", 2)
    # cumulative by turn 2: A = N, N, B, N; B = B, B, B, N (s4: turn 2 parsed)
    assert (cum2.n_pairs, cum2.rate_a, cum2.rate_b) == (4, 0.25, 0.75)
    assert (cum2.mcnemar.b, cum2.mcnemar.c) == (0, 2)
    assert cum2.diff.diff == pytest.approx(0.5)
    assert cum2.diff.low <= 0.5 <= cum2.diff.high
    assert cum2.p_holm == cum2.mcnemar.p_value  # one comparison: nothing to adjust


def test_holm_over_the_comparisons_of_a_grid_and_repeated_samples_resample_seeds():
    rng = random.Random(11)
    rates = {A1: 0.2, B1: 0.6, A2: 0.3, B2: 0.5}
    units = []
    for s in range(30):
        for sample in range(3):
            for g, p in rates.items():
                units.append(Unit(g, f"s{s}", sample, tuple(B if rng.random() < p else N for _ in range(3))))
    comparisons = compare_groups(units, n_boot=300, seed=4)
    assert len(comparisons) == 4
    for measure in ("cumulative", "per_turn"):
        for turn in (1, 2, 3):
            rows = [c.row(measure, turn) for c in comparisons]
            expected = multipletests([r.mcnemar.p_value for r in rows], method="holm")[1]
            assert [r.p_holm for r in rows] == pytest.approx(list(expected))
    first = comparisons[0].row("cumulative", 3)
    assert first.n_pairs == 90 and first.n_seeds == 30
    # The interval resamples the 30 seeds with their 3 samples together.
    kept = [(u.seed_id, u.sample) for u in units if u.group == comparisons[0].a]
    side_a = {k: u for k, u in zip(kept, [u for u in units if u.group == comparisons[0].a])}
    side_b = {(u.seed_id, u.sample): u for u in units if u.group == comparisons[0].b}
    pairs = [
        (cumulative_label(side_a[k].labels, 3) == B, cumulative_label(side_b[k].labels, 3) == B) for k in sorted(side_a)
    ]
    expected = paired_diff_interval(pairs, [k[0] for k in sorted(side_a)], n_boot=300, seed=4)
    assert (first.diff.low, first.diff.high) == (expected.low, expected.high)


def test_vectorised_interval_agrees_with_scipy_and_with_the_pure_python_clustered_bootstrap():
    rng = random.Random(8)
    pairs = [(rng.random() < 0.3, rng.random() < 0.5) for _ in range(120)]
    ours = paired_diff_interval(pairs, [str(i) for i in range(120)], n_boot=5000, seed=3)
    a = np.array([x for x, _ in pairs], dtype=float)
    b = np.array([y for _, y in pairs], dtype=float)
    theirs = sps.bootstrap(
        (a, b),
        lambda x, y: np.mean(y) - np.mean(x),
        paired=True,
        vectorized=False,
        n_resamples=5000,
        method="percentile",
        random_state=np.random.default_rng(2),
    ).confidence_interval
    assert ours.diff == pytest.approx(b.mean() - a.mean())
    assert (ours.low, ours.high) == pytest.approx((theirs.low, theirs.high), abs=0.03)
    # Clusters of unequal size (1 to 4 pairs per seed): the same estimator as evals.stats.primitives, up to resampling
    # noise.
    clusters = [f"s{i // 3 if i < 60 else i}" for i in range(120)]
    fast = paired_diff_interval(pairs, clusters, n_boot=5000, seed=3)
    slow = paired_bootstrap_diff(pairs, n_boot=5000, seed=3, clusters=clusters)
    assert fast.diff == pytest.approx(slow.diff)
    assert (fast.low, fast.high) == pytest.approx((slow.low, slow.high), abs=0.02)
    assert paired_diff_interval([], [], n_boot=10).diff is None
