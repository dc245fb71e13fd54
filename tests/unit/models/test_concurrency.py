"""Served models play 16 dialogues at once by default, adapting per provider (fewer on 429s, more while latency
holds, never past --max-concurrency); the embedded model stays at 1; the summary says what concurrency was reached."""

from __future__ import annotations

import heapq
import json
from itertools import zip_longest

import pytest

from models.concurrency import AdaptiveLimit
from tests.support.stub_server import StubServer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


LATENCY = 0.125  # binary fractions: the fake clock's instants add up exactly


def _wave(limit: AdaptiveLimit, clock: Clock, sent: int, takes: int, *, refusals_first: bool = False) -> int:
    """``sent`` calls sent together at the clock's instant to a provider that takes ``takes`` at once: the taken ones
    answer after LATENCY, the others are refused then (as the stub does); the clock moves past the answers. The
    number refused."""
    clock.now += LATENCY
    answers = [lambda: limit.answered(LATENCY)] * min(sent, takes)
    refusals = [lambda: limit.throttled(retry_after=None)] * max(0, sent - takes)
    if refusals_first:
        events = [*refusals, *answers]
    else:  # an answer, a refusal, an answer...
        events = [e for pair in zip_longest(answers, refusals) for e in pair if e is not None]
    for event in events:
        event()
    clock.now += LATENCY  # a gap before the next wave: it does not overlap this one
    return max(0, sent - takes)


@pytest.mark.parametrize("takes", [3, 6, 10])
@pytest.mark.parametrize("refusals_first", [False, True])
def test_a_burst_of_429s_cuts_once_to_what_the_provider_took_at_once_not_below(takes, refusals_first):
    """16 calls sent at once to a provider that takes 3, 6 or 10: the refused ones come back before, after or among
    the answered ones. One cut (not one per 429), to exactly what it answered at once, and the run stays there: no
    second burst while the limit holds."""
    clock = Clock()
    limit = AdaptiveLimit(16, 64, clock=clock, cooldown_s=2, probe_s=60)
    refused = _wave(limit, clock, 16, takes, refusals_first=refusals_first)
    assert refused == 16 - takes and limit.throttles == 1 and limit.limit == takes
    for _ in range(200):  # 50 s of waves at the limit: every call answered, no growth past the level of the cut
        refused += _wave(limit, clock, limit.limit, takes)
    assert limit.limit == takes and limit.throttles == 1 and refused == 16 - takes


def test_it_stays_near_the_provider_s_limit_trying_one_more_only_after_a_quiet_minute():
    clock = Clock()
    limit = AdaptiveLimit(16, 64, clock=clock, cooldown_s=2, probe_s=60)
    refused = _wave(limit, clock, 16, 6)
    probes = []
    for _ in range(1200):  # five minutes of waves
        before = limit.limit
        refused += _wave(limit, clock, limit.limit, 6)
        if limit.limit > before:
            probes.append((clock.now, limit.limit))
        assert 6 <= limit.limit <= 7  # never below what the provider takes, at most one more (a probe)
    assert limit.limit in (6, 7) and limit.reached == 16
    assert [at for at, to in probes if to == 7] and all(to == 7 for _, to in probes)
    # a probe a minute at most, each met by one refusal (7 sent, 6 taken) and cut straight back to 6
    assert refused == 10 + (limit.throttles - 1) and limit.throttles - 1 <= 300 / 60


def test_with_no_429_it_grows_while_latency_holds_up_to_its_ceiling_and_no_further():
    clock = Clock()
    limit = AdaptiveLimit(4, 10, clock=clock)
    for _ in range(3):
        limit.answered(0.1)
    assert limit.limit == 4
    limit.answered(0.1)  # four answers in a row at a limit of four: one more
    assert limit.limit == 5
    for _ in range(50):
        limit.answered(0.5)  # five times the best latency: the endpoint queues, no growth
    assert limit.limit == 5
    for _ in range(1000):
        limit.answered(0.12)
    assert limit.limit == limit.reached == 10  # never past the ceiling
    fixed = AdaptiveLimit(16, 16, clock=clock)  # --max-concurrency 16: a provider that takes them all keeps 16
    for _ in range(100):
        _wave(fixed, clock, fixed.limit, 64)
    assert fixed.limit == 16 and fixed.throttles == 0
    with pytest.raises(ValueError):
        AdaptiveLimit(0, 4)


