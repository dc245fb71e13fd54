"""Log-probabilities of the embedded model's output (a llama.cpp logits processor) and a Yes/No judge's P(yes)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage

if TYPE_CHECKING:
    import numpy as np
    from llama_cpp import Llama

# Sampled tokens are found among this many most likely ones when llama.cpp never
# evaluated them (the last token of a call); top_k sampling never goes past 40.
_CANDIDATES = 64
_P_EPSILON = 1e-6


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
        self.steps.append({"token": None, "logprob": None, "top": [(int(i), float(logprobs[i])) for i in best]})
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
        # llama-cpp-python's custom sampler keeps this recorder in a reference cycle until Python's full garbage
        # collection: drop the last step's distribution (2 MB over the 262k-token vocabulary) now.
        self._pending = None
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
