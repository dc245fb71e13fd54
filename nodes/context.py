"""What every node of one run shares: the models per role and run-level constants."""

from __future__ import annotations

from dataclasses import dataclass

from models.registry import RoleModel


@dataclass(frozen=True)
class Models:
    """One chat model per role."""

    user: RoleModel
    target: RoleModel
    judge: RoleModel


@dataclass(frozen=True)
class RunContext:
    """Runtime context passed to ``graph.ainvoke(..., context=...)``; never checkpointed."""

    models: Models
    sampling_seed: int = 0
    leakage: str = "regenerate"
    """What the user simulator does with a message that states the seed: "regenerate" or "keep" (flagged)."""
    leakage_attempts: int = 4
    """Messages drawn at most per user turn (a leaking or verbatim-repeated one is drawn again)."""
    judge_reasoning: bool = False
    """Label the target's reasoning too (``--judge-reasoning``): a second label set, beside the reply's."""
