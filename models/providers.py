"""Model providers, each described once: the ``provider:`` of a spec and everything the run needs to know about it.

A :class:`Provider` holds the factory that builds the chat model and what the rest of the product switches on: the
key variables (named in errors), whether a call takes a per-call seed, how the provider constrains a reply to a JSON
schema, whether its models answer from a server, what it is sent for thinking, and whether its calls run in this
process. Imports run one way: models/builtin_providers.py imports this module and registers the built-in
providers through :func:`register_provider` (the ``models`` package imports it first, so they are always there);
a package ships its own through an entry point in the ``dymt_esb.providers`` group, read lazily, as simonw/llm's
plugins register their models::

    [project.entry-points."dymt_esb.providers"]
    mine = "my_package.dymt_provider:provider"

The entry point names a :class:`Provider`, or a function without arguments returning one or several. Entry points are
read once, the first time a provider is looked up; one that fails to load is reported by name when its provider is
asked for, and the others work.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from checkpoints.vocabulary import Role
from models.thinking import Thinking, ThinkingPlan, no_thinking_plan

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

ENTRY_POINT_GROUP = "dymt_esb.providers"

PromptStyle = Literal["chat", "transcript"]
"""How a role's prompt is given: as chat messages, or as one transcript for a base model to continue."""
StructuredOutput = Literal["openai", "openai_compatible", "gemini"]
"""How a provider constrains a reply to a JSON schema (nodes/structured.py sends each style's options)."""


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


Factory = Callable[[str, Role, Sampling], "tuple[BaseChatModel, str, PromptStyle]"]
"""``(model name, role, sampling) -> (chat model, resolved model id, prompt style)``; raises ModelSpecError."""


@dataclass(frozen=True)
class Provider:
    """One provider: its factory and what the run switches on, in one record."""

    name: str
    """The ``provider`` in ``provider:model``."""
    factory: Factory
    key_variables: tuple[str, ...] = ()
    """The environment variables its key is read from, first found wins (named when a key is missing or refused)."""
    seeded: bool = False
    """Its calls take a per-call ``seed`` option (otherwise the seed only keys the response cache)."""
    structured: StructuredOutput | None = None
    """How it constrains a chat reply to a JSON schema; None: the reply is parsed as text."""
    compatible_structured: StructuredOutput | None = None
    """The style instead of ``structured`` when a base URL points it at a compatible server (None: ``structured``)."""
    served: bool | Callable[[ModelSpec, Sampling], bool] = False
    """Its models answer from a server or an API (a run then may play in several processes), or a test of the spec."""
    base_url_variable: str | None = None
    """An environment variable that sets its base URL when a role sets none (``OPENAI_BASE_URL``)."""
    thinking: Callable[[ModelSpec, Sampling], ThinkingPlan] | None = None
    """What it is sent for ``sampling.thinking``; None: it has no switch, so only ``off`` or no setting is taken."""
    reasons: bool | None = None
    """Without a ``thinking`` function: whether its models reason at all (False), or unknown (None)."""
    in_process: bool = False
    """Its calls run in this process and cannot be cancelled mid-call: no endpoint circuit, no per-attempt timeout."""
    example: str = ""
    """A spec to show in messages (``openai:gpt-4o-mini``)."""

    def base_url(self, sampling: Sampling) -> str | None:
        """The base URL its calls go to: the role's own, else its variable's, else None (its default endpoint)."""
        if sampling.base_url:
            return sampling.base_url
        if self.base_url_variable:
            return os.environ.get(self.base_url_variable) or None
        return None

    def structured_style(self, sampling: Sampling) -> StructuredOutput | None:
        """How a chat reply of this provider is constrained to a JSON schema with ``sampling``'s base URL."""
        if self.compatible_structured is not None and self.base_url(sampling):
            return self.compatible_structured
        return self.structured

    def is_served(self, spec: ModelSpec, sampling: Sampling) -> bool:
        """Whether ``spec``'s model answers from a server or an API rather than computing in this process."""
        return self.served(spec, sampling) if callable(self.served) else self.served

    def thinking_plan(self, spec: ModelSpec, sampling: Sampling) -> ThinkingPlan:
        """What ``spec`` is sent for ``sampling.thinking``, and the request's cap (models/thinking.py)."""
        if self.thinking is not None:
            return self.thinking(spec, sampling)
        return no_thinking_plan(sampling.thinking, spec=str(spec), max_tokens=sampling.max_tokens, reasons=self.reasons)

    def key_hint(self) -> str:
        """Its key variables as a message names them (``GOOGLE_API_KEY (or GEMINI_API_KEY)``)."""
        if not self.key_variables:
            return "the provider's API key"
        first, *others = self.key_variables
        return first + (f" (or {' or '.join(others)})" if others else "")


