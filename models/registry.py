"""The one place where a ``provider:model`` spec becomes a LangChain chat model.

Providers import their SDK only when used, and a missing key or package stops
with one line naming the fix. The requested spec and the resolved model id are
recorded separately with every run.

Providers: ``local:gemma3-270m`` (embedded, llama.cpp), ``openai:MODEL`` (OpenAI, or
any OpenAI-compatible server through a base URL), ``google_genai:MODEL`` and
``hf:REPO`` (a local transformers pipeline; an inference endpoint when the name is a
URL, a base URL is set, or ``extra.provider`` names a Hugging Face inference provider).
Every chat model is wrapped by :mod:`nodes.resilience` (retries, rate limit, response
cache), so the nodes see one interface whatever the provider.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel

from checkpoints.redaction import strip_credentials, without_secrets
from checkpoints.vocabulary import Role
from models.call_policy import CallPolicy
from models.request_settings import SentSettings, compare, request_settings
from models.thinking import (
    Thinking,
    ThinkingError,
    ThinkingPlan,
    compatible_plan,
    gemini_plan,
    no_thinking_plan,
    openai_plan,
)

PromptStyle = Literal["chat", "transcript"]
StructuredOutput = Literal["openai", "openai_compatible", "gemini"]

DEFAULT_SPEC = "local:gemma3-270m"
# Providers whose calls take a per-call ``seed`` option (others get it in the cache key only).
_SEEDED_PROVIDERS = frozenset({"local", "openai", "google_genai"})
# Providers that constrain a reply to a JSON schema: OpenAI's response_format (also llama.cpp's
# server, vLLM and Ollama through their OpenAI-compatible API) and Gemini's structured output.
_STRUCTURED: dict[str, StructuredOutput] = {"openai": "openai", "google_genai": "gemini"}
# Providers whose models always answer from a server or an API (hf: when it names an endpoint; see computes_here).
_SERVED_PROVIDERS = frozenset({"openai", "google_genai"})


class ModelSpecError(ValueError):
    """A model spec that names no known provider or model, or that cannot be built here."""


@dataclass(frozen=True)
class ModelSpec:
    """A parsed ``provider:model`` spec."""

    provider: str
    name: str

    def __str__(self) -> str:
        return f"{self.provider}:{self.name}"


@dataclass(frozen=True)
class Sampling:
    """Per-role sampling settings; ``extra`` goes to the provider's constructor as is."""

    temperature: float = 0.7
    max_tokens: int = 250
    """The visible reply's cap (reasoning has its own budget: models/thinking.py)."""
    seed: int | None = None
    base_url: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    thinking: Thinking | None = None
    """``off``, ``on``, a reasoning budget in tokens, or None: the model's own (models/thinking.py)."""


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
        raise ModelSpecError(
            f"model spec {text!r} is not provider:model (for example {DEFAULT_SPEC}, "
            f"openai:gpt-4o-mini, google_genai:gemini-2.5-flash-lite, hf:REPO)"
        )
    if provider not in _PROVIDERS:
        raise ModelSpecError(
            f"unknown model provider {provider!r} in {text!r}: use one of {', '.join(sorted(_PROVIDERS))}"
        )
    return ModelSpec(provider, name.strip())


