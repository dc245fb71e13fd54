"""A side of a paired difference held on a bound jointly with the other: the shared judge's error its labels imply."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from evals.judge_error import transitions
from evals.judge_error.correction import TurnRate


def _run(spec, sens, judged, per_turn):
    """A corrected run as held_on_bound reads it: draws (K, T), the judge's labels by turn, per-turn rows."""
    k, t_max = spec.shape
    flags = (False,) * t_max
    return SimpleNamespace(
        draws=SimpleNamespace(specificity=spec, sensitivity=sens, per_turn=per_turn, cumulative=per_turn),
        boundaries=SimpleNamespace(
            judged=judged, per_turn_zero=(True,) * t_max, per_turn_one=flags, cumulative_zero=flags
        ),
        per_turn=tuple(TurnRate(t + 1, 0.0, 0.0, 0.3) for t in range(t_max)),
        cumulative=tuple(TurnRate(t + 1, 0.0, 0.0, 0.3) for t in range(t_max)),
    )


def test_a_side_held_on_0_moves_the_other_sides_draws_with_the_judge_error_its_labels_observe():
    """Held on 0, the side's 10 positives of 100 replies are false positives: an observation of the judge's
    false-positive rate (about 0.10, against the draws' 0.125). The other side's draws move with the specificity
    as their regression on it says, to the law given that observation: the normal update's mean and spread."""
    rng = np.random.default_rng(0)
    spec = rng.normal(0.875, 0.03, size=(400, 2))
    values = 0.3 + 2 * (spec[:, 1] - 0.875) + rng.normal(0, 0.01, size=400)
    run = _run(spec, np.full((400, 2), 0.8), ((50, 50), (10, 90)), np.zeros((400, 2)))
    moved = transitions._held_shift(run, [1], 0.0, values)
    z = 1 - spec[:, 1]
    observed, noise = 10.5 / 101, (10.5 / 101) * (1 - 10.5 / 101) / 100
    gain = z.var() / (z.var() + noise)
    slope = np.cov(z, values, bias=True)[0, 1] / z.var()
    assert moved.mean() == pytest.approx(values.mean() + slope * gain * (observed - z.mean()))
    assert np.std(moved) < np.std(values)  # the judge's part of the spread shrinks
    assert moved.mean() > values.mean() + 0.015  # fewer false positives than the draws expect: B is higher
    unrelated = rng.normal(0.3, 0.05, size=400)  # draws that do not move with the judge stay as they are
    assert np.abs(transitions._held_shift(run, [1], 0.0, unrelated) - unrelated).max() < 0.01
    # cumulative 0 by turn 2: both turns' positives pooled against the reply-weighted mean false-positive rate
    both = transitions._held_shift(run, [0, 1], 0.0, values)
    assert both is not None and both.shape == values.shape
    assert transitions._held_shift(_run(spec, spec, (), np.zeros((400, 2))), [0], 0.0, values) is None


def test_the_other_side_held_against_a_bound_shifts_with_what_the_held_labels_say_about_the_judge():
    """Each draw of B's rate is high where its specificity is high (fewer of B's positives are false); A holds 10
    positives of 100, so held on 0 it says the specificity is about 0.90, above the draws' middle: B − 0 sits above
    B's own interval's middle, and is narrower than B's own interval (0.13–0.47)."""
    rng = np.random.default_rng(1)
    spec = rng.uniform(0.80, 0.95, size=(400, 1))
    b_rate = 0.3 + 2 * (spec[:, :1] - 0.875) + rng.normal(0, 0.01, size=(400, 1))
    a = _run(spec, np.full((400, 1), 0.8), ((10, 90),), np.zeros((400, 1)))
    b = _run(spec, np.full((400, 1), 0.8), ((40, 60),), b_rate)
    b.boundaries.per_turn_zero = (False,)
    b.per_turn = (TurnRate(1, 0.3, 0.13, 0.47),)
    ((lo, hi),) = transitions.held_on_bound(a, b, 0, cumulative=False)
    assert 0.32 < (lo + hi) / 2 < 0.4 and hi - lo < 0.3
