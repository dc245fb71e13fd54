"""How a run's models sample and are called: the per-role sampling tables and the retry settings.

Shared by the run configuration (:mod:`graph.config.run_config`) and experiment files (:mod:`graph.config.experiment`),
which both check them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from models.retries import RetryPolicy
from models.thinking import Thinking, parse_thinking


class StrictModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class RoleSampling(StrictModel):
    """Sampling for a role or a spec (``[sampling.ROLE]``, ``[sampling."SPEC"]``); unset keys fall through."""

    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1)
    base_url: str | None = Field(None, pattern=r"\S")
    extra: dict[str, Any] | None = None
    thinking: Thinking | None = None
    """``off``, ``on`` or a reasoning budget in tokens (models/thinking.py); unset: the model's own."""

    @field_validator("thinking", mode="before")
    @classmethod
    def _thinking(cls, value: Any) -> Any:
        return None if value is None else parse_thinking(value)

    def given(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True, exclude_none=True)


class RetrySettings(StrictModel):
    """``[retry]`` and --retries / --request-timeout; unset keys keep RetryPolicy's defaults."""

    attempts: int | None = Field(None, ge=1)
    base_delay: float | None = Field(None, ge=0)
    max_delay: float | None = Field(None, ge=0)
    max_retry_after: float | None = Field(None, ge=0)
    timeout: float | None = Field(None, gt=0)
    """Seconds per attempt; set to None: the provider's own (``timeout = false`` in a file)."""

    def policy(self) -> RetryPolicy:
        return RetryPolicy(**self.model_dump(exclude_unset=True))
