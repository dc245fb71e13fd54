"""What a provider answered: a reply, a malformed answer (a transient fault, retried), or a well-formed non-reply.

A *malformed* answer is not an answer at all: a 200 whose body is not JSON (a proxy's HTML page, an empty body),
JSON cut short, or a completion with no choices. Gateways and servers under load give them now and then; they are
retried like a 5xx (:class:`MalformedAnswerError`, its ``kind`` the retry reason counted in the run's summary).

A *non-reply* is a well-formed answer that carries no usable reply: the provider's content filter or safety block,
an empty message, a reply cut at ``max_tokens``, an answer that is all reasoning (the cap was reached while the model
reasoned: models/reasoning.py), or OpenAI's ``refusal`` (its text is the reply the user reads). It is not retried
(asking again gets the same answer): the node records it on the turn with its reason (:func:`non_reply`).
"""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult

from checkpoints.reasons import ReasonedError, causes
from models.reasoning import SplitReply

# Kinds of malformed answer: the retry reasons the run's summary counts them under.
NON_JSON = "non-JSON body"
NO_CHOICES = "no choices"
TRUNCATED = "truncated"
MALFORMED_KINDS: tuple[str, ...] = (NON_JSON, NO_CHOICES, TRUNCATED)
_KIND_WORDS = {
    NON_JSON: "a body that is not JSON",
    NO_CHOICES: "a completion with no choices",
    TRUNCATED: "JSON cut short (truncated)",
}

# Kinds of non-reply, as a turn records them.
CONTENT_FILTER = "content filter"
SAFETY_BLOCK = "safety block"
EMPTY_MESSAGE = "empty message"
CUT_AT_MAX_TOKENS = "cut at max_tokens"
CUT_WHILE_REASONING = "cut while reasoning"
REFUSAL = "refusal"
NON_REPLY_KINDS: tuple[str, ...] = (
    CONTENT_FILTER,
    SAFETY_BLOCK,
    EMPTY_MESSAGE,
    CUT_AT_MAX_TOKENS,
    CUT_WHILE_REASONING,
    REFUSAL,
)
# Kinds that leave nothing to judge: the judge does not call its model on them (the label is unparsed, with the reason).
WITHHELD_KINDS: frozenset[str] = frozenset({CONTENT_FILTER, SAFETY_BLOCK, EMPTY_MESSAGE, CUT_WHILE_REASONING})

# finish_reason values (lower-cased) meaning the provider withheld the reply: OpenAI's, Gemini's, Anthropic's.
_FILTERED = frozenset({"content_filter"})
_SAFETY = frozenset({"safety", "prohibited_content", "blocklist", "spii", "image_safety", "refusal"})
_CUT = frozenset({"length", "max_tokens"})
EXCERPT_CHARS = 80
# LangChain's OpenAI integration, given a non-JSON body as text by the SDK.
_NOT_A_COMPLETION = "Unexpected response type from OpenAI-compatible endpoint"


