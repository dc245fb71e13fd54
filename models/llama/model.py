"""The embedded local model: Gemma 3 270M (a base model) served by llama.cpp as a LangChain chat model.

The model's own chat template produces garbage, so messages are rendered as a plain
transcript instead::

    <system text>

    User: <one line>
    Assistant: <one line>
    Assistant:

Each turn is kept on one line (internal newlines collapse to spaces) and generation stops
at the end of its line (``one_line``) as well as at ``\nUser:`` / ``\nAssistant:``: a
blank line or a second line inside a turn reads to a base model as the end of the
conversation, and it then drifts into unrelated text or writes the other speaker's turn
under a misspelt label ("Assistant :") that no stop sequence catches.

One llama.cpp context per role (``instance_key``) keeps each role's growing prompt cached
between turns, all on one loaded copy of the weights; see ``models.llama.instance._Instance`` for how
that stays reproducible under a fixed seed and how a context grows to what the dialogue needs.
llama.cpp is imported only when a model is first called, so this module (and the unit
tests) work without it.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LangSmithParams
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import InputTokenDetails, UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import ConfigDict, Field, model_validator

from checkpoints.vocabulary import ROLES
from models.chat_contract import refuse_unknown_arguments
from models.llama.call import _Call
from models.llama.instance import ModelUnavailableError, _instance, gemma_model_path
from models.llama.logprobs import _LogprobRecorder
from models.llama.probe import LlamaCrashError, ensure_llama_runs
from models.llama.transcript import render_transcript, transcript_stops

KNOWN_MODELS = ("gemma3-270m",)

_CALL_OPTIONS = frozenset({"temperature", "max_tokens", "repeat_penalty", "seed", "timeout", "model"})
_SAMPLING_OPTIONS = ("temperature", "max_tokens", "repeat_penalty")
_REFUSED_ARGUMENTS = {
    "max_retries": "an in-process model has no transient failures to retry; retries belong to "
    "models.resilience.ResilientChatModel, which create_role_model wraps around every model",
    "api_key": "the embedded model needs no key",
}


class LlamaTranscriptChatModel(BaseChatModel):
    """A LangChain chat model over llama.cpp that prompts a base model with a plain transcript."""

    model_config = ConfigDict(protected_namespaces=(), extra="forbid")

    model_path: str
    model_name: str = "gemma3-270m"
    temperature: float = 0.7
    max_tokens: int = 250
    repeat_penalty: float = 1.3
    seed: int | None = None
    """Sampling seed passed to llama.cpp on every call; None draws a fresh one (reported back)."""
    stop: list[str] | None = None
    """Extra stop sequences for every call, besides the transcript's own and any given per call."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds one generation may take: llama.cpp is stopped then and the call raises TimeoutError."""
    streaming: bool = False
    """Stream by default (``invoke`` then goes through ``_stream``), as LangChain's ``streaming`` flag."""
    n_ctx: int = 8192
    human_label: str = "User"
    ai_label: str = "Assistant"
    generate_as: Literal["ai", "human"] = "ai"
    """Whose next line to write: "ai" continues as ai_label, "human" as human_label."""
    one_line: bool = True
    """Also stop at the first newline: turns are rendered one per line, and a base model that
    starts a second line drifts (a new speaker, a misspelt label such as "Assistant :")."""
    logprobs: bool = False
    top_logprobs: int = Field(default=20, ge=1)
    instance_key: str = "default"
    """Calls with the same key share one llama.cpp context (and its cached prompt prefix)."""

    @model_validator(mode="before")
    @classmethod
    def _known_arguments_only(cls, data: Any) -> Any:
        refuse_unknown_arguments(cls, data, hints=_REFUSED_ARGUMENTS)
        return data

    @property
    def _llm_type(self) -> str:
        return "llama-cpp-transcript"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        params = {
            "model_name": self.model_name,
            "human_label": self.human_label,
            "ai_label": self.ai_label,
            "generate_as": self.generate_as,
            "one_line": self.one_line,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "repeat_penalty": self.repeat_penalty,
            "seed": self.seed,
            "n_ctx": self.n_ctx,
            "logprobs": self.logprobs,
            "top_logprobs": self.top_logprobs,
        }
        if self.stop:
            # Only when set, so that response-cache keys of models without it stay as they were.
            params["stop"] = list(self.stop)
        return params

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = LangSmithParams(
            ls_provider="local",
            ls_model_name=kwargs.get("model") or self.model_name,
            ls_model_type="chat",
            ls_temperature=kwargs.get("temperature", self.temperature),
            ls_max_tokens=kwargs.get("max_tokens", self.max_tokens),
        )
        stops = [*(self.stop or []), *(s for s in stop or [] if s not in (self.stop or []))]
        if stops:
            params["ls_stop"] = stops
        return params

    def render(self, messages: list[BaseMessage]) -> str:
        """The exact prompt text this model sends to llama.cpp for ``messages``."""
        return render_transcript(
            messages,
            human_label=self.human_label,
            ai_label=self.ai_label,
            generate_as=self.generate_as,
        )

    def stop_sequences(self, stop: list[str] | None = None) -> list[str]:
        """The stop sequences used for a call with extra ``stop`` strings (after the model's own ``stop``)."""
        return transcript_stops(
            human_label=self.human_label,
            ai_label=self.ai_label,
            generate_as=self.generate_as,
            stop=[*(["\n"] if self.one_line else []), *(self.stop or []), *(stop or [])],
        )

    def _resolve(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]) -> _Call:
        unknown = kwargs.keys() - _CALL_OPTIONS
        if unknown:
            raise TypeError(
                f"unsupported call options {sorted(unknown)}; {type(self).__name__} accepts {sorted(_CALL_OPTIONS)}"
            )
        model = kwargs.get("model")
        if model is not None and model != self.model_name:
            raise ValueError(
                f"this embedded model serves {self.model_name} only, not {model!r}: "
                "build another model for it (known: " + ", ".join(KNOWN_MODELS) + ")"
            )
        options = {name: kwargs.get(name, getattr(self, name)) for name in _SAMPLING_OPTIONS}
        seed = kwargs.get("seed", self.seed)
        return _Call(
            options=options,
            seed=seed if seed is not None else secrets.randbits(31),
            prompt=self.render(messages),
            stops=self.stop_sequences(stop),
            timeout=kwargs.get("timeout", self.timeout),
            instance=_instance(self.model_path, self.instance_key, self.n_ctx),
            recorder=_LogprobRecorder(self.top_logprobs) if self.logprobs else None,
        )

    def _response_metadata(self, call: _Call, finish_reason: str | None, logprob_content: Any) -> dict[str, Any]:
        metadata: dict[str, Any] = {"model_name": self.model_name, "finish_reason": finish_reason, "seed": call.seed}
        if logprob_content is not None:
            metadata["logprobs"] = {"content": logprob_content}
        return metadata

    def _timed_out(self, call: _Call) -> TimeoutError:
        return TimeoutError(
            f"{self.model_name} did not finish within {call.timeout:g} s: raise the timeout or lower max_tokens"
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        call = self._resolve(messages, stop, kwargs)
        with call.instance.lock:
            prompt_tokens, reused = call.tokens(self.n_ctx)
            llama = call.instance.llama  # after tokens(): a call that needs a larger context gets a new one
            try:
                result = llama.create_completion(prompt_tokens, **call.completion_args(watch=call.timeout is not None))
            finally:
                call.instance.release_sampler()
            choice = result["choices"][0]  # type: ignore[index]  # not streamed: one response
            logprob_content = (
                call.recorder.finish(llama, choice["text"].encode("utf-8")) if call.recorder is not None else None
            )
        if call.watch.timed_out:
            raise self._timed_out(call)

        usage = result["usage"]  # type: ignore[index]
        usage_metadata = UsageMetadata(
            input_tokens=usage["prompt_tokens"],
            output_tokens=usage["completion_tokens"],
            total_tokens=usage["total_tokens"],
            input_token_details=InputTokenDetails(cache_read=reused),
        )
        message = AIMessage(
            content=choice["text"].strip(),
            usage_metadata=usage_metadata,
            response_metadata=self._response_metadata(call, choice["finish_reason"], logprob_content),
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        sync_manager = run_manager.get_sync() if run_manager is not None else None
        return await asyncio.to_thread(self._generate, messages, stop, sync_manager, **kwargs)

    def _chunks(self, call: _Call) -> Iterator[ChatGenerationChunk]:
        """Stream one resolved call: text chunks, then a last chunk with usage and response metadata.

        The text streamed adds up to exactly what ``invoke`` returns (stripped): leading
        whitespace is dropped and trailing whitespace is held back until more text follows.
        ``output_tokens`` counts the tokens sampled, including an end-of-text token.
        """
        with call.instance.lock:
            prompt_tokens, reused = call.tokens(self.n_ctx)
            llama = call.instance.llama  # after tokens(): a call that needs a larger context gets a new one
            parts = llama.create_completion(prompt_tokens, stream=True, **call.completion_args(watch=True))
            raw: list[str] = []
            pending, started, finish_reason = "", False, None
            try:
                for part in parts:
                    choice = part["choices"][0]  # type: ignore[index]  # streamed: an iterator of responses
                    finish_reason = choice.get("finish_reason") or finish_reason  # type: ignore[union-attr]
                    text = choice["text"]  # type: ignore[index]
                    raw.append(text)
                    if not started:
                        text = text.lstrip()
                        if not text:
                            continue
                        started = True
                    body = text.rstrip()
                    if body:
                        yield ChatGenerationChunk(message=AIMessageChunk(content=pending + body))
                        pending = text[len(body) :]
                    else:
                        pending += text
            finally:
                parts.close()  # type: ignore[union-attr]  # a consumer that stops early ends generation here, releasing the context
                call.instance.release_sampler()
            logprob_content = (
                call.recorder.finish(llama, "".join(raw).encode("utf-8")) if call.recorder is not None else None
            )
        if call.watch.timed_out:
            raise self._timed_out(call)
        output_tokens = call.watch.sampled
        usage = UsageMetadata(
            input_tokens=len(prompt_tokens),
            output_tokens=output_tokens,
            total_tokens=len(prompt_tokens) + output_tokens,
            input_token_details=InputTokenDetails(cache_read=reused),
        )
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                usage_metadata=usage,
                response_metadata=self._response_metadata(call, finish_reason, logprob_content),
                chunk_position="last",
            )
        )

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for chunk in self._chunks(self._resolve(messages, stop, kwargs)):
            if run_manager is not None and chunk.text:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        """Generate on a worker thread; leaving the stream early (or being cancelled) stops llama.cpp."""
        call = self._resolve(messages, stop, kwargs)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        def send(kind: str, value: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (kind, value))
            except RuntimeError:  # the loop is closed: the consumer left long ago
                call.watch.cancelled.set()

        def produce() -> None:
            try:
                for chunk in self._chunks(call):
                    if call.watch.cancelled.is_set():
                        break
                    send("chunk", chunk)
                send("done", None)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which re-raises it
                send("error", exc)

        worker = threading.Thread(target=produce, name="llama-stream", daemon=True)
        worker.start()
        try:
            while True:
                kind, value = await queue.get()
                if kind == "done":
                    break
                if kind == "error":
                    raise value
                if run_manager is not None and value.text:
                    await run_manager.on_llm_new_token(value.text, chunk=value)
                yield value
        finally:
            call.watch.cancelled.set()


