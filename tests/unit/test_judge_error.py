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

import evals.judge_error as je
from evals.judge_error import (
    CorrectionRefused,
    JudgeValidation,
    correct_run,
    corrected_difference,
    plan_labels,
    refusal_line,
)

TURNS = 4
DIALOGUES = 120
SETS = 200
DRAWS = 100
import os
CLASSES = int(os.environ.get("CLS", "2"))


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
    theta, reach = je._fit(y, length, counts, point[:, 0], point[:, 1])
    at_point = je._metrics_with(y, length, counts, theta, reach, *je._emissions(y, point[:, 0], point[:, 1]))
    weights = rng.poisson(np.repeat(counts, DRAWS, axis=0)).astype(float)
    s, p = np.concatenate(sens_draws), np.concatenate(spec_draws)
    fitted, reach = je._fit(y, length, weights, s, p, start=np.repeat(theta, DRAWS, axis=0))
    drawn = je._metrics_with(y, length, weights, fitted, reach, *je._emissions(y, s, p))
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
                lo, hi = je._interval(values, pt)
                out[name][t] += lo is not None and lo <= truth <= hi
    return {name: hits / SETS for name, hits in out.items()}


@pytest.mark.parametrize(("pattern", "sens", "spec"), [("persists", 0.75, 0.70), ("fades", 0.85, 0.90)])
def test_corrected_intervals_cover_the_truth_and_raw_ones_do_not(pattern, sens, spec):
    cov = _coverage(pattern, sens, spec, seed=11)
    print(pattern, {k: v.round(3).tolist() for k, v in cov.items()})
    assert cov["per_turn"].min() >= 0.9, cov
    assert cov["cumulative"].min() >= 0.9, cov
    # the judge's false positives pile up over turns: raw cumulative intervals miss the truth
    assert cov["raw_cumulative"][1:].max() <= 0.5, cov
