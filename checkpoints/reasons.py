"""Failure reasons in words: what every place that shows a failure (summary, replay, report, runs) says.

One home, with no imports of its own beyond the standard library, so every layer may use it. An error whose
message is already a reason in words (a malformed answer retried past its budget, an outage) derives from
:class:`ReasonedError`; anything else is put in words here from what it carries (an HTTP status, a timeout).
The exception's class is not part of the reason: the trace keeps it (the failed model call's error, and the
state's ``error_class``).
"""

from __future__ import annotations

from collections.abc import Iterator

from checkpoints.text import valid_utf8

# A reason is one line, short enough for a table cell or a progress line.
MAX_REASON_CHARS = 500


class ReasonedError(Exception):
    """An error whose message is a reason in words, as people should read it (no Python class name)."""


# What a provider's HTTP status means, for the reason of a call that failed with one.
_STATUS_WORDS = {
    400: "the provider refused the request (HTTP 400)",
    401: "the provider refused the API key (HTTP 401)",
    403: "the provider refused access (HTTP 403)",
    404: "the provider does not know this model or route (HTTP 404)",
    408: "the provider timed out the request (HTTP 408)",
    413: "the request is too large for the provider (HTTP 413)",
    422: "the provider could not process the request (HTTP 422)",
    429: "the provider kept rate-limiting (HTTP 429)",
}


def causes(exc: BaseException, *, context: bool = True) -> Iterator[BaseException]:
    """The exception and those behind it: what it was raised from, and (``context``) what it was raised while
    handling."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (current.__context__ if context else None)


def first_line(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """The first non-empty line of ``text``, at most ``limit`` characters."""
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")[:limit]


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception (or the one it was raised from) carries, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for value in (
            getattr(current, "status_code", None),
            getattr(getattr(current, "response", None), "status_code", None),
        ):
            if isinstance(value, int) and 100 <= value < 600:
                return value
        current = current.__cause__
    return None


def failure_reason(exc: BaseException) -> str:
    """Why a call or a step failed, in words: the message of a :class:`ReasonedError`, else what ``exc`` carries."""
    message = valid_utf8(first_line(str(exc)))  # it may quote a reply: storable whatever the reply held
    if isinstance(exc, ReasonedError):
        return message or "failed"
    status = status_of(exc)
    if status is not None:
        words = _STATUS_WORDS.get(status) or (
            f"the provider failed (HTTP {status})"
            if status >= 500
            else f"the provider refused the request (HTTP {status})"
        )
        return f"{words}: {message}" if message else words
    if isinstance(exc, TimeoutError):
        return message or "no answer in time"
    if isinstance(exc, ConnectionError):
        return f"no connection to the provider: {message}" if message else "no connection to the provider"
    # Not one we can word better: the message alone when it says something, else what kind of error it was.
    if message and not isinstance(exc, (KeyError, IndexError, AttributeError)):
        return message
    return f"an unexpected error ({type(exc).__name__}{': ' + message if message else ''})"


def error_class(exc: BaseException) -> str:
    """The exception's class as the trace keeps it (module-qualified unless built in), for debugging."""
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
