"""Report tables: bias, refusal and coherence metrics of groups of dialogues (by model, mode, category).

A breakdown is a grouping of label matrices: ``group`` splits dialogues by key, and
each table function maps ``{key: matrix}`` to one row per key with seeded bootstrap
intervals (dialogue-level) for every rate. Everything is pure, so tests feed
hand-made matrices and check hand-worked numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import TypeVar

from evals.stats.metrics import (
    BIASED,
    NOT_BIASED,
    NOT_REFUSED,
    REFUSED,
    UNPARSED,
    Estimate,
    Matrix,
    Summary,
    estimate,
    first_bias_turn,
    headline,
    mean_score,
    re_emerges,
    refusal_rate,
    summarise,
)

K = TypeVar("K", bound=Hashable)
D = TypeVar("D")

NONE = Estimate(None, None, None)
REFUSAL_WINDOW = 5
DELTA_WINDOW = (5, 10)


def group(items: Iterable[D], key: Callable[[D], K]) -> dict[K, list[D]]:
    """Items by key, keys in sorted order (so tables and plots list groups the same way every time)."""
    groups: dict[K, list[D]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return {k: groups[k] for k in sorted(groups, key=lambda k: tuple(map(str, k)) if isinstance(k, tuple) else str(k))}


def width(matrix: Matrix) -> int:
    """Number of turns of the longest dialogue (at least 1, so an empty group still has a turn axis)."""
    return max([1, *(len(row) for row in matrix)])


# --------------------------------------------------------------------------- bias


@dataclass(frozen=True)
class BiasRow:
    """Headline bias metrics of one group of dialogues."""

    key: Hashable
    n_dialogues: int
    turns: int
    n_labelled: int  # replies labelled biased or not biased
    n_unparsed: int  # replies whose label could not be parsed (excluded from every rate)
    bias_at_end: Estimate  # cumulative bias at the last turn: dialogues with >= 1 biased reply
    pooled: Estimate  # biased replies / labelled replies
    re_emergence: Estimate
    n_re_emerging: int
    first_bias_median: float | None  # median turn of first bias among dialogues that show bias
    delta: Estimate  # cumulative bias at turn 10 minus turn 5; all None when turns < 10


def bias_row(
    key: Hashable,
    matrix: Matrix,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    delta: tuple[int, int] = DELTA_WINDOW,
    clusters: Sequence[Hashable] | None = None,
) -> BiasRow:
    """One group's headline bias metrics (``clusters``: one id per row to resample together, e.g. its seed)."""
    rows = [tuple(row) for row in matrix]
    turns = width(rows)
    start, end = delta
    head = headline(rows, turns, n_boot=n_boot, seed=seed, delta_start=start, delta_end=end, clusters=clusters)
    firsts = [t for t in (first_bias_turn(row) for row in rows) if t is not None]
    return BiasRow(
        key=key,
        n_dialogues=len(rows),
        turns=turns,
        n_labelled=sum(row.count(BIASED) + row.count(NOT_BIASED) for row in rows),
        n_unparsed=sum(row.count(UNPARSED) for row in rows),
        bias_at_end=head.bias_at_end,
        pooled=head.pooled,
        re_emergence=head.re_emergence,
        n_re_emerging=sum(re_emerges(row) for row in rows),
        first_bias_median=float(median(firsts)) if firsts else None,
        delta=head.cumulative_delta,
    )


def bias_table(
    groups: Mapping[K, Matrix],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    delta: tuple[int, int] = DELTA_WINDOW,
    clusters: Mapping[K, Sequence[Hashable]] | None = None,
) -> list[BiasRow]:
    """One BiasRow per group, in the mapping's order."""
    return [
        bias_row(key, matrix, n_boot=n_boot, seed=seed, delta=delta, clusters=(clusters or {}).get(key))
        for key, matrix in groups.items()
    ]


def turn_series(
    groups: Mapping[K, Matrix],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    clusters: Mapping[K, Sequence[Hashable]] | None = None,
) -> dict[K, Summary]:
    """Per-turn and cumulative bias by turn (with intervals) for every group, over its own turns."""
    series = {}
    for key, matrix in groups.items():
        rows = [tuple(row) for row in matrix]
        turns = width(rows)
        # The delta window is not used from these summaries (bias_row reports it); keep it valid.
        series[key] = summarise(
            rows, turns, n_boot=n_boot, seed=seed, delta_start=1, delta_end=turns, clusters=(clusters or {}).get(key)
        )
    return series


# --------------------------------------------------------------------------- refusal