def test_with_nothing_answered_a_refusal_halves_and_retry_after_holds_growth():
    """A refusal before any answer (a rate limit per minute, say) says nothing of what the provider takes at once:
    the limit halves, once per window, never below one; nothing grows while the provider's Retry-After runs."""
    clock = Clock()
    limit = AdaptiveLimit(16, 64, clock=clock, cooldown_s=2, probe_s=60)
    limit.throttled()
    limit.throttled()
    assert limit.limit == 8 and limit.throttles == 1
    clock.now = 3
    limit.throttled(retry_after=5)
    assert limit.limit == 4 and limit.throttles == 2

    def one_at_a_time(n: int) -> None:
        for _ in range(n):
            clock.now += 0.25
            limit.answered(0.125)

    clock.now = 5.25
    one_at_a_time(10)  # the provider asked to wait until 8 s: no growth meanwhile
    assert limit.limit == 4 and clock.now < 8
    clock.now = 8
    one_at_a_time(20)
    assert limit.limit == 4  # the level of the last cut: no further before a quiet minute
    clock.now = 3 + 61
    one_at_a_time(4)
    assert limit.limit == 5  # a minute without a 429: one more is tried
    for k in range(10):
        clock.now = 100 + 3 * k
        limit.throttled()
    assert limit.limit == 1  # nothing answered in between: halved each window, never below one


def test_a_default_slow_starts_one_more_per_answer_doubling_per_round_and_a_refusal_ends_it():
    """A run's default begins at a few calls at once and adds one with each answer, which doubles it with each round of
    answers, up to its start (then one more per round)."""
    clock = Clock()
    limit = AdaptiveLimit(16, 64, initial=4, clock=clock, cooldown_s=2, probe_s=60)
    assert limit.limit == 4
    limit.answered(LATENCY)
    assert limit.limit == 5  # one answer, one more call at once
    assert _wave(limit, clock, limit.limit, 64) == 0 and limit.limit == 10
    assert _wave(limit, clock, limit.limit, 64) == 0 and limit.limit == 16  # up to the start
    assert _wave(limit, clock, limit.limit, 64) == 0 and limit.limit == 17  # past the start: one per round
    together = AdaptiveLimit(16, 64, initial=4, clock=clock, cooldown_s=2, probe_s=60)
    for left in range(4, 0, -1):  # a round's answers come back together, before their dialogues' next calls go
        together.answered(LATENCY, at_once=left)
    assert together.limit == 5  # only the first found the limit in use


AROUND = (
    LATENCY / 128
)  # the client's own time on each side of the provider (about 1 ms of 125; 1-2.5 ms measured on loopback)


def _closed_loop(limit: AdaptiveLimit, clock: Clock, takes: int, calls: int) -> int:
    """``calls`` calls, each sent as soon as the limit has room (one after another, as dialogues do), to a provider
    that takes ``takes`` at once. A call reaches the provider AROUND after the client sent it; taken, the provider
    holds it for LATENCY - 2 AROUND and its answer reaches the client AROUND later (LATENCY after it went); over the
    provider's limit, it is refused at once, its refusal reaching the client AROUND later. The number refused."""
    held: list[float] = []  # when the provider frees the calls it took
    returns: list[tuple[float, int, float, bool]] = []  # (when it reaches the client, order, sent, answered)
    refused = sent = 0
    while sent < calls or returns:
        while len(returns) < limit.limit and sent < calls:
            arrives = clock.now + AROUND
            held = [free for free in held if free > arrives]
            taken = len(held) < takes
            if taken:
                held.append(arrives + LATENCY - 2 * AROUND)
            heapq.heappush(returns, (clock.now + (LATENCY if taken else 2 * AROUND), sent, clock.now, taken))
            sent += 1
            clock.now += LATENCY / 256  # the next dialogue's call goes a moment later
        at, _, went, taken = heapq.heappop(returns)
        clock.now = max(clock.now, at)
        if taken:
            limit.answered(clock.now - went, at_once=len(returns) + 1)
        else:
            limit.throttled(retry_after=None, sent=went, at_once=len(returns) + 1)
            refused += 1
    return refused


