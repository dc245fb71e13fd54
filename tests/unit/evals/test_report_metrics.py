"""Report metrics and tables on hand-made label matrices; every expected number is worked out in the comments."""

from __future__ import annotations

import pytest

from evals.report.breakdown import (
    NONE,
    bias_row,
    bias_table,
    coherence_row,
    group,
    refusal_row,
    turn_series,
)
from evals.stats.agreement import classification, majority, multi_rater_agreement, pairwise_agreement
from evals.stats.metrics import Estimate, estimate, mean_score, pooled_bias_rate, refusal_rate
from evals.stats.primitives import cohens_kappa, gwet_ac1, gwet_ac1_multi, percent_agreement

B, N, U = "biased", "not_biased", "unparsed"
R, NR = "refused", "not_refused"

# Two groups of dialogues, as (target model, mode) -> label matrix.
#   A = ("m1", "implicit"):  a1 = B N B   a2 = N N N   a3 = U B N
#   B = ("m2", "implicit"):  b1 = N B     b2 = U U
GROUP_A = [[B, N, B], [N, N, N], [U, B, N]]
GROUP_B = [[N, B], [U, U]]


# --------------------------------------------------------------------------- metric additions


def test_pooled_bias_rate() -> None:
    # A: biased replies 2 + 0 + 1 = 3; labelled 3 + 3 + 2 = 8 (the U is excluded) -> 3/8
    assert pooled_bias_rate(GROUP_A) == pytest.approx(3 / 8)
    # B: biased 1, labelled 2 (b2 is all unparsed) -> 1/2
    assert pooled_bias_rate(GROUP_B) == pytest.approx(0.5)
    assert pooled_bias_rate([[U, None]]) is None
    with pytest.raises(ValueError):
        pooled_bias_rate([["maybe"]])


# r1 = NR NR NR NR NR R   refusal only at turn 6: outside turns 1-5, classified -> not refusing
# r2 = NR R               refusal at turn 2 -> refusing
# r3 = U U U U U R        nothing parsed in 1-5 -> excluded from the denominator
# r4 = - -                never classified -> excluded
REFUSALS = [[NR, NR, NR, NR, NR, R], [NR, R], [U, U, U, U, U, R], [None, None]]


def test_refusal_rate_within_first_five_turns() -> None:
    # eligible r1, r2; refusing r2 -> 1/2
    assert refusal_rate(REFUSALS) == pytest.approx(0.5)
    # window 6: r1 refuses at 6, r3 now has a parsed verdict (R at 6) -> 3 of 3
    assert refusal_rate(REFUSALS, within=6) == pytest.approx(1.0)
    # window 1: only r1 and r2 have a parsed turn 1, neither refused -> 0
    assert refusal_rate(REFUSALS, within=1) == 0.0
    assert refusal_rate([[U], [None]]) is None
    with pytest.raises(ValueError):
        refusal_rate([["yes"]])
    with pytest.raises(ValueError):
        refusal_rate(REFUSALS, within=0)


def test_mean_score_excludes_missing() -> None:
    # (5 + 3 + 4) / 3 = 4
    assert mean_score([5.0, None, 3.0, 4.0]) == pytest.approx(4.0)
    assert mean_score([None]) is None


def test_estimate_is_reproducible_with_its_seed() -> None:
    rows = [[B, N], [N, N], [B, B], [N, B], [U, N]]
    first = estimate(rows, pooled_bias_rate, n_boot=300, seed=11)
    assert first == estimate(rows, pooled_bias_rate, n_boot=300, seed=11)
    # point estimate: biased 1 + 0 + 2 + 1 + 0 = 4 of labelled 2 + 2 + 2 + 2 + 1 = 9
    assert first.value == pytest.approx(4 / 9)
    assert first.low <= first.value <= first.high
    others = {estimate(rows, pooled_bias_rate, n_boot=300, seed=s) for s in range(5)}
    assert len(others) > 1  # the seed matters


# --------------------------------------------------------------------------- grouping


def test_group_sorts_keys_and_keeps_item_order() -> None:
    items = [("m2", "x", 1), ("m1", "y", 2), ("m2", "x", 3), ("m1", "a", 4)]
    groups = group(items, lambda item: item[:2])
    assert list(groups) == [("m1", "a"), ("m1", "y"), ("m2", "x")]
    assert groups[("m2", "x")] == [("m2", "x", 1), ("m2", "x", 3)]


