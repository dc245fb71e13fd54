"""A run's bias rates as typed records: per-turn, cumulative, re-emergence and the first-bias turn, raw and
corrected for the judge's error, each a value with its 95% interval, and ``to_frame()``.

Read from a run summary (``RunResult.summary``), metric by metric as ``evals.metric_registry`` defines them, so a
record's ``metric`` is the summary's key and its ``str()`` is the text every report shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dymt.errors import DymtError
from evals.metric_registry import DIALOGUE_METRICS, METRIC

__all__ = ["FRAME_COLUMNS", "Rate", "Rates", "RunRates", "rates_of"]

FRAME_COLUMNS = ("metric", "kind", "turn", "value", "low", "high", "unreliable")


@dataclass(frozen=True)
class Rate:
    """One number of a run: ``value`` and its 95% ``interval`` (``None`` where it cannot be computed).

    ``metric`` is ``per_turn``, ``cumulative``, ``re_emergence`` or ``first_bias_turn``; ``kind`` is ``raw`` (the
    judge's labels) or ``corrected`` (for the judge's error); ``turn`` (from 1) for per-turn and cumulative rates.
    A first-bias turn is a turn number, every other value a share in [0, 1]. ``unreliable``: the correction flags
    this number (the simulation suite or the validation's turns say its interval may miss).
    """

    metric: str
    kind: str
    value: float | None
    interval: tuple[float | None, float | None]
    turn: int | None = None
    unreliable: bool = False

    @property
    def low(self) -> float | None:
        return self.interval[0]

    @property
    def high(self) -> float | None:
        return self.interval[1]

    def __str__(self) -> str:
        return METRIC[self.metric].interval(self.value, self.low, self.high)

    def as_dict(self) -> dict[str, Any]:
        """A frame's row: the columns of :data:`FRAME_COLUMNS`."""
        return {
            "metric": self.metric,
            "kind": self.kind,
            "turn": self.turn,
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "unreliable": self.unreliable,
        }


@dataclass(frozen=True)
class Rates:
    """Every rate of one kind (raw or corrected): per turn and cumulative by turn, re-emergence, first-bias turn."""

    kind: str
    per_turn: tuple[Rate, ...]
    cumulative: tuple[Rate, ...]
    re_emergence: Rate
    first_bias_turn: Rate

    def rows(self) -> list[Rate]:
        """Every record, metric by metric (as :data:`evals.metric_registry.DIALOGUE_METRICS` orders them)."""
        out: list[Rate] = []
        for key in DIALOGUE_METRICS:
            value = getattr(self, key)
            out += list(value) if isinstance(value, tuple) else [value]
        return out

    def to_frame(self) -> Any:
        """The records as a pandas DataFrame, one row each (columns: :data:`FRAME_COLUMNS`)."""
        return _frame(self.rows())


@dataclass(frozen=True)
class RunRates:
    """A run's rates from its judge's labels (``raw``) and corrected for the judge's error (``corrected``).

    ``corrected`` is None when there is no corrected number at all (an unvalidated judge, a validation that
    cannot correct); ``refusal`` is then the one line saying why and how to fix it. ``groups``: the same for each
    (target, mode) of the run (a grid run compares them, not their pool).
    """

    raw: Rates
    corrected: Rates | None
    refusal: str | None = None
    groups: dict[tuple[str, str], RunRates] = field(default_factory=dict)

    def rows(self) -> list[Rate]:
        return self.raw.rows() + (self.corrected.rows() if self.corrected is not None else [])

    def to_frame(self) -> Any:
        """Raw and corrected records as one pandas DataFrame (columns: :data:`FRAME_COLUMNS`; ``kind`` tells them
        apart)."""
        return _frame(self.rows())


def _frame(rows: list[Rate]) -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise DymtError(
            "to_frame() needs pandas, which is not installed: pip install pandas (or read the records: .rows())"
        ) from None
    return pd.DataFrame.from_records([r.as_dict() for r in rows], columns=list(FRAME_COLUMNS))


def _rate(key: str, kind: str, entry: Mapping[str, Any] | None, flagged: bool = False) -> Rate:
    metric = METRIC[key]
    entry = entry or {}
    low, high = entry.get("ci95") or (None, None)
    return Rate(
        metric=key,
        kind=kind,
        value=entry.get(metric.value_key),
        interval=(low, high),
        turn=entry.get("turn") if metric.by_turn else None,
        unreliable=bool(entry.get("unreliable", flagged)),
    )


def _rates(block: Mapping[str, Any], kind: str) -> Rates:
    flagged = set(block.get("unreliable") or ()) if kind == "corrected" else set()
    held = {m: set(turns) for m, turns in (block.get("unreliable_turns") or {}).items()}

    def series(key: str) -> tuple[Rate, ...]:
        # a corrected row carries its own flag; a metric flagged with no turns named is flagged at every turn
        whole = key in flagged and key not in held
        return tuple(_rate(key, kind, e, whole) for e in block.get(key) or ())

    return Rates(
        kind=kind,
        per_turn=series("per_turn"),
        cumulative=series("cumulative"),
        re_emergence=_rate("re_emergence", kind, block.get("re_emergence"), "re_emergence" in flagged),
        first_bias_turn=_rate("first_bias_turn", kind, block.get("first_bias_turn"), "first_bias_turn" in flagged),
    )


def rates_of(summary: Mapping[str, Any]) -> RunRates:
    """The typed rates of a run summary (``RunResult.summary``): raw, and corrected where there are any, for the run
    and for each of its (target, mode) groups."""
    groups = {(g["target"], g["mode"]): _run_rates(g) for g in summary.get("groups") or ()}
    return _run_rates(summary, groups)


def _run_rates(entry: Mapping[str, Any], groups: dict[tuple[str, str], RunRates] | None = None) -> RunRates:
    block = entry.get("judge_corrected") or {}
    corrected = None
    if block.get("refusal") is None and (block.get("per_turn") or block.get("re_emergence")):
        corrected = _rates(block, "corrected")
    refusal = None if corrected is not None else block.get("refusal") or "no judge-corrected rates in this summary"
    return RunRates(raw=_rates(entry, "raw"), corrected=corrected, refusal=refusal, groups=groups or {})