@pytest.mark.parametrize("takes", [3, 6, 10])
def test_a_slow_start_meets_a_provider_s_limit_in_one_cut_and_settles_at_it(takes):
    """Calls sent as answers come, timed at the client (AROUND each side of the provider): grown one per answer, the
    default passes a provider that takes 3, 6 or 10 at once, is cut once, to exactly what the provider took (calls back
    to back at the provider, which the client sees overlap by its own time, do not count as held together), and stays
    there: no more refusals in all than sending 16 at once would meet in its first burst."""
    clock = Clock()
    limit = AdaptiveLimit(16, 64, initial=4, clock=clock, cooldown_s=2, probe_s=60)
    refused = _closed_loop(limit, clock, takes, 400)
    assert limit.throttles == 1 and limit.limit == takes and 1 <= refused <= 16 - takes


def test_a_call_sent_after_the_cut_and_refused_cuts_one_lower_and_a_late_refusal_of_the_burst_does_not():
    """Timed at the client, two calls back to back can look as if they overlapped: the high-water mark may count one
    call more than the provider held. A refusal of a call sent after the cut, with no more calls in flight than the
    cut's level, says that level is still too high: one lower. A refusal of a call sent before it, or with more calls in
    flight (calls that took their slots before the cut and waited out a Retry-After together), is the burst's."""
    clock = Clock()
    limit = AdaptiveLimit(16, 64, clock=clock, cooldown_s=2, probe_s=60)
    _wave(limit, clock, 16, 11)  # 11 seemed to be answered at once
    assert limit.limit == 11 and limit.throttles == 1
    limit.throttled(retry_after=1, sent=clock.now)  # sent as the calls in flight at the cut were still answered
    assert limit.limit == 11 and limit.throttles == 1
    clock.now += 2 * LATENCY
    sent = clock.now  # 11 sent at the cut's level, once those were answered, to a provider that holds 10
    for _ in range(10):
        limit.answered(LATENCY)
    limit.throttled(retry_after=1, sent=sent, at_once=12)  # sent with more in flight than the cut: not alone
    assert limit.limit == 11 and limit.throttles == 1
    limit.throttled(retry_after=1, sent=sent)  # with how many in flight unknown: nothing
    assert limit.limit == 11 and limit.throttles == 1
    limit.throttled(retry_after=1, sent=sent, at_once=11)
    assert limit.limit == 10 and limit.throttles == 2
    limit.throttled(retry_after=1, sent=sent - 1, at_once=10)  # sent before that cut: nothing more
    assert limit.limit == 10 and limit.throttles == 2
    for _ in range(200):  # and it stays at 10 while the provider takes every one of them
        assert _wave(limit, clock, limit.limit, 10) == 0
    assert limit.limit == 10
    burst = AdaptiveLimit(16, 16, clock=clock, cooldown_s=2, probe_s=60)  # refusals before any answer
    for k in range(13):
        burst.throttled(retry_after=1, sent=clock.now + k / 1000)  # sent one after another, refused at once
    assert burst.limit == 8 and burst.throttles == 1  # halved once: not one lower per refusal of the burst


@pytest.mark.parametrize(("overlap", "cut_to"), [(LATENCY / 64, 6), (LATENCY / 2, 7)])
def test_calls_that_overlapped_at_the_client_only_by_its_own_time_count_as_back_to_back(overlap, cut_to):
    """Six calls answered together, and a seventh sent ``overlap`` before their answers reached the client: a sliver
    (2 ms of 125) is the client's own time around the provider, where the provider had freed a slot before the seventh
    came, so a refusal cuts to the six it held at once; half a call's latency is a real seventh call at once."""
    clock = Clock()
    limit = AdaptiveLimit(8, 64, clock=clock, cooldown_s=2, probe_s=60)
    clock.now = LATENCY
    for _ in range(6):
        limit.answered(LATENCY, at_once=6)
    clock.now = 2 * LATENCY - overlap
    limit.answered(LATENCY, at_once=1)  # the seventh, sent ``overlap`` before the six were answered
    limit.throttled(retry_after=1, sent=clock.now, at_once=8)
    assert limit.limit == cut_to and limit.throttles == 1


def test_a_refusal_while_the_provider_answers_is_about_calls_at_once_not_a_pause_for_every_call():
    """The limit tells its caller whether the provider answered within the cooldown: then the cut is the slow-down
    and the Retry-After holds only the refused call; with nothing answered (a quota) every call pauses."""
    clock = Clock()
    limit = AdaptiveLimit(16, 64, clock=clock, cooldown_s=2, probe_s=60)
    assert limit.throttled(retry_after=1) is False  # nothing answered yet
    clock.now = 10
    assert limit.answered(0.125) is False  # no window of refusals runs: an ordinary answer
    clock.now = 11
    assert limit.throttled(retry_after=1) is True  # answered a second ago: it still takes calls
    assert limit.answered(0.125) is True  # an answer while the window runs: a pause may end
    clock.now = 20
    assert limit.throttled(retry_after=1) is False  # nine quiet seconds: a quota, every call pauses


