"""What a role's calls send: its sampling as the provider's LangChain integration builds the request, after the
integration's own adjustments, and every setting dropped or changed on the way.

The request is built by the integration itself (langchain-openai's ``_get_request_payload``, langchain-google-genai's
``_prepare_params``, the embedded model's fields), for a call with a per-call seed as the nodes give one, so the
record holds what each call of the role sends (the seed aside, which differs per call). A setting asked for but
absent from the request (langchain-openai drops a temperature other than 1 for gpt-5 models; a provider that takes
no seed) or sent with another value is a *note*: the run records it and its summary says it once;
``--strict-sampling`` refuses such a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage

_PROBE_SEED = 12345
# The request's keys that are its sampling and thinking (OpenAI's Chat Completions and Responses, Gemini's config).
_OPENAI_KEYS = ("temperature", "max_tokens", "max_completion_tokens", "max_output_tokens", "seed", "top_p")
_OPENAI_THINKING = ("reasoning_effort", "reasoning")
_GEMINI_KEYS = ("temperature", "max_output_tokens", "seed", "top_p", "top_k")
_CAP_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "max_new_tokens")


@dataclass(frozen=True)
class SentSettings:
    """A role's request settings as sent, and what differs from what the run asked for."""

    sent: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"sent": dict(self.sent), "notes": list(self.notes)}


def request_settings(chat: BaseChatModel) -> dict[str, Any]:
    """The sampling and thinking settings a call of ``chat`` sends, as its integration builds the request."""
    builder = getattr(chat, "_get_request_payload", None)
    if callable(builder) and hasattr(chat, "model_name"):  # langchain-openai and the packages built on it
        payload = builder([HumanMessage(".")], seed=_PROBE_SEED)
        sent = {k: payload[k] for k in (*_OPENAI_KEYS, *_OPENAI_THINKING) if payload.get(k) is not None}
        body = {k: v for k, v in (payload.get("extra_body") or {}).items() if k != "response_format"}
        if body:
            sent["extra_body"] = body
        return _seed_flag(sent)
    prepare = getattr(chat, "_prepare_params", None)
    if callable(prepare):  # langchain-google-genai
        config = prepare(None, seed=_PROBE_SEED).model_dump(exclude_none=True, mode="json")
        sent = {k: config[k] for k in _GEMINI_KEYS if k in config}
        if config.get("thinking_config"):
            sent["thinking_config"] = config["thinking_config"]
        return _seed_flag(sent)
    llm = getattr(chat, "llm", None)  # langchain-huggingface: the endpoint's or the pipeline's own settings
    if llm is not None:
        if kwargs := getattr(llm, "pipeline_kwargs", None):
            return {k: kwargs[k] for k in ("temperature", "max_new_tokens", "do_sample") if k in kwargs}
        names = ("temperature", "max_new_tokens", "seed")
        sent = {k: getattr(llm, k) for k in names if getattr(llm, k, None) is not None}
        return _seed_flag(sent)
    sent = {k: getattr(chat, k) for k in ("temperature", "max_tokens", "seed") if hasattr(chat, k)}
    if "seed" in sent:  # the embedded model takes the per-call seed as a call option
        sent["seed"] = "per call"
    return sent


def _seed_flag(sent: dict[str, Any]) -> dict[str, Any]:
    """The probe's seed as "per call": each call sends its own (nodes.dialogue.call_seed)."""
    if sent.get("seed") == _PROBE_SEED:
        sent["seed"] = "per call"
    return sent


def compare(
    asked: Mapping[str, Any], sent: Mapping[str, Any], *, provider: str, model: str, seeded: bool
) -> tuple[str, ...]:
    """Notes for each asked-for setting the request does not carry as asked (``asked``: temperature, max tokens).

    The embedded model takes every setting as asked; its judge reads one token's probabilities (greedy, one token)
    by design, which its sent settings show and no note repeats.
    """
    if provider == "local":
        return ()
    notes: list[str] = []
    temperature = asked.get("temperature")
    if temperature is not None:
        if sent.get("temperature") is None:
            notes.append(f"temperature {temperature:g} not sent: {_why_no_temperature(provider, model)}")
        elif float(sent["temperature"]) != float(temperature):
            notes.append(f"temperature {temperature:g} sent as {float(sent['temperature']):g}")
    cap = asked.get("cap")
    sent_cap = next((sent[k] for k in _CAP_KEYS if sent.get(k) is not None), None)
    if cap is not None:
        if sent_cap is None:
            notes.append(f"max tokens {asked.get('max_tokens')} not sent: the provider's own limit applies")
        elif int(sent_cap) != int(cap):
            notes.append(f"max tokens {asked.get('max_tokens')} sent as {sent_cap}")
    if not seeded:
        notes.append(f"seed not sent: {provider}: takes no per-call seed here (it keys the response cache only)")
    elif sent.get("seed") is None:
        notes.append("seed not sent: the integration dropped it")
    return tuple(notes)


def _why_no_temperature(provider: str, model: str) -> str:
    if provider == "openai" and model.lower().startswith("gpt-5"):
        return f"langchain-openai sends none to {model} (a reasoning model samples at 1)"
    return "the integration sends none (the provider's default applies)"
