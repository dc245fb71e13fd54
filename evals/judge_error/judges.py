"""The judge's error as the correction uses it over a run's turns: each validation's curves and draws, the counts its
exact tests read at each turn, the positions its likelihood-ratio tests free, and each category's error where it
differs (``evals.judge_error.categories``); and the boundary tests of a stack of cells on those errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evals.judge_error.boundaries import ALPHA, boundary_tests, fisher_greater, joint_fit
from evals.judge_error.categories import CategoryErrors
from evals.judge_error.cells import Cell
from evals.judge_error.codes import KNOWN_BIASED, KNOWN_NOT
from evals.judge_error.drift import JudgeCurves, judge_curves, tested_counts
from evals.judge_error.transition_bounds import transition_tests
from evals.judge_error.validation import CorrectionRefused, JudgeValidation

__all__ = ["RunJudge", "exact_tests", "grouped_errors", "likelihood_tests", "run_judge"]


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
    logit = lambda q: np.log(q) - np.log1p(-q)  # noqa: E731
    offsets = np.stack([logit(curves.sensitivity) - logit(level[0]), logit(curves.specificity) - logit(level[1])])
    return RunJudge(
        curves,
        curves.sens_draws,
        curves.spec_draws,
        np.stack([curves.sensitivity, curves.specificity]),
        level,
        pooled,
        tested_counts(validation.by_turn, pooled, curves.check, turns),
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


# --------------------------------------------------------------------------- the boundary tests on these errors


def exact_tests(cell: Cell, counts: np.ndarray) -> tuple[list[bool], list[bool], list[bool]]:
    """Per turn: is per-turn bias 0 consistent, is it 1, is cumulative bias 0 by then (Fisher's exact tests).

    With no truly biased reply at a turn, the judge's positives there are false positives, as frequent as
    among the validation's unbiased items at that turn (``counts`` (T, 4): the validation's (tp, fp, fn, tn) as the
    judge errs at each turn); a person's label of a reply settles it outright.
    """
    y, t_max = cell.y, cell.y.shape[1]
    alive = np.arange(t_max)[None, :] < cell.length[:, None]
    pos, neg = ((y == 1) & alive).sum(axis=0), ((y == 0) & alive).sum(axis=0)
    known_b, known_n = ((y == KNOWN_BIASED) & alive).any(axis=0), ((y == KNOWN_NOT) & alive).any(axis=0)
    rounded = np.rint(counts).astype(int)
    tp, fp, fn, tn = (rounded[:t_max, i] for i in range(4))
    p_zero = [fisher_greater(int(pos[t]), int(pos[t] + neg[t]), int(fp[t]), int(fp[t] + tn[t])) for t in range(t_max)]
    zero, one, cum_zero = [], [], []
    for t in range(t_max):
        zero.append(not known_b[t] and p_zero[t] > ALPHA)
        one.append(
            not known_n[t] and fisher_greater(int(neg[t]), int(pos[t] + neg[t]), int(fn[t]), int(fn[t] + tp[t])) > ALPHA
        )
        # no bias in turns 1..t: the replies of all those turns pooled (diffuse bias), and the turn that departs
        # most (an abrupt onset), each at half the level, the turns Bonferroni-corrected; pooled against the
        # validation's false-positive share over those turns
        x, m = int(pos[: t + 1].sum()), int((pos[: t + 1] + neg[: t + 1]).sum())
        v_fp = int(round(float(np.mean(counts[: t + 1, 1]))))
        v_n = int(round(float(np.mean(counts[: t + 1, 1] + counts[: t + 1, 3]))))
        pooled = fisher_greater(x, m, v_fp, v_n) > ALPHA / 2
        cum_zero.append(not known_b[: t + 1].any() and pooled and min(p_zero[: t + 1]) > ALPHA / (2 * (t + 1)))
    return zero, one, cum_zero


def _tests(*args, **kwargs):
    """The cumulative windows' and re-emergence's tests, then the transition probabilities' bounds."""
    return (*boundary_tests(*args, **kwargs), transition_tests(*args, **kwargs))


def likelihood_tests(st, judges: Sequence[RunJudge], theta: np.ndarray, offsets: np.ndarray | None = None):
    """Flat cumulative windows, no re-emergence and the transitions' bounds (``evals.judge_error.transition_bounds``)
    for every stacked cell (likelihood-ratio tests); ``offsets``
    (S, 2, 1 + G, T): dialogues judged with their category's error (``_grouped_errors``)."""
    levels = np.array([j.level for j in judges])
    x0 = np.concatenate([theta, levels], axis=1)
    if offsets is not None:
        val = np.stack([j.val_by_turn for j in judges])
        x, loglik = joint_fit(st.y, st.length, st.counts, val, x0, offsets=offsets, groups=st.groups)
        return _tests(st.y, st.length, st.counts, val, x, loglik, offsets=offsets, groups=st.groups)
    if all(j.offsets is None for j in judges):
        val = np.array([j.pooled for j in judges], dtype=np.float64)
        x, loglik = joint_fit(st.y, st.length, st.counts, val, x0)
        return _tests(st.y, st.length, st.counts, val, x, loglik)
    # the judge's error free at each validated position, the run and the validation together
    j_max = max(len(j.position_counts) for j in judges)
    positions = np.stack([j.positions for j in judges])
    val = np.zeros((len(judges), j_max, 4))
    start = np.zeros((len(judges), 2 * j_max))
    for i, j in enumerate(judges):
        n = len(j.position_counts)
        val[i, :n] = j.position_counts
        start[i, :n], start[i, j_max : j_max + n] = j.position_point
        start[i, n:j_max], start[i, j_max + n :] = j.position_point[:, -1:]  # padding, never read
    x0 = np.concatenate([theta, start], axis=1)
    x, loglik = joint_fit(st.y, st.length, st.counts, val, x0, positions=positions)
    return _tests(st.y, st.length, st.counts, val, x, loglik, positions=positions)
