"""A shared circuit per provider endpoint: during an outage calls wait, one probe call checks, the run rides it out.

Per-call retries (models/retries.py) handle a call's own errors. When calls to one endpoint keep failing with
connection errors, timeouts or 5xx across dialogues, that is the provider's outage, not a call's: the circuit
opens, every call to the endpoint waits instead of spending its retries, and one call at a time goes through as
a probe (half-open). The first answer closes the circuit. Past ``budget`` seconds of outage every waiting and new
call raises :class:`ProviderOutageError` (the dialogue ends failed with that reason, resumably).
Loop- and thread-agnostic, like the rate gate: state under a plain lock, waiters poll. A run played in several
processes (``--processes``) keeps one circuit per endpoint in each; the parent mirrors its children's (:meth:`mirror`),
so its display, summary and exit status see their outages as one process's would.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from checkpoints.outages import OutageError
from models.answers import MALFORMED_KINDS
from models.retries import RetriesExhaustedError

DEFAULT_OUTAGE_BUDGET_S = 600.0
# Consecutive outage failures (no answer in between) of at least two calls that open the circuit; or one call
# failing for this long (a run playing one dialogue at a time), so that its own retries do not run out in an outage.
OPEN_AFTER = 3
OPEN_AFTER_S = 10.0
FIRST_PROBE_S, MAX_PROBE_S = 2.0, 15.0
# A probe that never reported back (cancelled, or failed mid-stream) is given up after this long: another one goes.
LOST_PROBE_S = 180.0
_POLL_S = 0.25


class ProviderOutageError(OutageError, RetriesExhaustedError):
    """A provider stayed unreachable past the outage budget."""


def is_outage(reason: str | None) -> bool:
    """Whether a retry reason (models.retries.retry_reason) is the kind an outage produces: no connection, no answer in
    time, a 5xx. A malformed answer (models/answers.py) is not: the endpoint answers, so its calls are not held back
    behind one probe; each call retries it, and one that meets nothing else past the budget ends the endpoint
    (:meth:`ProviderCircuit.give_up`)."""
    return reason in ("connection", "timeout") or bool(reason and reason.startswith("HTTP 5"))


@dataclass(frozen=True)
class OutageStatus:
    """An open circuit, for the progress display: how long down, when the next probe, how much budget left."""

    endpoint: str
    down_s: float
    budget_left_s: float
    reason: str
    waiting: int

    def line(self) -> str:
        return (f"{self.endpoint} unreachable for {format_duration(self.down_s)} ({self.reason}): {self.waiting} call(s) "
                f"wait while a probe call checks; gives up in {format_duration(self.budget_left_s)} (--outage-budget)")


@dataclass(frozen=True)
class CircuitReport:
    """A circuit's outage state as another process mirrors it; times are ``time.monotonic`` (one clock per machine)."""

    endpoint: str
    down_since: float | None  # the open outage's start (None: closed)
    reason: str
    waiting: int
    expired_after: float | None  # seconds down when it went past the budget (None: it has not)
    spans: tuple[tuple[float, float], ...]  # (start, end) of each outage ridden out
    detail: str = ""  # the last malformed answer (role, spec, an excerpt), when that is what the outage is made of

    def closed(self) -> CircuitReport:
        """This report once its process has gone: its open outage no longer waits anyone, the rest stands."""
        return replace(self, down_since=None, waiting=0)