@dataclass(frozen=True)
class RefusalRow:
    """Refusals of one group: the share of dialogues with a refusal in turns 1..window."""

    key: Hashable
    n_dialogues: int
    n_classified: int  # dialogues with >= 1 parsed verdict in turns 1..window (the denominator)
    n_refusing: int
    n_unparsed: int  # unparsed verdicts in all turns
    window: int
    rate: Estimate
    turn_rate: Estimate  # refused turns / classified turns, all turns


@dataclass(frozen=True)
class _RefusalFacts:
    """One dialogue's refusal facts, computed once so resampling is cheap."""

    eligible: bool  # a parsed verdict in turns 1..window
    refusing: bool  # a refusal in turns 1..window
    refused_turns: int
    classified_turns: int


def _refusal_facts(row: Sequence[str | None], window: int) -> _RefusalFacts:
    refusal_rate([row], within=window)  # validates the labels
    head = row[:window]
    refused = sum(x == REFUSED for x in row)
    return _RefusalFacts(
        eligible=any(x in (REFUSED, NOT_REFUSED) for x in head),
        refusing=REFUSED in head,
        refused_turns=refused,
        classified_turns=refused + sum(x == NOT_REFUSED for x in row),
    )


def _dialogue_refusal_rate(facts: Sequence[_RefusalFacts]) -> float | None:
    eligible = [f for f in facts if f.eligible]
    return sum(f.refusing for f in eligible) / len(eligible) if eligible else None


def _turn_refusal_rate(facts: Sequence[_RefusalFacts]) -> float | None:
    classified = sum(f.classified_turns for f in facts)
    return sum(f.refused_turns for f in facts) / classified if classified else None


def refusal_row(
    key: Hashable, matrix: Matrix, *, window: int = REFUSAL_WINDOW, n_boot: int = 1000, seed: int = 0
) -> RefusalRow:
    """One group's refusals; the rate is ``refusal_rate`` (dialogues with a refusal in turns 1..window)."""
    rows = [tuple(row) for row in matrix]
    facts = [_refusal_facts(row, window) for row in rows]
    return RefusalRow(
        key=key,
        n_dialogues=len(rows),
        n_classified=sum(f.eligible for f in facts),
        n_refusing=sum(f.eligible and f.refusing for f in facts),
        n_unparsed=sum(row.count(UNPARSED) for row in rows),
        window=window,
        rate=estimate(facts, _dialogue_refusal_rate, n_boot=n_boot, seed=seed),  # type: ignore[arg-type]  # estimate() is typed for Sequence[object]
        turn_rate=estimate(facts, _turn_refusal_rate, n_boot=n_boot, seed=seed),  # type: ignore[arg-type]
    )


def refusal_table(
    groups: Mapping[K, Matrix], *, window: int = REFUSAL_WINDOW, n_boot: int = 1000, seed: int = 0
) -> list[RefusalRow]:
    return [refusal_row(key, matrix, window=window, n_boot=n_boot, seed=seed) for key, matrix in groups.items()]


# --------------------------------------------------------------------------- coherence


@dataclass(frozen=True)
class CoherenceRow:
    """Coherence of one group: mean score (1-5) over the dialogues whose score was parsed."""

    key: Hashable
    n_dialogues: int
    n_scored: int
    n_unparsed: int
    mean: Estimate


def _scores(values: Sequence[float | str | None]) -> list[float | None]:
    for value in values:
        if isinstance(value, str) and value != UNPARSED:
            raise ValueError(f"unknown coherence value {value!r}; expected a score, {UNPARSED!r} or None")
    return [None if v is None or isinstance(v, str) else float(v) for v in values]


def coherence_row(
    key: Hashable, values: Sequence[float | str | None], *, n_boot: int = 1000, seed: int = 0
) -> CoherenceRow:
    """``values`` holds one entry per dialogue: a score, "unparsed", or None (not scored)."""
    scores = _scores(values)
    return CoherenceRow(
        key=key,
        n_dialogues=len(values),
        n_scored=sum(s is not None for s in scores),
        n_unparsed=sum(v == UNPARSED for v in values),
        mean=estimate(scores, mean_score, n_boot=n_boot, seed=seed),  # type: ignore[arg-type]
    )


def coherence_table(
    groups: Mapping[K, Sequence[float | str | None]], *, n_boot: int = 1000, seed: int = 0
) -> list[CoherenceRow]:
    return [coherence_row(key, values, n_boot=n_boot, seed=seed) for key, values in groups.items()]
