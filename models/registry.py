"""The one place where a ``provider:model`` spec becomes a LangChain chat model.

Providers import their SDK only when used, and a missing key or package stops
with one line naming the fix. The requested spec and the resolved model id are
recorded separately with every run.

Providers are described in models/providers.py (the built-in ones in models/builtin_providers.py:
``local:gemma3-270m``, ``openai:MODEL``, ``google_genai:MODEL``, ``hf:REPO``; others through the
``dymt_esb.providers`` entry point group); this module reads only their descriptors. Every chat model is wrapped by
:mod:`nodes.resilience` (retries, rate limit, response cache), so the nodes see one interface whatever the provider.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel

from checkpoints.redaction import strip_credentials, without_secrets
from checkpoints.vocabulary import Role
from models.call_policy import CallPolicy
from models.providers import (
    ModelSpec,
    ModelSpecError,
    PromptStyle,
    Provider,
    Sampling,
    StructuredOutput,
    get_provider,
    merged_arguments,
    provider_names,
    registered_provider,
)
from models.request_settings import SentSettings, compare, request_settings
from models.thinking import ThinkingError, ThinkingPlan

__all__ = [
    "DEFAULT_SPEC",
    "ROLE_SAMPLING",
    "ModelSpec",
    "ModelSpecError",
    "PromptStyle",
    "Provider",
    "RoleModel",
    "Sampling",
    "StructuredOutput",
    "cache_params",
    "computes_here",
    "create_role_model",
    "parse_spec",
    "provider_endpoint",
    "registered_provider",
    "thinking_plan",
]

DEFAULT_SPEC = "local:gemma3-270m"
# The one sampling default per role (runs, branches, resumed dialogues and labellers): the judge is greedy.
ROLE_SAMPLING: dict[Role, Sampling] = {
    "user": Sampling(temperature=0.7, max_tokens=250),
    "target": Sampling(temperature=0.7, max_tokens=250),
    "judge": Sampling(temperature=0.0, max_tokens=250),
}


@dataclass(frozen=True)
class RoleModel:
    """A chat model ready for one role, with what to record about it."""

    spec: str
    model_id: str
    chat: BaseChatModel
    style: PromptStyle
    sampling: Sampling
    structured: StructuredOutput | None = None
    """How the provider constrains a reply to a JSON schema (None: text parsing only)."""
    prompt: Any = None
    """A prompts.PromptTemplate replacing the role's built-in prompt (--judge-prompt FILE and the like)."""
    thinking: ThinkingPlan = field(default_factory=ThinkingPlan)
    """What the provider is sent for thinking, and the request's cap (the reply's plus the reasoning budget)."""
    sent: SentSettings = field(default_factory=SentSettings)
    """The settings a call sends as the integration builds the request, and what differs from what was asked."""

    @property
    def request_cap(self) -> int:
        """The request's output cap: the visible reply's, plus the reasoning budget where one cap covers both."""
        return self.thinking.cap or self.sampling.max_tokens


def parse_spec(text: str) -> ModelSpec:
    """Split ``provider:model``; unknown providers list the ones that exist."""
    provider, sep, name = text.partition(":")
    if not sep or not name.strip():
        examples = ", ".join(p.example for p in map(get_provider, provider_names()) if p.example)
        raise ModelSpecError(f"model spec {text!r} is not provider:model (for example {examples})")
    try:
        get_provider(provider)
    except ModelSpecError as exc:
        raise ModelSpecError(f"{exc} (in {text!r})") from None
    return ModelSpec(provider, name.strip())


