"""How a run's models sample and are called: the per-role sampling tables, the retry settings, and what each role's
requests send as the run stores it.

Shared by the run configuration (:mod:`graph.config.run_config`) and experiment files (:mod:`graph.config.experiment`),
which both check them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from checkpoints.redaction import redact_settings
from graph.config.errors import ConfigError
from models.registry import RoleModel
from models.retries import RetryPolicy
from models.thinking import Thinking, parse_thinking, thinking_text


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


def role_setting(dest: str, value: Any, *, flag: str) -> Any:
    """A ``--thinking`` or ``--max-tokens`` value checked: one ConfigError line that names the flag."""
    if dest == "thinking":
        try:
            return parse_thinking(value)
        except ValueError as exc:
            raise ConfigError(f"{flag} {value}: {exc}") from None
    text = str(value).strip()
    if isinstance(value, bool) or not (isinstance(value, int) or text.isdigit()) or int(text) < 1:
        raise ConfigError(f"{flag} {value}: give the reply's cap as a number of tokens, 1 or more")
    return int(text)


_THINKING_BODY = frozenset({"chat_template_kwargs", "thinking_token_budget"})  # what models/thinking.py sends


def _shown_request(sent: Mapping[str, Any]) -> dict[str, Any]:
    """A request's settings as stored: the request's own keys as they are, the role's other ``extra_body`` entries
    redacted where their name may hold a secret."""
    shown = dict(sent)
    if isinstance(body := shown.get("extra_body"), dict):
        ours = {k: v for k, v in body.items() if k in _THINKING_BODY}
        shown["extra_body"] = ours | redact_settings({k: v for k, v in body.items() if k not in _THINKING_BODY})
    return shown


def request_record(model: RoleModel) -> dict[str, Any]:
    """What a role's calls send (models/request_settings.py), its thinking and its caps, as the run stores them."""
    plan = model.thinking
    return {
        "thinking": thinking_text(model.sampling.thinking),
        "reply_cap": model.sampling.max_tokens,
        "request_cap": model.request_cap,
        "reasoning_budget": plan.budget,
        "reasons": plan.reasons,
        "sent": _shown_request(model.sent.sent),
        "notes": list(model.sent.notes),
    }
