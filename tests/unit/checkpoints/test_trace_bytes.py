"""The trace encoder stores a realistic batch byte for byte as pinned: speed-ups must not change stored traces.

A change of format is a new ``FORMAT`` in ``checkpoints.traces.format``: streams of the earlier format (a stored
fixture) still decode to the very same runs.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import enum
import functools
import hashlib
import json
import uuid
import zlib
from pathlib import Path

from langchain_core.load import dumpd
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from checkpoints.redaction import Redactor, _json_default
from checkpoints.reducers import apply_update
from checkpoints.traces.decoder import TraceDecoder, decode_stream
from checkpoints.traces.encoder import LazyMessages, TraceEncoder

# sha256 of the decompressed stream of format 2 (prompt messages stored once, model calls as patches, metadata as
# differences), each line as json.dumps writes it with its default separators: the pin from before lines were written
# compact (by orjson) still holds for the same values.
STORED = "48c86b8be82ec31dd4472ab52fc012c5cfafdb57ac4820aa006f00775589990a"
# The same stream as stored: compact JSON lines.
STORED_COMPACT = "27c65a29d1c9e81bdc691b0f7a66a87508f91e421bf7a9f8618bc96bfc496a0e"
# The same batch as format 1 wrote it (main 7ffacb2; its stream's sha256 was 4ee1b4b7…a96e).
FORMAT_1 = Path(__file__).resolve().parents[2] / "fixtures" / "trace_stream_v1.zz"

T0 = dt.datetime(2026, 11, 30, 12, 0, 0, 0, tzinfo=dt.UTC)
SYSTEM = "".join(
    f"Rule {i}: the simulated user asks about the hidden topic in everyday words, never quoting it.\n" for i in range(4)
)


class Mode(str, enum.Enum):  # noqa: UP042 - the str-mixin form, as user code writes it
    IMPLICIT = "implicit"


def _row(
    run_id,
    start,
    *,
    run_type="chain",
    name=None,
    parent=None,
    parent_dotted=None,
    inputs=None,
    outputs=None,
    metadata=None,
    dotted=None,
    error=None,
    turn=1,
    role=None,
    node=None,
    extra=None,
    tags=(),
):
    own = start.strftime("%Y%m%dT%H%M%S%fZ") + run_id
    return {
        "id": run_id,
        "trace_id": "t-0",
        "parent_run_id": parent,
        "parent_dotted_order": parent_dotted,
        "dotted_order": dotted or (f"{parent_dotted}.{own}" if parent else own),
        "run_type": run_type,
        "name": name or run_id,
        "start_time": start,
        "end_time": start + dt.timedelta(milliseconds=7, microseconds=3),
        "latency": 0.007003,
        "inputs": inputs,
        "outputs": outputs,
        "error": error,
        "prompt_tokens": 50 if run_type == "llm" else None,
        "completion_tokens": 12 if run_type == "llm" else None,
        "model": "fake-model" if run_type == "llm" else None,
        "turn": turn,
        "role": role,
        "node": node,
        "metadata": metadata or {"thread_id": "th", "run_id": "r"},
        "tags": list(tags),
        "extra": extra or {},
    }


def _llm_output(reply: AIMessage) -> dict:
    return {
        "generations": [
            [{"text": reply.content, "generation_info": None, "type": "ChatGeneration", "message": dumpd(reply)}]
        ],
        "llm_output": None,
        "run": None,
        "type": "LLMResult",
    }


SECRETS = {"MY_API_KEY": "sk-canary-0123456789abcdef", "ODD_TOKEN": 'quo"te\\slash99'}


def _stream(redact=None) -> tuple[bytes, dict]:
    """A trace of two turns as the tracer hands it over: its three chunks, and its summary row."""
    redactor = Redactor(SECRETS)
    encoder = TraceEncoder(
        "t-0", fold=apply_update, redact=redact or redactor.json_text, redact_text=redactor.text, default=_json_default
    )
    system = SystemMessage(content=SYSTEM)
    state = {"messages": [], "turns": [], "seed": {"id": "s-1", "mode": Mode.IMPLICIT, "tags": ("a", "b")}}
    metadata = {"thread_id": "th", "run_id": "r", "langgraph_checkpoint_ns": "user_simulator:" + "9" * 36}
    root = _row("root", T0, name="LangGraph", inputs=state, metadata=metadata)
    at = lambda ms: T0 + dt.timedelta(milliseconds=ms)  # noqa: E731
    chunks, records = [], [encoder.start(start_time=T0, metadata=metadata, state=state)]
    for turn in (1, 2):
        base = 100 * turn
        history = "".join(f"User: question {k} about the group, in a line long enough to intern\n" for k in range(turn))
        human = HumanMessage(
            content=f"This is turn {turn}.\nConversation so far:\n{history}Write the next message. See "
            "https://bob:hunter2@example.com/x?api_key=abc123 and Authorization: Bearer abcdef123456789"
        )
        secret = "sk-canary-0123456789abcdef" if turn == 1 else 'quo"te\\slash99'
        reply = AIMessage(
            content=f"Question {turn}: is that true for everyone? {secret}",
            id=f"lc_run--{turn}",
            usage_metadata={"input_tokens": 50, "output_tokens": 12, "total_tokens": 62},
            response_metadata={"model_name": "fake-model", "finish_reason": "stop"},
        )
        node = f"n{turn}"
        node_dotted = root["dotted_order"] + "." + at(base).strftime("%Y%m%dT%H%M%S%fZ") + node
        update = {
            "messages": [{"role": "user", "content": reply.content}],
            "turns": [{"index": turn, "user": reply.content}],
        }
        prompts = (
            [LazyMessages([system, human]), LazyMessages([system, human])]
            if turn == 2
            else [LazyMessages([system, human])]
        )
        runs = [
            _row(
                node,
                at(base),
                name="user_simulator",
                parent="root",
                parent_dotted=root["dotted_order"],
                inputs=state,
                outputs=update,
                node="user_simulator",
                role="user",
                turn=turn,
                metadata={
                    **metadata,
                    "langgraph_step": turn,
                    "api_key": "x" * 20,
                    "odd": collections.OrderedDict(b=1.5, a=True),
                    "marker": {"$s": 3},
                    "when": at(base),
                    "uid": uuid.UUID(int=turn),
                },
            ),
            _row(
                f"m{turn}",
                at(base + 1),
                run_type="llm",
                name="ResilientChatModel",
                parent=node,
                parent_dotted=node_dotted,
                inputs={"messages": prompts},
                outputs=_llm_output(reply),
                role="user",
                turn=turn,
                extra={"invocation_params": {"stop": None, "seed": 418056716, "temperature": 0.7}, "batch_size": 1},
                tags=["seq:step:1"],
            ),
        ]
        state = apply_update(state, update)
        runs.append(
            _row(
                f"route{turn}",
                at(base + 9),
                name="route",
                parent="root",
                parent_dotted=root["dotted_order"],
                inputs=state,
                outputs={"output": "target"},
                dotted="unusual-order" if turn == 2 else None,
                error="ValueError('boom')" if turn == 2 else None,
            )
        )
        records += [encoder.run(row, is_node=row["id"] == node) for row in runs]
        records.append(
            encoder.feedback(
                {
                    "key": "bias",
                    "score": 0.0,
                    "comment": "Label: not biased",
                    "turn": turn,
                    "source_run_id": f"m{turn}",
                    "trace_run_id": None,
                    "extra": '{"label": "unbiased"}',
                },
                "2026-11-30T12:00:01+00:00",
            )
        )
        chunks.append(encoder.encode(records))
        records = []
    root.update(outputs=state, end_time=at(500), latency=0.5)
    records.append(encoder.run(root, is_node=False))
    encoder.finish_root(root)
    chunks.append(encoder.encode(records, final=True))
    return b"".join(chunks), encoder.summary_row()


def test_a_realistic_trace_is_stored_byte_for_byte_as_pinned():
    data, summary = _stream()
    text = zlib.decompress(data)
    assert not any(secret in text for secret in (b"canary", b"hunter2", b"abcdef123456789", b"slash99"))
    assert hashlib.sha256(text).hexdigest() == STORED_COMPACT, text.decode()
    spaced = "".join(json.dumps(json.loads(line), ensure_ascii=False) + "\n" for line in text.decode().splitlines())
    assert hashlib.sha256(spaced.encode()).hexdigest() == STORED
    runs, feedback = TraceDecoder("t-0", fold=apply_update).decode(decode_stream([data]))
    assert len(runs) == 7 and len(feedback) == 2 and summary["model_calls"] == 2
    # Repeated prompt messages are stored once, then referred to; the second model call is what changed since the first.
    assert text.count(b'"$m"') == 3 and b'"x":{"$p":{}}' in text and b'"out":{"$p":{"generations"' in text


def test_a_stream_of_format_1_decodes_to_the_same_runs():
    new, _ = _stream()
    old = FORMAT_1.read_bytes()
    assert b'"fv"' not in zlib.decompress(old) and b'"fv":2' in zlib.decompress(new)
    decoded = [TraceDecoder("t-0", fold=apply_update).decode(decode_stream([data])) for data in (old, new)]
    assert decoded[0] == decoded[1]
    runs, feedback = decoded[1]
    assert [r["metadata"].get("langgraph_step") for r in runs] == [1, None, None, 2, None, None, None]
    assert runs[0]["metadata"]["api_key"] == "[redacted]" and runs[3]["metadata"]["api_key"] == "[redacted]"
    first, second = runs[4]["inputs"]["messages"]  # one prompt twice: the second a reference, decoded anew
    assert first == second and first[0] is not second[0] and first[0] == runs[1]["inputs"]["messages"][0][0]


def test_redacting_a_batch_whole_is_redacting_each_line():
    lines: list[str] = []

    def keep(text: str) -> str:
        lines.extend(text.split("\n"))
        return text

    _stream(redact=keep)
    redactor = Redactor(SECRETS)
    assert len(lines) == 10  # the start record, seven runs, two verdicts
    assert redactor.json_text("\n".join(lines)) == "\n".join(redactor.json_text(line) for line in lines)


@dataclasses.dataclass
class _Point:
    x: int
    at: dt.time


def test_a_line_holds_the_values_json_dumps_would_write():
    """orjson writes the lines; what it refuses or would write otherwise reads back as json.dumps wrote it."""
    import numpy as np

    values = [
        {"int keys": {1: "a", 2.5: "b", None: "c", False: "d"}},  # orjson refuses keys that are not strings
        {"huge": 2**70, "negative huge": -(2**65), "nan": float("nan")},  # beyond 64 bits (so NaN as json writes it)
        {"numpy": np.float64(0.25), "numpy int": np.int64(3)},  # a float subclass: a number, not its repr
        {"when": T0, "day": T0.date(), "time": dt.time(12, 30), "uid": uuid.UUID(int=7)},  # the default's forms
        {"point": _Point(1, dt.time(1, 2)), "set": {"only"}, "tuple": (1, 2), "mode": Mode.IMPLICIT},
        {"deep": functools.reduce(lambda inner, _: [inner], range(300), [])},  # deeper than orjson goes
        {"text": "caf\u00e9 \u2014 \U0001f600", "tuple key": {("a", 1): "skipped"}},
    ]

    def lines(records):
        encoder = TraceEncoder(
            "t-0", fold=apply_update, redact=lambda text: text, redact_text=lambda text: text, default=_json_default
        )
        return zlib.decompress(encoder.encode(records, final=True)).decode()

    text = lines([{"k": "f", **v} for v in values])
    written = [json.loads(line) for line in text.splitlines()]
    expected = [
        json.loads(json.dumps({"k": "f", **v}, ensure_ascii=False, default=_json_default, skipkeys=True))
        for v in values
    ]
    assert written == expected
    assert written[2]["numpy"] == 0.25 and written[3]["time"] == "datetime.time(12, 30)"  # json.dumps's default: repr
    # One difference: a NaN or infinity is null, as valid JSON (and LangSmith) has it, where json.dumps wrote NaN.
    assert json.loads(lines([{"k": "f", "score": float("nan"), "top": float("inf")}])) == {
        "k": "f",
        "score": None,
        "top": None,
    }


def test_message_dict_is_dumpd():
    from langchain_core.messages import ToolMessage

    from checkpoints.traces.lc_dump import message_dict

    messages = [
        SystemMessage(content=SYSTEM),
        HumanMessage(
            content=[{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "x"}}], name="u"
        ),
        AIMessage(
            content="",
            tool_calls=[{"name": "f", "args": {"a": [1, (2, 3)]}, "id": "c1"}],
            id="r-1",
            usage_metadata={"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
            response_metadata={"token_usage": {"prompt_tokens": 5}, "logprobs": None, "finish_reason": "stop"},
        ),
        AIMessage(content="x", response_metadata={"raw": {"lc": 1, "type": "constructor", "id": ["x"]}}),  # escaped
        AIMessage(content="x", additional_kwargs={"when": T0, 3: "int key"}),  # not JSON: as dumpd has it
        ToolMessage(content="42", tool_call_id="c1", artifact={"rows": [1, 2]}),
        *_more_messages(),
    ]
    for message in messages:
        assert message_dict(message) == dumpd(message)
        assert json.dumps(message_dict(message), default=str) == json.dumps(dumpd(message), default=str)
    copy = message_dict(messages[2])
    copy["kwargs"]["response_metadata"]["token_usage"]["prompt_tokens"] = 0
    assert messages[2].response_metadata["token_usage"]["prompt_tokens"] == 5


def _more_messages() -> list:
    """Messages whose fields take every way through ``to_json``: chunks, falsy values, extras, own lc_attributes,
    secrets."""
    from langchain_core.messages import AIMessageChunk, ChatMessage, FunctionMessage, HumanMessageChunk

    class Annotated(HumanMessage):  # an lc_attributes of its own, above none
        @property
        def lc_attributes(self) -> dict:
            return {"name": "from-attributes", "extra_kw": [1]}

    class AnnotatedTwice(Annotated):  # two definitions: both apply, the base's last
        @property
        def lc_attributes(self) -> dict:
            return {"name": "overridden", "second": True}

    class Secretive(HumanMessage):  # a secret: dumpd's own path
        @property
        def lc_secrets(self) -> dict:
            return {"name": "MY_SECRET"}

    return [
        AIMessageChunk(content="par", id="c-1", tool_call_chunks=[{"name": "f", "args": "{", "id": "t", "index": 0}]),
        HumanMessageChunk(content="x", name=""),  # a falsy value unlike its default: kept
        HumanMessage(content="", id=None, additional_kwargs={}, response_metadata={}),  # falsy and default: dropped
        ChatMessage(content="hello", role="critic"),
        FunctionMessage(content="{}", name="lookup"),
        HumanMessage(content="x", custom_field={"a": 1}),  # an extra field, not a constructor argument
        Annotated(content="a"),
        AnnotatedTwice(content="b"),
        Secretive(content="s", name="hide-me"),
        SystemMessage(content="x", additional_kwargs={"nested": {"lc": 2}}),  # escaped deeper down
    ]


def test_only_credential_fields_are_looked_for():
    from checkpoints.redaction import _has_secret_field

    redactor = Redactor({})
    for text, secret in [
        ('{"key": "bias", "x": 1}', False),
        ('{"monkey": "x"}', False),
        ('{"api_key": "abc"}', True),
        ('{"X-Api-Key": "abc"}', True),
        ('{"a": "the key\\": y"}', False),
        ('{"max_tokens": 5}', False),
        ('{"refresh_token": {"v": 1}}', True),
        ('{"n": 1}\n{"password": "p"}', True),
    ]:
        assert _has_secret_field(text.lower()) is secret, text
        assert (redactor.json_text(text) != text) is secret, text
