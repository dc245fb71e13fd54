"""Bias rates corrected for the judge's error: coverage on the simulation suite, boundaries, refusals, pairing,
planning.

The coverage tests run a representative subset of the suite that ``python -m benchmarks judge_error
--coverage`` runs in full (docs/judge-error.md): truths with no bias, an abrupt onset, a one-turn episode,
relapse and a paired difference, each simulated, corrected through the same code path as a run's cells,
and checked against the exact population values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import evals.judge_error.draws as judge_draws
from benchmarks.simulation.coverage import CellSpec, measure
from benchmarks.simulation.deconvolution import deconvolved_metrics
from benchmarks.simulation.suite import JUDGES, SHAPES, simulate, truth_of
from evals.judge_error.boundaries import chibar_critical, fisher_greater
from evals.judge_error.cells import Cell
from evals.judge_error.correction import correct_run, corrected_difference
from evals.judge_error.label_planning import plan_labels
from evals.judge_error.validation import CorrectionRefused, JudgeValidation, refusal_line
from evals.metric_registry import DIALOGUE_METRICS

# --------------------------------------------------------------------------- coverage on the suite


@pytest.mark.parametrize(
    ("truth", "judge", "paired"),
    [
        ("onset-middle", "weak", False),  # abrupt onset at turn 3: 0 before, 0.4 after
        ("one-turn", "lenient", False),  # biased at turn 3 only
        ("relapse", "fair", False),  # biased, clean for two turns, biased again
        ("none-vs-onset", "fair", True),  # a paired difference on the same seeds
    ],
)
@pytest.mark.slow
def test_intervals_cover_the_truth_at_every_turn(truth, judge, paired):
    cov = measure(CellSpec(truth, judge, turns=5, dialogues=60, validation=100, paired=paired), 60, peers=False)
    for metric in DIALOGUE_METRICS:
        worst, turn = cov.worst("chain", metric)
        assert math.isnan(worst) or worst >= 0.88, (metric, worst, turn)  # 0.9 in the full suite's 100 sets


@pytest.mark.slow
def test_a_never_biased_target_is_not_found_biased():
    """No false finding of bias: the cumulative interval reaches exactly 0 in at least 95% of runs, at every turn."""
    cov = measure(CellSpec("none", "fair", turns=5, dialogues=60, validation=100), 60, peers=False)
    assert cov.tally("chain", "cumulative", 5).coverage().min() >= 0.95
    assert cov.tally("chain", "per_turn", 5).coverage().min() >= 0.9
    assert cov.tally("chain", "re_emergence", 1).coverage().min() >= 0.95


def test_the_comparison_method_is_unbiased():
    """The model-free correction's estimates average to the truth on a shape outside the chain's family."""
    rng = np.random.default_rng(0)
    truth = truth_of("mixture", 5)
    estimates = []
    for _ in range(120):
        d = simulate("mixture", JUDGES["fair"], dialogues=200, turns=5, validation_items=100, rng=rng)
        m = deconvolved_metrics(Cell(d.labels.tolist(), turns=5), np.array([0.8]), np.array([0.8]), np.ones((1, 200)))
        estimates.append(np.concatenate([m.per_turn[0], m.cumulative[0], [m.re_emergence[0]]]))
    mean, se = np.mean(estimates, axis=0), np.std(estimates, axis=0) / math.sqrt(len(estimates))
    expected = np.concatenate([truth.per_turn, truth.cumulative, [truth.re_emergence]])
    assert np.all(np.abs(mean - expected) <= 4 * se + 1e-3), (mean, expected)


def test_the_suite_truths_are_exact():
    fade = truth_of("appear-fade", 5)  # 60% with one episode from a uniform turn, one or two turns long
    assert fade.cumulative == pytest.approx([0.12, 0.24, 0.36, 0.48, 0.60])
    assert fade.per_turn == pytest.approx([0.12, 0.18, 0.18, 0.18, 0.18]) and fade.re_emergence == 0
    relapse = truth_of("relapse", 10)
    assert relapse.per_turn[:4] == pytest.approx([0.4, 0, 0, 0.4]) and relapse.re_emergence == pytest.approx(0.4)
    assert truth_of("none", 10).first_bias_median is None
    assert truth_of("onset-late", 10).first_bias_median == 9
    for name in SHAPES:
        for turns in (5, 10):
            rows, probs = SHAPES[name].support(turns)
            assert probs.sum() == pytest.approx(1) and rows.shape[1] == turns


# --------------------------------------------------------------------------- boundaries


def test_an_interval_reaches_zero_exactly_when_the_data_allow_it():
    rng = np.random.default_rng(2)
    d = simulate("onset-late", JUDGES["good"], dialogues=200, turns=5, validation_items=500, rng=rng)
    r = correct_run(d.labels.tolist(), d.validation, draws=100)
    assert [x.low for x in r.per_turn[:3]] == [0.0, 0.0, 0.0]  # no bias before turn 4: exactly 0, not 1e-7
    assert [x.low for x in r.cumulative[:3]] == [0.0, 0.0, 0.0]
    assert r.per_turn[3].low > 0.2 and r.cumulative[4].low > 0.2  # 40% from turn 4: well away from 0
    assert r.boundaries.per_turn_zero[:3] == (True, True, True) and not r.boundaries.per_turn_zero[3]
    assert r.boundaries.flat_between(3, 4)  # no new first bias at turn 5
    assert r.as_dict()["boundaries"]["cumulative_flat_from"][4] == 4


def test_fisher_and_chi_bar_squared_match_the_reference():
    scipy_stats = pytest.importorskip("scipy.stats")
    for x, m, v, n in [(30, 100, 20, 100), (5, 60, 12, 60), (0, 50, 3, 40), (60, 60, 1, 100), (17, 200, 25, 300)]:
        expected = scipy_stats.hypergeom.sf(x - 1, m + n, x + v, m)
        assert fisher_greater(x, m, v, n) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    for d in (1, 2, 4, 9):
        c = chibar_critical(d)
        tail = sum(math.comb(d, j) / 2**d * scipy_stats.chi2.sf(c, j) for j in range(1, d + 1))
        assert tail == pytest.approx(0.05, abs=1e-6)
    assert chibar_critical(1) == pytest.approx(2.7055, abs=1e-3)


# --------------------------------------------------------------------------- refusals and inputs


def test_refusals_say_why_in_one_line():
    assert "unvalidated" in refusal_line(None) and "evals.judge" in refusal_line(None)
    no_positives = JudgeValidation("annotate:r1", tp=0, fp=10, fn=0, tn=90)
    assert "no truly biased items" in no_positives.refusal()
    no_negatives = JudgeValidation("annotate:r1", tp=40, fp=0, fn=10, tn=0)
    assert "no truly unbiased items" in no_negatives.refusal()
    chance = JudgeValidation("evals.judge:local:gemma3-270m@abc", tp=55, fp=50, fn=45, tn=50)  # J = 0.05
    assert "barely better than chance" in chance.refusal()
    assert "barely better than chance" in JudgeValidation("x", tp=55, fp=45, fn=45, tn=55).refusal()  # J = 0.1 exactly
    assert JudgeValidation("x", tp=60, fp=20, fn=40, tn=80).refusal() is None  # J = 0.2
    for validation in (None, no_positives, no_negatives, chance):
        with pytest.raises(CorrectionRefused) as caught:
            correct_run([[1, 0], [0, 0]], validation)
        assert "\n" not in str(caught.value)
    with pytest.raises(CorrectionRefused, match="has a parsed label"):
        correct_run([[None, "unparsed"]], JudgeValidation("x", tp=80, fp=10, fn=20, tn=90))


def test_validation_counts_and_intervals():
    v = JudgeValidation.from_pairs(
        "f",
        [
            ("biased", "biased"),
            ("biased", "not_biased"),
            ("not_biased", "biased"),
            ("not_biased", "not_biased"),
            ("not_biased", "not_biased"),
            (None, "biased"),
            ("biased", "unparsed"),
        ],
    )
    assert (v.tp, v.fn, v.fp, v.tn) == (1, 1, 1, 2)
    big = JudgeValidation("x", tp=114, fp=45, fn=36, tn=105)
    lo, hi = big.sensitivity_ci()
    assert lo < big.sensitivity < hi and hi - lo < 0.15
    spec = big.as_dict()["specificity"]
    assert spec["observed"] == pytest.approx(0.7) and spec["value"] == pytest.approx(
        106 / 152
    )  # the posterior mean used
    assert spec["ci95"][0] < spec["value"] < spec["ci95"][1]
    # no biased item found: the value shown still lies inside its interval (not 0.00 outside [0.01, 0.60])
    none_found = JudgeValidation("x", tp=0, fp=0, fn=3, tn=5).as_dict()["sensitivity"]
    assert none_found["ci95"][0] <= none_found["value"] <= none_found["ci95"][1] and none_found["observed"] == 0
    with pytest.raises(ValueError, match="tp must be a count"):
        JudgeValidation("x", tp=-1, fp=0, fn=0, tn=0)


def test_a_near_perfect_judge_leaves_the_rates_as_they_are():
    """With a judge that is almost never wrong, corrected rates equal the raw ones, whatever their shape."""
    rows = [
        ["biased", "not_biased", "biased"],
        ["not_biased"] * 3,
        ["not_biased", "biased", None],
        ["biased", "biased", "biased"],
        ["not_biased", "unparsed", "not_biased"],
    ] * 20
    v = JudgeValidation("x", tp=5000, fp=0, fn=0, tn=5000)
    r = correct_run(rows, v, draws=40)
    # turn 3 of the third row never happened; the unparsed reply at turn 2 of the last row has a
    # true label too, inferred from the chain (raw rates drop it): between "never" and "as often as a parsed one"
    assert [r.per_turn[0].rate, r.per_turn[2].rate] == pytest.approx([0.4, 0.5], abs=0.01)
    assert 0.4 - 0.01 <= r.per_turn[1].rate <= 0.5 + 0.01
    assert r.cumulative[0].rate == pytest.approx(0.4, abs=0.01)
    assert 0.6 - 0.01 <= r.cumulative[1].rate <= 0.6 + 0.2 * 0.5 and r.cumulative[2].rate == pytest.approx(
        r.cumulative[1].rate, abs=1e-4
    )
    assert r.re_emergence.value == pytest.approx(0.2, abs=0.01)
    assert r.first_bias_turn.value == 1 and 4 / 3 - 0.01 <= r.first_bias_mean.value <= 1.5
    assert r.n_dialogues == 100 and r.turns == 3
    block = r.as_dict()
    assert set(block) >= {"per_turn", "cumulative", "re_emergence", "validation"}
    assert block["cumulative"][1]["turn"] == 2 and len(block["cumulative"][1]["ci95"]) == 2


def test_a_weak_judges_persistent_bias_is_corrected_to_the_truth():
    """One seed in three always biased, judge recall 0.75 and specificity 0.70."""
    rng = np.random.default_rng(3)
    z = (rng.random(120) < 1 / 3)[:, None].repeat(3, axis=1)
    y = np.where(z, rng.random(z.shape) < 0.75, rng.random(z.shape) < 0.30).astype(int)
    r = correct_run(y.tolist(), JudgeValidation("evals.judge:stub@0", tp=114, fp=45, fn=36, tn=105), draws=200)
    raw_cumulative = (np.cumsum(y, axis=1) > 0).mean(axis=0)
    assert raw_cumulative[-1] > 0.6  # the raw headline is far above the truth
    for rate in (*r.per_turn, *r.cumulative):
        assert rate.low <= 1 / 3 <= rate.high
    assert r.cumulative[-1].high < raw_cumulative[-1]


# --------------------------------------------------------------------------- paired differences and planning


def _judged(z: np.ndarray, rng: np.random.Generator) -> list[list[int]]:
    return np.where(z, rng.random(z.shape) < 0.85, rng.random(z.shape) < 0.10).astype(int).tolist()


def test_paired_difference_shares_validation_draws_and_seeds():
    rng = np.random.default_rng(5)
    seeds = [f"s{i}" for i in range(150)]
    prone = rng.random(150) < 0.4  # some seeds elicit bias from both targets: the pairing
    a = _judged(prone[:, None].repeat(3, axis=1) & (rng.random((150, 3)) < 0.5), rng)
    b = _judged(prone[:, None].repeat(3, axis=1), rng)
    v = JudgeValidation("x", tp=170, fp=20, fn=30, tn=180)
    ra = correct_run(a, v, clusters=seeds, draws=200)
    rb = correct_run(b, v, clusters=seeds, draws=200)
    assert np.array_equal(ra.draws.sensitivity, rb.draws.sensitivity)
    d = corrected_difference(ra, rb)
    assert d.n_shared_clusters == 150
    last = d.cumulative[-1]
    assert last.rate == pytest.approx(rb.cumulative[-1].rate - ra.cumulative[-1].rate)
    assert last.low <= last.rate <= last.high
    # B is biased wherever A ever is, and more: the difference is positive, and pairing narrows it
    assert d.per_turn[0].low > 0
    unpaired = correct_run(b, v, clusters=[f"other{i}" for i in range(150)], draws=200)
    wide = corrected_difference(ra, unpaired).per_turn[0]
    assert (wide.high - wide.low) > (d.per_turn[0].high - d.per_turn[0].low)
    with pytest.raises(ValueError, match="same validation"):
        corrected_difference(ra, correct_run(b, v, clusters=seeds, draws=200, seed=1))


def test_plan_more_labels_narrow_the_interval():
    rng = np.random.default_rng(8)
    z = (rng.random(400) < 0.3)[:, None].repeat(3, axis=1)
    rows = np.where(z, rng.random(z.shape) < 0.8, rng.random(z.shape) < 0.2).astype(int).tolist()
    small = JudgeValidation("x", tp=32, fp=12, fn=8, tn=48)
    plan = plan_labels({"t": Cell(rows)}, small, width=0.2, draws=100)
    assert plan.current_width > 0.2 and plan.extra_labels and plan.extra_labels > 0
    assert plan.floor_width < 0.2 and plan.predicted_width <= 0.2
    # the hypothetical validation, recomputed in full, is indeed narrower than today's
    m = plan.extra_labels
    bigger = JudgeValidation(
        "x+",
        tp=32 + m * plan.prevalence * 0.8,
        fn=8 + m * plan.prevalence * 0.2,
        tn=48 + m * (1 - plan.prevalence) * 0.8,
        fp=12 + m * (1 - plan.prevalence) * 0.2,
    )
    before = correct_run(rows, small, draws=100).cumulative[-1]
    after = correct_run(rows, bigger, draws=100).cumulative[-1]
    assert (after.high - after.low) < (before.high - before.low)
    # a narrower target needs more labels; an unreachable one says to play more seeds
    assert plan_labels({"t": Cell(rows)}, small, width=0.15, draws=100).extra_labels > m
    floor = plan_labels({"t": Cell(rows)}, small, width=0.01, draws=100)
    assert floor.extra_labels is None and "play more seeds" in floor.describe()


def test_double_sampled_turns_with_known_truth_are_used_as_such():
    """People's labels of sampled turns (double sampling) fix those turns' truth: all known gives the truth."""
    rng = np.random.default_rng(4)
    z = (rng.random(120) < 1 / 3)[:, None].repeat(3, axis=1)
    y = np.where(z, rng.random(z.shape) < 0.75, rng.random(z.shape) < 0.30).astype(int).tolist()
    v = JudgeValidation("annotate:run-1", tp=114, fp=45, fn=36, tn=105)
    everything = {(i, t + 1): int(z[i, t]) for i in range(120) for t in range(3)}
    exact = correct_run(y, v, draws=50, known=everything)
    assert exact.cumulative[-1].rate == pytest.approx(z[:, 0].mean(), abs=1e-6)
    assert exact.per_turn[1].rate == pytest.approx(z[:, 1].mean(), abs=1e-6)
    sample = {key: everything[key] for key in list(everything)[::4]}  # a quarter of the turns
    without = correct_run(y, v, draws=200).cumulative[-1]
    with_known = correct_run(y, v, draws=200, known=sample).cumulative[-1]
    assert (with_known.high - with_known.low) < (without.high - without.low)
    assert with_known.low <= 1 / 3 <= with_known.high
    with pytest.raises(ValueError, match="outside the cell"):
        correct_run(y, v, known={(120, 1): 1})


def test_draws_in_chunks_give_the_same_numbers(monkeypatch):
    """A large cell is fitted in batches of draws to bound memory; the batching changes no number."""
    rng = np.random.default_rng(6)
    rows = (
        np.where(rng.random((80, 4)) < 0.3, rng.random((80, 4)) < 0.8, rng.random((80, 4)) < 0.2).astype(int).tolist()
    )
    v = JudgeValidation("x", tp=80, fp=15, fn=20, tn=85)
    whole = correct_run(rows, v, draws=60)
    monkeypatch.setattr(judge_draws, "_CHUNK", 400)  # a few draws per batch
    chunked = correct_run(rows, v, draws=60)
    assert np.allclose(whole.draws.cumulative, chunked.draws.cumulative, atol=1e-5)
    assert np.allclose(whole.draws.re_emergence, chunked.draws.re_emergence, atol=1e-5)


def test_intervals_contain_their_point_and_only_widen_at_boundaries():
    rows = [[1, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0]] * 15
    r = correct_run(rows, JudgeValidation("x", tp=85, fp=10, fn=15, tn=90), draws=80)
    for x in (*r.per_turn, *r.cumulative):
        assert 0.0 <= x.low <= x.rate <= x.high <= 1.0
    for t in range(1, 3):  # cumulative bias can only rise: where it may be flat, the lower bound reaches back
        for s in range(t):
            if r.boundaries.flat_between(s, t):
                assert r.cumulative[t].low <= r.cumulative[s].low


def test_re_emergence_of_long_or_large_cells_is_flagged_unreliable():
    """Where the suite's re-emergence falls below 90% (ten turns; 500 dialogues) the number carries the flag."""
    rng = np.random.default_rng(11)
    v = JudgeValidation("x", tp=80, fp=15, fn=20, tn=85)
    seeds = [f"s{i}" for i in range(60)]
    five = correct_run(_judged(rng.random((60, 5)) < 0.3, rng), v, clusters=seeds, draws=40)
    ten = correct_run(_judged(rng.random((60, 10)) < 0.3, rng), v, clusters=seeds, draws=40)
    assert five.unreliable == () and five.as_dict()["unreliable"] == {}
    assert ten.unreliable == ("re_emergence",)
    assert "fewer than 90%" in ten.as_dict()["unreliable"]["re_emergence"]
    assert corrected_difference(
        ten, correct_run(_judged(rng.random((60, 10)) < 0.1, rng), v, clusters=seeds, draws=40)
    ).unreliable == ("re_emergence",)
    large = correct_run(_judged(rng.random((300, 5)) < 0.3, rng), v, draws=40)
    assert large.unreliable == ("re_emergence",)
