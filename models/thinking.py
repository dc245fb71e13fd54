"""Thinking as a setting per role (``--thinking off|on|BUDGET``), mapped onto each provider's own switch.

- OpenAI-compatible servers (vLLM, SGLang, llama.cpp's server): ``chat_template_kwargs.enable_thinking`` (Qwen3's
  and most hybrid models' chat templates read it); a budget also goes as ``chat_template_kwargs.thinking_budget``
  (Qwen3's template, SGLang) and ``thinking_token_budget`` (vLLM). A server that knows none of them ignores them:
  ``--check`` shows whether the endpoint still thinks.
- OpenAI: ``reasoning_effort``, among the levels langchain-openai's model profile lists for the model (``off`` is
  ``none`` where the model has it, else its lowest level, and the run says so).
- Gemini: ``thinking_budget`` (0 is off, -1 the model's own depth) or, on Gemini 3, ``thinking_level``;
  ``include_thoughts`` so the thoughts come back to be stored.

``--max-tokens`` caps the visible reply; the reasoning has its own budget beside it. Where one cap covers both (an
OpenAI-compatible server's ``max_tokens``, OpenAI's ``max_completion_tokens``, Gemini's ``max_output_tokens``), the
request's cap is the reply's plus the reasoning budget, and an answer longer than the reply's cap is cut to it
(models/reasoning.py ``capped_answer``). A model that thinks by default (the integration's profile says it reasons)
gets the budget too, unless its thinking is off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Thinking = Literal["off", "on"] | int
DEFAULT_REASONING_BUDGET = 4096
"""Reasoning tokens allowed beside the reply's cap when thinking is on without a budget, or the model's own."""
_EFFORT_BY_BUDGET = ((1024, "low"), (8192, "medium"))  # up to this many tokens: this effort; above: "high"


class ThinkingError(ValueError):
    """A thinking setting a provider or model cannot take; says which and the fix."""


def parse_thinking(value: Any) -> Thinking:
    """``off``, ``on`` or a positive number of reasoning tokens (a budget); ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"thinking must be off, on or a number of tokens, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"a thinking budget must be 1 or more tokens (off turns thinking off), got {value}")
        return value
    text = str(value).strip().lower()
    if text in ("off", "on"):
        return text  # type: ignore[return-value]  # one of the two literals
    if text.isdigit():
        return parse_thinking(int(text))
    raise ValueError(f"thinking must be off, on or a number of tokens (a budget), got {value!r}")


def thinking_text(value: Thinking | None) -> str:
    """A thinking setting as a person reads it: "off", "on", "2048 tokens", "the model's own"."""
    if value is None:
        return "the model's own"
    return f"{value} tokens" if isinstance(value, int) else value


@dataclass(frozen=True)
class ThinkingPlan:
    """What a role's provider is sent for its thinking, and the request's cap that follows."""

    arguments: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments of the provider's chat model."""
    cap: int = 0
    """The request's output cap: the reply's, plus the reasoning budget where one cap covers both."""
    budget: int | None = None
    """Reasoning tokens beside the reply's cap (None: the request's cap is the reply's)."""
    notes: tuple[str, ...] = ()
    """Where the provider cannot do what was asked (thinking that cannot be turned off, ...)."""
    reasons: bool | None = None
    """Whether the model reasons, by its integration's profile (None: the profile does not say)."""


def _budget(thinking: Thinking | None) -> int:
    return thinking if isinstance(thinking, int) else DEFAULT_REASONING_BUDGET


