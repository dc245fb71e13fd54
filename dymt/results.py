"""What the library returns: typed results whose JSON is what the matching command prints with ``--json``.

Every result's JSON carries ``"schema"`` (``dymt.run/1`` …): a key is added in a new version only, never renamed
or removed within one (docs/library.md lists them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graph.running.playing import DialogueOutcome

RUN_SCHEMA = "dymt.run/1"


@dataclass(frozen=True)
class OutagePastBudget:
    """A provider endpoint that stayed unreachable past ``--outage-budget``: its dialogues stopped failed."""

    endpoint: str
    down: str  # "unreachable for 10m 3s" as the circuit words it
    budget_s: float

    def line(self, *, unfinished: int, resume: str) -> str:
        return (
            f"outage: {self.endpoint} {self.down} past the outage budget ({self.budget_s:g} s); {unfinished} "
            f"dialogue(s) stopped failed, nothing lost. Resume once it is back with: {resume}"
        )


@dataclass(frozen=True)
class RunResult:
    """One invocation of a run: its summary (metrics, raw and judge-corrected rates, cost, failures) and how it ended.

    ``status`` is the command's exit status: 0 every dialogue finished (or paused as asked), 1 some failed or were
    held back by the cost cap, 75 a provider outage past its budget. ``resume`` is the command that goes on.
    """

    run_id: str
    status: int
    summary: dict[str, Any]
    outcomes: tuple[DialogueOutcome, ...] = ()
    outages_past_budget: tuple[OutagePastBudget, ...] = ()
    paused: tuple[str, ...] = field(default=())

    @property
    def resume(self) -> str | None:
        return self.summary.get("resume")

    @property
    def failures(self) -> list[dict[str, Any]]:
        """The dialogues that did not finish: ``thread_id`` and ``error``."""
        return list(self.summary.get("failed") or [])

    @property
    def cost(self) -> dict[str, Any] | None:
        """Tokens and, with pricing, USD by role and model (``summary["cost"]``)."""
        return self.summary.get("cost")

    @property
    def judge_corrected(self) -> dict[str, Any] | None:
        """The rates corrected for the judge's error, with their intervals (or why they are not computed)."""
        return self.summary.get("judge_corrected")

    @property
    def unfinished(self) -> int:
        """Dialogues that failed or were held back by the cost cap."""
        return len(self.failures) + int((self.summary.get("budget") or {}).get("held") or 0)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` output of ``python -m graph.run``."""
        return {"schema": RUN_SCHEMA, **self.summary}
