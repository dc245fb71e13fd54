"""The judge's validation: its confusion counts against people, Beta posteriors, and when to refuse a correction.

Every corrected number rests on one ``JudgeValidation``; ``refusal_line`` is the one line shown instead of
corrected numbers when none can rest on it (no validation, no positives or negatives, a judge near chance).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evals.judge_error.codes import MISSING, code
from evals.judge_error.drift import DEFAULT_MODEL, DriftCheck, judge_curves
from evals.judge_error.intervals import LEVEL

__all__ = ["MIN_YOUDEN", "CorrectionRefused", "JudgeValidation", "refusal_line"]

MIN_YOUDEN = 0.1  # sensitivity + specificity − 1 at or below this: too close to chance to correct


class CorrectionRefused(ValueError):
    """No corrected number can be given; the message is the one-line reason shown instead."""


def _beta_quantiles(a: float, b: float, qs: Sequence[float]) -> list[float]:
    """Quantiles of Beta(a, b) by integrating its density on a fine grid (no scipy at run time)."""
    x = np.linspace(0.0, 1.0, 20001)[1:-1]
    log_pdf = (a - 1) * np.log(x) + (b - 1) * np.log1p(-x)
    pdf = np.exp(log_pdf - log_pdf.max())
    cdf = np.concatenate([[0.0], np.cumsum((pdf[1:] + pdf[:-1]) / 2)])
    cdf /= cdf[-1]
    return [float(np.interp(q, cdf, x)) for q in qs]


@dataclass(frozen=True)
class JudgeValidation:
    """The judge against people's labels on ``n`` items: its confusion counts and where they came from.

    ``source`` says which validation this is, e.g. ``"evals.judge:openai:gpt-4o-mini@3fa9c2e1b0d4"``
    (an external labelled set, keyed by judge spec and prompt hash) or ``"annotate:<run_id>"`` (double
    sampling: people labelled a random sample of the run's own turns). Biased is the positive class.
    Counts may be fractional only in hypothetical validations built by the planner and in the effective counts of a
    design-weighted validation (``evals.judge_error.active_design.design_validation``: a stratified draw's estimate as
    the counts of a simple random sample with the same mean and variance).
    """

    source: str
    tp: float
    fp: float
    fn: float
    tn: float
    # Where the items sit in their conversations: (turn, tp, fp, fn, tn) at each turn the items were at (a turn
    # may be fractional: the mean turn of a band of turns in a design-weighted validation). Empty: the items'
    # turns were not recorded, which validates turn 1 only (docs/judge-error.md: a judge whose error changes).
    by_turn: tuple[tuple[float, ...], ...] = ()
    # The same by the items' seed category, where recorded: (category, tp, fp, fn, tn).
    by_category: tuple[tuple[Any, ...], ...] = ()

    def __post_init__(self) -> None:
        for name in ("tp", "fp", "fn", "tn"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name} must be a count >= 0, got {value!r}")
        for row in self.by_turn:
            if len(row) != 5 or not row[0] >= 1 or any(not x >= 0 for x in row[1:]):
                raise ValueError(f"by_turn rows are (turn >= 1, tp, fp, fn, tn) with counts >= 0, got {row!r}")
        for row in self.by_category:
            if len(row) != 5 or not isinstance(row[0], str) or any(not x >= 0 for x in row[1:]):
                raise ValueError(f"by_category rows are (category, tp, fp, fn, tn) with counts >= 0, got {row!r}")

    @classmethod
    def from_pairs(
        cls,
        source: str,
        pairs: Sequence[tuple[Any, ...]],
    ) -> JudgeValidation:
        """Counts from (person's label, judge's label) pairs, or (person's, judge's, turn) triples, which also record
        where each item sat; pairs with an unparsed or missing side are skipped."""
        counts: dict[float, list[int]] = {}
        with_turns = False
        for item in pairs:
            truth, judged = item[0], item[1]
            turn = 1.0
            if len(item) > 2:
                with_turns = True
                turn = float(item[2])
                if not turn >= 1:
                    raise ValueError(f"an item's turn must be >= 1, got {item[2]!r}")
            t, j = code(truth), code(judged)
            if t == MISSING or j == MISSING:
                continue
            row = counts.setdefault(turn, [0, 0, 0, 0])
            row[0 if t and j else 1 if j else 2 if t else 3] += 1
        return cls.from_turn_counts(source, counts if with_turns else {}, total=counts.get(1.0))

    @classmethod
    def from_turn_counts(
        cls,
        source: str,
        by_turn: Mapping[float, Sequence[float]],
        *,
        total: Sequence[float] | None = None,
        by_category: Mapping[str, Sequence[float]] | None = None,
    ) -> JudgeValidation:
        """A validation from its counts (tp, fp, fn, tn) by turn (``total``: the counts of one without turns)."""
        rows = tuple((float(t), *map(float, c)) for t, c in sorted(by_turn.items()))
        sums = [sum(r[i] for r in rows) for i in range(1, 5)] if rows else list(total or (0, 0, 0, 0))
        cats = tuple((k, *map(float, c)) for k, c in sorted((by_category or {}).items()))
        tp, fp, fn, tn = (_integral(x) for x in sums)
        return cls(source, tp, fp, fn, tn, by_turn=rows, by_category=cats)

    @property
    def turns_recorded(self) -> bool:
        """Whether the items' turns are known (else the validation speaks for turn 1 only)."""
        return bool(self.by_turn)

    @property
    def turn_span(self) -> tuple[int, int]:
        """The first and last turn the validation holds items at (1, 1 when the turns were not recorded)."""
        held = [t for t, *c in self.by_turn if sum(c) > 0]
        if not held:
            return 1, 1
        return int(math.floor(min(held))), int(math.ceil(max(held)))

    def drift(self, turns: int, *, draws: int = 400, seed: int = 0, model: str = DEFAULT_MODEL) -> DriftCheck:
        """How much the judge's error changes from the first turn it holds items at to the last, over a run of
        ``turns`` turns (``evals.judge_error.drift``)."""
        pooled = (self.tp, self.fp, self.fn, self.tn)
        return judge_curves(self.by_turn, pooled, horizon=max(turns, 1), draws=draws, seed=seed, model=model).check

    def category(self, name: str) -> JudgeValidation | None:
        """The validation of one seed category's items (None when it holds none of them)."""
        row = next((r for r in self.by_category if r[0] == name), None)
        if row is None:
            return None
        tp, fp, fn, tn = (float(x) for x in row[1:])
        return JudgeValidation(f"{self.source}[{name}]", _integral(tp), _integral(fp), _integral(fn), _integral(tn))

    @property
    def n(self) -> float:
        """Items with both a person's and the judge's label."""
        return self.tp + self.fp + self.fn + self.tn

    @property
    def positives(self) -> float:
        return self.tp + self.fn

    @property
    def negatives(self) -> float:
        return self.tn + self.fp

    @property
    def sensitivity(self) -> float | None:
        """Share of truly biased items the judge called biased (recall); None without positives."""
        return self.tp / self.positives if self.positives else None

    @property
    def specificity(self) -> float | None:
        """Share of truly unbiased items the judge called not biased; None without negatives."""
        return self.tn / self.negatives if self.negatives else None

    @property
    def youden(self) -> float | None:
        """Sensitivity + specificity − 1: 0 is a coin toss, 1 a perfect judge."""
        if self.sensitivity is None or self.specificity is None:
            return None
        return self.sensitivity + self.specificity - 1

    def sensitivity_ci(self, level: float = LEVEL) -> tuple[float, float]:
        """Equal-tailed interval of the Beta(tp + 1, fn + 1) posterior (uniform prior)."""
        lo, hi = _beta_quantiles(self.tp + 1, self.fn + 1, [(1 - level) / 2, (1 + level) / 2])
        return lo, hi

    def specificity_ci(self, level: float = LEVEL) -> tuple[float, float]:
        """Equal-tailed interval of the Beta(tn + 1, fp + 1) posterior (uniform prior)."""
        lo, hi = _beta_quantiles(self.tn + 1, self.fp + 1, [(1 - level) / 2, (1 + level) / 2])
        return lo, hi

    def refusal(self) -> str | None:
        """Why no corrected number can rest on this validation (one line), or None when it can."""
        if not self.positives:
            return (
                f"no corrected rates: the validation {self.source} holds no truly biased items, so the judge's "
                "sensitivity is unknown; validate on items that include biased replies"
            )
        if not self.negatives:
            return (
                f"no corrected rates: the validation {self.source} holds no truly unbiased items, so the judge's "
                "specificity is unknown; validate on items that include unbiased replies"
            )
        j = self.youden
        assert j is not None
        if j <= MIN_YOUDEN + 1e-9:  # "at or below", with room for float rounding (0.55 + 0.55 − 1 > 0.1)
            return (
                f"no corrected rates: the judge is barely better than chance on {self.source} "
                f"(sensitivity {self.sensitivity:.2f} + specificity {self.specificity:.2f} − 1 = {j:.2f} ≤ "
                f"{MIN_YOUDEN}); "
                "its labels carry too little signal to correct: use a stronger judge"
            )
        return None

    def draw(self, n: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``n`` posterior draws of (sensitivity, specificity): Beta posteriors, uniform priors, restricted to J > 0.

        The restriction (a judge better than chance) is what makes the correction identifiable; the
        refusal rule already rejects validations whose point estimate is near it.
        """
        rng = np.random.default_rng([seed, 0x5E57])
        sens = np.empty(0)
        spec = np.empty(0)
        for _ in range(100):
            s = rng.beta(self.tp + 1, self.fn + 1, size=2 * n + 16)
            p = rng.beta(self.tn + 1, self.fp + 1, size=2 * n + 16)
            keep = s + p > 1.0 + 1e-3
            sens, spec = np.concatenate([sens, s[keep]]), np.concatenate([spec, p[keep]])
            if len(sens) >= n:
                return sens[:n], spec[:n]
        raise CorrectionRefused(
            f"no corrected rates: the validation {self.source} does not show the judge better than chance"
        )

    def point(self) -> tuple[float, float]:
        """Posterior means of (sensitivity, specificity): the point estimate the corrected rates use."""
        return (self.tp + 1) / (self.positives + 2), (self.tn + 1) / (self.negatives + 2)

    def as_dict(self) -> dict[str, Any]:
        """What every corrected number cites: source, size, counts, sensitivity and specificity with 95% intervals.

        Each ``value`` is the Beta posterior's mean, the point the correction uses, and ``ci95`` the same
        posterior's equal-tailed interval, so the value always lies inside its interval; ``observed`` is the
        plain share (tp / (tp + fn), tn / (tn + fp)).
        """
        s, p = self.point()
        return {
            "source": self.source,
            "n": _number(self.n),
            "tp": _number(self.tp),
            "fp": _number(self.fp),
            "fn": _number(self.fn),
            "tn": _number(self.tn),
            "sensitivity": {"value": s, "ci95": list(self.sensitivity_ci()), "observed": self.sensitivity},
            "specificity": {"value": p, "ci95": list(self.specificity_ci()), "observed": self.specificity},
            "turns": [
                {"turn": _number(t), "tp": _number(a), "fp": _number(b), "fn": _number(c), "tn": _number(d)}
                for t, a, b, c, d in self.by_turn
            ]
            or None,
        }

    def describe(self) -> str:
        """One line: which validation, its size, sensitivity and specificity (posterior means) with 95% intervals."""
        s, p = self.point()
        (slo, shi), (plo, phi) = self.sensitivity_ci(), self.specificity_ci()
        return (
            f"validation {self.source} (n={_number(self.n)}): sensitivity {s:.2f} [{slo:.2f}, {shi:.2f}] "
            f"({_number(self.tp)}/{_number(self.positives)} biased items found), specificity {p:.2f} [{plo:.2f}, "
            f"{phi:.2f}] "
            f"({_number(self.tn)}/{_number(self.negatives)} unbiased items passed)"
        )


def _integral(x: float) -> float:
    """A count as an int where it is whole (the counts people see), else as it is (effective counts)."""
    return int(x) if float(x).is_integer() else x


def refusal_line(validation: JudgeValidation | None) -> str | None:
    """The one line shown instead of corrected numbers (None when they can be computed)."""
    if validation is None:
        return (
            "no corrected rates: the judge is unvalidated, so these are raw judge labels; validate it on labelled "
            "pairs (python -m evals.judge) or on a labelled random sample of this run (python -m evals.annotate export "
            "--design random, then validate)"
        )
    return validation.refusal()


def _number(x: float) -> int | float:
    """A count as the summary shows it: whole counts as int (hypothetical validations have fractional ones)."""
    return int(x) if float(x).is_integer() else round(float(x), 2)
