"""How the response cache stores a reply: its key as the digest's first bytes, its value as JSON deflated against a
preset dictionary.

Kept apart from :mod:`checkpoints.cache` so the migration that compacted the table (m064) uses it without
importing the cache (which opens stores through the migrations).
"""

from __future__ import annotations

import zlib
from datetime import datetime

TABLE = "response_cache"
KEY_VERSION = 1
KEY_BYTES = 16  # of the SHA-256: a collision needs ~2^64 stored replies

# --- the stored value -----------------------------------------------------------------------
# A value is a format byte and a body. Format 1: the reply's JSON (compact separators, UTF-8),
# raw-deflated against ZDICT_V1. Rows written before m064 hold the JSON as text and are read
# too (the migration converts them; a text row written by hand still decodes).
FORMAT_DEFLATE_V1 = 1
# Never edit this: rows of format 1 decompress only against these exact bytes. A better
# dictionary is a new format byte with its own constant. Strings every stored reply repeats
# (LangChain's message dict, OpenAI-style metadata, usage, logprobs, the judge's answer
# shape), the most frequent last (deflate reaches near matches most cheaply).
ZDICT_V1 = (
    b'{"content":[{"token":"","bytes":[],"logprob":-0.0,"top_logprobs":[{"token":"","bytes":[],"logprob":-'
    b'"refusal":null}'
    b'"model_provider":"google_genai","safety_ratings":[],"prompt_feedback":{"block_reason":0,"safety_ratings":[]},'
    b'"model_provider":"huggingface","model_provider":"llama_cpp","model_provider":"openai",'
    b'"service_tier":"default","system_fingerprint":"fp_","id":"chatcmpl-","created":17'
    b'"completion_tokens_details":{"accepted_prediction_tokens":0,"audio_tokens":0,"reasoning_tokens":0,'
    b'"rejected_prediction_tokens":0},"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":0}},'
    b'"input_token_details":{"audio":0,"cache_read":0},"output_token_details":{"audio":0,"reasoning":0}}'
    b'Rationale: Label: not biased","Label: biased",'
    b'"llm_output":{"token_usage":{"completion_tokens":,"prompt_tokens":,"total_tokens":,'
    b'"completion_tokens_details":null,"prompt_tokens_details":null},"model_provider":"openai","model_name":"'
    b'","system_fingerprint":null,"id":"'
    b'{"generations":[{"message":{"type":"ai","data":{"content":"'
    b'","additional_kwargs":{"refusal":null},"response_metadata":{"token_usage":{"completion_tokens":'
    b',"prompt_tokens":,"total_tokens":},"model_name":"","finish_reason":"stop","logprobs":null},'
    b'"type":"ai","name":null,"id":null,"tool_calls":[],"invalid_tool_calls":[],"usage_metadata":{'
    b'"input_tokens":,"output_tokens":,"total_tokens":,"input_token_details":{},"output_token_details":{}}}},'
    b'"generation_info":{"finish_reason":"stop","logprobs":null}}],"llm_output":{"token_usage":{"completion_tokens":'
)


def compress(text: str) -> bytes:
    """A JSON text as a stored value: the format byte, then the text deflated against :data:`ZDICT_V1`."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, ZDICT_V1)
    return bytes([FORMAT_DEFLATE_V1]) + packer.compress(text.encode("utf-8")) + packer.flush()


def decompress(value: bytes | str) -> str:
    """The JSON text of a stored value (either format); ValueError for anything else."""
    if isinstance(value, str):
        return value  # a row from before m064: the JSON itself
    if not isinstance(value, (bytes, bytearray, memoryview)) or not value:
        raise ValueError("not a stored reply")
    value = bytes(value)
    if value[0] != FORMAT_DEFLATE_V1:
        raise ValueError(f"unknown reply format {value[0]}")
    try:
        unpacker = zlib.decompressobj(-15, ZDICT_V1)
        text = unpacker.decompress(value[1:]) + unpacker.flush()
    except zlib.error as exc:
        raise ValueError(f"damaged reply: {exc}") from None
    if not unpacker.eof:
        raise ValueError("truncated reply")
    return text.decode("utf-8")


def stored_key(key: str) -> bytes | str:
    """A key as stored: a hex digest (what :func:`request_key` makes) as its first bytes, anything else as it is."""
    if len(key) == 64:
        try:
            return bytes.fromhex(key)[:KEY_BYTES]
        except ValueError:
            pass
    return key


def stored_time(stamp: object) -> int | None:
    """A row's time as the cache stores it, Unix seconds (rows written before m064 hold an ISO timestamp)."""
    if not isinstance(stamp, str):
        return stamp if isinstance(stamp, int) else None
    try:
        return int(datetime.fromisoformat(stamp).timestamp())
    except ValueError:
        return None
