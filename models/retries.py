"""What is worth retrying and how long to wait: retry reasons, Retry-After, the retry policy and its final error."""

from __future__ import annotations

import asyncio
import email.utils
import random
import re
import time
from dataclasses import dataclass

from langchain_core.exceptions import ModelError

from checkpoints.reasons import ReasonedError, causes
from models.answers import malformed

# Exception class names (anywhere in the MRO) that mean "the request never completed":
# httpx/httpx2, requests, aiohttp and the provider SDKs all use one of these.
_TIMEOUT_NAMES = frozenset(
    {"TimeoutError", "TimeoutException", "Timeout", "ReadTimeout", "ConnectTimeout", "APITimeoutError"}
)
_CONNECTION_NAMES = frozenset(
    {
        "ConnectionError",
        "ConnectError",
        "TransportError",
        "RemoteProtocolError",
        "ReadError",
        "WriteError",
        "NetworkError",
        "APIConnectionError",
        "ClientConnectionError",
        "ServerDisconnectedError",
        "IncompleteRead",
    }
)
_RATE_LIMIT_TEXT = re.compile(r"\b429\b|RESOURCE_EXHAUSTED|rate[ -]?limit|too many requests", re.IGNORECASE)
_RETRY_DELAY_TEXT = re.compile(
    r"retry(?:[ _-]?delay|[ _-]?after| in)['\"]?\s*[:=]?\s*['\"]?(\d+(?:\.\d+)?)\s*s\b", re.IGNORECASE
)


def _status_of(exc: BaseException) -> int | None:
    for value in (
        getattr(exc, "status_code", None),
        getattr(getattr(exc, "response", None), "status_code", None),
        getattr(exc, "code", None),
    ):
        if isinstance(value, int) and 100 <= value < 600:
            return value
    return None


def _mro_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def retry_reason(exc: BaseException) -> str | None:
    """Why ``exc`` is worth retrying ("HTTP 429", "HTTP 503", "timeout", "connection", or a malformed answer's kind:
    "non-JSON body", "no choices", "truncated"), or None.

    Retryable: 429, 408 and 5xx responses, timeouts, connection failures and malformed answers (models/answers.py),
    from any provider (OpenAI and OpenAI-compatible servers, Google GenAI, Hugging Face).
    Other 4xx responses (a bad key, an unknown model, a too-long prompt) are not.
    """
    if (bad := malformed(exc)) is not None:
        return bad.kind  # first: an SDK may wrap it in a connection error
    for e in causes(exc, context=False):
        status = _status_of(e)
        if status is not None:
            return f"HTTP {status}" if status in (408, 429) or status >= 500 else None
        names = _mro_names(e)
        if names & _TIMEOUT_NAMES or isinstance(e, asyncio.TimeoutError):
            return "timeout"
        if names & _CONNECTION_NAMES:
            return "connection"
        if isinstance(e, ModelError):
            return type(e).__name__ if e.is_retryable else None
    if _RATE_LIMIT_TEXT.search(str(exc)):
        return "HTTP 429"
    return None


def retry_after(exc: BaseException) -> float | None:
    """Seconds the provider asked us to wait (Retry-After, retry-after-ms, Google's retryDelay)."""
    for e in causes(exc, context=False):
        headers = getattr(getattr(e, "response", None), "headers", None)
        if headers is not None:
            try:
                millis = headers.get("retry-after-ms")
                if millis is not None:
                    return max(0.0, float(millis) / 1000)
                value = headers.get("retry-after")
            except (AttributeError, TypeError, ValueError):
                value = None
            if value is not None:
                try:
                    return max(0.0, float(value))
                except ValueError:
                    when = email.utils.parsedate_to_datetime(value) if value.strip() else None
                    if when is not None:
                        return max(0.0, when.timestamp() - time.time())
        match = _RETRY_DELAY_TEXT.search(str(e))
        if match:
            return float(match.group(1))
    return None


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter; ``attempts`` counts the first try."""

    attempts: int = 6
    base_delay: float = 1.0
    max_delay: float = 60.0
    max_retry_after: float = 300.0
    timeout: float | None = 120.0
    """Seconds one attempt may take before it counts as a timeout (None: the provider's own)."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"retry attempts must be at least 1, got {self.attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("retry delays must not be negative")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"request timeout must be positive, got {self.timeout}")

    def delay(self, attempt: int, exc: BaseException, rng: random.Random) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based): at least what the provider asked."""
        backoff = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        backoff = rng.uniform(backoff / 2, backoff)  # "equal jitter": spread retries of many dialogues
        asked = retry_after(exc)
        if asked is not None:
            return min(max(asked, backoff), self.max_retry_after)
        return backoff


class RetriesExhaustedError(ReasonedError, RuntimeError):
    """A model call failed with transient errors on every attempt the retry policy allows."""
