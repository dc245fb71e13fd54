"""How many calls a provider endpoint takes at once, found as the run goes (as TCP finds a link's rate).

Every served endpoint (a base URL, a provider's API) has an :class:`AdaptiveLimit`: it starts at the run's
starting concurrency and is cut when the provider refuses a call (a 429) or asks to slow down (a ``Retry-After``).

What the provider takes is measured, not guessed: every answered call is an interval of time (sent, answered), and
the most answered calls that overlapped in time (their high-water mark) is what the provider was seen to take at
once. A burst of 429s is one signal: the first refusal opens a window (one cooldown long) and the limit is cut once,
to that high-water mark (one below where the refusals came, if the provider answered that many), never lower;
answers that come back within the window refine the cut, so the calls of the burst that were answered count however
their answers and refusals interleave. Timed at the client, two calls back to back can look as if they overlapped
(the provider freed the first's slot before its answer reached the client, and took the second's after it was sent;
on loopback the client spends 1-2.5 ms on each side of a call), so an answered call counts from a short slack after
it was sent to as long before its answer: the best latency ÷ (OVERLAP_SLACK × the limit), a fraction of the time
between two answers when the limit's calls are spread evenly, so calls the provider held together still overlap.
Should the mark still count one call more than the provider held, a refusal of a call sent after the cut (once the calls
in flight at the cut were answered: twice the best latency after it), with no more calls in flight than the cut's
level, cuts one lower. (Calls that took their slots before the cut, and waited out a Retry-After, may still go out
together over the cut's level: their refusals are the burst's.)
With no call answered since the last cut (a refusal as the run starts, a rate
limit per minute) the cut halves the limit instead.

A run's default (``start`` below its ceiling) begins with a slow start, as TCP does: ``initial`` calls at once
(SLOW_START, promptfoo's default), one more with each answer (so doubling with each round of answers), up to
``start``, unless a refusal comes first; an answer grows it only while the calls in flight use the limit (the
answers of a round that come back together, before their dialogues' next calls went, grow it by one, not by a round).
Grown one answer at a time, the calls at once pass a provider's limit by one call, not by a round's worth sent
together: a provider that takes fewer than ``start`` refuses one call rather than most of a first burst, and no
dialogue's first call waits out a Retry-After it need not have met.

It grows back by one after as many answers in a row as the limit, while their latency stays within twice the best
seen (a server that queues the extra calls answers slower: then it stops growing), and not while the provider's
``Retry-After`` runs. Before any refusal it may grow this way up to its ceiling; after one, no further than the
level of the cut, until a quiet period (a minute without a refusal) lets it try one more, and one more after each
further quiet period. It never passes its ceiling (``--max-concurrency``). The runner plays as many dialogues at
once as the lowest limit of the run's endpoints allows (graph/running/playing.py ``DialogueSlots``); a
``--rate-limit`` gate still spaces the calls themselves.

A ``Retry-After`` pauses every call to the endpoint (models/resilience.py) only when the provider answered nothing
within the cooldown (a quota, not a limit on calls at once); while it answers, the cut is the slow-down and only the
refused calls wait out their ``Retry-After``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

SLOW_START = 4  # calls at once a run's default begins with, one more per answer (up to its start)
LATENCY_HOLDS = 2.0  # an answer within this many times the best latency seen: the endpoint keeps up
COOLDOWN_S = 2.0  # one cut per burst of 429s, not one per 429
PROBE_S = 60.0  # this long without a slow-down: the level it may grow to rises by one
OVERLAP_SLACK = 4  # an answered call counts as in flight from best latency / (this × limit) after it went, to as long
# before its answer (2.3 ms of a 100 ms call at a limit of 10): within the client's own time around a call, in which
# calls back to back at the provider look as if they overlapped
_KEPT = 512  # answered calls kept to measure how many overlapped (far more than ever overlap one call)


class AdaptiveLimit:
    """Additive increase of the calls an endpoint takes at once; on refusals, a cut to what it was seen to take."""

    def __init__(
        self,
        start: int,
        ceiling: int,
        *,
        initial: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        cooldown_s: float = COOLDOWN_S,
        probe_s: float = PROBE_S,
    ) -> None:
        if not 1 <= start <= ceiling:
            raise ValueError(f"a concurrency must start between 1 and its ceiling {ceiling}, got {start}")
        # slow start: from ``initial`` calls at once, one more with each answer up to ``start``
        self._limit = min(start, initial) if initial else start
        self._start = start
        self.ceiling = ceiling
        self.reached = self._limit
        self.throttles = 0
        self._best: float | None = None
        self._good = 0
        self._clock, self.cooldown_s, self.probe_s = clock, cooldown_s, probe_s
        self._bound = ceiling  # the most it may grow to now (the level of the last cut, raised by quiet periods)
        self._probed = clock()
        self._cut_at = float("-inf")  # when the current (or last) window of refusals opened
        self._cut_from = start  # the limit when it opened
        self._calls: deque[tuple[float, float]] = deque(maxlen=_KEPT)  # answered calls: (sent, answered)
        self._peak = 0  # the most answered calls that overlapped, since the last window opened
        self._window_peak = 0  # the same, for the window's cut: before it opened and while it runs
        self._quiet_until = float("-inf")  # the provider's Retry-After: no growth before then
        self._last_answer = float("-inf")
        self._lock = threading.Lock()

    @property
    def limit(self) -> int:
        return self._limit

    def answered(self, latency: float | None = None, *, at_once: int | None = None) -> bool:
        """A call answered after ``latency`` seconds (None: not timed), with ``at_once`` calls in flight as it was,
        itself included (None: unknown). True while a window of refusals runs: the provider still takes calls, so its
        refusals were about how many at once, which the cut now bounds (the caller lifts the Retry-After pause it put
        on every call to the endpoint)."""
        with self._lock:
            now = self._clock()
            self._last_answer = now
            if latency is not None:
                self._best = latency if self._best is None else min(self._best, latency)
                slack = self._best / (OVERLAP_SLACK * self._limit)
                self._overlap(now - latency + slack, now - slack)
            if now - self._cut_at < self.cooldown_s:  # a window runs: its answers refine the cut, no growth
                self._cut()
                return True
            if latency is not None and latency > LATENCY_HOLDS * self._best:  # type: ignore[operator]  # set above
                self._good = 0
                return False
            self._good += 1
            if now < self._quiet_until:
                return False
            if now - max(self._probed, self._cut_at) >= self.probe_s and self._bound < self.ceiling:
                self._bound, self._probed = self._bound + 1, now
            # no refusal yet: one more per answer, while the calls in flight use the limit (answers of a round that
            # come back together, before their dialogues' next calls went, would grow it by a round at once)
            slow_start = self.throttles == 0 and self._limit < self._start and (at_once or self._limit) >= self._limit
            if (slow_start or self._good >= self._limit) and self._limit < self._bound:
                self._limit, self._good = min(self._limit + 1, self._bound), 0
                self.reached = max(self.reached, self._limit)
            return False

    def throttled(
        self, retry_after: float | None = None, *, sent: float | None = None, at_once: int | None = None
    ) -> bool:
        """The provider refused a call (a 429) or asked to wait ``retry_after`` seconds: cut once per window, to
        the most calls it was seen to answer at once; and one lower for a refused call ``sent`` after the last cut
        with ``at_once`` calls in flight, the call included, no more than the cut's level (that level is still too
        high: the high-water mark, timed at the client, can count one call more than the provider held at once).
        True when it answered a call within the last cooldown: it still takes calls, so the refusal is about how
        many at once, which the cut bounds (the caller then does not pause every call to the endpoint for the
        Retry-After; only the refused call waits it out)."""
        with self._lock:
            now = self._clock()
            if retry_after:
                self._quiet_until = max(self._quiet_until, now + retry_after)
            if now - self._cut_at >= self.cooldown_s:  # a new window
                self._cut_at, self._cut_from = now, self._limit
                self._window_peak, self._peak = self._peak, 0
                self.throttles += 1
                self._cut()
            elif self._settled(sent, at_once):  # refused at the level of the cut: one lower
                self._cut_at, self._cut_from = now, self._limit
                self._window_peak, self._peak = max(self._peak, self._limit - 1), 0
                self.throttles += 1
                self._cut()
            else:  # the window's burst: its refusals refine the cut
                self._cut()
            self._good = 0
            return now - self._last_answer < self.cooldown_s

    def _settled(self, sent: float | None, at_once: int | None) -> bool:
        """Whether a call sent at ``sent`` with ``at_once`` calls in flight met the level of the last cut alone: sent
        after the calls in flight at the cut were answered (twice the best latency after it; never before any answer
        timed one), with no more calls in flight than that level (unknown: not alone)."""
        if sent is None or at_once is None or self._best is None or at_once > self._limit:
            return False
        return sent > self._cut_at + LATENCY_HOLDS * self._best

    def _cut(self) -> None:
        """The window's cut: to what the provider was seen to take at once, and one below where the refusals came."""
        took = self._window_peak
        level = min(self._cut_from - 1, took) if took else self._cut_from // 2
        self._limit = self._bound = max(1, level)

    def _overlap(self, sent: float, answered: float) -> None:
        """Keep the call answered at ``answered`` (sent at ``sent``; both moved inwards by the slack) and raise the
        high-water mark of answered calls that overlapped in time: the most of them in flight at one instant while this
        one was."""
        ends, starts = [], [sent]
        for other_sent, other_answered in reversed(self._calls):  # in the order answered, latest first
            if other_answered <= sent:
                break
            ends.append(other_answered)
            starts.append(other_sent)
        self._calls.append((sent, answered))
        if not ends:
            most = 1
        else:  # sweep the instants in (sent, answered): a call counts from its start to its end
            events = sorted([(max(s, sent), 1) for s in starts] + [(e, -1) for e in ends])
            most = at = 0
            for _, step in events:  # an end sorts before a start at the same instant: they did not overlap
                at += step
                most = max(most, at)
        self._peak = max(self._peak, most)
        if self._clock() - self._cut_at < self.cooldown_s:
            self._window_peak = max(self._window_peak, most)
