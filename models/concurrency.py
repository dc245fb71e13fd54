"""How many calls a provider endpoint takes at once, found as the run goes (AIMD, as TCP finds a link's rate).

Every served endpoint (a base URL, a provider's API) has an :class:`AdaptiveLimit`: it starts at the run's
starting concurrency, halves when the provider says slow down (a 429, a ``Retry-After``), at most once per
cooldown, and grows by one after as many answers in a row as the limit, while their latency stays within twice
the best seen (a server that queues the extra calls answers slower: then it stops growing). A slow-down also
lowers the level it may grow back to (three quarters of where it was cut), so it settles under the provider's
limit instead of meeting it again and again; after a minute without one, that level rises by one, to find room
the provider has made since. It never passes its ceiling (``--max-concurrency``). The runner plays as many dialogues at
once as the lowest limit of the run's endpoints allows (graph/running/playing.py ``DialogueSlots``); a ``--rate-limit``
gate still spaces the calls themselves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

LATENCY_HOLDS = 2.0  # an answer within this many times the best latency seen: the endpoint keeps up
COOLDOWN_S = 2.0  # one halving per burst of 429s, not one per 429
PROBE_S = 60.0  # this long without a slow-down: the level it may grow to rises by one


class AdaptiveLimit:
    """Additive increase, multiplicative decrease of the calls an endpoint takes at once."""

    def __init__(self, start: int, ceiling: int, *, clock: Callable[[], float] = time.monotonic,
                 cooldown_s: float = COOLDOWN_S, probe_s: float = PROBE_S) -> None:
        if not 1 <= start <= ceiling:
            raise ValueError(f"a concurrency must start between 1 and its ceiling {ceiling}, got {start}")
        self._limit = float(start)
        self.ceiling = ceiling
        self.reached = start
        self.throttles = 0
        self._best: float | None = None
        self._good = 0
        self._cut_at = float("-inf")
        self._clock, self.cooldown_s, self.probe_s = clock, cooldown_s, probe_s
        self._bound = float(ceiling)  # the most it may grow to now (lowered by slow-downs)
        self._probed = clock()
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        return max(1, int(self._limit))

    def answered(self, latency: float | None = None) -> None:
        """A call answered after ``latency`` seconds (None: not timed)."""
        with self._lock:
            if latency is not None:
                self._best = latency if self._best is None else min(self._best, latency)
                if latency > LATENCY_HOLDS * self._best:
                    self._good = 0
                    return
            self._good += 1
            now = self._clock()
            if now - max(self._probed, self._cut_at) >= self.probe_s and self._bound < self.ceiling:
                self._bound, self._probed = self._bound + 1, now
            if self._good >= self.limit and self._limit < self._bound:
                self._limit, self._good = min(self._bound, self._limit + 1), 0
                self.reached = max(self.reached, self.limit)

    def throttled(self) -> None:
        """The provider asked to slow down (a 429 or a Retry-After): halve, once per cooldown."""
        with self._lock:
            now = self._clock()
            if now - self._cut_at < self.cooldown_s:
                return
            self._cut_at, self._good = now, 0
            self._bound = max(1.0, float(int(self._limit * 0.75)))
            self._limit = max(1.0, self._limit / 2)
            self.throttles += 1
