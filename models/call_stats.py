"""Counters of one run's model calls (cache hits and misses, retries, rate-limit waits) and their summaries."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any


class CallStats:
    """Counters of one run's model calls: cache hits and misses per role, retries per reason."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cache_hits: Counter[str] = Counter()
        self.cache_misses: Counter[str] = Counter()
        self.cache_unstorable: Counter[str] = Counter()
        self.retries: Counter[str] = Counter()
        self.gave_up: Counter[str] = Counter()
        self.outage_waits: Counter[str] = Counter()  # failed calls that waited for a provider's circuit, by reason
        self.calls: Counter[str] = Counter()  # calls a provider answered, by role (cache hits are not calls)
        self.rate_limited_seconds = 0.0
        self.dialogues_at_once = 0  # the most dialogues played at once (--processes: the processes' most, added)

    def add(self, counter: str, key: str, n: int = 1) -> None:
        with self._lock:
            getattr(self, counter)[key] += n

    def waited(self, seconds: float) -> None:
        with self._lock:
            self.rate_limited_seconds += seconds

    def cache_summary(self, *, enabled: bool) -> dict[str, Any]:
        hits, misses = sum(self.cache_hits.values()), sum(self.cache_misses.values())
        return {
            "enabled": enabled,
            "hits": hits,
            "misses": misses,
            "hit_rate": hits / (hits + misses) if hits + misses else None,
            "by_role": {
                role: {"hits": self.cache_hits[role], "misses": self.cache_misses[role]}
                for role in sorted(set(self.cache_hits) | set(self.cache_misses))
            },
        }

    def retry_summary(self) -> dict[str, Any]:
        return {
            "retries": sum(self.retries.values()),
            "by_reason": dict(sorted(self.retries.items())),
            "gave_up": sum(self.gave_up.values()),
            "outage_waits": sum(self.outage_waits.values()),
            "rate_limited_seconds": round(self.rate_limited_seconds, 3),
        }
