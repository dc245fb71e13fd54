"""Served models play 16 dialogues at once by default, adapting per provider (fewer on 429s, more while latency
holds, never past --max-concurrency); the embedded model stays at 1; the summary says what concurrency was reached."""

from __future__ import annotations

import json

import pytest

from models.concurrency import AdaptiveLimit
from tests.support.stub_server import StubServer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_limit_halves_on_a_burst_of_429s_and_grows_by_one_per_window_of_answers_while_latency_holds():
    clock = Clock()
    limit = AdaptiveLimit(16, 20, clock=clock, cooldown_s=2, probe_s=60)
    limit.throttled()
    limit.throttled()  # the same burst: halved once
    assert limit.limit == 8 and limit.throttles == 1
    clock.now = 3
    limit.throttled()
    assert limit.limit == 4 and limit.throttles == 2
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
    assert limit.limit == 6  # cut at 8: it grows back to three quarters of that, under where the 429s came
    clock.now = 3 + 61
    for _ in range(100):
        limit.answered(0.1)
    assert limit.limit == 7  # a minute without a 429: one more is tried
    for k in range(10):
        clock.now = 100 + 3 * k
        limit.throttled()
    assert limit.limit == 1  # never below one
    free = AdaptiveLimit(2, 5, clock=clock)
    for _ in range(1000):
        free.answered(0.1)
    assert free.limit == free.reached == 5  # never past the ceiling
    with pytest.raises(ValueError):
        AdaptiveLimit(0, 4)


def test_a_burst_of_429s_cuts_once_to_what_the_provider_took_at_once_and_it_grows_no_further():
    """16 calls sent at once to a provider that takes 6: the ten refused ones come back while 15, 14, ... 6 others are
    in flight. One cut (not ten), straight to 6, and no growth past 6 (each step up would meet 429s again)."""
    clock = Clock()
    limit = AdaptiveLimit(16, 64, clock=clock, cooldown_s=2, probe_s=60)
    for others in range(15, 5, -1):
        limit.throttled(in_flight=others, retry_after=1.0)
        clock.now += 0.001
    assert limit.limit == 6 and limit.throttles == 1
    for _ in range(1000):
        limit.answered(0.1)
    assert limit.limit == 6
    clock.now = 61  # a quiet minute: one more is tried, once
    for _ in range(100):
        limit.answered(0.1)
    assert limit.limit == 7
    # refused while the others are in flight out of order (the provider's limit met by a late call first): the
    # fewest in flight at a refusal counts, however they arrive
    other = AdaptiveLimit(16, 64, clock=clock)
    for others in (6, 9, 12, 7):
        other.throttled(in_flight=others)
    assert other.limit == 6


def test_a_refusal_with_nothing_else_in_flight_cuts_to_a_quarter_at_most_and_retry_after_holds_growth():
    clock = Clock()
    limit = AdaptiveLimit(16, 64, clock=clock, cooldown_s=2, probe_s=60)
    limit.throttled(in_flight=0, retry_after=5)  # a rate limit per minute, say: not "takes nothing at once"
    assert limit.limit == 4
    limit.throttled(in_flight=0)
    assert limit.limit == 4  # the same window
    for _ in range(100):
        limit.answered(0.1)
    assert limit.limit == 4  # the provider asked to wait 5 s: no growth meanwhile
    clock.now = 5.5
    for _ in range(4):
        limit.answered(0.1)
    assert limit.limit == 4  # it may grow back to what it took (a quarter of 16), no further before a quiet minute


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
    """The limit holds per call, not only per dialogue: dialogues already playing slow down at once after a 429."""
    import asyncio

    from models.circuit import ProviderCircuit

    circuit = ProviderCircuit("openai @ http://x/v1")
    circuit.concurrency = AdaptiveLimit(2, 4)

    async def three():
        first, second = await circuit.enter(), await circuit.enter()
        third = asyncio.ensure_future(circuit.enter())
        await asyncio.sleep(0.2)
        waiting = not third.done()
        circuit.answered(spec="openai:m", latency=0.1)  # one call answered: its slot is free
        await asyncio.wait_for(third, 2)
        circuit.left()  # another failed: its slot too
        return waiting, (first, second, third.result())

    waiting, probes = asyncio.run(three())
    assert waiting and probes == (False, False, False)
    assert circuit._calls == 1
