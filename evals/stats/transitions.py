"""How bias moves between turns, from the judge's labels: onset, the clean-so-far curve, persistence, recovery, relapse.

Per-turn and cumulative bias are states; these are the moves between them, each a probability at turn t:

- ``onset``: P(first biased at t | clean through t − 1), the hazard of a first biased reply (turn 1: the share
  biased at turn 1);
- ``survival``: P(clean through t), the share of dialogues without a biased reply in turns 1..t (1 − cumulative
  bias, with cumulative bias's denominator);
- ``persistence``: P(biased at t | biased at t − 1), from turn 2;
- ``recovery``: P(not biased at t | biased at t − 1) = 1 − persistence, from turn 2;
- ``relapse``: P(biased at t | not biased at t − 1, biased before t − 1), from turn 3.

A conditional probability needs its condition observed: a dialogue enters a turn's base only when the labels it
conditions on and the label at t are parsed (unparsed and missing labels are never guessed; the judge-corrected
ones, ``evals.judge_error.transitions``, infer them). Where a base holds fewer than ``MIN_BASE`` dialogues the
rate is withheld ("too few dialogues"): a probability over a handful says nothing. Intervals: 95% percentile
bootstrap of whole seeds (clusters), the same Poisson weights per seed as the corrected numbers use, so two cells
on the same seeds give a paired difference (``transition_difference``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from checkpoints.vocabulary import BIASED, NOT_BIASED
from evals.metric_registry import METRIC, TRANSITION_METRICS
from evals.metric_registry import TRANSITION_METRICS as METRICS  # the name earlier callers import from here

__all__ = [
    "FIRST_TURN",
    "METRICS",
    "MIN_BASE",
    "TOO_FEW",
    "TransitionRate",
    "Transitions",
    "label_codes",
    "percentile_interval",
    "raw_transitions",
    "transition_difference",
]

FIRST_TURN = {m: METRIC[m].first_turn for m in TRANSITION_METRICS}  # where each is defined
MIN_BASE = 20  # dialogues (expected ones, corrected) a probability's base must hold for its number to be shown
TOO_FEW = "too few dialogues"
DEFAULT_BOOT = 1000


@dataclass(frozen=True)
class TransitionRate:
    """One transition probability at one turn: its rate and 95% interval (None where its base is too small).

    ``base``: the dialogues in its denominator (raw: a count; corrected: an expected count under the judge's error).
    For a difference, ``base`` is the smaller side's.
    """

    metric: str
    turn: int
    rate: float | None
    low: float | None
    high: float | None
    base: float
    too_few: bool

    def as_dict(self, key: str = "rate") -> dict[str, Any]:
        out: dict[str, Any] = {"turn": self.turn, key: self.rate, "ci95": [self.low, self.high]}
        out["base"] = round(float(self.base), 2)
        if self.too_few:
            out["too_few"] = TOO_FEW
        return out


@dataclass(frozen=True)
class Transitions:
    """Every transition metric of one cell by turn (``kind`` "raw", "corrected" or "difference")."""

    kind: str
    onset: tuple[TransitionRate, ...]
    survival: tuple[TransitionRate, ...]
    persistence: tuple[TransitionRate, ...]
    recovery: tuple[TransitionRate, ...]
    relapse: tuple[TransitionRate, ...]
    min_base: int = MIN_BASE
    unreliable: tuple[tuple[str, str], ...] = ()  # (metric, the one line why) where the simulation suite fails

    @classmethod
    def of(
        cls,
        kind: str,
        series: dict[str, tuple[TransitionRate, ...]],
        min_base: int,
        unreliable: tuple[tuple[str, str], ...] = (),
    ) -> Transitions:
        return cls(
            kind,
            onset=series["onset"],
            survival=series["survival"],
            persistence=series["persistence"],
            recovery=series["recovery"],
            relapse=series["relapse"],
            min_base=min_base,
            unreliable=unreliable,
        )

    def series(self, metric: str) -> tuple[TransitionRate, ...]:
        return tuple(getattr(self, metric))

    def rows(self) -> list[TransitionRate]:
        """Every rate, metric by metric, turn by turn (a DataFrame's rows)."""
        return [r for m in TRANSITION_METRICS for r in self.series(m)]

    def as_dict(self) -> dict[str, Any]:
        key = "diff" if self.kind == "difference" else "rate"
        return {
            **{m: [r.as_dict(key) for r in self.series(m)] for m in TRANSITION_METRICS},
            "min_base": self.min_base,
            "kind": self.kind,
            "unreliable": dict(self.unreliable),
        }


def label_codes(rows: Sequence[Sequence[str | None]], turns: int) -> np.ndarray:
    """(N, turns) int8: 1 biased, 0 not biased, −1 unparsed, missing or past the dialogue's end."""
    out = np.full((len(rows), turns), -1, dtype=np.int8)
    for i, row in enumerate(rows):
        for t, label in enumerate(list(row)[:turns]):
            out[i, t] = 1 if label == BIASED else 0 if label == NOT_BIASED else -1
    return out


def indicators(codes: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per dialogue and turn, whether it counts in each metric's numerator and base: (N, T) bool pairs."""
    n, t_max = codes.shape
    seen, biased, clean = codes >= 0, codes == 1, codes == 0
    clean_so_far = np.cumprod(clean, axis=1).astype(bool)  # parsed and clean at every turn 1..t
    biased_by = np.cumsum(biased, axis=1) > 0
    seen_by = np.cumsum(seen, axis=1) > 0
    before = np.zeros((n, t_max), bool)  # the condition at turn t holds at turn t − 1 ...
    onset_base = seen.copy()
    onset_base[:, 1:] &= clean_so_far[:, :-1]
    persist_base, relapse_base = before.copy(), before.copy()
    persist_base[:, 1:] = biased[:, :-1] & seen[:, 1:]
    relapse_base[:, 2:] = clean[:, 1:-1] & biased_by[:, :-2] & seen[:, 2:]
    return {
        "onset": (onset_base & biased, onset_base),
        "survival": (seen_by & ~biased_by, seen_by),
        "persistence": (persist_base & biased, persist_base),
        "recovery": (persist_base & clean, persist_base),
        "relapse": (relapse_base & biased, relapse_base),
    }


def seed_weights(clusters: Sequence[Hashable], draws: int, seed: int) -> np.ndarray:
    """(draws, N) bootstrap weights shared with the corrected numbers (one Poisson stream per seed)."""
    from evals.judge_error.draws import cluster_weights  # the one home of seed-keyed weights

    return cluster_weights(clusters, draws, seed)


def percentile_interval(values: np.ndarray) -> tuple[float | None, float | None]:
    """95% percentile interval of the finite draws; (None, None) when fewer than half of them are finite."""
    finite = values[np.isfinite(values)]
    if len(finite) < max(10, len(values) // 2):
        return None, None
    lo, hi = np.percentile(finite, [2.5, 97.5])
    return float(lo), float(hi)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.full(np.broadcast(num, den).shape, np.nan), where=den > 0)


@dataclass(frozen=True)
class RawDraws:
    """Bootstrap draws of each raw metric's numerator and base, (draws, T) each, for paired differences."""

    num: dict[str, np.ndarray]
    den: dict[str, np.ndarray]


def raw_transitions(
    rows: Sequence[Sequence[str | None]],
    turns: int,
    *,
    clusters: Sequence[Hashable] | None = None,
    draws: int = DEFAULT_BOOT,
    seed: int = 0,
    min_base: int | None = None,
) -> tuple[Transitions, RawDraws]:
    """Every transition metric of one cell's label rows by turn, with its interval, and the draws behind them.

    ``clusters``: one key per dialogue (its seed id), resampled together; cells on the same seeds share weights.
    """
    min_base = MIN_BASE if min_base is None else min_base
    codes = label_codes(rows, turns)
    keys = list(clusters) if clusters is not None else list(range(len(rows)))
    if len(keys) != len(rows):
        raise ValueError(f"clusters ({len(keys)}) and rows ({len(rows)}) differ in length")
    w = seed_weights(keys, draws, seed)
    series: dict[str, tuple[TransitionRate, ...]] = {}
    nums, dens = {}, {}
    for metric, (num, den) in indicators(codes).items():
        point_num, point_den = num.sum(axis=0), den.sum(axis=0)
        nums[metric], dens[metric] = w @ num, w @ den
        drawn = _ratio(nums[metric], dens[metric])
        out = []
        for t in range(FIRST_TURN[metric] - 1, turns):
            base = float(point_den[t])
            if base < min_base:
                out.append(TransitionRate(metric, t + 1, None, None, None, base, True))
                continue
            lo, hi = percentile_interval(drawn[:, t])
            out.append(TransitionRate(metric, t + 1, float(point_num[t] / base), lo, hi, base, False))
        series[metric] = tuple(out)
    return Transitions.of("raw", series, min_base), RawDraws(nums, dens)


def transition_difference(
    a: Transitions,
    b: Transitions,
    da: dict[str, np.ndarray],
    db: dict[str, np.ndarray],
    interval=None,
) -> Transitions:
    """B − A at every turn both sides define, from draws that share their weights (a paired difference).

    ``da``, ``db``: each metric's rate draws (draws, T) of each side; ``interval`` (values, point) → (low, high)
    the interval rule (the percentile one without). Too few dialogues on either side: no number.
    """
    series: dict[str, tuple[TransitionRate, ...]] = {}
    for metric in TRANSITION_METRICS:
        by_turn = {r.turn: r for r in b.series(metric)}
        out = []
        for ra in a.series(metric):
            rb = by_turn.get(ra.turn)
            if rb is None:
                continue
            base = min(ra.base, rb.base)
            if ra.too_few or rb.too_few or ra.rate is None or rb.rate is None:
                out.append(TransitionRate(metric, ra.turn, None, None, None, base, True))
                continue
            values = db[metric][:, ra.turn - 1] - da[metric][:, ra.turn - 1]
            point = rb.rate - ra.rate
            lo, hi = percentile_interval(values) if interval is None else interval(values, point)
            out.append(TransitionRate(metric, ra.turn, point, lo, hi, base, False))
        series[metric] = tuple(out)
    flags = tuple(dict([*a.unreliable, *b.unreliable]).items())  # either side's flags hold for the difference
    return Transitions.of("difference", series, min(a.min_base, b.min_base), flags)


def raw_rate_draws(d: RawDraws) -> dict[str, np.ndarray]:
    """Each metric's rate in every bootstrap draw, (draws, T)."""
    return {m: _ratio(d.num[m], d.den[m]) for m in TRANSITION_METRICS}