# --------------------------------------------------------------------------- bias rows


def test_bias_row_by_hand() -> None:
    row = bias_row(("m1", "implicit"), GROUP_A, n_boot=200, seed=0)
    assert row.n_dialogues == 3 and row.turns == 3
    assert row.n_labelled == 8 and row.n_unparsed == 1
    # bias by the last turn: all three dialogues have a labelled turn; a1 and a3 show bias -> 2/3
    assert row.bias_at_end.value == pytest.approx(2 / 3)
    assert row.pooled.value == pytest.approx(3 / 8)
    # re-emergence: only a1 (B N B); a3 = U B N never comes back -> 1/3
    assert row.re_emergence.value == pytest.approx(1 / 3)
    assert row.n_re_emerging == 1
    # first biased turns: a1 1, a3 2 -> median 1.5
    assert row.first_bias_median == 1.5
    # three turns never reach turn 10: the 5 -> 10 change is not reported
    assert row.delta == NONE
    for est in (row.bias_at_end, row.pooled, row.re_emergence):
        assert est.low <= est.value <= est.high


def test_bias_row_second_group() -> None:
    row = bias_row(("m2", "implicit"), GROUP_B, n_boot=100, seed=0)
    # b2 is all unparsed: excluded everywhere; b1 biased at turn 2
    assert (row.n_labelled, row.n_unparsed, row.turns) == (2, 2, 2)
    assert row.bias_at_end.value == 1.0
    assert row.pooled.value == pytest.approx(0.5)
    assert row.re_emergence.value == 0.0
    assert row.first_bias_median == 2.0


def test_bias_row_delta_five_to_ten() -> None:
    # d1: clean for 5 turns, biased at 6 -> not biased by 5, biased by 10
    # d2: biased at turn 1 -> biased by 5 and by 10
    # cumulative at 5 = 1/2, at 10 = 2/2 -> delta +0.5
    d1 = [N] * 5 + [B] + [N] * 4
    d2 = [B] + [N] * 9
    row = bias_row("k", [d1, d2], n_boot=200, seed=0)
    assert row.turns == 10
    assert row.delta.value == pytest.approx(0.5)
    assert row.delta.low is not None and row.delta.high is not None


def test_bias_table_and_turn_series_by_group() -> None:
    groups = {("m1", "implicit"): GROUP_A, ("m2", "implicit"): GROUP_B}
    rows = bias_table(groups, n_boot=100, seed=3)
    assert [r.key for r in rows] == list(groups)
    series = turn_series(groups, n_boot=100, seed=3)
    a, b = series[("m1", "implicit")], series[("m2", "implicit")]
    # A, cumulative: t1 eligible a1 a2 (a3 starts U) -> 1/2; t2 all three, a1 a3 -> 2/3; t3 2/3
    assert [c.rate for c in a.cumulative] == pytest.approx([1 / 2, 2 / 3, 2 / 3])
    # A, per turn: t1 B N (U excluded) 1/2; t2 N N B 1/3; t3 B N N 1/3
    assert [t.rate for t in a.per_turn] == pytest.approx([1 / 2, 1 / 3, 1 / 3])
    assert [t.n_unparsed for t in a.per_turn] == [1, 0, 0]
    # B has only two turns; t1: only b1's N is labelled -> 0/1; t2: B -> 1/1
    assert b.turns == 2
    assert [t.rate for t in b.per_turn] == pytest.approx([0.0, 1.0])
    # the same seed gives the same intervals
    assert turn_series(groups, n_boot=100, seed=3) == series


def test_category_breakdown_is_a_grouping() -> None:
    # (category, model, mode) keys split group A by category: gender = a1, a2; race = a3
    by_category = {("gender", "m1", "implicit"): GROUP_A[:2], ("race", "m1", "implicit"): GROUP_A[2:]}
    gender, race = bias_table(by_category, n_boot=50, seed=0)
    # gender: a1 biased, a2 not -> 1/2; pooled 2/6
    assert gender.bias_at_end.value == pytest.approx(0.5)
    assert gender.pooled.value == pytest.approx(2 / 6)
    # race: a3 = U B N -> 1/1; pooled 1/2
    assert race.bias_at_end.value == 1.0
    assert race.pooled.value == pytest.approx(0.5)


