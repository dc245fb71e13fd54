"""The one place where a ``provider:model`` spec becomes a LangChain chat model.

Providers import their SDK only when used, and a missing key or package stops
with one line naming the fix. The requested spec and the resolved model id are
recorded separately with every run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from langchain_core.language_models import BaseChatModel

PromptStyle = Literal["chat", "transcript"]
Role = Literal["user", "target", "judge"]
ROLES: tuple[Role, ...] = ("user", "target", "judge")

DEFAULT_SPEC = "local:gemma3-270m"


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
    seed: int | None = None
    base_url: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RoleModel:
    """A chat model ready for one role, with what to record about it."""

    spec: str
    model_id: str
    chat: BaseChatModel
    style: PromptStyle
    sampling: Sampling


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


def create_role_model(spec_text: str, *, role: Role, sampling: Sampling) -> RoleModel:
    """Build the chat model for one role from its spec and sampling settings."""
    spec = parse_spec(spec_text)
    chat, model_id, style = _PROVIDERS[spec.provider](spec.name, role, sampling)
    return RoleModel(spec=str(spec), model_id=model_id, chat=chat, style=style, sampling=sampling)


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
    from nodes.local_model import create_local_model

    try:
        chat = create_local_model(
            name,
            role=role,
            temperature=sampling.temperature,
            max_tokens=sampling.max_tokens,
            seed=sampling.seed,
            **sampling.extra,
        )
    except ValueError as exc:
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
    )
    if sampling.seed is not None:
        kwargs["seed"] = sampling.seed
    chat = ChatOpenAI(**(kwargs | sampling.extra))
    return chat, f"openai:{name}" + (f" @ {_strip_credentials(base_url)}" if base_url else ""), "chat"


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
    return ChatGoogleGenerativeAI(**(kwargs | sampling.extra)), spec, "chat"


def _huggingface(name: str, role: Role, sampling: Sampling) -> tuple[BaseChatModel, str, PromptStyle]:
    spec = f"hf:{name}"
    _require_package(spec, "langchain_huggingface", "langchain-huggingface")
    from langchain_huggingface import ChatHuggingFace, HuggingFaceEndpoint, HuggingFacePipeline

    if name.startswith(("http://", "https://")):
        token = _require_key(spec, "HF_TOKEN", "HUGGINGFACEHUB_API_TOKEN")
        llm = HuggingFaceEndpoint(
            endpoint_url=name,
            huggingfacehub_api_token=token,
            temperature=max(sampling.temperature, 0.01),
            max_new_tokens=sampling.max_tokens,
            **sampling.extra,
        )
        return ChatHuggingFace(llm=llm), f"hf-endpoint:{_strip_credentials(name)}", "chat"
    _require_package(spec, "transformers", "transformers torch")
    try:
        llm = HuggingFacePipeline.from_model_id(
            model_id=name,
            task="text-generation",
            pipeline_kwargs={
                "max_new_tokens": sampling.max_tokens,
                "temperature": sampling.temperature,
                "do_sample": sampling.temperature > 0,
                "return_full_text": False,
            },
            **sampling.extra,
        )
    except Exception as exc:  # noqa: BLE001 - hub/download failures come in many types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelSpecError(
            f"cannot load {spec} through transformers ({first}): download it first or use another spec"
        ) from None
    return ChatHuggingFace(llm=llm, model_id=name), spec, "chat"


def _strip_credentials(url: str) -> str:
    """Drop user:password@ from a URL before it is stored or shown."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        parts = parts._replace(netloc=host)
    return urlunsplit(parts._replace(query=""))


_PROVIDERS: dict[str, Callable[[str, Role, Sampling], tuple[BaseChatModel, str, PromptStyle]]] = {
    "local": _local,
    "openai": _openai,
    "google_genai": _google,
    "hf": _huggingface,
}


def register_provider(
    name: str, factory: Callable[[str, Role, Sampling], tuple[BaseChatModel, str, PromptStyle]]
) -> None:
    """Add a provider (tests register scripted fakes; plugins may add real ones)."""
    _PROVIDERS[name] = factory
