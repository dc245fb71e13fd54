"""A shared circuit per provider endpoint: during an outage calls wait, one probe call checks, the run rides it out.

Per-call retries (models/retries.py) handle a call's own errors. When calls to one endpoint keep failing with
connection errors, timeouts or 5xx across dialogues, that is the provider's outage, not a call's: the circuit
opens, every call to the endpoint waits instead of spending its retries, and one call at a time goes through as
a probe (half-open). The first answer closes the circuit. Past ``budget`` seconds of outage every waiting and new
call raises :class:`ProviderOutageError` (the dialogue ends failed with that reason, resumably).
Loop- and thread-agnostic, like the rate gate: state under a plain lock, waiters poll. A run played in several
processes (``--processes``) keeps one circuit per endpoint in each; the parent mirrors its children's (:meth:`mirror`),
so its display, summary and exit status see their outages as one process's would.

An endpoint that has not answered once in the run is not in an outage when it fails: a refused connection, an
unknown host, a TLS error or a 401, 403 or 404 there is a wrong setting (a URL, a key, a model name), and no wait
mends it. Its first such failure marks the circuit *refused* (:meth:`ProviderCircuit.first_contact`): every call to it
raises :class:`EndpointSettingError` at once and the command stops with one line (cli/run.py). The outage budget
applies once the endpoint has answered (:meth:`ProviderCircuit.contacted` marks that for a resumed run).
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from checkpoints.outages import OutageError
from models.answers import MALFORMED_KINDS
from models.concurrency import AdaptiveLimit
from models.providers import ModelSpecError, get_provider
from models.retries import RetriesExhaustedError

DEFAULT_OUTAGE_BUDGET_S = 600.0
# Consecutive outage failures (no answer in between) of at least two calls that open the circuit; or one call
# failing for this long (a run playing one dialogue at a time), so that its own retries do not run out in an outage.
OPEN_AFTER = 3
OPEN_AFTER_S = 10.0
FIRST_PROBE_S, MAX_PROBE_S = 2.0, 15.0
# A probe that never reported back (cancelled, or failed mid-stream) is given up after this long: another one goes.
LOST_PROBE_S = 180.0
LOST_SLOT_S = 60.0
_POLL_S = 0.25


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


class ProviderOutageError(OutageError, RetriesExhaustedError):
    """A provider stayed unreachable past the outage budget."""


class EndpointSettingError(RuntimeError):
    """An endpoint that never answered refused a call in a way no wait mends: a wrong URL, key or model name."""


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it was raised from or while handling (SDKs wrap httpx, httpx wraps the socket's error)."""
    seen, todo, found = set(), [exc], []
    while todo:
        current = todo.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        found.append(current)
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
    return found


def setting_failure(exc: BaseException) -> str | None:
    """What a failure says about the setting of an endpoint that never answered: "connection refused", "unknown host",
    "TLS error", "HTTP 401", "HTTP 403", "HTTP 404"; None when it may be passing (a timeout, a 5xx, a dropped line)."""
    for e in _causes(exc):
        for value in (getattr(e, "status_code", None), getattr(getattr(e, "response", None), "status_code", None)):
            if value in (401, 403, 404):
                return f"HTTP {value}"
            if value == 400 and re.search(r"api[ _-]?key", str(e), re.IGNORECASE):
                return "HTTP 401"  # Google answers a bad key with 400 "API key not valid"
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, socket.gaierror):
            return "unknown host"
        if isinstance(e, ssl.SSLError):
            return "TLS error"
    # httpx keeps only the text of the socket's error in its ConnectError
    text = " ".join(str(e) for e in _causes(exc) if "ConnectError" in {c.__name__ for c in type(e).__mro__})
    if re.search(r"connection refused|errno 111\b|errno 61\b", text, re.IGNORECASE):
        return "connection refused"
    if re.search(
        r"name or service not known|nodename nor servname|name resolution|getaddrinfo|errno -[23]\b",
        text,
        re.IGNORECASE,
    ):
        return "unknown host"
    if re.search(r"\bssl\b|certificate|tls", text, re.IGNORECASE):
        return "TLS error"
    return None


