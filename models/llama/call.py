"""One resolved request to a llama.cpp context: its options, prompt tokens, log-probability recorder and deadline."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from models.llama.instance import _Instance
from models.llama.logprobs import _LogprobRecorder


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
        """Tokenise the prompt, grow the context to fit it and its reply, evaluate all but its last chunk; (tokens,
        cached)."""
        llama = self.instance.llama
        prompt_tokens = llama.tokenize(self.prompt.encode("utf-8"), add_bos=True, special=True)
        if len(prompt_tokens) >= n_ctx:
            raise ValueError(
                f"the prompt has {len(prompt_tokens)} tokens, more than n_ctx={n_ctx}: "
                "shorten the dialogue or raise n_ctx"
            )
        self.instance.fit(min(n_ctx, len(prompt_tokens) + self.options["max_tokens"]))
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