def create_role_model(spec_text: str, *, role: Role, sampling: Sampling, policy: CallPolicy | None = None) -> RoleModel:
    """Build the chat model for one role from its spec and sampling settings.

    ``policy`` (shared by all roles of a run) sets retries, rate limits and the response
    cache; without one the model still retries transient errors, with no cache.
    """
    spec = parse_spec(spec_text)
    provider = get_provider(spec.provider)
    try:
        plan = provider.thinking_plan(spec, sampling)
        call_sampling = dataclasses.replace(
            sampling, max_tokens=plan.cap, extra=merged_arguments(plan.arguments, sampling.extra)
        )
        chat, model_id, style = provider.factory(spec.name, role, call_sampling)
    except ModelSpecError:
        raise
    except ThinkingError as exc:
        raise ModelSpecError(str(exc)) from None
    except (TypeError, ValueError) as exc:  # a constructor refusing an argument (pydantic errors are ValueErrors)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelSpecError(f"cannot build {spec} for the {role} role ({first}): check its extra arguments") from None
    sent = _sent_settings(chat, spec, provider, sampling, plan)
    policy = policy or CallPolicy()
    retry = policy.retry
    if provider.in_process:
        # An in-process call cannot be cancelled mid-generation: no per-attempt timeout.
        retry = dataclasses.replace(retry, timeout=None)
    wrapped = policy.wrap(
        chat,
        spec=str(spec),
        provider=spec.provider,
        role=role,
        retry=retry,
        cache_params=cache_params(str(spec), call_sampling, chat),
        seed_option=provider.seeded,
        endpoint=provider_endpoint(spec, sampling),
    )
    structured = provider.structured_style(sampling) if style == "chat" else None
    return RoleModel(
        spec=str(spec),
        model_id=model_id,
        chat=wrapped,
        style=style,
        sampling=sampling,
        structured=structured,
        thinking=plan,
        sent=sent,
    )


def thinking_plan(spec: ModelSpec, sampling: Sampling) -> ThinkingPlan:
    """What ``spec``'s provider is sent for ``sampling.thinking``, and the request's cap (models/thinking.py)."""
    return get_provider(spec.provider).thinking_plan(spec, sampling)


def _sent_settings(
    chat: BaseChatModel, spec: ModelSpec, provider: Provider, sampling: Sampling, plan: ThinkingPlan
) -> SentSettings:
    """What a call sends (the integration's own request) and the notes on what was dropped or changed."""
    try:
        sent = request_settings(chat)
    except Exception:  # noqa: BLE001 - an integration whose request cannot be built offline: nothing to compare
        return SentSettings(notes=plan.notes)
    asked = {"temperature": sampling.temperature, "max_tokens": sampling.max_tokens, "cap": plan.cap}
    notes = compare(asked, sent, provider=spec.provider, model=spec.name, seeded=provider.seeded)
    return SentSettings(sent, (*plan.notes, *notes))


def provider_endpoint(spec: ModelSpec, sampling: Sampling) -> str | None:
    """Where a spec's calls go, as its circuit's name: the base URL (no credentials) or the provider; None
    in-process."""
    provider = get_provider(spec.provider)
    if provider.in_process:
        return None
    url = provider.base_url(sampling)
    return f"{spec.provider} @ {strip_credentials(url)}" if url else spec.provider


def computes_here(spec_text: str, sampling: Sampling) -> bool:
    """Whether a spec's model computes in this process (the embedded llama.cpp model, a transformers pipeline, a
    provider that declares no server) rather than on a server or an API: such a run plays in one process."""
    spec = parse_spec(spec_text)
    return not get_provider(spec.provider).is_served(spec, sampling)


def cache_params(spec: str, sampling: Sampling, chat: BaseChatModel) -> dict[str, Any]:
    """What besides the messages decides a reply: spec, sampling, base URL, extra and provider parameters.

    The provider's own identifying parameters catch role-specific settings (the
    embedded judge generates one token with logprobs whatever ``max_tokens`` says).
    Secrets are left out so that rotating a key keeps the cache.
    """
    try:
        identifying = dict(chat._identifying_params)
    except Exception:  # noqa: BLE001 - a provider without them still caches on the rest
        identifying = {}
    return {
        "spec": spec,
        "temperature": sampling.temperature,
        "max_tokens": sampling.max_tokens,
        "seed": sampling.seed,
        "base_url": strip_credentials(sampling.base_url) if sampling.base_url else None,
        "extra": without_secrets(sampling.extra),
        "provider_params": without_secrets(identifying),
    }