def setting_advice(what: str, endpoint: str) -> str:
    """What to check after :func:`setting_failure` said ``what`` of ``endpoint`` (``provider @ URL`` or
    ``provider``)."""
    provider, _, url = endpoint.partition(" @ ")
    try:
        key = get_provider(provider).key_hint()  # the key its endpoint is called with: a 401 or a 403 names it
    except ModelSpecError:
        key = "the provider's API key"
    where = "--base-url" if url else "the network"
    return {
        "connection refused": f"nothing listens there: start the server or correct {where}",
        "unknown host": f"the host name does not resolve: correct {where}",
        "TLS error": f"check https:// against http:// in {where}" if url else "check the network's TLS proxy",
        "HTTP 401": f"the key was refused: check {key}",
        "HTTP 403": f"the key may not use this model: check {key} and the model's access",
        "HTTP 404": (
            "no such model or path: check the model name in the spec and that --base-url ends in /v1"
            if url
            else "no such model: check the model name in the spec"
        ),
    }[what]


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
        return (
            f"{self.endpoint} unreachable for {format_duration(self.down_s)} ({self.reason}): {self.waiting} call(s) "
            f"wait while a probe call checks; gives up in {format_duration(self.budget_left_s)} (--outage-budget)"
        )


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
    refused: str | None = None  # a setting failure before any answer (EndpointSettingError's line)

    def closed(self) -> CircuitReport:
        """This report once its process has gone: its open outage no longer waits anyone, the rest stands."""
        return replace(self, down_since=None, waiting=0)


