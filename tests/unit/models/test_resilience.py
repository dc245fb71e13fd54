"""Retries, rate limits and timeouts around real provider clients, against the stub server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import httpx2
import openai
import pytest
from langchain_core.messages import HumanMessage

from models.call_policy import CallPolicy
from models.rate_limits import RateGate
from models.registry import Sampling, create_role_model
from models.retries import RetriesExhaustedError, RetryPolicy, retry_after, retry_reason
from tests.conftest import ScriptedChatModel
from tests.support.stub_server import Faults, StubServer

FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05, timeout=5)


def _model(stub: StubServer, policy: CallPolicy, *, spec: str = "openai:stub", role: str = "target"):
    return create_role_model(spec, role=role, sampling=Sampling(base_url=stub.url, seed=1), policy=policy)


def _ask(model, text: str = "hello"):
    return asyncio.run(model.chat.ainvoke([HumanMessage(text)]))


def _openai_error(cls, status: int, headers: dict[str, str] | None = None):
    response = httpx2.Response(
        status, request=httpx2.Request("POST", "http://x/v1/chat/completions"), headers=headers or {}
    )
    return cls("stub", response=response, body=None)


# --- what is retried -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc, reason",
    [
        (_openai_error(openai.RateLimitError, 429), "HTTP 429"),
        (_openai_error(openai.InternalServerError, 503), "HTTP 503"),
        (_openai_error(openai.BadRequestError, 400), None),
        (_openai_error(openai.AuthenticationError, 401), None),
        (openai.APITimeoutError(request=httpx2.Request("POST", "http://x")), "timeout"),
        (openai.APIConnectionError(request=httpx2.Request("POST", "http://x")), "connection"),
        (httpx.ConnectError("refused"), "connection"),
        (httpx.ReadTimeout("slow"), "timeout"),
        (TimeoutError(), "timeout"),
        (ValueError("the prompt is wrong"), None),
    ],
)
def test_retry_reason_by_exception(exc, reason):
    assert retry_reason(exc) == reason


def test_google_and_hugging_face_errors_by_status_code():
    from google.genai import errors as google_errors
    from huggingface_hub.errors import HfHubHTTPError

    busy = google_errors.ServerError(503, {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}})
    limited = google_errors.ClientError(
        429,
        {
            "error": {
                "code": 429,
                "message": "quota",
                "status": "RESOURCE_EXHAUSTED",
                "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}],
            }
        },
    )
    invalid = google_errors.ClientError(400, {"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}})
    assert retry_reason(busy) == "HTTP 503"
    assert retry_reason(limited) == "HTTP 429" and retry_after(limited) == 7.0
    assert retry_reason(invalid) is None
    hf = HfHubHTTPError("unavailable", response=httpx.Response(503, request=httpx.Request("POST", "http://x")))
    assert retry_reason(hf) == "HTTP 503"
    # LangChain re-raises SDK errors "from" the original: the cause is followed.
    try:
        try:
            raise busy
        except Exception as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert retry_reason(outer) == "HTTP 503"


def test_retry_after_header_seconds_and_milliseconds():
    assert retry_after(_openai_error(openai.RateLimitError, 429, {"retry-after": "3"})) == 3.0
    assert retry_after(_openai_error(openai.RateLimitError, 429, {"retry-after-ms": "250"})) == 0.25
    assert retry_after(_openai_error(openai.RateLimitError, 429)) is None


def test_backoff_grows_with_jitter_and_honours_retry_after():
    import random

    policy = RetryPolicy(base_delay=1.0, max_delay=8.0)
    rng = random.Random(0)
    plain = ValueError("x")
    delays = [policy.delay(k, plain, rng) for k in range(1, 7)]
    for k, d in enumerate(delays, start=1):
        cap = min(8.0, 2 ** (k - 1))
        assert cap / 2 <= d <= cap
    asked = _openai_error(openai.RateLimitError, 429, {"retry-after": "5"})
    assert policy.delay(1, asked, rng) >= 5.0


# --- through a real client against the stub ----------------------------------------------------


def test_transient_failures_are_retried_until_a_reply():
    with StubServer(script=["500", "429", "drop", "ok"], faults=Faults(retry_after=0.01)) as stub:
        policy = CallPolicy(retry=FAST)
        reply = _ask(_model(stub, policy))
    assert reply.content.startswith("Stub reply 4")
    assert sum(stub.outcomes.values()) == 4
    assert policy.stats.retry_summary()["by_reason"] == {"HTTP 429": 1, "HTTP 500": 1, "connection": 1}


def test_retry_after_is_honoured():
    with StubServer(script=["429", "ok"], faults=Faults(retry_after=0.6)) as stub:
        start = time.perf_counter()
        _ask(_model(stub, CallPolicy(retry=FAST)))
        assert time.perf_counter() - start >= 0.6


def test_a_hanging_request_times_out_and_is_retried():
    with StubServer(script=["hang", "ok"], faults=Faults(hang_seconds=10)) as stub:
        policy = CallPolicy(retry=RetryPolicy(attempts=3, base_delay=0.01, timeout=0.5))
        start = time.perf_counter()
        reply = _ask(_model(stub, policy))
        assert time.perf_counter() - start < 5
    assert reply.content.startswith("Stub reply 2")
    assert policy.stats.retries["timeout"] == 1


def test_giving_up_raises_after_the_allowed_attempts():
    with StubServer(faults=Faults(error_500=1.0)) as stub:
        policy = CallPolicy(retry=RetryPolicy(attempts=3, base_delay=0.01, timeout=5))
        with pytest.raises(RetriesExhaustedError, match=r"gave up after 3 attempts \(HTTP 500\)"):
            _ask(_model(stub, policy))
        assert len(stub.requests) == 3
    assert policy.stats.retry_summary()["gave_up"] == 1


def test_errors_that_are_not_transient_fail_at_once(providers):
    calls = []

    def respond(messages, n):
        calls.append(n)
        raise ValueError("malformed request")

    providers("broken", lambda name, role, sampling: (ScriptedChatModel(respond=respond, calls=[]), name, "chat"))
    model = create_role_model("broken:x", role="target", sampling=Sampling(), policy=CallPolicy(retry=FAST))
    with pytest.raises(ValueError, match="malformed request"):
        _ask(model)
    assert calls == [1]


def test_the_request_carries_the_role_sampling():
    with StubServer() as stub:
        sampling = Sampling(temperature=0.3, max_tokens=17, seed=5, base_url=stub.url, extra={"top_p": 0.5})
        model = create_role_model("openai:stub", role="judge", sampling=sampling, policy=CallPolicy(retry=FAST))
        _ask(model)
    body = stub.requests[0]
    assert body["temperature"] == 0.3 and body["seed"] == 5 and body["top_p"] == 0.5
    # OpenAI-compatible servers (llama.cpp, older vLLM, TGI) know max_tokens, not max_completion_tokens.
    assert body["max_tokens"] == 17 and "max_completion_tokens" not in body
    assert body["model"] == "stub"


# --- rate limits -----------------------------------------------------------------------------


def test_rate_gate_spaces_requests_across_tasks():
    gate = RateGate(600, burst=1)  # 10 per second, no burst

    async def many():
        start = time.perf_counter()
        await asyncio.gather(*(gate.acquire() for _ in range(6)))
        return time.perf_counter() - start

    elapsed = asyncio.run(many())
    assert 0.45 <= elapsed < 1.5  # five waits of 0.1 s after the first


def test_rate_gate_is_shared_by_threads_and_pauses():
    gate = RateGate(None)
    assert gate.reserve() == 0.0
    gate.pause(0.3)
    waits = []
    threads = [threading.Thread(target=lambda: waits.append(gate.reserve())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(0.2 < w <= 0.3 for w in waits)


def test_a_429_met_while_the_endpoint_answers_holds_only_the_refused_calls():
    """Eight calls at once to an endpoint that takes two at once and refuses the rest with Retry-After 1 s: its answers
    show the refusals are about calls at once. The cut concurrency is the slow-down, so no call waits at the gate
    for the Retry-After (the refused ones wait it out in their own retry), and every call is answered."""
    policy = CallPolicy(retry=RetryPolicy(attempts=6, base_delay=0.01, max_delay=0.05, timeout=5))
    policy.adapt_concurrency(8, 8)
    with StubServer(latency=0.3, concurrency_limit=2, faults=Faults(retry_after=1.0)) as stub:
        model = _model(stub, policy)

        async def eight():
            return await asyncio.gather(*(model.chat.ainvoke([HumanMessage(f"q{i}")]) for i in range(8)))

        replies = asyncio.run(eight())
        refused = stub.limited
    assert len(replies) == 8 and refused >= 1
    [endpoint] = policy.concurrency_summary()
    assert endpoint["throttled"] >= 1 and endpoint["now"] <= 2
    assert policy.stats.rate_limited_seconds == 0.0, policy.stats.retry_summary()


def test_calls_that_held_slots_through_a_pause_neither_wait_it_all_out_nor_cut_below_what_the_endpoint_takes():
    """Sixteen dialogues of three calls, starting 10 ms apart, at a fixed 16 against an endpoint that takes three at
    once (Retry-After 1 s). The first refusal comes before any answer: every caller pauses and the concurrency halves;
    dialogues starting meanwhile take slots and wait at the gate. The answers then cut it to the three answered and
    end the pause: the waiters go at once, not a second later, and their refusals (more calls in flight than the cut,
    from slots taken before it) do not cut below three."""
    policy = CallPolicy(retry=RetryPolicy(attempts=8, base_delay=0.01, max_delay=0.05, timeout=5))
    policy.adapt_concurrency(16, 16)
    with StubServer(latency=0.1, concurrency_limit=3, faults=Faults(retry_after=1.0)) as stub:
        model = _model(stub, policy)

        async def dialogue(i: int) -> None:
            await asyncio.sleep(i / 100)
            for turn in range(3):
                await model.chat.ainvoke([HumanMessage(f"d{i} t{turn}")])

        async def sixteen() -> None:
            await asyncio.gather(*(dialogue(i) for i in range(16)))

        asyncio.run(sixteen())
        refused = stub.limited
    [endpoint] = policy.concurrency_summary()
    assert refused >= 1 and endpoint["throttled"] >= 1
    assert endpoint["now"] == 3, (endpoint, refused)
    assert policy.stats.rate_limited_seconds < 2.0, policy.stats.retry_summary()  # waited out in full: 1 s each


def test_one_gate_per_provider_shared_by_roles_and_a_spec_can_have_its_own():
    with StubServer() as stub:
        policy = CallPolicy(retry=FAST, rate_limits={"openai": 600, "openai:special": 60})
        user = _model(stub, policy, role="user")
        judge = _model(stub, policy, role="judge")
        special = _model(stub, policy, spec="openai:special")
    assert user.chat.gate is judge.chat.gate
    assert user.chat.gate.per_minute == 600
    assert special.chat.gate is not user.chat.gate and special.chat.gate.per_minute == 60


def test_rate_limit_applies_to_concurrent_dialogue_calls():
    with StubServer() as stub:
        policy = CallPolicy(retry=FAST, rate_limits={"openai": 300})  # 5 per second
        model = _model(stub, policy)
        model.chat.gate.capacity = model.chat.gate._tokens = 1.0

        async def burst():
            start = time.perf_counter()
            await asyncio.gather(*(model.chat.ainvoke([HumanMessage(f"q{i}")]) for i in range(4)))
            return time.perf_counter() - start

        elapsed = asyncio.run(burst())
    assert elapsed >= 0.55  # three waits of 0.2 s
    assert policy.stats.rate_limited_seconds > 0


def test_a_429_slows_down_every_caller_of_that_provider():
    with StubServer(script=["429"], faults=Faults(retry_after=0.6)) as stub:
        policy = CallPolicy(retry=FAST)
        first, second = _model(stub, policy), _model(stub, policy, role="user")

        async def two_dialogues():
            async def later():
                await asyncio.sleep(0.2)  # after the 429 arrived: the gate is paused
                start = time.perf_counter()
                await second.chat.ainvoke([HumanMessage("another dialogue")])
                return time.perf_counter() - start

            _, waited = await asyncio.gather(first.chat.ainvoke([HumanMessage("hello")]), later())
            return waited

        waited = asyncio.run(two_dialogues())
    assert waited >= 0.3
    assert stub.outcomes["429"] == 1


def test_bad_retry_settings_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="requests per minute"):
        RateGate(0)


def test_empty_or_malformed_bodies_are_retried_but_bad_requests_are_not():
    import json as _json

    from models.retries import retry_reason

    for body, kind in (("", "non-JSON body"), ("<html>busy</html>", "non-JSON body"), ('{"choices": [', "truncated")):
        try:
            _json.loads(body)
        except _json.JSONDecodeError as exc:
            assert retry_reason(exc) == kind
    assert retry_reason(ValueError("prompt too long")) is None


def test_a_worker_takes_its_share_of_each_rate_limit_as_workers_come_and_go():
    policy = CallPolicy(rate_limits={"openai": 600, "openai:big": 60})
    small, big, other = (
        policy.gate_for("openai:m", "openai"),
        policy.gate_for("openai:big", "openai"),
        policy.gate_for("fake:x", "fake"),
    )
    policy.share_among(3)
    assert (small.per_minute, big.per_minute, other.per_minute) == (200, 20, None)
    assert policy.gate_for("openai:n", "openai") is small and policy.gate_for("openai:big2", "openai").per_minute == 200
    waits = [small.reserve() for _ in range(5)]  # a burst of one second's worth (3.33 requests), then one per 0.3 s
    assert (
        waits[:3] == [0, 0, 0] and waits[3] == pytest.approx(0.2, abs=0.02) and waits[4] == pytest.approx(0.5, abs=0.02)
    )
    policy.share_among(1)
    assert (small.per_minute, big.per_minute) == (600, 60)
    with pytest.raises(ValueError):
        small.retune(0)
