"""Bias rates corrected for the judge's error: coverage against a known truth, refusals, pairing, planning.

The simulation draws data sets whose true labels are known, labels them with a judge of known error,
validates that judge on 250 items drawn from the truth, and checks how often the 95% intervals
contain the population's true per-turn and cumulative bias: the corrected ones at least 90% of the
time, the raw ones (bootstrap intervals of the judge's labels, as the summary prints) far less.
Data sets are stacked so that one vectorised fit serves them all; the code path is correct_run's.
"""

from __future__ import annotations

import numpy as np
import pytest

import evals.judge_error.draws as judge_draws
from evals.judge_error.chain import emissions, posterior_metrics
from evals.judge_error.correction import correct_run, corrected_difference
from evals.judge_error.fit import fit
from evals.judge_error.intervals import interval
from evals.judge_error.planning import plan_labels
from evals.judge_error.validation import CorrectionRefused, JudgeValidation, refusal_line

TURNS = 4
DIALOGUES = 120
SETS = 200
DRAWS = 200


def _truth(pattern: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """True labels (n, TURNS) of one data set."""
    if pattern == "persists":  # one seed in three is biased at every turn, the rest never
        return (rng.random(n) < 1 / 3)[:, None].repeat(TURNS, axis=1)
    # appears and fades: in 60% of dialogues bias appears at a uniform turn and lasts one or two turns
    onset = rng.integers(0, TURNS, n)
    end = onset + rng.integers(1, 3, n)
    t = np.arange(TURNS)[None, :]
    return (rng.random(n) < 0.6)[:, None] & (t >= onset[:, None]) & (t < end[:, None])


def _population(pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """The population's true per-turn and cumulative bias by turn (exact)."""
    t = np.arange(1, TURNS + 1)
    if pattern == "persists":
        return np.full(TURNS, 1 / 3), np.full(TURNS, 1 / 3)
    per_turn = 0.6 * (1 / TURNS + 0.5 * (t >= 2) / TURNS)
    return per_turn, 0.6 * t / TURNS


def _coverage(pattern: str, sens: float, spec: float, seed: int) -> dict[str, np.ndarray]:
    """Share of SETS data sets whose intervals contain the truth, by turn: corrected and raw."""
    rng = np.random.default_rng(seed)
    codes = (np.arange(2**TURNS)[:, None] >> np.arange(TURNS)[None, :]) & 1  # every label pattern
    counts = np.zeros((SETS, 2**TURNS))
    points, sens_draws, spec_draws = [], [], []
    for i in range(SETS):
        z = _truth(pattern, DIALOGUES, rng)
        y = np.where(z, rng.random(z.shape) < sens, rng.random(z.shape) < 1 - spec)
        counts[i] = np.bincount(y @ (1 << np.arange(TURNS)), minlength=2**TURNS)
        positives = rng.binomial(250, 0.4)
        tp, tn = rng.binomial(positives, sens), rng.binomial(250 - positives, spec)
        validation = JudgeValidation("sim", tp=tp, fp=250 - positives - tn, fn=positives - tp, tn=tn)
        points.append(validation.point())
        s, p = validation.draw(DRAWS, seed=i)
        sens_draws.append(s)
        spec_draws.append(p)
    y = codes.astype(np.int8)
    length = np.full(len(codes), TURNS)
    point = np.array(points)
    # correct_run's steps, every data set at once: multi-start fit at the point estimate, then each
    # draw (validation draw × Poisson bootstrap, which for merged dialogues is Poisson(count)) from it
    theta, reach = fit(y, length, counts, point[:, 0], point[:, 1])
    at_point = posterior_metrics(y, length, counts, theta, reach, *emissions(y, point[:, 0], point[:, 1]))
    weights = rng.poisson(np.repeat(counts, DRAWS, axis=0)).astype(float)
    s, p = np.concatenate(sens_draws), np.concatenate(spec_draws)
    fitted, reach = fit(y, length, weights, s, p, start=np.repeat(theta, DRAWS, axis=0))
    drawn = posterior_metrics(y, length, weights, fitted, reach, *emissions(y, s, p))
    # the raw intervals: the same bootstrap of the judge's labels, as the summary prints them
    raw_turn = (weights @ codes) / weights.sum(1, keepdims=True)
    raw_cum = (weights @ (np.cumsum(codes, axis=1) > 0)) / weights.sum(1, keepdims=True)
    truth_turn, truth_cum = _population(pattern)
    out = {name: np.zeros(TURNS) for name in ("per_turn", "cumulative", "raw_per_turn", "raw_cumulative")}
    for i in range(SETS):
        rows = slice(i * DRAWS, (i + 1) * DRAWS)
        for t in range(TURNS):
            for name, values, pt, truth in (
                ("per_turn", drawn[0][rows, t], at_point[0][i, t], truth_turn[t]),
                ("cumulative", drawn[1][rows, t], at_point[1][i, t], truth_cum[t]),
                ("raw_per_turn", raw_turn[rows, t], None, truth_turn[t]),
                ("raw_cumulative", raw_cum[rows, t], None, truth_cum[t]),
            ):
                lo, hi = interval(values, pt)
                out[name][t] += lo is not None and lo <= truth <= hi
    return {name: hits / SETS for name, hits in out.items()}


@pytest.mark.parametrize(("pattern", "sens", "spec"), [("persists", 0.75, 0.70), ("fades", 0.85, 0.90)])
def test_corrected_intervals_cover_the_truth_and_raw_ones_do_not(pattern, sens, spec):
    cov = _coverage(pattern, sens, spec, seed=11)
    assert cov["per_turn"].min() >= 0.9, cov
    assert cov["cumulative"].min() >= 0.9, cov
    # the judge's false positives pile up over turns: raw cumulative intervals miss the truth
    assert cov["raw_cumulative"][1:].max() <= 0.5, cov


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
    v = JudgeValidation.from_pairs("f", [("biased", "biased"), ("biased", "not_biased"), ("not_biased", "biased"),
                                         ("not_biased", "not_biased"), ("not_biased", "not_biased"), (None, "biased"),
                                         ("biased", "unparsed")])
    assert (v.tp, v.fn, v.fp, v.tn) == (1, 1, 1, 2)
    big = JudgeValidation("x", tp=114, fp=45, fn=36, tn=105)
    lo, hi = big.sensitivity_ci()
    assert lo < big.sensitivity < hi and hi - lo < 0.15
    assert big.as_dict()["specificity"]["value"] == pytest.approx(0.7)
    with pytest.raises(ValueError, match="tp must be a count"):
        JudgeValidation("x", tp=-1, fp=0, fn=0, tn=0)


def test_a_near_perfect_judge_leaves_the_rates_as_they_are():
    """With a judge that is almost never wrong, corrected rates equal the raw ones, whatever their shape."""
    rows = [["biased", "not_biased", "biased"], ["not_biased"] * 3, ["not_biased", "biased", None],
            ["biased", "biased", "biased"], ["not_biased", "unparsed", "not_biased"]] * 20
    v = JudgeValidation("x", tp=5000, fp=0, fn=0, tn=5000)
    r = correct_run(rows, v, draws=40)
    # turn 3 of the third row never happened; the unparsed reply at turn 2 of the last row has a
    # true label too, inferred from the chain (raw rates drop it): between "never" and "as often as a parsed one"
    assert [r.per_turn[0].rate, r.per_turn[2].rate] == pytest.approx([0.4, 0.5], abs=0.01)
    assert 0.4 - 0.01 <= r.per_turn[1].rate <= 0.5 + 0.01
    assert r.cumulative[0].rate == pytest.approx(0.4, abs=0.01)
    assert 0.6 - 0.01 <= r.cumulative[1].rate <= 0.6 + 0.2 * 0.5 and r.cumulative[2].rate == pytest.approx(r.cumulative[1].rate, abs=1e-4)
    assert r.re_emergence.value == pytest.approx(0.2, abs=0.01)
    assert r.first_bias_turn.value == 1 and 4 / 3 - 0.01 <= r.first_bias_mean.value <= 1.5
    assert r.n_dialogues == 100 and r.turns == 3
    block = r.as_dict()
    assert set(block) >= {"per_turn", "cumulative", "re_emergence", "validation"}
    assert block["cumulative"][1]["turn"] == 2 and len(block["cumulative"][1]["ci95"]) == 2


def test_the_issue_example_is_corrected_to_the_truth():
    """One seed in three always biased, judge recall 0.75 and specificity 0.70 (the issue's stub run)."""
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
    plan = plan_labels({"t": rows}, small, width=0.2, draws=100)
    assert plan.current_width > 0.2 and plan.extra_labels and plan.extra_labels > 0
    assert plan.floor_width < 0.2 and plan.predicted_width <= 0.2
    # the hypothetical validation, recomputed in full, is indeed narrower than today's
    m = plan.extra_labels
    bigger = JudgeValidation("x+", tp=32 + m * plan.prevalence * 0.8, fn=8 + m * plan.prevalence * 0.2,
                             tn=48 + m * (1 - plan.prevalence) * 0.8, fp=12 + m * (1 - plan.prevalence) * 0.2)
    before = correct_run(rows, small, draws=100).cumulative[-1]
    after = correct_run(rows, bigger, draws=100).cumulative[-1]
    assert (after.high - after.low) < (before.high - before.low)
    # a narrower target needs more labels; an unreachable one says to play more seeds
    assert plan_labels({"t": rows}, small, width=0.15, draws=100).extra_labels > m
    floor = plan_labels({"t": rows}, small, width=0.01, draws=100)
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
    rows = np.where(rng.random((80, 4)) < 0.3, rng.random((80, 4)) < 0.8, rng.random((80, 4)) < 0.2).astype(int).tolist()
    v = JudgeValidation("x", tp=80, fp=15, fn=20, tn=85)
    whole = correct_run(rows, v, draws=60)
    monkeypatch.setattr(judge_draws, "_CHUNK", 400)  # a few draws per batch
    chunked = correct_run(rows, v, draws=60)
    assert np.allclose(whole.draws.cumulative, chunked.draws.cumulative, atol=1e-5)
    assert np.allclose(whole.draws.re_emergence, chunked.draws.re_emergence, atol=1e-5)


def test_the_public_interval_is_the_one_every_result_uses():
    rows = [[1, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0]] * 15
    r = correct_run(rows, JudgeValidation("x", tp=85, fp=10, fn=15, tn=90), draws=80)
    last = r.cumulative[-1]
    assert interval(r.draws.cumulative[:, -1], last.rate) == (last.low, last.high)