class ProviderCircuit:
    """Closed (calls go through) or open (calls wait; one probe at a time); expired past the budget."""

    def __init__(
        self,
        endpoint: str,
        *,
        budget: float = DEFAULT_OUTAGE_BUDGET_S,
        open_after: int = OPEN_AFTER,
        open_after_s: float = OPEN_AFTER_S,
        first_probe_s: float = FIRST_PROBE_S,
        max_probe_s: float = MAX_PROBE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
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
        self.answered_once = False  # since when the outage budget applies (before: a failure may be a wrong setting)
        self.refused: str | None = None  # the line of a setting failure: every call raises EndpointSettingError
        self._answered_specs: set[str] = set()  # models that replied here (a 403 or 404 of another is its setting)
        self._resumed = False
        # asked before a failure is taken for a wrong setting: True if another --processes player stored a turn
        self.answered_elsewhere: Callable[[], bool] | None = None
        self.concurrency: AdaptiveLimit | None = None  # how many calls it takes at once, when the run adapts it
        self._calls = 0  # calls in flight that took a slot
        self._slot_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []  # first come, first woken

    # --- what a call does -------------------------------------------------------------------

    def admit(self) -> tuple[float, bool]:
        """(seconds to wait before asking again, this call is the probe); raises past the budget."""
        with self._lock:
            if self.refused is not None:
                raise EndpointSettingError(self.refused)
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

    def answered(self, probe: bool = False, spec: str | None = None, latency: float | None = None) -> bool:
        """The endpoint answered (with a reply or an error of the call's own; ``spec``: a reply for that model, after
        ``latency`` seconds): the outage, if any, is over. True when this reply came while a burst of 429s cuts the
        endpoint's concurrency: it takes calls, so a Retry-After's pause of every caller may end."""
        lift = False
        if spec is not None:
            at_once = self.left()
            if self.concurrency is not None:
                lift = self.concurrency.answered(latency, at_once=at_once)
        with self._lock:
            if spec is not None:
                self._answered_specs.add(spec)
            if self._opened and self._held:  # an outage that made calls wait (not a blip answered at once)
                self._spans.append((self._streak_started, self._clock()))
                self._recount()
            self._streak, self._opened, self._probing, self._interval = 0, False, False, self.first_probe_s
            self._held, self.answered_once = False, True
            self._callers.clear()
        return lift

    def throttled(
        self, retry_after: float | None = None, *, sent: float | None = None, at_once: int | None = None
    ) -> bool:
        """A 429 or a Retry-After of ``retry_after`` seconds for a call ``sent`` with ``at_once`` calls in flight:
        fewer calls at once, if it adapts (models/concurrency.py). True when that cut is the slow-down: the endpoint
        answered calls just now (a limit on calls at once, not a quota)."""
        return self.concurrency.throttled(retry_after, sent=sent, at_once=at_once) if self.concurrency else False

    @property
    def in_flight(self) -> int:
        """Calls that hold one of the endpoint's slots now (passed :meth:`enter`, not yet :meth:`left`)."""
        with self._lock:
            return self._calls

    def contacted(self) -> None:
        """The endpoint answered before (a resumed run's earlier calls): its failures are outages from now on."""
        with self._lock:
            self.answered_once = self._resumed = True

    def first_contact(self, exc: BaseException, *, role: str, spec: str) -> EndpointSettingError | None:
        """The error to raise for ``exc`` if it shows a wrong setting of this endpoint, which has never answered
        (the circuit is then refused: every call fails at once); None if it answered once or ``exc`` may pass."""
        with self._lock:
            if self.refused is not None:
                return EndpointSettingError(self.refused)
            model_answered = self._resumed or spec in self._answered_specs
            answered_once = self.answered_once
        what = setting_failure(exc)
        if what is None or model_answered or (answered_once and what not in ("HTTP 403", "HTTP 404")):
            return None
        if self.answered_elsewhere is not None and self.answered_elsewhere():
            self.contacted()
            return None
        _, _, url = self.endpoint.partition(" @ ")
        where = url or f"the {self.endpoint} API"
        line = f"the {role} model {spec} at {where} did not answer ({what}): {setting_advice(what, self.endpoint)}"
        with self._lock:
            self.refused = self.refused or line
            return EndpointSettingError(self.refused)

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
        """Wait while the circuit is open, then for a call slot if the endpoint's concurrency adapts; True if this call
        goes through as the probe. The call gives its slot back with :meth:`left`."""
        counted = False
        try:
            while True:
                wait, probe = self.admit()
                if not wait:
                    await self._slot()
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
                waited = 0.0
                while not self._take_slot(waited):
                    time.sleep(_POLL_S / 5)
                    waited += _POLL_S / 5
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

    async def _slot(self) -> None:
        """Take a call slot, waiting in line to be woken when a call gives one back (and checking every
        ``_POLL_S`` anyway: the limit also rises without a call leaving)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            woken: asyncio.Future[None] = loop.create_future()
            if self._take_slot(loop.time() - started, (loop, woken)):
                return
            try:
                await asyncio.wait_for(woken, _POLL_S)
            except TimeoutError:
                pass
            finally:
                with self._lock:
                    if (loop, woken) in self._slot_waiters:
                        self._slot_waiters.remove((loop, woken))

    def _take_slot(
        self, waited: float, waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None
    ) -> bool:
        """One of the endpoint's call slots (always, when its concurrency does not adapt). A call that waited
        ``LOST_SLOT_S`` goes through anyway: a slot never given back (a stream its reader dropped) must not stall the
        run."""
        with self._lock:
            if self.concurrency is not None and self._calls < self.concurrency.limit or waited >= LOST_SLOT_S:
                self._calls += 1
                return True
            if self.concurrency is None:
                return True
            if waiter is not None:
                self._slot_waiters.append(waiter)
            return False

    def left(self) -> int:
        """A call that passed :meth:`enter` is over (answered or failed): its slot is free, for the first in line. The
        calls that were in flight, it included."""
        with self._lock:
            at_once, self._calls = self._calls, max(0, self._calls - 1)
            first = self._slot_waiters.pop(0) if self._slot_waiters else None
        if first is not None:
            loop, woken = first
            try:
                loop.call_soon_threadsafe(_wake, woken)
            except RuntimeError:
                pass  # its loop closed: nothing waits there any more
        return at_once

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
            return CircuitReport(
                self.endpoint,
                self._streak_started if self._opened and not self.expired else None,
                self._reason,
                self._waiting,
                self.expired_after if self.expired else None,
                tuple(self._spans),
                self.detail if self._reason in MALFORMED_KINDS else "",
                self.refused,
            )

    def mirror(self, source: object, report: CircuitReport) -> None:
        """Take in the latest report of ``source`` (a child process) on this endpoint: past its budget there is past it
        here."""
        with self._lock:
            self._mirrored[source] = report
            self.refused = self.refused or report.refused
            if report.detail:
                self._reason, self.detail = report.reason, report.detail
            if report.expired_after is not None:
                self.expired = True
                self.expired_after = max(self.expired_after or 0.0, report.expired_after)
            self._recount()

    def _recount(self) -> None:
        """``outages`` from every span ridden out here and in the mirrored processes, overlapping ones merged (under the
        lock)."""
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
            return (
                f"{self.endpoint} answered only malformed answers for {format_duration(down)} ({self._reason}; last: "
                f"{self.detail}), past the outage budget of {format_duration(self.budget)}: rerun the same command "
                "once it answers properly again (or raise --outage-budget)"
            )
        return (
            f"{self.endpoint} unreachable for {format_duration(down)} ({self._reason}), past the outage budget of "
            f"{format_duration(self.budget)}: rerun the same command once it is back (or raise --outage-budget)"
        )

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