def create_role_model(spec_text: str, *, role: Role, sampling: Sampling, policy: CallPolicy | None = None) -> RoleModel:
    """Build the chat model for one role from its spec and sampling settings.

    ``policy`` (shared by all roles of a run) sets retries, rate limits and the response
    cache; without one the model still retries transient errors, with no cache.
    """
    spec = parse_spec(spec_text)
    try:
        plan = thinking_plan(spec, sampling)
        call_sampling = dataclasses.replace(
            sampling, max_tokens=plan.cap, extra=_merged(plan.arguments, sampling.extra)
        )
        chat, model_id, style = _PROVIDERS[spec.provider](spec.name, role, call_sampling)
    except ModelSpecError:
        raise
    except ThinkingError as exc:
        raise ModelSpecError(str(exc)) from None
    except (TypeError, ValueError) as exc:  # a constructor refusing an argument (pydantic errors are ValueErrors)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelSpecError(f"cannot build {spec} for the {role} role ({first}): check its extra arguments") from None
    sent = _sent_settings(chat, spec, sampling, plan)
    policy = policy or CallPolicy()
    retry = policy.retry
    if spec.provider == "local":
        # An in-process call cannot be cancelled mid-generation: no per-attempt timeout.
        retry = dataclasses.replace(retry, timeout=None)
    wrapped = policy.wrap(
        chat,
        spec=str(spec),
        provider=spec.provider,
        role=role,
        retry=retry,
        cache_params=cache_params(str(spec), call_sampling, chat),
        seed_option=spec.provider in _SEEDED_PROVIDERS,
        endpoint=provider_endpoint(spec, sampling),
    )
    structured = _STRUCTURED.get(spec.provider) if style == "chat" else None
    if structured == "openai" and (sampling.base_url or os.environ.get("OPENAI_BASE_URL")):
        structured = "openai_compatible"
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
    if spec.provider == "openai":
        if sampling.base_url or os.environ.get("OPENAI_BASE_URL"):
            return compatible_plan(sampling.thinking, max_tokens=sampling.max_tokens)
        return openai_plan(
            sampling.thinking, model=spec.name, max_tokens=sampling.max_tokens, profile=_profile(spec, sampling)
        )
    if spec.provider == "google_genai":
        return gemini_plan(
            sampling.thinking, model=spec.name, max_tokens=sampling.max_tokens, profile=_profile(spec, sampling)
        )
    return no_thinking_plan(
        sampling.thinking,
        spec=str(spec),
        max_tokens=sampling.max_tokens,
        reasons=False if spec.provider == "local" else None,
    )


def _profile(spec: ModelSpec, sampling: Sampling) -> dict[str, Any]:
    """The model's profile as its LangChain integration knows it (reasoning, effort levels); {} without one."""
    try:
        if spec.provider == "openai":
            from langchain_openai import ChatOpenAI

            return dict(ChatOpenAI(model=spec.name, api_key="profile-only").profile or {})
        from langchain_google_genai import ChatGoogleGenerativeAI

        return dict(ChatGoogleGenerativeAI(model=spec.name, google_api_key="profile-only").profile or {})
    except Exception:  # noqa: BLE001 - a missing package is said by the provider's factory; no profile here
        return {}