class MalformedAnswerError(ReasonedError):
    """A provider answered with something that is not a reply (its ``kind``: one of :data:`MALFORMED_KINDS`)."""

    def __init__(self, kind: str, body: str = "") -> None:
        self.kind, self.excerpt = kind, excerpt(body)
        said = f": {self.excerpt}" if self.excerpt else ""
        super().__init__(f"the provider answered with {_KIND_WORDS[kind]}{said}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable as it was made (a player process may hand it on): the excerpt is kept, not quoted twice.
        return _rebuilt, (self.kind, self.excerpt, self.args)


def _rebuilt(kind: str, said: str, args: tuple[Any, ...]) -> MalformedAnswerError:
    error = MalformedAnswerError(kind)
    error.excerpt, error.args = said, args
    return error


def excerpt(body: Any, limit: int = EXCERPT_CHARS) -> str:
    """A short, one-line excerpt of what came back, quoted (``(empty)`` for nothing)."""
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", "replace")
    if body is None:
        return ""
    text = " ".join(str(body).split())
    if not text:
        return "(empty body)"
    return "“" + text[:limit] + ("…" if len(text) > limit else "") + "”"


def body_kind(body: str | bytes) -> str | None:
    """The malformed kind of a completion's raw body, or None if it parses as JSON with choices (or is no
    completion)."""
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else body
    try:
        data = json.loads(text)
    except ValueError:
        return TRUNCATED if text.lstrip()[:1] in ("{", "[") else NON_JSON
    if isinstance(data, dict) and "choices" in data and not data["choices"] and not data.get("error"):
        return NO_CHOICES
    return None


def malformed(exc: BaseException) -> MalformedAnswerError | None:
    """``exc`` (or what it was raised from) as a malformed answer, or None if it is not one.

    Recognised from what SDKs raise on such bodies: a JSON decoding error (truncated if the body began as JSON), the
    OpenAI SDK's response validation error, and LangChain's errors reading a completion without choices.
    """
    for e in causes(exc):
        if isinstance(e, MalformedAnswerError):
            return e
        if isinstance(e, json.JSONDecodeError):
            return MalformedAnswerError(body_kind(e.doc) or NON_JSON, e.doc)
        names = {cls.__name__ for cls in type(e).__mro__}
        if "APIResponseValidationError" in names:
            body = getattr(e, "body", None)
            if body is None:
                body = getattr(getattr(e, "response", None), "text", "")
            return MalformedAnswerError(NON_JSON, body if isinstance(body, str) else json.dumps(body, default=str))
    return None


def error_page(exc: BaseException) -> str:
    """An excerpt of the page an HTTP error came with when it is not JSON (a proxy's HTML 502), else ""."""
    for e in causes(exc):
        response = getattr(e, "response", None)
        try:
            text = response.text if response is not None else None
        except Exception:  # noqa: BLE001 - a streamed response not read: nothing to show
            text = None
        if isinstance(text, str) and text.strip():
            return excerpt(text) if body_kind(text) in (NON_JSON, TRUNCATED) else ""
    return ""


def parse_failure(exc: BaseException) -> MalformedAnswerError | None:
    """A provider integration's error reading an answer it could not make sense of, as a malformed answer.

    Only for errors raised inside a provider's own call (models/resilience.py), where they can only come from the
    answer: LangChain's OpenAI integration reads a non-JSON body the SDK handed over as text (``'str' object has no
    attribute``), and a completion whose ``choices`` is missing or null.
    """
    if (found := malformed(exc)) is not None:
        return found
    text = str(exc)
    if isinstance(exc, ValueError) and text.startswith(_NOT_A_COMPLETION):
        # "... got str: '<html>...'": the body as the SDK handed it over, quoted by repr
        body = text.split(": ", 1)[1] if ": " in text else ""
        return MalformedAnswerError(NON_JSON, body.strip("'\"").replace("\\r", "").replace("\\n", " "))
    if isinstance(exc, AttributeError) and text.startswith("'str' object has no attribute"):
        return MalformedAnswerError(NON_JSON)
    if isinstance(exc, (KeyError, TypeError, IndexError)) and ("choices" in text or isinstance(exc, IndexError)):
        return MalformedAnswerError(NO_CHOICES)
    return None


def check_result(result: ChatResult) -> ChatResult:
    """``result`` if it holds a reply; a completion without one (empty ``choices``) is malformed."""
    if not result.generations:
        raise MalformedAnswerError(NO_CHOICES, '"choices": []')
    return result


def finish_reason(message: BaseMessage) -> str:
    """The provider's finish reason of a reply, lower-cased ("" when it gave none)."""
    metadata = getattr(message, "response_metadata", None) or {}
    value = metadata.get("finish_reason") or metadata.get("stop_reason") or ""
    return str(getattr(value, "name", value)).lower()


def non_reply(message: BaseMessage, text: str, split: SplitReply | None = None) -> str | None:
    """Why a well-formed answer is not a (whole) reply: one of :data:`NON_REPLY_KINDS`; None for a reply.

    ``text`` is the reply's visible text (nodes.dialogue.text_of); ``split`` its reasoning, if known. A filtered or
    blocked answer is that, even when the provider sent part of a reply with it; a refusal keeps its words; an answer
    with reasoning and no text, cut (an unclosed block, or the cap) is cut while reasoning; an empty one is empty; a
    reply cut at max_tokens keeps its text.
    """
    finish = finish_reason(message)
    if finish in _FILTERED:
        return CONTENT_FILTER
    if split is not None and split.refusal:
        return REFUSAL
    if finish in _SAFETY or _prompt_blocked(message):
        return SAFETY_BLOCK
    if not text:
        if split is not None and split.reasoning and (split.cut or finish in _CUT):
            return CUT_WHILE_REASONING
        return EMPTY_MESSAGE
    if finish in _CUT:
        return CUT_AT_MAX_TOKENS
    return None


def _prompt_blocked(message: BaseMessage) -> bool:
    """Whether Gemini blocked the prompt itself (no candidates; LangChain then returns an empty message with the
    ``prompt_feedback``). A reply's metadata may carry ``block_reason`` 0 / unspecified: that is no block."""
    feedback = (getattr(message, "response_metadata", None) or {}).get("prompt_feedback")
    reason = feedback.get("block_reason") if isinstance(feedback, dict) else None
    word = str(getattr(reason, "name", reason) or "").upper()
    return word not in ("", "0", "NONE", "BLOCKED_REASON_UNSPECIFIED", "BLOCK_REASON_UNSPECIFIED")


def as_malformed(exc: Exception) -> Exception:
    """An error of the provider's call that can only come from a malformed answer, as a
    :class:`MalformedAnswerError`."""
    if malformed(exc) is not None:
        return exc  # recognised as it is (models.retries.retry_reason finds it)
    bad = parse_failure(exc)
    if bad is None:
        return exc
    bad.__cause__ = exc
    return bad
