"""How the models of one run call their providers: one retry policy, shared rate gates, the cache and the counters."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel

from models.call_stats import CallStats
from models.rate_limits import RateGate
from models.resilience import ResilientChatModel
from models.retries import RetryPolicy

if TYPE_CHECKING:
    from checkpoints.cache import ResponseCache


@dataclass
class CallPolicy:
    """How the models of one run call their providers; one instance is shared by all roles."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    rate_limits: Mapping[str, float] = field(default_factory=dict)
    """Requests per minute, keyed by provider (``openai``) or by a full spec (``openai:gpt-4o``)."""
    cache: ResponseCache | None = None
    stats: CallStats = field(default_factory=CallStats)
    _gates: dict[str, RateGate] = field(default_factory=dict, repr=False)
    _gates_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def gate_for(self, spec: str, provider: str) -> RateGate:
        """The shared gate of a spec: its own limit if it has one, else its provider's."""
        key = spec if spec in self.rate_limits else provider
        with self._gates_lock:
            if key not in self._gates:
                self._gates[key] = RateGate(self.rate_limits.get(key))
            return self._gates[key]

    def wrap(self, chat: BaseChatModel, *, spec: str, provider: str, role: str, cache_params: dict[str, Any],
             retry: RetryPolicy | None = None, seed_option: bool = True) -> ResilientChatModel:
        return ResilientChatModel(
            inner=chat,
            spec=spec,
            role=role,
            retry=retry or self.retry,
            gate=self.gate_for(spec, provider),
            response_cache=self.cache,
            cache_params=cache_params,
            stats=self.stats,
            seed_option=seed_option,
        )
