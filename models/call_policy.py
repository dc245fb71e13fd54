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
    _sharers: int = field(default=1, repr=False)

    def gate_for(self, spec: str, provider: str) -> RateGate:
        """The shared gate of a spec: its own limit if it has one, else its provider's."""
        key = spec if spec in self.rate_limits else provider
        with self._gates_lock:
            if key not in self._gates:
                self._gates[key] = RateGate(self._share(key))
            return self._gates[key]

    def share_among(self, sharers: int) -> None:
        """Let this process use 1/``sharers`` of every rate limit: the run's limit is then the total of all workers."""
        with self._gates_lock:
            self._sharers = max(1, sharers)
            for key, gate in self._gates.items():
                gate.retune(self._share(key))

    def _share(self, key: str) -> float | None:
        limit = self.rate_limits.get(key)
        return limit / self._sharers if limit else None

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