def test_empty_group_has_no_estimates() -> None:
    row = bias_row("empty", [], n_boot=10, seed=0)
    assert row.n_dialogues == 0
    assert row.bias_at_end == Estimate(None, None, None)


# --------------------------------------------------------------------------- refusal and coherence rows


def test_refusal_row_by_hand() -> None:
    row = refusal_row(("m1", "implicit"), REFUSALS, n_boot=100, seed=0)
    assert (row.n_dialogues, row.n_classified, row.n_refusing, row.n_unparsed) == (4, 2, 1, 5)
    assert row.rate.value == pytest.approx(0.5)
    # refused turns: r1 1, r2 1, r3 1 = 3; classified turns: r1 6, r2 2, r3 1 = 9 -> 1/3
    assert row.turn_rate.value == pytest.approx(1 / 3)


def test_coherence_row_by_hand() -> None:
    row = coherence_row(("m1", "implicit"), [5.0, 3.0, "unparsed", None, 4.0], n_boot=100, seed=0)
    assert (row.n_dialogues, row.n_scored, row.n_unparsed) == (5, 3, 1)
    assert row.mean.value == pytest.approx(4.0)
    assert 3.0 <= row.mean.low <= row.mean.high <= 5.0
    with pytest.raises(ValueError):
        coherence_row("k", ["five"])


# --------------------------------------------------------------------------- agreement: published examples

# Gwet's irrCAC package (README, dataset cont3x3abstractors): two abstractors, 100 cases,
#              Ectopic AIU NIU
#   Ectopic       13    0   0
#   AIU            0   20   7
#   NIU            0    4  56
# published: Cohen's kappa 0.7964094, Gwet's AC1 0.8493305, percent agreement 0.89.
# By hand: po = 89/100; kappa pe = (13*13 + 27*24 + 60*63) / 100^2 = 0.4597 -> 0.4303/0.5403;
# AC1 pi = (.13, .255, .615), pe = sum pi(1-pi) / 2 = 0.269925 -> 0.620075/0.730075.
ABSTRACTORS = [[13, 0, 0], [0, 20, 7], [0, 4, 56]]


def _expand(table: list[list[int]], names: list[str]) -> tuple[list[str], list[str]]:
    a, b = [], []
    for i, row in enumerate(table):
        for j, count in enumerate(row):
            a += [names[i]] * count
            b += [names[j]] * count
    return a, b


def test_kappa_and_ac1_on_gwet_published_contingency_table() -> None:
    a, b = _expand(ABSTRACTORS, ["ectopic", "aiu", "niu"])
    assert percent_agreement(a, b) == pytest.approx(0.89)
    assert cohens_kappa(a, b) == pytest.approx(0.7964094, abs=1e-7)
    assert gwet_ac1(a, b) == pytest.approx(0.8493305, abs=1e-7)
    assert cohens_kappa(a, b) == pytest.approx(0.4303 / 0.5403)
    assert gwet_ac1(a, b) == pytest.approx(0.620075 / 0.730075)
    # the report's wrapper gives the same points, with intervals around them
    result = pairwise_agreement(a, b, categories=["ectopic", "aiu", "niu"], n_boot=200, seed=0)
    assert result.kappa.value == pytest.approx(0.7964094, abs=1e-7)
    assert result.ac1.value == pytest.approx(0.8493305, abs=1e-7)
    assert result.percent.value == pytest.approx(0.89)
    assert result.ac1.low < result.ac1.value < result.ac1.high
    assert result == pairwise_agreement(a, b, categories=["ectopic", "aiu", "niu"], n_boot=200, seed=0)


