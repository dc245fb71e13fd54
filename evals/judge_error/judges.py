"""The judge's error as the correction uses it over a run's turns: each validation's curves and draws, the counts its
exact tests read at each turn, the offsets its likelihood-ratio tests hold, and each category's error where it
differs (``evals.judge_error.categories``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evals.judge_error.categories import CategoryErrors
from evals.judge_error.drift import JudgeCurves, judge_curves
from evals.judge_error.validation import CorrectionRefused, JudgeValidation

__all__ = ["RunJudge", "grouped_errors", "run_judge"]


@dataclass(frozen=True)
class RunJudge:
    """One validation as the correction uses it over a run's ``turns``: curves, draws and the counts its tests use."""

    curves: JudgeCurves
    sens: np.ndarray  # (K, T) draws
    spec: np.ndarray
    point: np.ndarray  # (2, T): sensitivity and specificity at each turn
    level: tuple[float, float]  # the pooled point estimate
    pooled: tuple[float, float, float, float]
    counts: np.ndarray  # (T, 4): effective (tp, fp, fn, tn) of the judge's error at each turn, for the exact tests
    offsets: np.ndarray | None  # (2, T) logit offsets of the curves from the level; None for a constant judge
    val_by_turn: np.ndarray  # (T, 4): the validation's counts at each turn of the run
    positions: np.ndarray  # (T,): each turn's validated position (the nearest turn the validation holds items at)
    position_counts: np.ndarray  # (J, 4): the validation's (tp, fp, fn, tn) at each position
    position_point: np.ndarray  # (2, J): sensitivity and specificity at each position (the curves' points)


def _beta_counts(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per turn, (successes, failures) of the Beta posterior with the draws' mean and variance (uniform prior)."""
    m, v = draws.mean(axis=0), np.maximum(draws.var(axis=0), 1e-12)
    size = np.maximum(m * (1 - m) / v - 1, 2.0)
    return np.maximum(m * size - 1, 0.0), np.maximum((1 - m) * size - 1, 0.0)


def run_judge(validation: JudgeValidation, turns: int, draws: int, seed: int, model: str) -> RunJudge:
    pooled = (validation.tp, validation.fp, validation.fn, validation.tn)
    curves = judge_curves(validation.by_turn, pooled, horizon=turns, draws=draws, seed=seed, model=model)
    level = validation.point()
    constant = curves.check.sensitivity.drift_probability == 0 and curves.check.specificity.drift_probability == 0
    val_by_turn = np.zeros((turns, 4))
    for t, *c in validation.by_turn or ((1.0, *pooled),):
        val_by_turn[min(max(int(round(t)), 1), turns) - 1] += c
    positions, position_counts, position_point = _positions(validation, turns, curves)
    if constant:
        # one validated turn (or none recorded): the judge's error is the pooled one at every turn, drawn as it
        # always was, so such a validation corrects exactly as one without turns
        s, p = validation.draw(draws, seed=seed)
        return RunJudge(
            curves,
            np.repeat(s[:, None], turns, axis=1),
            np.repeat(p[:, None], turns, axis=1),
            np.repeat(np.array(level)[:, None], turns, axis=1),
            level,
            pooled,
            np.tile(np.array(pooled, dtype=np.float64), (turns, 1)),
            None,
            val_by_turn,
            np.zeros(turns, dtype=np.intp),
            np.array([pooled], dtype=np.float64),
            np.array(level, dtype=np.float64)[:, None],
        )
    if len(curves.sens_draws) < draws:
        raise CorrectionRefused(
            f"no corrected rates: the validation {validation.source} does not show the judge better than chance at "
            "every turn"
        )
    tp, fn = _beta_counts(curves.sens_draws)
    tn, fp = _beta_counts(curves.spec_draws)
    logit = lambda q: np.log(q) - np.log1p(-q)  # noqa: E731
    offsets = np.stack([logit(curves.sensitivity) - logit(level[0]), logit(curves.specificity) - logit(level[1])])
    return RunJudge(
        curves,
        curves.sens_draws,
        curves.spec_draws,
        np.stack([curves.sensitivity, curves.specificity]),
        level,
        pooled,
        np.stack([tp, fp, fn, tn], axis=1),
        offsets,
        val_by_turn,
        positions,
        position_counts,
        position_point,
    )


def _positions(validation: JudgeValidation, turns: int, curves: JudgeCurves):
    """Each turn's nearest validated position, the validation's counts there, and the curves' values there."""
    rows = [r for r in validation.by_turn if sum(r[1:]) > 0] or [
        (1.0, validation.tp, validation.fp, validation.fn, validation.tn)
    ]
    at = np.array([r[0] for r in rows])
    counts = np.array([r[1:] for r in rows], dtype=np.float64)
    nearest = np.abs(np.arange(1, turns + 1)[:, None] - at[None, :]).argmin(axis=1)
    index = np.clip(np.rint(at).astype(int), 1, turns) - 1
    point = np.stack([curves.sensitivity[index], curves.specificity[index]])
    return nearest.astype(np.intp), counts, point


def grouped_errors(judges: Sequence[RunJudge], by_category: Sequence[CategoryErrors | None], st):
    """Every cell's judge error by group and turn, (S, K, G, T) draws and (S, 2, G, T) points, and the joint fit's
    offsets (S, 2, 1 + G, T): a cell without groups repeats its error over them."""
    n_groups = max(len(names) for names in st.group_names)
    t_max = st.y.shape[-1]
    sens, spec, points, offsets = [], [], [], []
    logit = lambda q: np.log(q) - np.log1p(-q)  # noqa: E731
    for j, e in zip(judges, by_category):
        if e is None:
            gs = np.repeat(j.sens[:, None], n_groups, axis=1)
            gp = np.repeat(j.spec[:, None], n_groups, axis=1)
            pt = np.repeat(j.point[:, None], n_groups, axis=1)
        else:
            pad = n_groups - e.sens.shape[1]
            gs = np.concatenate([e.sens, np.repeat(e.sens[:, -1:], pad, axis=1)], axis=1)
            gp = np.concatenate([e.spec, np.repeat(e.spec[:, -1:], pad, axis=1)], axis=1)
            sp = np.concatenate([e.sens_point, np.repeat(e.sens_point[-1:], pad, axis=0)])
            pp = np.concatenate([e.spec_point, np.repeat(e.spec_point[-1:], pad, axis=0)])
            pt = np.stack([sp, pp])
        own = np.zeros((2, t_max)) if j.offsets is None else j.offsets
        level = np.array(j.level)[:, None, None]
        sens.append(gs)
        spec.append(gp)
        points.append(pt)
        offsets.append(np.concatenate([own[:, None], logit(pt) - logit(level)], axis=1))
    return np.stack(sens), np.stack(spec), np.stack(points), np.stack(offsets)
