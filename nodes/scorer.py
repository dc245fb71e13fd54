"""The one scorer interface: an item becomes messages, the model's reply becomes a Verdict.

The live judge node, re-judging, refusal, coherence, the guard filter and judge validation
all score through it (openevals / inspect_ai style). A reply that cannot be read gives an
*unscored* verdict with the reason and the raw output kept, never a guess.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from langchain_core.messages import BaseMessage

from checkpoints.scores import ScoreRow, refusal_value
from models.registry import RoleModel
from nodes.dialogue import timed_invoke

Item = TypeVar("Item")
Value = str | bool | float | None


@dataclass(frozen=True)
class Verdict:
    """One scored item: what was scored (``key``), the reading, the reasoning and the model's raw output.

    ``value`` is the reading (a label, True / False, a 1-5 score); ``score`` a probability or
    expectation behind it where the model gives one. ``unscored`` says why nothing could be read; ``read_as`` how
    the value was read (nodes/verdicts.py: "json", "line", or "logprobs" for a base model's first token).
    """

    key: str
    value: Value
    explanation: str = ""
    raw: str = ""
    score: float | None = None
    unscored: str | None = None
    read_as: str | None = None

    @property
    def scored(self) -> bool:
        return self.unscored is None

    def row(
        self,
        *,
        thread_id: str,
        idx: int,
        scorer: str,
        subject: str,
        model: str | None = None,
        latency: float | None = None,
        created_at: str | None = None,
    ) -> ScoreRow:
        """The verdict as a row of the ``scores`` table (checkpoints.scores)."""
        value = refusal_value(self.value) if isinstance(self.value, bool) else self.value
        number = self.score
        if isinstance(value, (int, float)):  # a numeric reading (coherence) is stored as the score
            value, number = None, float(value) if number is None else number  # type: ignore[arg-type]
        return ScoreRow(
            thread_id=thread_id,
            idx=idx,
            key=self.key,
            scorer=scorer,
            subject=subject,
            value=value,
            score=number,
            explanation=self.explanation,
            raw=self.raw,
            model=model,
            latency=latency,
            created_at=created_at,
        )


@dataclass(frozen=True)
class Scored:
    """A verdict with the model output it came from and the seconds the call(s) took."""

    verdict: Verdict
    output: Any
    latency: float


class Scorer(ABC, Generic[Item]):
    """Turns items into messages for ``model`` and its replies into verdicts of one ``key``."""

    key: str

    def __init__(self, *, model: RoleModel) -> None:
        self.model = model

    @abstractmethod
    def messages(self, item: Item) -> list[BaseMessage]:
        """The request for one item."""

    @abstractmethod
    def verdict(self, output: Any) -> Verdict:
        """The verdict read from the model's output (unscored when it cannot be read)."""

    async def ascore(self, item: Item, **options: Any) -> Scored:
        """One model call on one item; ``options`` (e.g. a seed) go to the model call."""
        output, latency = await timed_invoke(self.model.chat, self.messages(item), **options)
        return Scored(self.verdict(output), output, latency)