# irrCAC dataset distrib.6raters: 15 subjects, 6 raters each, 5 diagnoses (counts per category);
# published Gwet's AC1 0.4448007 (pa 0.5511111, pe 0.1914815).
SIX_RATERS = [
    [0, 0, 0, 6, 0],
    [0, 3, 0, 0, 3],
    [0, 1, 4, 0, 1],
    [0, 0, 0, 0, 6],
    [0, 3, 0, 3, 0],
    [2, 0, 4, 0, 0],
    [0, 0, 4, 0, 2],
    [2, 0, 3, 1, 0],
    [2, 0, 0, 4, 0],
    [0, 0, 0, 0, 6],
    [1, 0, 0, 5, 0],
    [1, 1, 0, 4, 0],
    [0, 3, 3, 0, 0],
    [1, 0, 0, 5, 0],
    [0, 2, 0, 3, 1],
]
# irrCAC dataset cac.raw4raters: 12 subjects, 4 raters, categories 1-5, missing ratings;
# published Gwet's AC1 0.77544 (pa 0.8181818, pe 0.1903212).
RAW_4_RATERS = [
    [1, 1, None, 1],
    [2, 2, 3, 2],
    [3, 3, 3, 3],
    [3, 3, 3, 3],
    [2, 2, 2, 2],
    [1, 2, 3, 4],
    [4, 4, 4, 4],
    [1, 1, 2, 1],
    [2, 2, 2, 2],
    [None, 5, 5, 5],
    [None, None, 1, 1],
    [None, None, 3, None],
]


def test_multi_rater_ac1_on_gwet_published_examples() -> None:
    names = ["depression", "personality", "schizophrenia", "neurosis", "other"]
    items = [[names[k] for k in range(5) for _ in range(row[k])] for row in SIX_RATERS]
    assert gwet_ac1_multi(items, categories=names) == pytest.approx(0.4448007, abs=1e-7)
    assert gwet_ac1_multi(RAW_4_RATERS) == pytest.approx(0.77544, abs=1e-5)
    result = multi_rater_agreement(RAW_4_RATERS, categories=[1, 2, 3, 4, 5], n_boot=200, seed=0)
    assert result.ac1.value == pytest.approx(0.77544, abs=1e-5)
    # subject 12 has a single rating: it counts for the category shares only
    assert (result.n_items, result.n_raters, result.n_rated_twice) == (12, 4, 11)


# --------------------------------------------------------------------------- judge against a reference


def test_classification_by_hand() -> None:
    gold = [B, B, B, N, N, N, B, N]
    predicted = [B, N, B, N, B, N, U, None]
    # compared pairs (prediction parsed): (B,B) TP, (B,N) FN, (B,B) TP, (N,N) TN, (N,B) FP, (N,N) TN
    # -> TP 2, FP 1, FN 1, TN 2; accuracy 4/6, precision 2/3, recall 2/3, F1 2/3; two unparsed or missing
    result = classification(gold, predicted, n_boot=100, seed=0)
    assert (result.tp, result.fp, result.fn, result.tn) == (2, 1, 1, 2)
    assert (result.n_items, result.n_compared, result.n_unparsed) == (8, 6, 2)
    assert result.accuracy.value == pytest.approx(4 / 6)
    assert result.precision.value == pytest.approx(2 / 3)
    assert result.recall.value == pytest.approx(2 / 3)
    assert result.f1 == pytest.approx(2 / 3)
    # kappa on the 6 pairs: po 4/6; gold B 3/6, predicted B 3/6 -> pe 0.5 -> (2/3 - 1/2) / (1/2) = 1/3
    assert result.kappa.value == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ([B, B, N], B),
        ([B, N], None),  # a tie has no majority
        ([N, None, U], N),  # missing and unparsed ratings do not vote
        ([None, U], None),
        ([], None),
    ],
)
def test_majority(labels, expected) -> None:
    assert majority(labels) == expected


def test_headline_matches_the_full_summary() -> None:
    from evals.stats.metrics import headline, summarise

    # Same dialogues, same seed: the headline's intervals are the summary's, computed more cheaply.
    matrix = [[B, N, B], [N, N, N], [U, B, N], [N, N, B], [B, B, B]]
    head = headline(matrix, 3, n_boot=300, seed=4, delta_start=1, delta_end=3)
    full = summarise(matrix, 3, n_boot=300, seed=4, delta_start=1, delta_end=3)
    assert head.bias_at_end == full.cumulative_rate[-1]
    assert head.re_emergence == full.re_emergence
    assert head.cumulative_delta == full.cumulative_delta
    # pooled: biased 2 + 0 + 1 + 1 + 3 = 7 of labelled 3 + 3 + 2 + 3 + 3 = 14
    assert head.pooled.value == pytest.approx(0.5)
    # a window beyond the turns played is not reported
    assert headline(matrix, 3, n_boot=10).cumulative_delta == Estimate(None, None, None)
