"""How many calls a provider endpoint takes at once, found as the run goes (AIMD, as TCP finds a link's rate).

Every served endpoint (a base URL, a provider's API) has an :class:`AdaptiveLimit`: it starts at the run's
starting concurrency and is cut when the provider refuses a call (a 429) or asks to slow down (a ``Retry-After``).
A cut is made once per window (one cooldown from the first refusal), not once per refused call: a burst of 429s
is one signal. It at least halves the limit, and goes down to what the provider took at once (a call refused while
N others were in flight means the provider takes no more than N now), but to no less than a quarter of it. The
limit may grow back to that level (never above three quarters of where it was cut), by one after as many answers
in a row as the limit, while their latency stays within twice the best seen (a server that queues the extra calls
answers slower: then it stops growing), and not while the provider's ``Retry-After`` runs. After a minute without
a refusal, that level rises by one, to find room the provider has made since. It never passes its ceiling
(``--max-concurrency``). The runner plays as many dialogues at once as the lowest limit of the run's endpoints
allows (graph/running/playing.py ``DialogueSlots``); a ``--rate-limit`` gate still spaces the calls themselves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

LATENCY_HOLDS = 2.0  # an answer within this many times the best latency seen: the endpoint keeps up
COOLDOWN_S = 2.0  # one cut per burst of 429s, not one per 429
PROBE_S = 60.0  # this long without a slow-down: the level it may grow to rises by one


class AdaptiveLimit:
    """Additive increase, multiplicative decrease of the calls an endpoint takes at once."""

    def __init__(
        self,
        start: int,
        ceiling: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        cooldown_s: float = COOLDOWN_S,
        probe_s: float = PROBE_S,
    ) -> None:
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
        self._cut_from = float(start)  # the limit when the current slow-down window opened
        self._took = float("inf")  # the fewest other calls in flight when the provider refused one, this window
        self._quiet_until = float("-inf")  # the provider's Retry-After: no growth before then
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
            if now < self._quiet_until:
                return
            if now - max(self._probed, self._cut_at) >= self.probe_s and self._bound < self.ceiling:
                self._bound, self._probed = self._bound + 1, now
            if self._good >= self.limit and self._limit < self._bound:
                self._limit, self._good = min(self._bound, self._limit + 1), 0
                self.reached = max(self.reached, self.limit)

    def throttled(self, in_flight: int | None = None, retry_after: float | None = None) -> None:
        """The provider refused a call (a 429) while ``in_flight`` other calls to it were in flight (None: not
        known), or asked to wait ``retry_after`` seconds: cut once per window, under what it took at once."""
        with self._lock:
            now = self._clock()
            if retry_after:
                self._quiet_until = max(self._quiet_until, now + retry_after)
            if now - self._cut_at >= self.cooldown_s:  # a new window
                self._cut_at, self._cut_from, self._took = now, self._limit, float("inf")
                self.throttles += 1
            if in_flight is not None:
                self._took = min(self._took, float(in_flight))
            self._good = 0
            took = max(self._took, self._cut_from / 4)  # a quarter at most per window: a refusal with nothing else
            # in flight may be a rate limit per minute, not one of calls at once
            self._bound = max(1.0, float(int(min(took, 0.75 * self._cut_from))))
            self._limit = max(1.0, min(self._limit, self._cut_from / 2, took))
