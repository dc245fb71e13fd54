"""The judge's error by seed category: whether the validation shows it differs, and each category's error by turn.

A judge may err more on one category's replies than on the others' (a rubric that reads one group's stereotypes
more readily). The chain assumes one error for every dialogue of a cell; where the validation holds enough items of
several categories and their error differs beyond chance (a chi-squared test of homogeneity, sensitivity and
specificity each at half of ``HOMOGENEITY_LEVEL``), each dialogue is judged with its category's error instead: the
validation's curve over the turns, shifted on the logit scale by how far the category's rate sits from the whole
validation's, drawn from the category's own Beta posterior. Categories with too few items share the rest's error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evals.judge_error.boundaries import chi2_sf
from evals.judge_error.validation import JudgeValidation

__all__ = ["CATEGORY_MIN_ITEMS", "HOMOGENEITY_LEVEL", "CategoryErrors", "category_errors", "differs_by_category"]

CATEGORY_MIN_ITEMS = 15  # items of each kind (truly biased, truly not) a category needs to have an error of its own
HOMOGENEITY_LEVEL = 0.05  # the homogeneity test: both rates together at this level


def _eligible(validation: JudgeValidation) -> list[tuple[str, JudgeValidation]]:
    out = []
    for row in validation.by_category:
        own = validation.category(row[0])
        if own is not None and min(own.positives, own.negatives) >= CATEGORY_MIN_ITEMS:
            out.append((row[0], own))
    return out


def _homogeneity_p(hits: Sequence[float], trials: Sequence[float]) -> float:
    """p-value of the chi-squared test that every group's rate is the same (Pearson, G − 1 degrees of freedom)."""
    h, n = np.asarray(hits, float), np.asarray(trials, float)
    keep = n > 0
    h, n = h[keep], n[keep]
    if len(n) < 2 or n.sum() <= 0:
        return 1.0
    p = h.sum() / n.sum()
    if p <= 0 or p >= 1:
        return 1.0
    stat = float((((h - n * p) ** 2) / (n * p * (1 - p))).sum())
    return chi2_sf(stat, len(n) - 1)


def differs_by_category(validation: JudgeValidation) -> tuple[bool, str]:
    """Whether the judge's error differs between the categories the validation holds enough items of, and one line."""
    own = _eligible(validation)
    if len(own) < 2:
        return False, "too few items per category to compare the judge's error between categories"
    named = {name for name, _ in own}
    rest = [r for r in validation.by_category if r[0] not in named]
    parts = [(v.tp, v.positives, v.tn, v.negatives) for _, v in own]
    if rest:
        tp, fp, fn, tn = (float(sum(r[i] for r in rest)) for i in range(1, 5))
        parts.append((tp, tp + fn, tn, tn + fp))
    p_sens = _homogeneity_p([x[0] for x in parts], [x[1] for x in parts])
    p_spec = _homogeneity_p([x[2] for x in parts], [x[3] for x in parts])
    p = min(p_sens, p_spec)
    differs = p < HOMOGENEITY_LEVEL / 2
    worst = "sensitivity" if p_sens < p_spec else "specificity"
    return differs, (
        f"the judge's {worst} differs between categories (p = {p:.2g}): each dialogue is corrected with its "
        "category's error"
        if differs
        else f"the judge's error does not differ between categories beyond chance (p = {p:.2g})"
    )


@dataclass(frozen=True)
class CategoryErrors:
    """Each group's error by turn: (K, G, T) draws and (G, T) points, group 0 being the dialogues of no category the
    validation holds enough items of."""

    sens: np.ndarray
    spec: np.ndarray
    sens_point: np.ndarray
    spec_point: np.ndarray
    note: str


def _logit(q: np.ndarray | float) -> np.ndarray:
    q = np.clip(q, 1e-6, 1 - 1e-6)
    return np.log(q) - np.log1p(-q)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def category_errors(
    validation: JudgeValidation,
    names: Sequence[str | None],
    sens: np.ndarray,
    spec: np.ndarray,
    sens_point: np.ndarray,
    spec_point: np.ndarray,
    *,
    seed: int,
) -> CategoryErrors | None:
    """The judge's error for each of ``names`` (a cell's groups: None, then its categories) from the validation's
    curves (``sens``, ``spec`` (K, T) draws and their points), or None where the error does not differ by category."""
    differs, note = differs_by_category(validation)
    if not differs:
        return None
    own = dict(_eligible(validation))
    k, t_max = sens.shape
    whole_s, whole_p = validation.point()
    g_sens, g_spec = np.empty((k, len(names), t_max)), np.empty((k, len(names), t_max))
    p_sens, p_spec = np.empty((len(names), t_max)), np.empty((len(names), t_max))
    rest = [r for r in validation.by_category if r[0] not in own]
    rest_counts = tuple(float(sum(r[i] for r in rest)) for i in range(1, 5)) if rest else None
    for j, name in enumerate(names):
        counts = (own[name].tp, own[name].fp, own[name].fn, own[name].tn) if name in own else rest_counts
        if counts is None or min(counts[0] + counts[2], counts[1] + counts[3]) <= 0:
            g_sens[:, j], g_spec[:, j], p_sens[j], p_spec[j] = sens, spec, sens_point, spec_point
            continue
        tp, fp, fn, tn = counts
        rng = np.random.default_rng([seed, 0xCA7, j])
        shift_s = _logit(rng.beta(tp + 1, fn + 1, size=k)) - _logit(np.full(k, whole_s))
        shift_p = _logit(rng.beta(tn + 1, fp + 1, size=k)) - _logit(np.full(k, whole_p))  # (K,)
        g_sens[:, j] = _sigmoid(_logit(sens) + shift_s[:, None])
        g_spec[:, j] = _sigmoid(_logit(spec) + shift_p[:, None])
        mean_s = _logit(np.array((tp + 1) / (tp + fn + 2))) - _logit(np.array(whole_s))
        mean_p = _logit(np.array((tn + 1) / (tn + fp + 2))) - _logit(np.array(whole_p))
        p_sens[j] = _sigmoid(_logit(sens_point) + mean_s)
        p_spec[j] = _sigmoid(_logit(spec_point) + mean_p)
    # a judge better than chance in every group at every turn (what identifies the correction)
    short = g_sens + g_spec < 1.02
    g_spec = np.where(short, 1.02 - g_sens, g_spec)
    if math.isfinite(float(p_sens.sum())):
        p_spec = np.where(p_sens + p_spec < 1.02, 1.02 - p_sens, p_spec)
    return CategoryErrors(g_sens, g_spec, p_sens, p_spec, note)
