"""How the models of one run call their providers: one retry policy, shared rate gates, the cache and the counters."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel

from models.call_stats import CallStats
from models.circuit import DEFAULT_OUTAGE_BUDGET_S, CircuitReport, OutageStatus, ProviderCircuit
from models.concurrency import SLOW_START, AdaptiveLimit
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
    outage_budget: float = DEFAULT_OUTAGE_BUDGET_S
    """Seconds a provider may stay unreachable (its circuit open) before its calls fail (--outage-budget)."""
    _circuits: dict[str, ProviderCircuit] = field(default_factory=dict, repr=False)
    _gates: dict[str, RateGate] = field(default_factory=dict, repr=False)
    _gates_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _sharers: int = field(default=1, repr=False)
    _answered_before: bool = field(default=False, repr=False)
    _answered_elsewhere: Callable[[], bool] | None = field(default=None, repr=False)
    _adapt: tuple[int, int] | None = field(default=None, repr=False)

    def gate_for(self, spec: str, provider: str) -> RateGate:
        """The shared gate of a spec: its own limit if it has one, else its provider's."""
        key = spec if spec in self.rate_limits else provider
        with self._gates_lock:
            if key not in self._gates:
                self._gates[key] = RateGate(self._share(key))
            return self._gates[key]

    def circuit_for(self, endpoint: str) -> ProviderCircuit:
        """The shared circuit of a provider endpoint (a base URL, or the provider's own API)."""
        with self._gates_lock:
            if endpoint not in self._circuits:
                self._circuits[endpoint] = ProviderCircuit(endpoint, budget=self.outage_budget)
                if self._answered_before:
                    self._circuits[endpoint].contacted()
                self._circuits[endpoint].answered_elsewhere = self._answered_elsewhere
                if self._adapt is not None:
                    self._circuits[endpoint].concurrency = self._limit(*self._adapt)
            return self._circuits[endpoint]

    def answered_before(self) -> None:
        """The run's endpoints answered in an earlier invocation (a resume): their failures are outages, not
        settings."""
        with self._gates_lock:
            self._answered_before = True
            circuits = list(self._circuits.values())
        for circuit in circuits:
            circuit.contacted()

    def answered_elsewhere(self, check: Callable[[], bool]) -> None:
        """``check()`` says whether another process of the run was answered (it stored a turn): a --processes player
        then takes a failure of an endpoint it has not heard from yet for an outage, not a wrong setting."""
        with self._gates_lock:
            self._answered_elsewhere = check
            for circuit in self._circuits.values():
                circuit.answered_elsewhere = check

    def adapt_concurrency(self, start: int, ceiling: int) -> None:
        """Let every served endpoint's calls at once adapt from ``start`` up to ``ceiling`` (models/concurrency.py)."""
        with self._gates_lock:
            self._adapt = (start, ceiling)
            for circuit in self._circuits.values():
                circuit.concurrency = self._limit(start, ceiling)

    @staticmethod
    def _limit(start: int, ceiling: int) -> AdaptiveLimit:
        """An endpoint's adaptive limit: a default (start below its ceiling) slow-starts; a fixed setting (start at
        its ceiling, ``--max-concurrency N``) plays N at once from the first call."""
        return AdaptiveLimit(start, ceiling, initial=SLOW_START if start < ceiling else None)

    @property
    def adapting(self) -> tuple[int, int] | None:
        """(start, ceiling) of the endpoints' adaptive concurrency, or None when it is fixed."""
        return self._adapt

    def concurrency_allowed(self) -> int | None:
        """How many dialogues may play at once now: the lowest limit of the run's served endpoints (None: none
        adapts)."""
        with self._gates_lock:
            limits = [c.concurrency.limit for c in self._circuits.values() if c.concurrency is not None]
        return min(limits) if limits else None

    def concurrency_summary(self) -> list[dict[str, Any]]:
        """Per adapting endpoint: its limit now, the highest it reached, its ceiling and how often it was cut (429s)."""
        with self._gates_lock:
            circuits = list(self._circuits.values())
        return [
            {
                "endpoint": c.endpoint,
                "now": c.concurrency.limit,
                "reached": c.concurrency.reached,
                "ceiling": c.concurrency.ceiling,
                "throttled": c.concurrency.throttles,
            }
            for c in circuits
            if c.concurrency is not None
        ]

    @property
    def endpoints_answered_before(self) -> bool:
        return self._answered_before

    def setting_failures(self) -> list[str]:
        """Endpoints that never answered and refused a call as a wrong setting would (their one line each)."""
        with self._gates_lock:
            return [c.refused for c in self._circuits.values() if c.refused is not None]

    def outages(self) -> list[OutageStatus]:
        """The providers unreachable right now (their calls waiting), for the progress display."""
        with self._gates_lock:
            circuits = list(self._circuits.values())
        return [status for c in circuits if (status := c.status()) is not None]

    def outages_past_budget(self) -> list[ProviderCircuit]:
        """The providers whose outage outlasted the budget (their calls failed): the run exits 75."""
        with self._gates_lock:
            return [c for c in self._circuits.values() if c.expired]

    def reset_outages_past_budget(self) -> None:
        """Let calls through again to providers whose outage outlasted the budget (a worker's next job)."""
        for circuit in self.outages_past_budget():
            circuit.reset()

    def outage_reports(self) -> list[CircuitReport]:
        """This process's circuits that have met an outage (open, past the budget or ridden out), to mirror
        elsewhere."""
        with self._gates_lock:
            circuits = list(self._circuits.values())
        return [
            r
            for c in circuits
            if (r := c.report()).down_since is not None or r.expired_after is not None or r.spans or r.refused
        ]

    def mirror_outages(self, source: object, reports: Iterable[CircuitReport]) -> None:
        """Another process's :meth:`outage_reports` (a ``--processes`` child's), kept on this policy's circuit per
        endpoint: :meth:`outages`, :meth:`outages_past_budget` and :meth:`outage_summary` then include them."""
        for report in reports:
            self.circuit_for(report.endpoint).mirror(source, report)

    def outage_summary(self) -> dict[str, Any]:
        """Outages ridden out (closed again) and those past the budget, by endpoint, for the run summary."""
        with self._gates_lock:
            circuits = list(self._circuits.values())
        return {
            "ridden_out": [{"endpoint": c.endpoint, "seconds": round(s, 1)} for c in circuits for s in c.outages],
            "past_budget": [
                {"endpoint": c.endpoint, "seconds": round(c.expired_after or 0.0, 1)} for c in circuits if c.expired
            ],
            "budget_s": self.outage_budget,
            "waits": sum(self.stats.outage_waits.values()),
        }

    def share_among(self, sharers: int) -> None:
        """Let this process use 1/``sharers`` of every rate limit: the run's limit is then the total of all workers."""
        with self._gates_lock:
            self._sharers = max(1, sharers)
            for key, gate in self._gates.items():
                gate.retune(self._share(key))

    def _share(self, key: str) -> float | None:
        limit = self.rate_limits.get(key)
        return limit / self._sharers if limit else None

    def wrap(
        self,
        chat: BaseChatModel,
        *,
        spec: str,
        provider: str,
        role: str,
        cache_params: dict[str, Any],
        retry: RetryPolicy | None = None,
        seed_option: bool = True,
        endpoint: str | None = None,
    ) -> ResilientChatModel:
        """``chat`` with this policy's cache, gate and retries; ``endpoint`` (None: in-process, no circuit) shares a
        circuit."""
        return ResilientChatModel(
            inner=chat,
            spec=spec,
            role=role,
            retry=retry or self.retry,
            gate=self.gate_for(spec, provider),
            circuit=self.circuit_for(endpoint) if endpoint else None,
            response_cache=self.cache,
            cache_params=cache_params,
            stats=self.stats,
            seed_option=seed_option,
        )
