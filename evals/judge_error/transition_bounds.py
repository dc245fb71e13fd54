"""Whether the data allow a transition probability at one turn to be exactly 0 or 1: what extends its interval.

A corrected transition probability is a ratio of expected transitions under a fit constrained to (0, 1): its draws
pile up inside the range and, where the truth at a turn is exactly 0 or 1 (no recovered dialogue relapses at that
turn, every biased one stays biased), its interval need not reach it. So each bound has a test, at the 5% level, and
a bound the test does not reject is reached by the interval, as for per-turn and cumulative bias
(``evals.judge_error.boundaries``):

- onset hazard 0 at turn t ≥ 2: the likelihood-ratio test of a_t = 0 (the flat window from t − 1 to t, already
  run for cumulative bias); at turn 1 it is per-turn bias at turn 1 and takes that turn's exact tests;
- onset hazard 1, persistence 0 and 1 (recovery 1 and 0), relapse 0 and 1: the likelihood ratio of the chain with
  that turn's transitions held at the bound (a_t; b_t and p_t, out of B1 and B+; r_t), the judge's sensitivity and
  specificity estimated from the run and the validation together, referred to the chi-bar-squared law of the
  parameters held (Self & Liang 1987).

The tests use the chain's own maximum-likelihood fit, each turn's transitions free (no pooling over turns), so a
turn whose transition is 0 between turns where it is not is tested on its own.
"""

from __future__ import annotations

import numpy as np

from evals.judge_error.boundaries import chibar_critical, joint_fit

__all__ = ["BOUNDS", "bound_flags", "transition_tests"]

# the bounds tested by likelihood ratio: (metric, bound); recovery's are persistence's mirrored
BOUNDS = (("onset", 1.0), ("persistence", 0.0), ("persistence", 1.0), ("relapse", 0.0), ("relapse", 1.0))
_A, _B, _P, _R = range(4)  # the per-turn parameters in the packed chain (evals.judge_error.chain.unpack)


def _column(t_max: int, param: int, turn: int) -> int:
    """Column of a per-turn parameter (0-based ``turn`` ≥ 1) in the packed chain parameters."""
    return 1 + param * (t_max - 1) + turn - 1


def _tests(t_max: int) -> list[tuple[int, int, list[int], list[int], int]]:
    """Every test: (bound index, 0-based turn, columns held at 0, columns held at 1, parameters held)."""
    out = []
    for t in range(1, t_max):
        a, b, p, r = (_column(t_max, k, t) for k in (_A, _B, _P, _R))
        held = 1 if t == 1 else 2  # at turn 2 no dialogue is in B+ yet: only B1 → B+ is held
        out += [(0, t, [], [a], 1), (1, t, [b, p], [], held), (2, t, [], [b, p], held)]
        if t >= 2:
            out += [(3, t, [r], [], 1), (4, t, [], [r], 1)]
    return out


def transition_tests(y, length, weights, val, full_x, full_loglik, offsets=None, groups=None, positions=None):
    """Likelihood-ratio tests of every transition bound at every turn of every cell at once.

    The inputs are those of ``evals.judge_error.boundaries.boundary_tests`` (one row per cell, the joint fit
    ``full_x`` and its log-likelihood). Returns (S, len(BOUNDS), T) bool: kept[i, j, t], bound j at 0-based turn t
    is not rejected at 5%.
    """
    n_cells, t_max = y.shape[0], y.shape[-1]
    kept = np.zeros((n_cells, len(BOUNDS), t_max), bool)
    tests = _tests(t_max)
    if not tests:
        return kept
    n_par = 4 * t_max - 3
    zero = np.zeros((len(tests), n_par), bool)
    one = np.zeros((len(tests), n_par), bool)
    for i, (_, _, at_zero, at_one, _) in enumerate(tests):
        zero[i, at_zero] = True
        one[i, at_one] = True
    rows = np.repeat(np.arange(n_cells), len(tests))
    start = np.array(full_x[rows], dtype=np.float64)
    _, loglik = joint_fit(
        y[rows],
        length[rows],
        weights[rows],
        val[rows],
        start,
        zero=np.tile(zero, (n_cells, 1)),
        one=np.tile(one, (n_cells, 1)),
        offsets=None if offsets is None else offsets[rows],
        groups=None if groups is None else groups[rows],
        positions=None if positions is None else positions[rows],
    )
    stat = (2 * (full_loglik[rows] - loglik)).reshape(n_cells, len(tests))
    for i, (j, t, _, _, held) in enumerate(tests):
        kept[:, j, t] = stat[:, i] <= chibar_critical(held)
    return kept


def bound_flags(boundaries, kept) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per metric, (may be 0, may be 1) by 0-based turn: what each transition's interval must reach.

    ``boundaries``: the cell's ``Boundaries`` (per-turn bias's exact tests: turn 1's onset hazard is per-turn bias
    at turn 1; the cumulative windows' tests, flat[t − 1][t]: no onset at turn t), ``kept`` (len(BOUNDS), T) its
    ``transition_tests``.
    """
    per_turn_zero, per_turn_one, flat = boundaries.per_turn_zero, boundaries.per_turn_one, boundaries.flat
    t_max = len(per_turn_zero)
    kept = np.asarray(kept, bool)
    onset_zero = np.array([bool(per_turn_zero[0])] + [bool(flat[t - 1][t]) for t in range(1, t_max)])
    onset_one = kept[0].copy()
    onset_one[0] = bool(per_turn_one[0])
    return {
        "onset": (onset_zero, onset_one),
        "persistence": (kept[1], kept[2]),
        "recovery": (kept[2], kept[1]),
        "relapse": (kept[3], kept[4]),
    }
