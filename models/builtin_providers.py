"""The built-in providers: the embedded model, OpenAI (and OpenAI-compatible servers), Gemini and Hugging Face.

Each is one :class:`~models.providers.Provider`; its factory imports the provider's SDK only when used and stops with
one line naming the package or key variable that is missing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from checkpoints.redaction import strip_credentials
from checkpoints.vocabulary import Role
from models.providers import (
    ModelSpec,
    ModelSpecError,
    PromptStyle,
    Provider,
    Sampling,
    merged_arguments,
    register_provider,
)
from models.thinking import ThinkingPlan, compatible_plan, gemini_plan, openai_plan

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel


def _openai_thinking(spec: ModelSpec, sampling: Sampling) -> ThinkingPlan:
    if sampling.base_url or os.environ.get("OPENAI_BASE_URL"):
        return compatible_plan(sampling.thinking, max_tokens=sampling.max_tokens)
    return openai_plan(
        sampling.thinking, model=spec.name, max_tokens=sampling.max_tokens, profile=_profile(_openai_profile, spec)
    )


def _gemini_thinking(spec: ModelSpec, sampling: Sampling) -> ThinkingPlan:
    return gemini_plan(
        sampling.thinking, model=spec.name, max_tokens=sampling.max_tokens, profile=_profile(_gemini_profile, spec)
    )


def _openai_profile(model: str) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=model, api_key="profile-only").profile


def _gemini_profile(model: str) -> Any:
    from langchain_google_genai import ChatGoogleGenerativeAI

    return ChatGoogleGenerativeAI(model=model, google_api_key="profile-only").profile


def _profile(read: Callable[[str], Any], spec: ModelSpec) -> dict[str, Any]:
    """The model's profile as its LangChain integration knows it (reasoning, effort levels); {} without one."""
    try:
        return dict(read(spec.name) or {})
    except Exception:  # noqa: BLE001 - a missing package is said by the provider's factory; no profile here
        return {}


def _hf_endpoint(name: str, sampling: Sampling) -> bool:
    """An hf: spec served elsewhere: a URL spec, a base URL, or a Hugging Face inference provider in ``extra``."""
    return name.startswith(("http://", "https://")) or bool(sampling.base_url) or "provider" in sampling.extra


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
    chat = chat_class(**merged_arguments(kwargs, sampling.extra))
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
    return ChatGoogleGenerativeAI(**merged_arguments(kwargs, sampling.extra)), model_id, "chat"


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


def _hf_served(spec: ModelSpec, sampling: Sampling) -> bool:
    return _hf_endpoint(spec.name, sampling)


BUILTIN_PROVIDERS: tuple[Provider, ...] = (
    Provider(
        name="local",
        factory=_local,
        seeded=True,
        reasons=False,
        in_process=True,
        example="local:gemma3-270m",
    ),
    Provider(
        name="openai",
        factory=_openai,
        key_variables=("OPENAI_API_KEY",),
        seeded=True,
        structured="openai",
        compatible_structured="openai_compatible",
        served=True,
        base_url_variable="OPENAI_BASE_URL",
        thinking=_openai_thinking,
        example="openai:gpt-4o-mini",
    ),
    Provider(
        name="google_genai",
        factory=_google,
        key_variables=("GOOGLE_API_KEY", "GEMINI_API_KEY"),
        seeded=True,
        structured="gemini",
        served=True,
        thinking=_gemini_thinking,
        example="google_genai:gemini-2.5-flash-lite",
    ),
    Provider(
        name="hf",
        factory=_huggingface,
        key_variables=("HF_TOKEN", "HUGGINGFACEHUB_API_TOKEN"),
        served=_hf_served,
        example="hf:REPO",
    ),
)

for _provider in BUILTIN_PROVIDERS:
    register_provider(_provider, builtin=True)
