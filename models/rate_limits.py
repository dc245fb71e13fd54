"""Per-provider rate limits: a token bucket of requests per minute, shared by every dialogue of a process."""

from __future__ import annotations

import asyncio
import threading
import time

_RECHECK_S = 0.05  # a waiter looks again this often whether a pause ended early


class RateGate:
    """A token bucket of ``per_minute`` requests, shared by every dialogue of a process.

    Loop- and thread-agnostic: a caller reserves the next free slot under a plain lock
    and sleeps until it, so one gate serves all asyncio tasks (and threads) at once.
    ``pause`` pushes every caller back after the provider answered 429 with Retry-After; ``resume`` lets them go
    again once the provider answers a call through it (its refusals were about calls at once, see
    models/concurrency.py).
    """

    def __init__(self, per_minute: float | None, *, burst: float | None = None) -> None:
        if per_minute is not None and per_minute <= 0:
            raise ValueError(f"a rate limit must be a positive number of requests per minute, got {per_minute}")
        self.per_minute = per_minute
        self.rate = per_minute / 60.0 if per_minute else None
        # A burst of one second's worth of requests (at least 1) keeps the start smooth.
        self.capacity = burst if burst is not None else max(1.0, self.rate or 1.0)
        self._tokens = self.capacity
        self._stamp = time.monotonic()
        self._paused_until = 0.0
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take one request slot; returns how many seconds to wait before using it (as the pause stands now)."""
        due = self._take_token()
        with self._lock:
            return max(0.0, due - time.monotonic(), self._paused_until - time.monotonic())

    def _take_token(self) -> float:
        """Take one token of the bucket: the time it is due (now, with no rate limit)."""
        with self._lock:
            now = time.monotonic()
            if self.rate is None:
                return now
            self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            self._tokens -= 1.0
            return now + max(0.0, -self._tokens / self.rate)

    def retune(self, per_minute: float | None) -> None:
        """Change the limit in place (a worker's share of a run's limit as workers come and go)."""
        if per_minute is not None and per_minute <= 0:
            raise ValueError(f"a rate limit must be a positive number of requests per minute, got {per_minute}")
        with self._lock:
            self.per_minute = per_minute
            self.rate = per_minute / 60.0 if per_minute else None
            self.capacity = max(1.0, self.rate or 1.0)
            self._tokens = min(self._tokens, self.capacity)

    def pause(self, seconds: float) -> None:
        with self._lock:
            self._paused_until = max(self._paused_until, time.monotonic() + seconds)

    def resume(self) -> None:
        """End a pause early (the endpoint answered through it); the rate limit's own spacing still holds."""
        with self._lock:
            self._paused_until = min(self._paused_until, time.monotonic())

    async def acquire(self) -> float:
        """Wait for a request slot; the seconds waited. A pause that ends early (:meth:`resume`) lets its waiters go
        within ``_RECHECK_S``; one that grows (another Retry-After) holds them longer."""
        due, waited = self._take_token(), 0.0
        while (left := self._left(due)) > 0:
            await asyncio.sleep(step := min(left, _RECHECK_S))
            waited += step
        return waited

    def acquire_sync(self) -> float:
        due, waited = self._take_token(), 0.0
        while (left := self._left(due)) > 0:
            time.sleep(step := min(left, _RECHECK_S))
            waited += step
        return waited

    def _left(self, due: float) -> float:
        """Seconds still to wait for a token due at ``due``: until then, and until the pause, as it stands, ends."""
        with self._lock:
            return max(due, self._paused_until) - time.monotonic()
