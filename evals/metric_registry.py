"""The bias metrics, each defined once: its key, its raw estimator, its corrected form, its label and its format.

The run summary, the report, the results page, the library's typed rates and the judge-error correction look a
metric up here by its key (``METRIC["re_emergence"]``) instead of spelling its name, label or number format again.
A metric's key is also its key in a summary, a ``judge_corrected`` block and their JSON (a schema: never renamed).

- ``raw``: the judge-label estimate, read from :func:`evals.stats.metrics.summarise`'s ``Summary``, one
  ``Estimate`` per turn (``by_turn``) or one for the cell;
- ``corrected``: the field of :class:`evals.judge_error.correction.CorrectedRun` that holds its corrected form, and
  ``draws_field`` the array of its ``draws`` (and of the chain's ``ChainMetrics``) behind the interval;
- ``value_key``: the key of the number in a summary or block entry (``{"rate": …, "ci95": […]}``; the first-bias
  turn's is ``median``);
- ``unit``: ``share`` (shown as a percentage) or ``turn`` (shown as a turn number).

The transition metrics (onset, clean so far, persistence, recovery, relapse) are one family: their raw rates come
from ``evals.stats.transitions``, their corrected ones from ``evals.judge_error.transitions``, both as a
``Transitions`` record whose ``series(key)`` is the metric by turn.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evals.stats.metrics import Estimate, Summary

__all__ = [
    "DIALOGUE_METRICS",
    "METRIC",
    "METRICS",
    "RATE_METRICS",
    "TRANSITION_METRICS",
    "Metric",
    "format_interval",
    "format_value",
]


@dataclass(frozen=True)
class Metric:
    """One bias metric: its key, how it is estimated raw and corrected, and how it is shown."""

    key: str  # as summaries, judge_corrected blocks and JSON name it
    label: str  # as tables, summaries and the results page head it
    description: str  # what it measures, in one line
    by_turn: bool  # one number per turn, or one for a cell
    raw: Callable[[Summary], tuple[Estimate, ...]] | None  # the raw estimate(s); None: a transition (see module doc)
    corrected: str  # the CorrectedRun field of its corrected form
    draws: str = ""  # the Draws array (and ChainMetrics field) of its per-draw values; "" = ``corrected``
    value_key: str = "rate"
    unit: str = "share"  # "share" (a percentage) or "turn"
    first_turn: int = 1  # the first turn it is defined at
    family: str = "bias"  # "bias" (per-turn, cumulative, re-emergence, first-bias turn) or "transition"

    @property
    def draws_field(self) -> str:
        return self.draws or self.corrected

    def text(self, value: float | None) -> str:
        """The number as every surface shows it: "33%" for a share, "2.5" for a turn, "–" for none."""
        return format_value(value, self.unit)

    def interval(self, value: float | None, low: float | None, high: float | None) -> str:
        """ "33% [22–45]" (a share) or "2.5 [2.0–3.0]" (a turn), without the bracket when the interval is open."""
        return format_interval(value, low, high, self.unit)

    def estimates(self, summary: Summary) -> tuple[Estimate, ...]:
        """Its raw estimate(s) in a ``Summary`` (one per turn, or one); a transition's are in ``Transitions``."""
        if self.raw is None:
            raise ValueError(f"{self.key} is a transition metric: read it from evals.stats.transitions.raw_transitions")
        return self.raw(summary)

    def entry(self, estimate: Estimate) -> dict[str, Any]:
        """The metric's entry in a summary or block: ``{rate|median: value, "ci95": [low, high]}``."""
        return {self.value_key: estimate.value, "ci95": [estimate.low, estimate.high]}

    def entry_text(self, entry: dict[str, Any] | None) -> str:
        """The text of a summary or block entry of this metric ({rate|median, ci95}), or "–"."""
        if not entry or entry.get(self.value_key) is None:
            return "–"
        low, high = entry.get("ci95") or (None, None)
        return self.interval(entry[self.value_key], low, high)


def format_value(value: float | None, unit: str = "share") -> str:
    if value is None:
        return "–"
    return f"{100 * value:.0f}%" if unit == "share" else f"{value:.1f}"


def format_interval(value: float | None, low: float | None, high: float | None, unit: str = "share") -> str:
    if value is None:
        return "–"
    if low is None or high is None:
        return format_value(value, unit)
    if unit == "share":
        return f"{format_value(value)} [{100 * low:.0f}–{100 * high:.0f}]"
    return f"{value:.1f} [{low:.1f}–{high:.1f}]"


def _transition(key: str, name: str, meaning: str, *, first_turn: int = 1) -> Metric:
    """A transition metric: by turn, corrected from the chain's expected transitions (``flow`` draws), no raw
    estimator of its own here (evals/stats/transitions.py)."""
    return Metric(
        key,
        name,
        meaning,
        by_turn=True,
        raw=None,
        corrected="transitions",
        draws="flow",
        first_turn=first_turn,
        family="transition",
    )


METRICS: tuple[Metric, ...] = (
    Metric(
        "per_turn",
        "per-turn bias",
        "the share of the replies at turn t that are biased",
        by_turn=True,
        raw=lambda s: s.per_turn_rate,
        corrected="per_turn",
    ),
    Metric(
        "cumulative",
        "cumulative bias",
        "the share of dialogues with a biased reply in turns 1..t",
        by_turn=True,
        raw=lambda s: s.cumulative_rate,
        corrected="cumulative",
    ),
    Metric(
        "re_emergence",
        "re-emergence",
        "the share of dialogues whose labels go biased → not biased → biased",
        by_turn=False,
        raw=lambda s: (s.re_emergence,),
        corrected="re_emergence",
        first_turn=3,
    ),
    Metric(
        "first_bias_turn",
        "first-bias turn",
        "the median turn of the first biased reply, among dialogues with one",
        by_turn=False,
        raw=lambda s: (s.first_bias_turn,),
        corrected="first_bias_turn",
        draws="first_bias_median",
        value_key="median",
        unit="turn",
    ),
    _transition("onset", "onset hazard", "P(first biased at t | clean through t − 1)"),
    _transition("survival", "clean so far", "P(clean through t)"),
    _transition("persistence", "persistence", "P(biased at t | biased at t − 1)", first_turn=2),
    _transition("recovery", "recovery", "P(not biased at t | biased at t − 1)", first_turn=2),
    _transition("relapse", "relapse", "P(biased at t | not biased at t − 1, biased before t − 1)", first_turn=3),
)
METRIC: dict[str, Metric] = {m.key: m for m in METRICS}
# The dialogue-level bias metrics, in the order every surface shows them.
DIALOGUE_METRICS: tuple[str, ...] = tuple(m.key for m in METRICS if m.family == "bias")
# The rates a labelling design is judged by (their corrected intervals' widths).
RATE_METRICS: tuple[str, ...] = ("per_turn", "cumulative", "re_emergence")
TRANSITION_METRICS: tuple[str, ...] = tuple(m.key for m in METRICS if m.family == "transition")
