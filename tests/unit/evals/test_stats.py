"""Unit tests for evals.stats.primitives; every expected number is worked out by hand in the comments."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from evals.stats.primitives import (
    McNemarResult,
    bootstrap_ci,
    cohens_kappa,
    gwet_ac1,
    gwet_ac1_multi,
    mcnemar_exact,
    paired_bootstrap_diff,
    percent_agreement,
    percentile,
)


def _raters_from_table(yy: int, yn: int, ny: int, nn: int) -> tuple[list[str], list[str]]:
    """Expand a 2x2 table (rows = rater A, cols = rater B) into two label lists."""
    a = ["yes"] * (yy + yn) + ["no"] * (ny + nn)
    b = ["yes"] * yy + ["no"] * yn + ["yes"] * ny + ["no"] * nn
    return a, b


# Wikipedia "Cohen's kappa" worked example, 50 items:
#             B yes  B no
#   A yes       20     5     (A yes = 25/50 = 0.5)
#   A no        10    15     (B yes = 30/50 = 0.6)
WIKI_A, WIKI_B = _raters_from_table(20, 5, 10, 15)


# --------------------------------------------------------------------------- percentile


def test_percentile_linear_interpolation() -> None:
    # values 1..5, q=0.25 -> position 0.25 * 4 = 1.0 -> value 2.0
    # q=0.1 -> position 0.4 -> 1 + 0.4 * (2 - 1) = 1.4
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert percentile(values, 0.25) == pytest.approx(2.0)
    assert percentile(values, 0.1) == pytest.approx(1.4)
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 1.0) == 5.0


def test_percentile_rejects_empty() -> None:
    with pytest.raises(ValueError):
        percentile([], 0.5)


# --------------------------------------------------------------------------- agreement


def test_percent_agreement_wikipedia_table() -> None:
    # po = (20 + 15) / 50 = 0.7
    assert percent_agreement(WIKI_A, WIKI_B) == pytest.approx(0.7)


def test_cohens_kappa_wikipedia_table() -> None:
    # po = 0.7; pe = 0.5*0.6 + 0.5*0.4 = 0.3 + 0.2 = 0.5
    # kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4
    assert cohens_kappa(WIKI_A, WIKI_B) == pytest.approx(0.4)


def test_gwet_ac1_wikipedia_table() -> None:
    # pi_yes = (25/50 + 30/50) / 2 = 0.55, pi_no = 0.45, Q = 2
    # pe = (0.55*0.45 + 0.45*0.55) / (2 - 1) = 0.495
    # AC1 = (0.7 - 0.495) / (1 - 0.495) = 0.205 / 0.505 = 0.405940594...
    assert gwet_ac1(WIKI_A, WIKI_B) == pytest.approx(0.205 / 0.505)
    assert gwet_ac1(WIKI_A, WIKI_B) == pytest.approx(0.4059405940594)


def test_kappa_paradox_high_agreement_table() -> None:
    # Hand-made high-prevalence table, n = 125:
    #             B yes  B no
    #   A yes      118     5    (A yes = 123)
    #   A no         2     0    (B yes = 120)
    # po = 118/125 = 0.944
    # kappa: pe = (123*120 + 2*5) / 125^2 = 14770 / 15625 = 0.94528
    #        kappa = (0.944 - 0.94528) / (1 - 0.94528) = -0.00128 / 0.05472 = -0.0233918...
    # AC1:   pi_yes = (123 + 120) / 250 = 0.972; pe = 2 * 0.972 * 0.028 = 0.054432
    #        AC1 = (0.944 - 0.054432) / (1 - 0.054432) = 0.889568 / 0.945568 = 0.9407763...
    a, b = _raters_from_table(118, 5, 2, 0)
    assert cohens_kappa(a, b) == pytest.approx(-0.00128 / 0.05472)
    assert gwet_ac1(a, b) == pytest.approx(0.889568 / 0.945568)


def test_three_category_kappa_and_ac1() -> None:
    # a = x x y z, b = x y y z -> po = 3/4
    # A shares: x .5, y .25, z .25 ; B shares: x .25, y .5, z .25
    # kappa pe = .5*.25 + .25*.5 + .25*.25 = .3125 -> kappa = .4375/.6875 = 7/11
    # AC1 pi: x .375, y .375, z .25; sum pi(1-pi) = 2*.375*.625 + .25*.75 = .65625
    #     pe = .65625 / (3 - 1) = .328125 -> AC1 = .421875/.671875 = 27/43
    a = ["x", "x", "y", "z"]
    b = ["x", "y", "y", "z"]
    assert cohens_kappa(a, b) == pytest.approx(7 / 11)
    assert gwet_ac1(a, b) == pytest.approx(27 / 43)


def test_agreement_drops_unparsed_and_none_pairs() -> None:
    # excluded labels on either side: only items 0 and 3 survive:
    # (yes, yes) agree, (yes, no) disagree -> 1/2
    a = ["yes", "unparsed", None, "yes", "no", "no"]
    b = ["yes", "yes", "no", "no", None, "unparsed"]
    assert percent_agreement(a, b) == pytest.approx(0.5)
    # with nothing excluded, "unparsed"/None are ordinary categories: 1 agreement of 6
    assert percent_agreement(a, b, exclude=()) == pytest.approx(1 / 6)


def test_agreement_none_when_no_pairs_survive() -> None:
    a = ["unparsed", None]
    b = ["yes", "no"]
    assert percent_agreement(a, b) is None
    assert cohens_kappa(a, b) is None
    assert gwet_ac1(a, b) is None


def test_agreement_rejects_length_mismatch() -> None:
    with pytest.raises(ValueError):
        cohens_kappa(["yes"], ["yes", "no"])


def test_kappa_undefined_when_both_raters_use_one_category() -> None:
    # pe = 1*1 = 1 -> division by zero -> None
    assert cohens_kappa(["yes", "yes"], ["yes", "yes"]) is None


def test_ac1_uses_declared_categories() -> None:
    # both raters say "yes" twice: observed Q = 1 -> undefined
    assert gwet_ac1(["yes", "yes"], ["yes", "yes"]) is None
    # declared Q = 2: pi_yes = 1, pi_no = 0 -> pe = 0 -> AC1 = (1 - 0)/(1 - 0) = 1
    assert gwet_ac1(["yes", "yes"], ["yes", "yes"], categories=("yes", "no")) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        gwet_ac1(["maybe"], ["yes"], categories=("yes", "no"))


def test_ac1_multi_equals_two_rater_ac1_without_missing() -> None:
    items = [[x, y] for x, y in zip(WIKI_A, WIKI_B)]
    # two raters, no missing -> same as the two-rater value 0.205/0.505 (worked above)
    assert gwet_ac1_multi(items) == pytest.approx(0.205 / 0.505)
    a, b = ["x", "x", "y", "z"], ["x", "y", "y", "z"]
    assert gwet_ac1_multi([[x, y] for x, y in zip(a, b)]) == pytest.approx(27 / 43)


def test_ac1_multi_with_missing_ratings() -> None:
    # 3 raters, categories a/b:
    #   item1: a a a     r=3, r_a=3 -> pa term 3*2/(3*2) = 1
    #   item2: a b -     r=2        -> pa term 0
    #   item3: b b -     r=2, r_b=2 -> pa term 2*1/(2*1) = 1
    #   item4: a - -     r=1        -> not in pa (needs r >= 2), counts in pi
    #   item5: - - -     r=0        -> ignored entirely
    # pa = (1 + 0 + 1) / 3 = 2/3
    # pi_a = (3/3 + 1/2 + 0/2 + 1/1) / 4 = 2.5/4 = 0.625 ; pi_b = 0.375
    # pe = (0.625*0.375 + 0.375*0.625) / (2 - 1) = 15/32
    # AC1 = (2/3 - 15/32) / (1 - 15/32) = (19/96) / (17/32) = 19/51 = 0.372549...
    ratings = [
        ["a", "a", "a"],
        ["a", "b", None],
        ["b", "unparsed", "b"],
        ["a", None, None],
        [None, "unparsed", None],
    ]
    assert gwet_ac1_multi(ratings) == pytest.approx(19 / 51)


def test_ac1_multi_none_without_doubly_rated_items() -> None:
    assert gwet_ac1_multi([["a", None], [None, "b"]]) is None


# --------------------------------------------------------------------------- McNemar


def _pairs(b: int, c: int, both_true: int = 0, both_false: int = 0) -> list[tuple[bool, bool]]:
    """b pairs True->False, c pairs False->True, plus concordant ones."""
    return [(True, False)] * b + [(False, True)] * c + [(True, True)] * both_true + [(False, False)] * both_false


def test_mcnemar_b1_c9() -> None:
    # n = 10, min = 1: 2 * (C(10,0) + C(10,1)) / 2^10 = 2 * 11 / 1024 = 0.021484375
    result = mcnemar_exact(_pairs(1, 9, both_true=4, both_false=7))
    assert result == McNemarResult(b=1, c=9, p_value=0.021484375)


def test_mcnemar_b2_c8() -> None:
    # n = 10, min = 2: 2 * (1 + 10 + 45) / 1024 = 112 / 1024 = 0.109375
    assert mcnemar_exact(_pairs(8, 2)).p_value == pytest.approx(0.109375)


def test_mcnemar_b0_c5() -> None:
    # n = 5, min = 0: 2 * 1 / 32 = 0.0625
    assert mcnemar_exact(_pairs(0, 5)).p_value == pytest.approx(0.0625)


def test_mcnemar_capped_at_one() -> None:
    # n = 6, min = 3: 2 * (1 + 6 + 15 + 20) / 64 = 84/64 > 1 -> 1.0
    assert mcnemar_exact(_pairs(3, 3)).p_value == 1.0


def test_mcnemar_no_discordant_pairs() -> None:
    assert mcnemar_exact(_pairs(0, 0, both_true=3, both_false=2)) == McNemarResult(0, 0, 1.0)


# --------------------------------------------------------------------------- bootstrap


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


DATA = [0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0]


def test_bootstrap_reproducible_with_seed() -> None:
    first = bootstrap_ci(DATA, _mean, n_boot=500, seed=7)
    second = bootstrap_ci(DATA, _mean, n_boot=500, seed=7)
    assert first == second


def test_bootstrap_differs_with_other_seed() -> None:
    # continuous, distinct values and a small n_boot: the interval ends are interpolated
    # between resample means, so two seeds matching exactly would be a remarkable coincidence
    values = [0.11, 2.7, 5.3, 1.9, 8.45, 3.3, 0.07, 6.6, 4.21, 9.9]
    with_seed_1 = bootstrap_ci(values, _mean, n_boot=50, seed=1)
    with_seed_2 = bootstrap_ci(values, _mean, n_boot=50, seed=2)
    assert with_seed_1 != with_seed_2


def test_bootstrap_interval_brackets_mean_and_is_within_range() -> None:
    # sample mean = 7/12 = 0.5833; a 95% interval of 0/1 data must lie in [0, 1] and
    # comfortably contain the mean for n = 12
    low, high = bootstrap_ci(DATA, _mean, n_boot=1000, seed=0)
    assert low is not None and high is not None
    assert 0.0 <= low < 7 / 12 < high <= 1.0


def test_bootstrap_percentile_positions() -> None:
    # A statistic that ignores the sample and returns 0, 1, 2, ... on successive calls
    # makes the bootstrap distribution exactly {0, ..., 100} whatever the draws.
    # 95%: q = 0.025 -> position 0.025 * 100 = 2.5 -> 2.5 ; q = 0.975 -> 97.5
    # 90%: q = 0.05  -> 5.0 ; q = 0.95 -> 95.0
    def counter() -> Callable[[list[int]], float]:
        calls = iter(range(1000))
        return lambda sample: float(next(calls))

    assert bootstrap_ci([1, 2], counter(), n_boot=101, seed=0) == pytest.approx((2.5, 97.5))
    assert bootstrap_ci([1, 2], counter(), n_boot=101, seed=0, level=0.9) == pytest.approx((5.0, 95.0))


def test_bootstrap_constant_statistic_gives_degenerate_interval() -> None:
    assert bootstrap_ci([1, 2, 3], lambda rows: 0.25, n_boot=50) == (0.25, 0.25)


def test_bootstrap_resamples_whole_rows() -> None:
    # each statistic call must see len(rows) items drawn from the original row objects
    rows = [("d1", 1), ("d2", 0), ("d3", 1)]
    seen: list[int] = []

    def statistic(sample: list[tuple[str, int]]) -> float:
        assert len(sample) == 3
        assert all(any(item is row for row in rows) for item in sample)
        seen.append(1)
        return 0.0

    bootstrap_ci(rows, statistic, n_boot=20, seed=3)
    assert len(seen) == 20


def test_bootstrap_skips_none_statistics() -> None:
    # statistic is None whenever "b" is in the resample; only the all-"a" resamples
    # (prob 1/4 each) contribute, all with value 1.0 -> interval (1.0, 1.0)
    def statistic(sample: list[str]) -> float | None:
        return None if "b" in sample else 1.0

    assert bootstrap_ci(["a", "b"], statistic, n_boot=200, seed=0) == (1.0, 1.0)


def test_bootstrap_nothing_computable() -> None:
    assert bootstrap_ci([1, 2], lambda rows: None, n_boot=10) == (None, None)
    assert bootstrap_ci([], _mean, n_boot=10) == (None, None)


def test_bootstrap_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        bootstrap_ci(DATA, _mean, n_boot=0)
    with pytest.raises(ValueError):
        bootstrap_ci(DATA, _mean, level=1.0)


# --------------------------------------------------------------------------- paired bootstrap


def test_paired_bootstrap_diff_point_estimate() -> None:
    # 3 pairs False->True, 1 pair True->True: before rate 1/4, after rate 4/4 -> diff 0.75
    result = paired_bootstrap_diff(_pairs(0, 3, both_true=1), n_boot=300, seed=0)
    assert result.diff == pytest.approx(0.75)
    assert result.n == 4
    assert result.low is not None and result.high is not None
    # each resampled diff is k/4 for k in 0..4 (k = number of False->True pairs drawn)
    assert 0.0 <= result.low <= result.high <= 1.0


def test_paired_bootstrap_diff_negative_and_degenerate() -> None:
    # every pair True->False: diff = 0 - 1 = -1 in the sample and in every resample
    result = paired_bootstrap_diff(_pairs(5, 0), n_boot=100, seed=4)
    assert (result.diff, result.low, result.high) == (-1.0, -1.0, -1.0)


def test_paired_bootstrap_diff_reproducible() -> None:
    pairs = _pairs(2, 6, both_true=3, both_false=5)
    assert paired_bootstrap_diff(pairs, n_boot=400, seed=11) == paired_bootstrap_diff(pairs, n_boot=400, seed=11)


def test_paired_bootstrap_diff_empty() -> None:
    result = paired_bootstrap_diff([], n_boot=10, seed=0)
    assert result.diff is None and result.low is None and result.high is None