def _merged(arguments: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The thinking plan's constructor arguments under the role's own ``extra`` (its ``extra_body`` merged)."""
    merged = dict(arguments) | dict(extra)
    if isinstance(arguments.get("extra_body"), dict) and isinstance(extra.get("extra_body"), dict):
        merged["extra_body"] = arguments["extra_body"] | extra["extra_body"]
    return merged


def _sent_settings(chat: BaseChatModel, spec: ModelSpec, sampling: Sampling, plan: ThinkingPlan) -> SentSettings:
    """What a call sends (the integration's own request) and the notes on what was dropped or changed."""
    try:
        sent = request_settings(chat)
    except Exception:  # noqa: BLE001 - an integration whose request cannot be built offline: nothing to compare
        return SentSettings(notes=plan.notes)
    asked = {"temperature": sampling.temperature, "max_tokens": sampling.max_tokens, "cap": plan.cap}
    notes = compare(asked, sent, provider=spec.provider, model=spec.name, seeded=spec.provider in _SEEDED_PROVIDERS)
    return SentSettings(sent, (*plan.notes, *notes))


def provider_endpoint(spec: ModelSpec, sampling: Sampling) -> str | None:
    """Where a spec's calls go, as its circuit's name: the base URL (no credentials) or the provider; None
    in-process."""
    if spec.provider == "local":
        return None
    url = sampling.base_url or (os.environ.get("OPENAI_BASE_URL") if spec.provider == "openai" else None)
    return f"{spec.provider} @ {strip_credentials(url)}" if url else spec.provider


def computes_here(spec_text: str, sampling: Sampling) -> bool:
    """Whether a spec's model computes in this process (the embedded llama.cpp model, a transformers pipeline, a
    provider registered at run time) rather than on a server or an API: such a run plays in one process."""
    spec = parse_spec(spec_text)
    if spec.provider == "hf":
        return not _hf_endpoint(spec.name, sampling)
    return spec.provider not in _SERVED_PROVIDERS


def _hf_endpoint(name: str, sampling: Sampling) -> bool:
    """An hf: spec served elsewhere: a URL spec, a base URL, or a Hugging Face inference provider in ``extra``."""
    return name.startswith(("http://", "https://")) or bool(sampling.base_url) or "provider" in sampling.extra


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


def _require_key(spec: str, *names: str, hint: str = "") -> str:
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    raise ModelSpecError(f"no API key for {spec}: set {' or '.join(names)}{hint}")


def _require_package(spec: str, module: str, package: str) -> None:
    try:
        __import__(module)
    except ImportError:
        raise ModelSpecError(f"{spec} needs the {package} package: pip install {package}") from None


def _local(name: str, role: Role, sampling: Sampling) -> tuple[BaseChatModel, str, PromptStyle]:
    from models.llama.instance import ModelUnavailableError
    from models.llama.model import create_local_model

    try:
        chat = create_local_model(
            name,
            role=role,
            temperature=sampling.temperature,
            max_tokens=sampling.max_tokens,
            seed=sampling.seed,
            **sampling.extra,
        )
    except (ValueError, ModelUnavailableError) as exc:
        raise ModelSpecError(str(exc)) from None
    return chat, f"local:{name} (llama.cpp, GGUF Q4_K_M, base model)", "transcript"


def _openai(name: str, role: Role, sampling: Sampling) -> tuple[BaseChatModel, str, PromptStyle]:
    spec = f"openai:{name}"
    _require_package(spec, "langchain_openai", "langchain-openai")
    from langchain_openai import ChatOpenAI

    base_url = sampling.base_url or os.environ.get("OPENAI_BASE_URL")
    if base_url:
        # An OpenAI-compatible local server (vLLM, Ollama, llama.cpp) usually needs no key.
        key = os.environ.get("OPENAI_API_KEY") or "not-needed"
    else:
        key = _require_key(spec, "OPENAI_API_KEY", hint=" (or --base-url for an OpenAI-compatible server)")
    kwargs: dict[str, Any] = dict(
        model=name,
        temperature=sampling.temperature,
        max_tokens=sampling.max_tokens,
        api_key=key,
        base_url=base_url,
        max_retries=0,  # retries are ours: one policy for every provider
        # A timeout object (unhashable) gives the model HTTP clients of its own: langchain-openai otherwise shares one
        # cached async client per process, which belongs to the first event loop that used it, so a second run
        # playing at once on another loop (two threads, or a notebook's) would fail. The per-call deadline is ours.
        timeout=_client_timeout(),
    )
    if sampling.seed is not None:
        kwargs["seed"] = sampling.seed
    chat_class = _compatible_chat_openai() if base_url else ChatOpenAI
    chat = chat_class(**_merged(kwargs, sampling.extra))
    return chat, f"openai:{name}" + (f" @ {strip_credentials(base_url)}" if base_url else ""), "chat"


def _client_timeout() -> Any:
    """No timeout, as the openai SDK's own type (whichever HTTP library it is built on checks for that type)."""
    import openai

    return openai.Timeout(None)


@functools.cache
def _compatible_chat_openai() -> type[BaseChatModel]:
    """The chat model of an OpenAI-compatible server: langchain-deepseek's ``ChatDeepSeek``, which reads the
    ``reasoning_content`` (and ``reasoning``) field vLLM, SGLang, llama.cpp's server and DeepSeek's API send a
    thinking model's reasoning in (langchain-openai's ChatOpenAI drops it).

    It sends ``max_tokens``, the field such servers know (ChatOpenAI renames it ``max_completion_tokens``, which
    llama.cpp's server, older vLLM and TGI ignore: they then generate to the end of the context). A call's own
    ``extra_body`` (structured output) is merged into the model's (the chat template's thinking switch), not put in
    its place.
    """
    from langchain_deepseek import ChatDeepSeek

    class CompatibleChatOpenAI(ChatDeepSeek):
        def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any) -> dict:
            if isinstance(kwargs.get("extra_body"), dict) and self.extra_body:
                kwargs["extra_body"] = {**self.extra_body, **kwargs["extra_body"]}
            payload = super()._get_request_payload(input_, stop=stop, **kwargs)
            if "max_completion_tokens" in payload:
                payload["max_tokens"] = payload.pop("max_completion_tokens")
            return payload

        @property
        def _identifying_params(self) -> dict[str, Any]:
            # As ChatOpenAI named them, so the response cache keeps the keys its replies were stored under.
            params = dict(super()._identifying_params)
            if "max_tokens" in params:
                params["max_completion_tokens"] = params.pop("max_tokens")
            return params

        def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
            params = super()._get_ls_params(stop=stop, **kwargs)
            params["ls_provider"] = "openai"  # an OpenAI-compatible server, whichever package reads its answers
            return params

    return CompatibleChatOpenAI


def _google(name: str, role: Role, sampling: Sampling) -> tuple[BaseChatModel, str, PromptStyle]:
    spec = f"google_genai:{name}"
    _require_package(spec, "langchain_google_genai", "langchain-google-genai")
    key = _require_key(spec, "GOOGLE_API_KEY", "GEMINI_API_KEY")
    from langchain_google_genai import ChatGoogleGenerativeAI

    kwargs: dict[str, Any] = dict(
        model=name,
        temperature=sampling.temperature,
        max_output_tokens=sampling.max_tokens,
        google_api_key=key,
        max_retries=0,
    )
    if sampling.seed is not None:
        kwargs["seed"] = sampling.seed
    if sampling.base_url:
        kwargs["base_url"] = sampling.base_url
    model_id = spec + (f" @ {strip_credentials(sampling.base_url)}" if sampling.base_url else "")
    return ChatGoogleGenerativeAI(**_merged(kwargs, sampling.extra)), model_id, "chat"


def _huggingface(name: str, role: Role, sampling: Sampling) -> tuple[BaseChatModel, str, PromptStyle]:
    spec = f"hf:{name}"
    _require_package(spec, "langchain_huggingface", "langchain-huggingface")
    from langchain_huggingface import ChatHuggingFace, HuggingFaceEndpoint, HuggingFacePipeline

    extra = dict(sampling.extra)
    is_url = name.startswith(("http://", "https://"))
    if _hf_endpoint(name, sampling):
        # An endpoint: a URL spec (Inference Endpoint, TGI), a base URL serving REPO, or
        # REPO through a Hugging Face inference provider (extra.provider = "auto", ...).
        url = name if is_url else sampling.base_url
        hosted = "provider" in extra or (url is not None and "huggingface" in url)
        if hosted:
            token: str | None = _require_key(spec, "HF_TOKEN", "HUGGINGFACEHUB_API_TOKEN")
        else:
            token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGINGFACEHUB_API_TOKEN")
        kwargs: dict[str, Any] = dict(
            temperature=max(sampling.temperature, 0.01),  # TGI rejects 0: near-greedy instead
            max_new_tokens=sampling.max_tokens,
            huggingfacehub_api_token=token,
        )
        if url:
            kwargs["endpoint_url"] = url
        else:
            kwargs["repo_id"] = name
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        llm = HuggingFaceEndpoint(**(kwargs | extra))
        if url:
            where = strip_credentials(url)
            return ChatHuggingFace(llm=llm), (f"hf-endpoint:{where}" if is_url else f"{spec} @ {where}"), "chat"
        return ChatHuggingFace(llm=llm, model_id=name), f"{spec} via {extra['provider']}", "chat"
    _require_package(spec, "transformers", "transformers torch")
    try:
        llm = HuggingFacePipeline.from_model_id(  # type: ignore[assignment]
            model_id=name,
            task="text-generation",
            pipeline_kwargs={
                "max_new_tokens": sampling.max_tokens,
                "temperature": sampling.temperature,
                "do_sample": sampling.temperature > 0,
                "return_full_text": False,
            },
            **extra,
        )
    except Exception as exc:  # noqa: BLE001 - hub/download failures come in many types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelSpecError(
            f"cannot load {spec} through transformers ({first}): download it first or use another spec"
        ) from None
    return ChatHuggingFace(llm=llm, model_id=name), f"{spec} (transformers pipeline)", "chat"


_PROVIDERS: dict[str, Callable[[str, Role, Sampling], tuple[BaseChatModel, str, PromptStyle]]] = {
    "local": _local,
    "openai": _openai,
    "google_genai": _google,
    "hf": _huggingface,
}


@contextlib.contextmanager
def registered_provider(
    name: str, factory: Callable[[str, Role, Sampling], tuple[BaseChatModel, str, PromptStyle]]
) -> Iterator[None]:
    """``factory`` registered as ``name`` inside the block; afterwards the registry is as it was."""
    previous = _PROVIDERS.get(name)
    _PROVIDERS[name] = factory
    try:
        yield
    finally:
        if previous is None:
            _PROVIDERS.pop(name, None)
        else:
            _PROVIDERS[name] = previous
