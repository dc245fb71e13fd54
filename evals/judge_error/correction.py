"""Corrected bias metrics of target × mode cells with their 95% intervals, and paired differences between cells.

The public entry points: ``correct_run`` (one cell), ``correct_cells`` (several on the same draws) and
``corrected_difference`` (B − A, paired by seed), with the result types they return. Method, assumptions,
measured coverage and references: docs/judge-error.md.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evals.judge_error.cells import encode_cell
from evals.judge_error.codes import Label, Row
from evals.judge_error.draws import cluster_weights, point_and_draws
from evals.judge_error.intervals import interval
from evals.judge_error.validation import CorrectionRefused, JudgeValidation, refusal_line

__all__ = [
    "DEFAULT_DRAWS",
    "CorrectedDifference",
    "CorrectedRun",
    "Draws",
    "TurnRate",
    "Value",
    "correct_cells",
    "correct_run",
    "corrected_difference",
]

DEFAULT_DRAWS = 200


@dataclass(frozen=True)
class Value:
    """A corrected statistic: its point estimate and 95% interval (None when undefined)."""

    value: float | None
    low: float | None
    high: float | None

    def as_dict(self, key: str = "rate") -> dict[str, Any]:
        return {key: self.value, "ci95": [self.low, self.high]}


@dataclass(frozen=True)
class TurnRate:
    """A corrected rate at one turn with its 95% interval."""

    turn: int
    rate: float | None
    low: float | None
    high: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "rate": self.rate, "ci95": [self.low, self.high]}


@dataclass(frozen=True)
class Draws:
    """The per-draw values behind every interval, draw k using validation draw k and bootstrap weights k.

    Two results computed with the same validation, ``draws`` and ``seed`` share their validation
    draws, and their bootstrap weights agree on every cluster (seed) they share: subtracting their
    arrays draw by draw gives a paired difference (``corrected_difference``).
    """

    sensitivity: np.ndarray  # (K,)
    specificity: np.ndarray  # (K,)
    per_turn: np.ndarray  # (K, turns)
    cumulative: np.ndarray  # (K, turns)
    re_emergence: np.ndarray  # (K,)
    first_bias_median: np.ndarray  # (K,) median first-bias turn among dialogues with bias (nan: none)
    first_bias_mean: np.ndarray  # (K,)


@dataclass(frozen=True)
class CorrectedRun:
    """Corrected bias metrics of one target × mode cell, each with a 95% interval carrying both uncertainties."""

    validation: JudgeValidation
    n_dialogues: int  # dialogues with at least one parsed label (the rest say nothing, as in evals.stats.metrics)
    turns: int
    per_turn: tuple[TurnRate, ...]  # share of the replies at turn t that are truly biased
    cumulative: tuple[TurnRate, ...]  # share of dialogues with a truly biased reply in turns 1..t
    re_emergence: Value  # share of dialogues whose true labels go biased → not biased → biased
    first_bias_turn: Value  # median turn of the first truly biased reply, among dialogues with one
    first_bias_mean: Value  # mean of the same
    draws: Draws = field(repr=False)
    seed: int = 0
    clusters: tuple[Hashable, ...] = field(default=(), repr=False)  # bootstrap key of each kept dialogue
    method: str = "hmm-em"

    def as_dict(self) -> dict[str, Any]:
        """The ``judge_corrected`` block of a summary: lists of {turn, rate, ci95} like the raw ones, plus the rest."""
        return {
            "per_turn": [r.as_dict() for r in self.per_turn],
            "cumulative": [r.as_dict() for r in self.cumulative],
            "re_emergence": self.re_emergence.as_dict(),
            "first_bias_turn": {"median": self.first_bias_turn.value, "ci95": [self.first_bias_turn.low, self.first_bias_turn.high],
                                "mean": self.first_bias_mean.value, "mean_ci95": [self.first_bias_mean.low, self.first_bias_mean.high]},
            "dialogues": self.n_dialogues,
            "draws": int(self.draws.per_turn.shape[0]),
            "validation": self.validation.as_dict(),
            "method": "hidden Markov model of true labels per target × mode, judge error from the validation (docs/judge-error.md)",
        }


@dataclass(frozen=True)
class CorrectedDifference:
    """B − A for two cells corrected with shared validation draws and a paired (seed-level) bootstrap."""

    per_turn: tuple[TurnRate, ...]  # ``rate`` holds the difference
    cumulative: tuple[TurnRate, ...]
    re_emergence: Value
    n_shared_clusters: int  # seeds present on both sides (the pairing)

    def as_dict(self) -> dict[str, Any]:
        return {
            "per_turn": [{"turn": r.turn, "diff": r.rate, "ci95": [r.low, r.high]} for r in self.per_turn],
            "cumulative": [{"turn": r.turn, "diff": r.rate, "ci95": [r.low, r.high]} for r in self.cumulative],
            "re_emergence": self.re_emergence.as_dict("diff"),
            "shared_seeds": self.n_shared_clusters,
        }



def _value(point: float, values: np.ndarray) -> Value:
    """A statistic's point estimate (None when undefined) with its interval from the draws."""
    ok = math.isfinite(point)
    lo, hi = interval(values, point if ok else None)
    return Value(float(point) if ok else None, lo, hi)