def compatible_plan(thinking: Thinking | None, *, max_tokens: int) -> ThinkingPlan:
    """An OpenAI-compatible server: the chat template's ``enable_thinking`` (and budget fields)."""
    if thinking is None:
        return ThinkingPlan(cap=max_tokens)
    if thinking == "off":
        return ThinkingPlan({"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}, cap=max_tokens)
    budget = _budget(thinking)
    body: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": True}}
    if isinstance(thinking, int):
        body["chat_template_kwargs"]["thinking_budget"] = thinking
        body["thinking_token_budget"] = thinking
    return ThinkingPlan({"extra_body": body}, cap=max_tokens + budget, budget=budget)


def openai_plan(thinking: Thinking | None, *, model: str, max_tokens: int, profile: Mapping[str, Any]) -> ThinkingPlan:
    """OpenAI's API: ``reasoning_effort`` among the model's levels (langchain-openai's profile of the model)."""
    reasons = profile.get("reasoning_output")
    levels = list(profile.get("reasoning_effort_levels") or [])
    if thinking is None:
        if reasons:
            budget = DEFAULT_REASONING_BUDGET
            return ThinkingPlan(cap=max_tokens + budget, budget=budget, reasons=True)
        return ThinkingPlan(cap=max_tokens, reasons=reasons)
    if reasons is False and not levels:
        if thinking == "off":
            return ThinkingPlan(cap=max_tokens, reasons=False)
        raise ThinkingError(
            f"openai:{model} does not reason (langchain-openai's profile of it): give no thinking setting, or off"
        )
    if thinking == "off":
        if "none" in levels:
            return ThinkingPlan({"reasoning_effort": "none"}, cap=max_tokens, reasons=reasons)
        if reasons is None and not levels:  # a model the profile does not know may not take reasoning_effort at all
            note = f"thinking off not sent: langchain-openai has no profile of openai:{model}"
            return ThinkingPlan(cap=max_tokens, notes=(note,))
        lowest = levels[0] if levels else "low"
        note = f"thinking off sent as reasoning_effort={lowest}: openai:{model} cannot turn its reasoning off"
        budget = DEFAULT_REASONING_BUDGET
        return ThinkingPlan({"reasoning_effort": lowest}, max_tokens + budget, budget, (note,), reasons)
    budget = _budget(thinking)
    effort = "medium" if thinking == "on" else _effort_for(budget, levels)
    if levels and effort not in levels:
        effort = levels[-1]
    return ThinkingPlan({"reasoning_effort": effort}, cap=max_tokens + budget, budget=budget, reasons=reasons)


def _effort_for(budget: int, levels: list[str]) -> str:
    for limit, effort in _EFFORT_BY_BUDGET:
        if budget <= limit:
            return effort
    return "high"


def gemini_plan(thinking: Thinking | None, *, model: str, max_tokens: int, profile: Mapping[str, Any]) -> ThinkingPlan:
    """Gemini: ``thinking_budget`` (2.5) or ``thinking_level`` (3), with the thoughts returned to be stored."""
    levels = list(profile.get("reasoning_effort_levels") or [])
    reasons = bool(profile.get("reasoning_output")) or bool(levels) or None
    if thinking is None:
        if reasons:
            budget = DEFAULT_REASONING_BUDGET
            return ThinkingPlan({"include_thoughts": True}, max_tokens + budget, budget, reasons=True)
        return ThinkingPlan(cap=max_tokens, reasons=reasons)
    if thinking == "off":
        if levels:  # Gemini 3 thinks at every level: its lowest
            note = f"thinking off sent as thinking_level={levels[0]}: google_genai:{model} cannot turn its thinking off"
            budget = DEFAULT_REASONING_BUDGET
            lowest = {"thinking_level": levels[0], "include_thoughts": True}
            return ThinkingPlan(lowest, max_tokens + budget, budget, (note,), reasons)
        return ThinkingPlan({"thinking_budget": 0}, cap=max_tokens, reasons=reasons)
    budget = _budget(thinking)
    args: dict[str, Any] = {"include_thoughts": True}
    if not levels:
        args["thinking_budget"] = thinking if isinstance(thinking, int) else -1
    elif isinstance(thinking, int):
        args["thinking_level"] = levels[0] if budget <= 1024 else levels[-1]
    return ThinkingPlan(args, cap=max_tokens + budget, budget=budget, reasons=reasons)


def no_thinking_plan(thinking: Thinking | None, *, spec: str, max_tokens: int, reasons: bool | None) -> ThinkingPlan:
    """A provider with no thinking switch (the embedded base model, Hugging Face): only the model's own.

    ``reasons=False`` (the embedded base model) takes ``off`` as it is; otherwise ``off`` is recorded as not sent.
    """
    if thinking is not None and thinking != "off":
        raise ThinkingError(
            f"{spec} has no thinking switch here: give no thinking setting (set it on its server; reasoning blocks "
            "in its text are still split off the reply)"
        )
    notes = (f"thinking off not sent: {spec} has no thinking switch here",) if thinking and reasons is not False else ()
    return ThinkingPlan(cap=max_tokens, notes=notes, reasons=reasons)
