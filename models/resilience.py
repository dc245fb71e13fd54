"""Retries, per-provider rate limits and the response cache, wrapped around any chat model.

``create_role_model`` wraps every provider's chat model in :class:`ResilientChatModel`,
so the nodes and the graph never see any of this: a call returns a reply, or raises
once the retry policy gives up (the node then ends its dialogue with stop reason
``error``, and a rerun of the run id picks the dialogue up from the failed node).

Order inside one call: response cache → (identical requests in flight share one call)
→ the provider's circuit (waits during an outage, models/circuit.py) → rate limit → provider,
with retries around circuit + rate limit + provider. A failure that is the provider's outage
(the circuit is open) spends no retry: the call waits for the circuit instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LangSmithParams
from langchain_core.language_models.chat_models import generate_from_stream
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from pydantic import ConfigDict, Field, model_validator

from models.answers import (
    MALFORMED_KINDS,
    NO_CHOICES,
    MalformedAnswerError,
    as_malformed,
    check_result,
    error_page,
    malformed,
)
from models.call_stats import CallStats
from models.chat_contract import refuse_unknown_arguments
from models.circuit import ProviderCircuit, is_outage
from models.rate_limits import RateGate
from models.retries import RetriesExhaustedError, RetryPolicy, retry_after, retry_reason


class ResilientChatModel(BaseChatModel):
    """A chat model that adds the response cache, a rate gate and retries around ``inner``.

    It reports the inner model's type and parameters, so tracing shows the real model;
    the inner model's ``_agenerate`` runs under this model's callbacks (one LLM run per
    call, not two). A reply served from the cache carries ``response_metadata["cache"] = "hit"``.

    LangChain's standard constructor arguments are honoured, not dropped: ``timeout`` and
    ``max_retries`` set the retry policy (per-attempt seconds; retries after the first try),
    and ``temperature``, ``max_tokens`` and ``stop`` configure a copy of ``inner`` (which must
    have those fields). Any other unknown argument is refused.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    inner: BaseChatModel
    spec: str
    role: str
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    gate: RateGate | None = None
    circuit: ProviderCircuit | None = None
    response_cache: Any = None  # checkpoints.cache.ResponseCache (untyped: nodes do not import checkpoints)
    cache_params: dict[str, Any] = Field(default_factory=dict)
    stats: CallStats = Field(default_factory=CallStats)
    rng: random.Random = Field(default_factory=random.Random)
    streaming: bool = False
    """Stream by default (``invoke`` then goes through ``_stream``), as LangChain's ``streaming`` flag."""

    @model_validator(mode="before")
    @classmethod
    def _standard_arguments(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        policy = {name: data.pop(name) for name in ("timeout", "max_retries") if name in data}
        sampling = {name: data.pop(name) for name in _INNER_STANDARD_ARGUMENTS if name in data}
        refuse_unknown_arguments(cls, data, extra=frozenset(_INNER_STANDARD_ARGUMENTS) | {"timeout", "max_retries"})
        if policy:
            retry = data.get("retry") or RetryPolicy()
            if "timeout" in policy:
                retry = dataclasses.replace(retry, timeout=policy["timeout"])
            if "max_retries" in policy:
                retries = policy["max_retries"]
                if not isinstance(retries, int) or retries < 0:
                    raise TypeError(f"max_retries must be a whole number of retries (0 or more), got {retries!r}")
                retry = dataclasses.replace(retry, attempts=retries + 1)
            data["retry"] = retry
        if sampling and isinstance(data.get("inner"), BaseChatModel):
            data["inner"] = _configured_copy(data["inner"], sampling)
        return data

    seed_option: bool = True
    """Whether the provider takes a per-call ``seed``; either way the seed is part of the cache key."""

    @property
    def _llm_type(self) -> str:
        return self.inner._llm_type

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return dict(self.inner._identifying_params)

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = self.inner._get_ls_params(stop=stop, **kwargs)
        if isinstance(kwargs.get("model"), str):
            params["ls_model_name"] = kwargs["model"]  # a per-call override, whatever the inner model reports
        return params

    def cache_key(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]) -> str:
        from checkpoints.cache import request_key

        return request_key(self.cache_params, messages, stop=stop, call_options=kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.response_cache is None:
            return await self._acall(messages, stop, run_manager, kwargs)
        key = self.cache_key(messages, stop, kwargs)
        async with self.response_cache.single_flight(key):
            # SQLite work runs on the cache's own thread: the checkpointer shares the file
            # through the event loop, and a blocking call here could wait on it forever.
            cached = await self.response_cache.aget(key)
            if cached is not None:
                self.stats.add("cache_hits", self.role)
                return cached
            self.stats.add("cache_misses", self.role)
            result = await self._acall(messages, stop, run_manager, kwargs)
            if not self.response_cache.put_later(key, result, spec=self.spec):
                self.stats.add("cache_unstorable", self.role)
            return result

    def _provider_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return kwargs if self.seed_option else {k: v for k, v in kwargs.items() if k != "seed"}

    async def _acall(self, messages, stop, run_manager, kwargs) -> ChatResult:
        kwargs = self._provider_kwargs(kwargs)
        attempt, caller = 0, _Call()  # caller: this call, to the circuit
        while True:
            attempt += 1
            probe = await self._pass_circuit()
            await self._pass_gate()
            caller.went(self.circuit)
            started = time.monotonic()
            try:
                call = self.inner._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
                if self.retry.timeout is None:
                    result = check_result(await call)
                else:
                    try:
                        async with asyncio.timeout(self.retry.timeout):  # in this task: wait_for made a task per call
                            result = check_result(await call)
                    except TimeoutError:
                        raise TimeoutError(f"{self.spec} did not answer within {self.retry.timeout:g} s") from None
            except Exception as exc:  # noqa: BLE001 - classified by _after_failure: retried or raised
                delay = self._after_failure(attempt, as_malformed(exc), probe, caller)
                if delay is None:
                    attempt -= 1  # the provider's outage, not this call's error: wait at the circuit
                    continue
                await asyncio.sleep(delay)
                continue
            self._answered(probe, time.monotonic() - started)
            return result

    async def _pass_circuit(self) -> bool:
        """Wait while the provider's circuit is open; True if this call is its probe."""
        return await self.circuit.enter() if self.circuit is not None else False

    def _answered(self, probe: bool, latency: float | None = None) -> None:
        self.stats.add("calls", self.role)
        if self.circuit is not None and self.circuit.answered(probe, spec=self.spec, latency=latency) and self.gate:
            # The endpoint answers while its 429s' Retry-After runs: they were about calls at once, which its cut
            # concurrency now bounds, so the calls within the cut need not sit out the pause (the refused ones still
            # wait their Retry-After, and the limit does not grow before it ends).
            self.gate.resume()

    async def _pass_gate(self) -> None:
        """Wait for the rate gate, if any, counting the wait."""
        if self.gate is not None and (waited := await self.gate.acquire()):
            self.stats.waited(waited)

    def _pass_gate_sync(self) -> None:
        if self.gate is not None and (waited := self.gate.acquire_sync()):
            self.stats.waited(waited)

    def _from_cache(self, key: str | None) -> ChatResult | None:
        """The cached result for ``key`` (counted as a hit or a miss), or None; no key, no lookup."""
        if key is None:
            return None
        cached = self.response_cache.get(key)
        self.stats.add("cache_hits" if cached is not None else "cache_misses", self.role)
        return cached

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        key = self.cache_key(messages, stop, kwargs) if self.response_cache is not None else None
        if (cached := self._from_cache(key)) is not None:
            return cached
        provider_kwargs = self._provider_kwargs(kwargs)
        attempt, caller = 0, _Call()  # caller: this call, to the circuit
        while True:
            attempt += 1
            probe = self.circuit.enter_sync() if self.circuit is not None else False
            self._pass_gate_sync()
            caller.went(self.circuit)
            try:
                result = check_result(
                    self.inner._generate(messages, stop=stop, run_manager=run_manager, **provider_kwargs)
                )
                self._answered(probe)
                break
            except Exception as exc:  # noqa: BLE001 - classified by _after_failure: retried or raised
                delay = self._after_failure(attempt, as_malformed(exc), probe, caller)
                if delay is None:
                    attempt -= 1
                    continue
                time.sleep(delay)
        if key is not None and not self.response_cache.put(key, result, spec=self.spec):
            self.stats.add("cache_unstorable", self.role)
        return result

    # --- streaming: the same cache, gate and retries; a retry only before the first chunk ---------

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        key = self.cache_key(messages, stop, kwargs) if self.response_cache is not None else None
        if (cached := self._from_cache(key)) is not None:
            yield from _replayed(cached, run_manager)
            return
        chunks: list[ChatGenerationChunk] = []
        attempt, caller = 0, _Call()  # caller: this call, to the circuit
        while True:
            attempt += 1
            probe = self.circuit.enter_sync() if self.circuit is not None else False
            self._pass_gate_sync()
            caller.went(self.circuit)
            try:
                for chunk in self._inner_stream(messages, stop, run_manager, kwargs):
                    chunks.append(chunk)
                    yield chunk
                if not chunks:
                    raise MalformedAnswerError(NO_CHOICES)
                self._answered(probe)
                break
            except Exception as exc:  # noqa: BLE001 - classified by _after_stream_failure: retried or raised
                delay = self._after_stream_failure(attempt, exc, chunks, probe, caller)
                if delay is None:
                    attempt -= 1
                    continue
                time.sleep(delay)
        if key is not None and not self.response_cache.put(key, generate_from_stream(iter(chunks)), spec=self.spec):
            self.stats.add("cache_unstorable", self.role)

    def _inner_stream(self, messages, stop, run_manager, kwargs) -> Iterator[ChatGenerationChunk]:
        if type(self.inner)._stream is BaseChatModel._stream:
            # An inner model that cannot stream: its whole reply as one chunk.
            yield from _replayed(self.inner._generate(messages, stop=stop, run_manager=None, **kwargs), run_manager)
            return
        yield from self.inner._stream(messages, stop=stop, run_manager=run_manager, **kwargs)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        if self.response_cache is None:
            async for chunk in self._astream_with_retries(messages, stop, run_manager, kwargs, []):
                yield chunk
            return
        key = self.cache_key(messages, stop, kwargs)
        async with self.response_cache.single_flight(key):
            cached = await self.response_cache.aget(key)
            if cached is not None:
                self.stats.add("cache_hits", self.role)
                for chunk in _replayed(cached, None):
                    if run_manager is not None and chunk.text:
                        await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
                    yield chunk
                return
            self.stats.add("cache_misses", self.role)
            chunks: list[ChatGenerationChunk] = []
            async for chunk in self._astream_with_retries(messages, stop, run_manager, kwargs, chunks):
                yield chunk
            if not self.response_cache.put_later(key, generate_from_stream(iter(chunks)), spec=self.spec):
                self.stats.add("cache_unstorable", self.role)

    async def _astream_with_retries(
        self, messages, stop, run_manager, kwargs, chunks
    ) -> AsyncIterator[ChatGenerationChunk]:
        """Chunks of one successful attempt, collected into ``chunks``; ``retry.timeout`` bounds each wait for a
        chunk."""
        attempt, caller = 0, _Call()  # caller: this call, to the circuit
        while True:
            attempt += 1
            probe = await self._pass_circuit()
            await self._pass_gate()
            caller.went(self.circuit)
            started = time.monotonic()
            stream = self._inner_astream(messages, stop, run_manager, kwargs)
            try:
                while True:
                    deadline = asyncio.timeout(self.retry.timeout)
                    try:
                        async with deadline:
                            chunk = await anext(stream)
                    except StopAsyncIteration:
                        if not chunks:
                            raise MalformedAnswerError(NO_CHOICES) from None
                        self._answered(probe, time.monotonic() - started)
                        return
                    except TimeoutError:
                        if not deadline.expired():
                            raise  # the provider's own timeout, not ours
                        raise TimeoutError(f"{self.spec} sent nothing for {self.retry.timeout:g} s") from None
                    chunks.append(chunk)
                    yield chunk
            except Exception as exc:  # noqa: BLE001 - classified by _after_stream_failure: retried or raised
                delay = self._after_stream_failure(attempt, exc, chunks, probe, caller)
                if delay is None:
                    attempt -= 1
                    continue
                await asyncio.sleep(delay)
            finally:
                await stream.aclose()  # type: ignore[attr-defined]  # an async generator

    async def _inner_astream(self, messages, stop, run_manager, kwargs) -> AsyncIterator[ChatGenerationChunk]:
        inner_type = type(self.inner)
        if inner_type._astream is BaseChatModel._astream and inner_type._stream is BaseChatModel._stream:
            result = await self.inner._agenerate(messages, stop=stop, run_manager=None, **kwargs)
            for chunk in _replayed(result, None):
                if run_manager is not None and chunk.text:
                    await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
                yield chunk
            return
        async for chunk in self.inner._astream(messages, stop=stop, run_manager=run_manager, **kwargs):
            yield chunk

    def _after_stream_failure(
        self, attempt: int, exc: Exception, chunks: list[ChatGenerationChunk], probe: bool, caller: object | None
    ) -> float | None:
        """:meth:`_after_failure` for a stream: one that already sent text re-raises (a retry would repeat it)."""
        if chunks:
            if self.circuit is not None:
                self.circuit.left()
            raise exc
        return self._after_failure(attempt, as_malformed(exc), probe, caller)

    def _after_failure(
        self, attempt: int, exc: Exception, probe: bool = False, caller: object | None = None
    ) -> float | None:
        """Re-raise ``exc`` if it is final; None if it is the provider's outage (wait at the circuit, no retry
        spent); else count the retry and return how long to wait."""
        if self.circuit is not None:
            self.circuit.left()  # the attempt is over: its call slot is free
        if self.circuit is not None and (wrong := self.circuit.first_contact(exc, role=self.role, spec=self.spec)):
            raise wrong from exc  # an endpoint that never answered: a wrong URL, key or model name, not an outage
        reason = retry_reason(exc)
        bad = malformed(exc) if reason in MALFORMED_KINDS else None
        detail = f"{self.role} {self.spec}: {bad}" if bad is not None else ""
        if self.circuit is not None:
            if is_outage(reason):
                if self.circuit.failed(reason, probe, caller):  # type: ignore[arg-type]  # is_outage(reason): not None
                    self.stats.add("outage_waits", reason)  # type: ignore[arg-type]
                    return None
            elif reason is not None or probe:
                self.circuit.answered(probe)  # the provider answered (429, a malformed answer, a 4xx): it is up
        if reason is None:
            raise exc
        if isinstance(caller, _Call) and bad is None:
            caller.garbage_since = None  # another kind of failure ends a run of malformed answers
        if bad is not None and self.circuit is not None:
            # Malformed answers spend no attempts: like an outage, they are bounded by the endpoint's budget in time,
            # so a share of them never fails a call that a retry would finish; nothing but them, past the budget,
            # ends the endpoint as an outage past its budget would.
            if isinstance(caller, _Call):
                now = time.monotonic()
                caller.garbage_since = caller.garbage_since or now
                if now - caller.garbage_since > self.circuit.budget:
                    self.stats.add("gave_up", reason)
                    raise self.circuit.give_up(reason, detail) from exc
                caller.free += 1
            self.stats.add("retries", reason)
            return self.retry.delay(min(attempt, self.retry.attempts), exc, self.rng)
        spent = attempt - caller.free if isinstance(caller, _Call) else attempt
        if spent >= self.retry.attempts:
            self.stats.add("gave_up", reason)
            tries = f"{attempt} attempt" + ("s" if attempt != 1 else "")
            said = str(bad) if bad is not None else " ".join(filter(None, (_first_line(exc), error_page(exc))))
            raise RetriesExhaustedError(f"{self.role} {self.spec}: gave up after {tries} ({reason}): {said}") from exc
        self.stats.add("retries", reason)
        delay = self.retry.delay(attempt, exc, self.rng)
        asked = retry_after(exc)
        cut = False
        if self.circuit is not None and (asked or reason == "HTTP 429"):
            # fewer calls at once to this endpoint (models/concurrency.py), none more while its Retry-After runs
            cut = self.circuit.throttled(
                min(asked, self.retry.max_retry_after) if asked else None,
                sent=caller.sent if isinstance(caller, _Call) else None,
                at_once=caller.at_once if isinstance(caller, _Call) else None,
            )
        if asked and self.gate is not None and not cut:
            # The provider asked everyone to slow down, not only this dialogue: unless it still answers calls, when
            # its refusals are about calls at once and the cut concurrency is the slow-down.
            self.gate.pause(min(asked, self.retry.max_retry_after))
        return delay


# Standard LangChain arguments the wrapper passes on to (a copy of) its inner model.
_INNER_STANDARD_ARGUMENTS = ("temperature", "max_tokens", "stop")


def _configured_copy(inner: BaseChatModel, settings: dict[str, Any]) -> BaseChatModel:
    """A copy of ``inner`` with standard settings applied; a setting it has no field for is refused."""
    fields = type(inner).model_fields
    by_alias = {f.alias: name for name, f in fields.items() if f.alias}
    update: dict[str, Any] = {}
    for name, value in settings.items():
        field_name = name if name in fields else by_alias.get(name)
        if field_name is None:
            raise TypeError(
                f"ResilientChatModel got {name}={value!r}, but the wrapped {type(inner).__name__} has no {name} "
                "setting: configure the inner model itself"
            )
        update[field_name] = value
    return inner.model_copy(update=update)


def _replayed(result: ChatResult, run_manager: CallbackManagerForLLMRun | None) -> Iterator[ChatGenerationChunk]:
    """A finished reply as one last stream chunk (a cached reply, or an inner model that cannot stream)."""
    for generation in result.generations:
        message = generation.message
        chunk = ChatGenerationChunk(message=_as_chunk(message), generation_info=generation.generation_info)
        if run_manager is not None and chunk.text:
            run_manager.on_llm_new_token(chunk.text, chunk=chunk)
        yield chunk


def _as_chunk(message: BaseMessage) -> AIMessageChunk:
    tool_call_chunks = [
        {"name": call["name"], "args": json.dumps(call["args"]), "id": call["id"], "index": index}
        for index, call in enumerate(getattr(message, "tool_calls", None) or [])
    ]
    return AIMessageChunk(
        content=message.content,
        additional_kwargs=message.additional_kwargs,
        response_metadata=message.response_metadata,
        usage_metadata=message.usage_metadata if isinstance(message, AIMessage) else None,
        tool_call_chunks=tool_call_chunks,
        id=message.id,
        chunk_position="last",
    )


class _Call:
    """One call through the wrapper: its identity (to the circuit), and its malformed answers (to their budget)."""

    __slots__ = ("at_once", "garbage_since", "free", "sent")

    def __init__(self) -> None:
        self.garbage_since: float | None = None  # when its current run of malformed answers began
        self.free = 0  # attempts that met a malformed answer: they spend none of the retry policy's attempts
        self.sent: float | None = None  # when its latest attempt went out (past the circuit and the gate)
        self.at_once: int | None = None  # the endpoint's calls in flight as it went, itself included

    def went(self, circuit: ProviderCircuit | None) -> None:
        """Its attempt goes out now (past ``circuit``, if any, and the gate)."""
        self.sent = time.monotonic()
        self.at_once = circuit.in_flight if circuit is not None else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:300]