def merged_arguments(arguments: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` under a role's own ``extra`` (their ``extra_body`` merged, the role's winning)."""
    merged = dict(arguments) | dict(extra)
    if isinstance(arguments.get("extra_body"), dict) and isinstance(extra.get("extra_body"), dict):
        merged["extra_body"] = arguments["extra_body"] | extra["extra_body"]
    return merged


_lock = threading.RLock()
_providers: dict[str, Provider] = {}
_failures: dict[str, str] = {}
"""Entry points that failed to load: their name and the error's first line."""
_builtins: set[str] = set()
_loaded = False


def register_provider(provider: Provider, *, builtin: bool = False) -> None:
    """Make ``provider`` known by its name (a later registration of the same name replaces the earlier).

    ``builtin``: one of DyMT-ESB's own (models/builtin_providers.py registers them as it is imported); an entry
    point's provider cannot take a built-in's name.
    """
    if not isinstance(provider, Provider):
        raise TypeError(f"register_provider takes a models.providers.Provider, not {type(provider).__name__}")
    if not provider.name or ":" in provider.name:
        raise ValueError(f"a provider's name is the part before ':' in a spec, not {provider.name!r}")
    with _lock:
        _providers[provider.name] = provider
        if builtin:
            _builtins.add(provider.name)


def get_provider(name: str) -> Provider:
    """The provider registered as ``name``; an unknown one says which exist (and which entry points failed)."""
    _load()
    with _lock:
        found = _providers.get(name)
        known = sorted(_providers)
        failures = dict(_failures)
    if found is not None:
        return found
    failed = next(
        (f"; its entry point {ep!r} failed to load ({why})" for ep, why in failures.items() if ep == name), ""
    )
    raise ModelSpecError(f"unknown model provider {name!r}: use one of {', '.join(known)}{failed}")


def provider_names() -> list[str]:
    """The names of every registered provider, sorted."""
    _load()
    with _lock:
        return sorted(_providers)


def provider_load_failures() -> dict[str, str]:
    """Entry points of the ``dymt_esb.providers`` group that failed to load, with why."""
    _load()
    with _lock:
        return dict(_failures)


@contextlib.contextmanager
def registered_provider(name: str, provider: Provider | Factory) -> Iterator[None]:
    """``provider`` registered as ``name`` inside the block; afterwards the registry is as it was.

    A bare factory under a known name keeps that provider's other settings (a fake ``openai`` is still seeded and
    served); under a new name it gets the defaults.
    """
    _load()
    with _lock:
        previous = _providers.get(name)
        if isinstance(provider, Provider):
            described = dataclasses.replace(provider, name=name)
        elif previous is not None:
            described = dataclasses.replace(previous, factory=provider)
        else:
            described = Provider(name=name, factory=provider)
        _providers[name] = described
    try:
        yield
    finally:
        with _lock:
            if previous is None:
                _providers.pop(name, None)
            else:
                _providers[name] = previous


def _load() -> None:
    """Register the entry points' providers (once per process, the first time a provider is looked up)."""
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                for provider in _provided(entry_point.load()):
                    if provider.name in _builtins:
                        raise ValueError(f"{provider.name!r} is a built-in provider's name")
                    register_provider(provider)
            except Exception as exc:  # noqa: BLE001 - a broken plugin is reported, it does not stop the others
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                _failures[entry_point.name] = f"{entry_point.value}: {first}"
        _loaded = True


def _provided(loaded: Any) -> Iterable[Provider]:
    """What an entry point gave: a Provider, or a function returning one or several."""
    if isinstance(loaded, Provider):
        return [loaded]
    if callable(loaded):
        result = loaded()
        providers = [result] if isinstance(result, Provider) else list(result)
        if all(isinstance(p, Provider) for p in providers):
            return providers
    raise TypeError("names neither a models.providers.Provider nor a function returning Providers")