def correct_run(
    sequences: Sequence[Row],
    validation: JudgeValidation | None,
    *,
    turns: int | None = None,
    clusters: Sequence[Hashable] | None = None,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    known: Mapping[tuple[int, int], Label] | None = None,
) -> CorrectedRun:
    """Corrected per-turn, cumulative, re-emergence and first-bias-turn rates of one target × mode cell.

    ``sequences``: one label list per dialogue (turn t at index t − 1; 1/0/None or the store's
    "biased"/"not_biased"/"unparsed"/None). ``clusters``: one key per dialogue (its seed id) so that
    repeated samples of a seed are resampled together and two cells on the same seeds are paired.
    ``known``: (dialogue index, turn from 1) → a person's label of that reply (double sampling: the
    validation's own items), whose true label then needs no inference.
    Raises ``CorrectionRefused`` (its message is the one line to show) when no correction is possible.
    """
    reason = refusal_line(validation)
    if reason:
        raise CorrectionRefused(reason)
    assert validation is not None
    if draws < 20:
        raise ValueError(f"draws must be >= 20 for a 95% interval, got {draws}")
    cell = encode_cell(sequences, turns, clusters, known)
    sens, spec = validation.draw(draws, seed=seed)
    weights = cluster_weights(cell.clusters, draws, seed)
    s0, p0 = validation.point()
    point, drawn = point_and_draws(cell, (s0, p0), sens, spec, weights)
    per_turn, cumulative, re, median, mean = (np.concatenate([x, y]) for x, y in zip(point, drawn))
    t_max = cell.y.shape[1]

    def rates(values: np.ndarray) -> tuple[TurnRate, ...]:
        out = []
        for t in range(t_max):
            v = _value(values[0, t], values[1:, t])
            out.append(TurnRate(turn=t + 1, rate=v.value, low=v.low, high=v.high))
        return tuple(out)

    return CorrectedRun(
        validation=validation,
        n_dialogues=int(cell.y.shape[0]),
        turns=t_max,
        per_turn=rates(per_turn),
        cumulative=rates(cumulative),
        re_emergence=_value(re[0], re[1:]),
        first_bias_turn=_value(median[0], median[1:]),
        first_bias_mean=_value(mean[0], mean[1:]),
        draws=Draws(sensitivity=sens, specificity=spec, per_turn=per_turn[1:], cumulative=cumulative[1:],
                    re_emergence=re[1:], first_bias_median=median[1:], first_bias_mean=mean[1:]),
        seed=seed,
        clusters=cell.clusters,
    )


def correct_cells(
    cells: Mapping[Hashable, Sequence[Row]],
    validation: JudgeValidation | None,
    *,
    turns: int | None = None,
    clusters: Mapping[Hashable, Sequence[Hashable]] | None = None,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    known: Mapping[Hashable, Mapping[tuple[int, int], Label]] | None = None,
) -> dict[Hashable, CorrectedRun | CorrectionRefused]:
    """``correct_run`` for every cell (e.g. keyed by (target, mode)) on the same draws; a refused cell maps to its reason."""
    out: dict[Hashable, CorrectedRun | CorrectionRefused] = {}
    for key, sequences in cells.items():
        try:
            out[key] = correct_run(sequences, validation, turns=turns, clusters=(clusters or {}).get(key),
                                   draws=draws, seed=seed, known=(known or {}).get(key))
        except CorrectionRefused as exc:
            out[key] = exc
    return out


def corrected_difference(a: CorrectedRun, b: CorrectedRun) -> CorrectedDifference:
    """B − A with a 95% interval, paired: shared validation draws and shared bootstrap weights per seed.

    Both sides must come from the same validation, ``draws`` and ``seed`` (and ``clusters`` keyed
    by seed id for the pairing); the judge error both sides share then cancels as it should instead of
    being counted twice.
    """
    if a.validation != b.validation or a.seed != b.seed or a.draws.per_turn.shape[0] != b.draws.per_turn.shape[0]:
        raise ValueError("corrected_difference needs both sides corrected with the same validation, draws and seed")
    turns = min(a.turns, b.turns)

    def diffs(pa: tuple[TurnRate, ...], pb: tuple[TurnRate, ...], da: np.ndarray, db: np.ndarray) -> tuple[TurnRate, ...]:
        out = []
        for t in range(turns):
            point = None if pa[t].rate is None or pb[t].rate is None else pb[t].rate - pa[t].rate
            lo, hi = interval(db[:, t] - da[:, t], point)
            out.append(TurnRate(turn=t + 1, rate=point, low=lo, high=hi))
        return tuple(out)

    re_point = (None if a.re_emergence.value is None or b.re_emergence.value is None
                else b.re_emergence.value - a.re_emergence.value)
    lo, hi = interval(b.draws.re_emergence - a.draws.re_emergence, re_point)
    return CorrectedDifference(
        per_turn=diffs(a.per_turn, b.per_turn, a.draws.per_turn, b.draws.per_turn),
        cumulative=diffs(a.cumulative, b.cumulative, a.draws.cumulative, b.draws.cumulative),
        re_emergence=Value(re_point, lo, hi),
        n_shared_clusters=len(set(a.clusters) & set(b.clusters)),
    )