def create_local_model(
    name: str,
    *,
    role: str,
    temperature: float,
    max_tokens: int,
    seed: int | None = None,
    **kwargs: Any,
) -> LlamaTranscriptChatModel:
    """The embedded model configured for one dialogue role ("user", "target" or "judge").

    The user simulator writes the next *User* line of the dialogue as seen by the target
    (generate_as="human"); the judge answers one token and reports its log-probabilities,
    so its temperature and length are fixed (greedy, 1 token, no repeat penalty).
    """
    if name not in KNOWN_MODELS:
        raise ValueError(f"unknown local model {name!r}; known: {', '.join(KNOWN_MODELS)}")
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; known: {', '.join(ROLES)}")
    settings: dict[str, Any] = {
        "model_name": name,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "seed": seed,
        "instance_key": role,
    }
    if role == "user":
        settings["generate_as"] = "human"
    elif role == "judge":
        settings.update(logprobs=True, max_tokens=1, temperature=0.0, repeat_penalty=1.0)
    settings.update(kwargs)
    if "model_path" not in settings:
        settings["model_path"] = str(gemma_model_path())
        try:
            ensure_llama_runs(settings["model_path"])
        except LlamaCrashError as error:
            raise ModelUnavailableError(str(error)) from None
    return LlamaTranscriptChatModel(**settings)
