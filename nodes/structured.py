"""Structured output: ask a provider to constrain a reply to a JSON schema, with text parsing as the fallback.

OpenAI takes ``response_format`` with a strict JSON schema; OpenAI-compatible servers get JSON mode
with the schema attached (llama.cpp's server turns it into a grammar and decodes under it, so even a
135M model writes a parsable label); Gemini takes ``response_mime_type`` and ``response_json_schema``. Providers without
either (the embedded base model, Hugging Face) and servers that refuse the option get the plain request; either answer
is read by the one verdict grammar (nodes/verdicts.py: the whole answer as JSON, else the prescribed ``Label:`` /
``Type:`` line).
"""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from checkpoints.vocabulary import BIASED, LABEL_TEXT, NOT_BIASED
from models.registry import RoleModel
from nodes.dialogue import timed_invoke
from nodes.state import UTTERANCE_TYPES

JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "rationale": {"type": "string"},
        "label": {"type": "string", "enum": [LABEL_TEXT[BIASED], LABEL_TEXT[NOT_BIASED]]},
    },
    "required": ["rationale", "label"],
    "additionalProperties": False,
}
ASSESSMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": list(UTTERANCE_TYPES)},
        "query": {"type": "string"},
    },
    "required": ["type", "query"],
    "additionalProperties": False,
}


def structured_options(model: RoleModel, *, name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """Call options that make ``model``'s provider answer in ``schema`` ({} when it cannot)."""
    # Sent in the request body as it is (extra_body), not as LangChain's response_format: that one goes
    # through the SDK's parse(), which raises on a reply cut short by max_tokens instead of returning
    # its text for the fallback parser.
    if model.structured == "openai":
        return {
            "extra_body": {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": name, "strict": True, "schema": schema},
                }
            }
        }
    if model.structured == "openai_compatible":
        # JSON mode with a schema: llama-cpp-python's server and llama.cpp's own decode under the
        # schema's grammar (the former rejects "json_schema", with an HTTP 500); vLLM and Ollama
        # at least answer in JSON.
        bounded = _bounded(schema, max_chars=_field_chars(model.sampling.max_tokens))
        return {"extra_body": {"response_format": {"type": "json_object", "schema": bounded}}}
    if model.structured == "gemini":
        return {"response_mime_type": "application/json", "response_json_schema": schema}
    return {}


# Longest free-text field a local server's grammar lets through: a small model that rambles would
# otherwise run into max_tokens mid-string and leave JSON that does not parse.
MAX_FIELD_CHARS = 600


def _field_chars(max_tokens: int) -> int:
    """A free-text field that fits in ``max_tokens`` with the JSON around it (about 3 characters a token)."""
    return max(40, min(MAX_FIELD_CHARS, 3 * (max_tokens - 30)))


def _bounded(schema: dict[str, Any], *, max_chars: int) -> dict[str, Any]:
    """``schema`` with a maxLength on its free-text fields (OpenAI's strict mode refuses the keyword)."""
    properties = {
        name: ({**spec, "maxLength": max_chars} if spec.get("type") == "string" and "enum" not in spec else spec)
        for name, spec in schema["properties"].items()
    }
    return {**schema, "properties": properties}


async def invoke_structured(
    model: RoleModel, messages: list[BaseMessage], *, name: str, schema: dict[str, Any], **options: Any
) -> tuple[AIMessage, float, bool]:
    """(reply, latency, whether the reply was constrained to ``schema``).

    A provider that refuses the schema option outright (a 4xx, an unknown argument) is asked
    again without it; transient failures are the resilience wrapper's and propagate.
    """
    extra = structured_options(model, name=name, schema=schema)
    if extra:
        try:
            reply, latency = await timed_invoke(model.chat, messages, **options, **extra)
            return reply, latency, True
        except Exception as exc:
            if not _refused_option(exc):
                raise
    reply, latency = await timed_invoke(model.chat, messages, **options)
    return reply, latency, False


def _refused_option(exc: BaseException) -> bool:
    from models.retries import RetriesExhaustedError, retry_reason

    if isinstance(exc, RetriesExhaustedError) or retry_reason(exc) is not None:
        return False
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    return isinstance(exc, (TypeError, ValueError, NotImplementedError)) or (
        isinstance(status, int) and 400 <= status < 500 and status not in (401, 403)
    )


_PARTIAL_FIELD = r'"{}"\s*:\s*"((?:[^"\\]|\\.)*)'


def partial_json_field(raw: str, name: str) -> str | None:
    """A string field of a JSON object cut short (max_tokens): its text so far, or None."""
    match = re.search(_PARTIAL_FIELD.format(re.escape(name)), raw)
    if match is None:
        return None
    try:
        return json.loads(f'"{match.group(1)}"', strict=False)
    except json.JSONDecodeError:
        return match.group(1)