class ProviderCircuit:
    """Closed (calls go through) or open (calls wait; one probe at a time); expired past the budget."""

    def __init__(self, endpoint: str, *, budget: float = DEFAULT_OUTAGE_BUDGET_S, open_after: int = OPEN_AFTER,
                 open_after_s: float = OPEN_AFTER_S, first_probe_s: float = FIRST_PROBE_S, max_probe_s: float = MAX_PROBE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if budget <= 0:
            raise ValueError(f"an outage budget must be more than 0 seconds, got {budget}")
        self.endpoint = endpoint
        self.budget = budget
        self.open_after, self.open_after_s = open_after, open_after_s
        self._callers: set[int] = set()
        self.first_probe_s, self.max_probe_s = first_probe_s, max_probe_s
        self._clock = clock
        self._lock = threading.Lock()
        self._streak = 0
        self._streak_started = 0.0
        self._opened = False
        self._reason = ""
        self.detail = ""  # the last malformed answer: "role spec: what came back"
        self._probing = False
        self._probe_started = 0.0
        self._next_probe = 0.0
        self._interval = first_probe_s
        self._waiting = 0
        self._held = False
        self.expired = False
        self.outages: list[float] = []  # seconds each closed outage lasted (overlapping mirrored ones count once)
        self.expired_after: float | None = None
        self._spans: list[tuple[float, float]] = []
        self._mirrored: dict[object, CircuitReport] = {}

    # --- what a call does -------------------------------------------------------------------

    def admit(self) -> tuple[float, bool]:
        """(seconds to wait before asking again, this call is the probe); raises past the budget."""
        with self._lock:
            if not self._opened:
                return 0.0, False
            now = self._clock()
            down = now - self._streak_started
            if self.expired or down > self.budget:
                if not self.expired:
                    self.expired, self.expired_after = True, down
                raise ProviderOutageError(self._past_budget(down))
            if self._probing and now - self._probe_started > LOST_PROBE_S:
                self._probing = False
            if not self._probing and now >= self._next_probe:
                self._probing, self._probe_started = True, now
                return 0.0, True
            self._held = True
            until = self._next_probe - now if not self._probing else _POLL_S
            return max(0.01, min(until, _POLL_S * 4, self.budget - down + 0.01)), False

    def answered(self, probe: bool = False) -> None:
        """The endpoint answered (with a reply or an error of the call's own): the outage, if any, is over."""
        with self._lock:
            if self._opened and self._held:  # an outage that made calls wait (not a blip answered at once)
                self._spans.append((self._streak_started, self._clock()))
                self._recount()
            self._streak, self._opened, self._probing, self._interval = 0, False, False, self.first_probe_s
            self._held = False
            self._callers.clear()

    def failed(self, reason: str, probe: bool = False, caller: object | None = None) -> bool:
        """Count an outage failure of the call ``caller`` (None: a call of its own); True if the circuit is open now
        (the call then waits instead of spending a retry). One call failing alone is its own error until it lasts."""
        with self._lock:
            now = self._clock()
            if self._streak == 0:
                self._streak_started = now
            self._streak += 1
            self._callers.add(id(caller) if caller is not None else -self._streak)
            self._reason = reason
            if probe:
                self._probing = False
                self._next_probe = now + self._interval
                self._interval = min(self.max_probe_s, self._interval * 2)
            spread = self._streak >= self.open_after and len(self._callers) >= 2
            if not self._opened and (spread or now - self._streak_started >= self.open_after_s):
                self._opened, self._probing = True, False
                self._next_probe, self._interval = now + self.first_probe_s, self.first_probe_s * 2
            return self._opened

    async def enter(self) -> bool:
        """Wait while the circuit is open; True if this call goes through as the probe."""
        counted = False
        try:
            while True:
                wait, probe = self.admit()
                if not wait:
                    return probe
                if not counted:
                    counted = True
                    self._count_waiting(+1)
                await asyncio.sleep(wait)
        finally:
            if counted:
                self._count_waiting(-1)

    def enter_sync(self) -> bool:
        while True:
            wait, probe = self.admit()
            if not wait:
                return probe
            time.sleep(wait)

    def give_up(self, reason: str, detail: str) -> ProviderOutageError:
        """One call met malformed answers for longer than the budget: the endpoint is past it (the error to raise)."""
        with self._lock:
            now = self._clock()
            if not self._opened:
                self._streak_started = now - self.budget
            self._reason, self.detail = reason, detail or self.detail
            down = now - self._streak_started
            self.expired, self.expired_after = True, self.expired_after or down
            return ProviderOutageError(self._past_budget(down))

    def reset(self) -> None:
        """Forget an outage that outlasted its budget: a long-lived worker gives the provider a fresh budget per job."""
        with self._lock:
            self.expired, self._opened, self._probing, self._streak = False, False, False, 0
            self._callers.clear()

    # --- what the display and the command read --------------------------------------------------

    def status(self) -> OutageStatus | None:
        """The outage now (this process's calls and those of the processes mirrored here), or None."""
        with self._lock:
            if self.expired:
                return None
            open_ = [(self._streak_started, self._reason, self._waiting)] if self._opened else []
            open_ += [(r.down_since, r.reason, r.waiting) for r in self._mirrored.values() if r.down_since is not None]
            if not open_:
                return None
            since, reason, _ = min(open_)
            down = self._clock() - since
            return OutageStatus(self.endpoint, down, max(0.0, self.budget - down), reason, sum(w for *_, w in open_))

    def report(self) -> CircuitReport:
        """This circuit's own state, for another process to :meth:`mirror`."""
        with self._lock:
            return CircuitReport(self.endpoint, self._streak_started if self._opened and not self.expired else None,
                                 self._reason, self._waiting, self.expired_after if self.expired else None, tuple(self._spans),
                                 self.detail if self._reason in MALFORMED_KINDS else "")

    def mirror(self, source: object, report: CircuitReport) -> None:
        """Take in the latest report of ``source`` (a child process) on this endpoint: past its budget there is past it here."""
        with self._lock:
            self._mirrored[source] = report
            if report.detail:
                self._reason, self.detail = report.reason, report.detail
            if report.expired_after is not None:
                self.expired = True
                self.expired_after = max(self.expired_after or 0.0, report.expired_after)
            self._recount()

    def _recount(self) -> None:
        """``outages`` from every span ridden out here and in the mirrored processes, overlapping ones merged (under the lock)."""
        merged: list[list[float]] = []
        for start, end in sorted([*self._spans, *(s for r in self._mirrored.values() for s in r.spans)]):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self.outages = [end - start for start, end in merged]

    def _count_waiting(self, delta: int) -> None:
        with self._lock:
            self._waiting += delta

    def _past_budget(self, down: float) -> str:
        if self._reason in MALFORMED_KINDS:
            return (f"{self.endpoint} answered only malformed answers for {format_duration(down)} ({self._reason}; last: "
                    f"{self.detail}), past the outage budget of {format_duration(self.budget)}: rerun the same command "
                    "once it answers properly again (or raise --outage-budget)")
        return (f"{self.endpoint} unreachable for {format_duration(down)} ({self._reason}), past the outage budget of "
                f"{format_duration(self.budget)}: rerun the same command once it is back (or raise --outage-budget)")

    def down_words(self) -> str:
        """What the endpoint's outage past the budget was: unreachable, or malformed answers (with the last one)."""
        if self._reason in MALFORMED_KINDS:
            return f"answered only malformed answers ({self._reason}; last: {self.detail})"
        return "stayed unreachable"


def format_duration(seconds: float) -> str:
    """``45 s``, ``2 min 05 s``, ``1 h 03 min``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