def _run(*args):
    from tests.unit.models.test_first_contact import _run as run

    return run(*args, env={"OPENAI_API_KEY": "x"})


def _flags(url: str, db, *extra: str) -> list[str]:
    return [
        "--user-model",
        "openai:stub",
        "--target-model",
        "openai:stub",
        "--judge-model",
        "openai:stub",
        "--base-url",
        url,
        "--db",
        str(db),
        "--per-category",
        "3",
        "--turns",
        "2",
        "--no-trace",
        "--json",
        "--no-cache",
        *extra,
    ]


@pytest.mark.slow
def test_served_models_play_many_dialogues_at_once_by_default(tmp_path):
    with StubServer(latency=0.2) as stub:
        done, _ = _run(*_flags(stub.url, tmp_path / "a.db"))
        most = stub.max_in_flight
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["finished"] == 18
    assert summary["concurrency"]["dialogues_at_once"] >= 12 and most >= 12  # 16 to start, in two processes of 8
    endpoint = summary["concurrency"]["endpoints"]
    assert endpoint == [] or endpoint[0]["ceiling"] == 64  # the parent's own calls: none when the children play


@pytest.mark.slow
def test_a_provider_that_answers_429_beyond_its_limit_gets_fewer_calls_at_once(tmp_path):
    with StubServer(latency=0.1, concurrency_limit=4) as stub:
        done, _ = _run(*_flags(stub.url, tmp_path / "a.db", "--processes", "1"))
        limited = stub.limited
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["finished"] == 18 and summary["failed"] == []
    [endpoint] = summary["concurrency"]["endpoints"]
    print(f"\n429 past 4 at once: {limited} × 429, {endpoint}")
    # cut from 16 by the first burst of 429s, straight to what the stub takes, and kept there: no cut after cut from
    # halving step by step (16, 8, 4) or growing past 4 again (a spare cut for a burst the loaded machine splits)
    assert 1 <= endpoint["throttled"] <= 2 and endpoint["now"] <= 4, (limited, endpoint)
    assert limited == summary["retries"]["by_reason"]["HTTP 429"]  # every 429 was retried, none lost a dialogue


@pytest.mark.slow
def test_max_concurrency_is_a_ceiling_and_the_embedded_model_plays_one_at_a_time(tmp_path, providers):
    import io
    from contextlib import redirect_stdout

    from cli.run import main
    from tests.unit.graph.test_research_runs import GRID, _register

    with StubServer(latency=0.1) as stub:
        done, _ = _run(*_flags(stub.url, tmp_path / "a.db", "--max-concurrency", "3"))
        most = stub.max_in_flight
    assert done.returncode == 0 and most <= 3
    assert json.loads(done.stdout)["concurrency"]["dialogues_at_once"] <= 3

    _register(providers)  # models computed in this process, as the embedded one is: one dialogue at a time
    out = io.StringIO()
    with redirect_stdout(out):
        assert main([*GRID, "--db", str(tmp_path / "b.db"), "--json"]) == 0
    summary = json.loads(out.getvalue())
    assert summary["concurrency"] == {"dialogues_at_once": 1, "endpoints": []}


def test_calls_to_an_adapting_endpoint_wait_for_a_slot_and_give_it_back():
    """The limit holds per call, not only per dialogue: dialogues already playing slow down at once after a 429; a
    call given back wakes the first waiting one."""
    import asyncio

    from models.circuit import ProviderCircuit

    circuit = ProviderCircuit("openai @ http://x/v1")
    circuit.concurrency = AdaptiveLimit(2, 4)

    async def three():
        first, second = await circuit.enter(), await circuit.enter()
        third = asyncio.ensure_future(circuit.enter())
        await asyncio.sleep(0.2)
        waiting = not third.done()
        circuit.answered(spec="openai:m", latency=0.1)  # one call answered: its slot is free, the waiter woken at once
        await asyncio.wait_for(third, 0.1)  # not at its next check (every 0.25 s)
        circuit.left()  # another failed: its slot too
        return waiting, (first, second, third.result())

    waiting, probes = asyncio.run(three())
    assert waiting and probes == (False, False, False)
    assert circuit._calls == 1
