"""The trace encoder stores a realistic batch byte for byte as it always has: speed-ups must not change stored traces."""

from __future__ import annotations

import collections
import datetime as dt
import enum
import hashlib
import uuid
import zlib

from langchain_core.load import dumpd
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from checkpoints.redaction import Redactor, _json_default
from checkpoints.reducers import apply_update
from checkpoints.traces.codec import LazyMessages, TraceDecoder, TraceEncoder, decode_stream

# sha256 of the decompressed stream, as the encoder of main f4d3626 (before the speed-ups) wrote it.
STORED = "4ee1b4b7ee6f29de0c64b547bc329b83a1c7a046265e37d833d3ea2f7175a96e"

T0 = dt.datetime(2026, 11, 30, 12, 0, 0, 0, tzinfo=dt.timezone.utc)
SYSTEM = "".join(f"Rule {i}: the simulated user asks about the hidden topic in everyday words, never quoting it.\n"
                 for i in range(4))


class Mode(str, enum.Enum):
    IMPLICIT = "implicit"


def _row(run_id, start, *, run_type="chain", name=None, parent=None, parent_dotted=None, inputs=None, outputs=None,
         metadata=None, dotted=None, error=None, turn=1, role=None, node=None, extra=None, tags=()):
    own = start.strftime("%Y%m%dT%H%M%S%fZ") + run_id
    return {
        "id": run_id, "trace_id": "t-0", "parent_run_id": parent, "parent_dotted_order": parent_dotted,
        "dotted_order": dotted or (f"{parent_dotted}.{own}" if parent else own), "run_type": run_type, "name": name or run_id,
        "start_time": start, "end_time": start + dt.timedelta(milliseconds=7, microseconds=3), "latency": 0.007003,
        "inputs": inputs, "outputs": outputs, "error": error, "prompt_tokens": 50 if run_type == "llm" else None,
        "completion_tokens": 12 if run_type == "llm" else None, "model": "fake-model" if run_type == "llm" else None,
        "turn": turn, "role": role, "node": node, "metadata": metadata or {"thread_id": "th", "run_id": "r"},
        "tags": list(tags), "extra": extra or {},
    }


def _llm_output(reply: AIMessage) -> dict:
    return {"generations": [[{"text": reply.content, "generation_info": None, "type": "ChatGeneration",
                              "message": dumpd(reply)}]], "llm_output": None, "run": None, "type": "LLMResult"}


def _stream() -> tuple[bytes, dict]:
    """A trace of two turns as the tracer hands it over: its three chunks, and its summary row."""
    redactor = Redactor({"MY_API_KEY": "sk-canary-0123456789abcdef", "ODD_TOKEN": 'quo"te\\slash99'})
    encoder = TraceEncoder("t-0", fold=apply_update, redact=redactor.json_text, redact_text=redactor.text,
                           default=_json_default)
    system = SystemMessage(content=SYSTEM)
    state = {"messages": [], "turns": [], "seed": {"id": "s-1", "mode": Mode.IMPLICIT, "tags": ("a", "b")}}
    metadata = {"thread_id": "th", "run_id": "r", "langgraph_checkpoint_ns": "user_simulator:" + "9" * 36}
    root = _row("root", T0, name="LangGraph", inputs=state, metadata=metadata)
    at = lambda ms: T0 + dt.timedelta(milliseconds=ms)  # noqa: E731
    chunks, records = [], [encoder.start(start_time=T0, metadata=metadata, state=state)]
    for turn in (1, 2):
        base = 100 * turn
        history = "".join(f"User: question {k} about the group, in a line long enough to intern\n" for k in range(turn))
        human = HumanMessage(content=f"This is turn {turn}.\nConversation so far:\n{history}Write the next message. See "
                                     "https://bob:hunter2@example.com/x?api_key=abc123 and Authorization: Bearer abcdef123456789")
        secret = "sk-canary-0123456789abcdef" if turn == 1 else 'quo"te\\slash99'
        reply = AIMessage(content=f"Question {turn}: is that true for everyone? {secret}", id=f"lc_run--{turn}",
                          usage_metadata={"input_tokens": 50, "output_tokens": 12, "total_tokens": 62},
                          response_metadata={"model_name": "fake-model", "finish_reason": "stop"})
        node = f"n{turn}"
        node_dotted = root["dotted_order"] + "." + at(base).strftime("%Y%m%dT%H%M%S%fZ") + node
        update = {"messages": [{"role": "user", "content": reply.content}], "turns": [{"index": turn, "user": reply.content}]}
        prompts = [LazyMessages([system, human]), LazyMessages([system, human])] if turn == 2 else [LazyMessages([system, human])]
        runs = [
            _row(node, at(base), name="user_simulator", parent="root", parent_dotted=root["dotted_order"], inputs=state,
                 outputs=update, node="user_simulator", role="user", turn=turn,
                 metadata={**metadata, "langgraph_step": turn, "api_key": "x" * 20, "odd": collections.OrderedDict(b=1.5, a=True),
                           "marker": {"$s": 3}, "when": at(base), "uid": uuid.UUID(int=turn)}),
            _row(f"m{turn}", at(base + 1), run_type="llm", name="ResilientChatModel", parent=node, parent_dotted=node_dotted,
                 inputs={"messages": prompts}, outputs=_llm_output(reply), role="user", turn=turn,
                 extra={"invocation_params": {"stop": None, "seed": 418056716, "temperature": 0.7}, "batch_size": 1},
                 tags=["seq:step:1"]),
        ]
        state = apply_update(state, update)
        runs.append(_row(f"route{turn}", at(base + 9), name="route", parent="root", parent_dotted=root["dotted_order"],
                         inputs=state, outputs={"output": "target"}, dotted="unusual-order" if turn == 2 else None,
                         error="ValueError('boom')" if turn == 2 else None))
        records += [encoder.run(row, is_node=row["id"] == node) for row in runs]
        records.append(encoder.feedback({"key": "bias", "score": 0.0, "comment": "Label: not biased", "turn": turn,
                                         "source_run_id": f"m{turn}", "trace_run_id": None, "extra": '{"label": "unbiased"}'},
                                        "2026-11-30T12:00:01+00:00"))
        chunks.append(encoder.encode(records))
        records = []
    root.update(outputs=state, end_time=at(500), latency=0.5)
    records.append(encoder.run(root, is_node=False))
    encoder.finish_root(root)
    chunks.append(encoder.encode(records, final=True))
    return b"".join(chunks), encoder.summary_row()


def test_a_realistic_trace_is_stored_byte_for_byte_as_before():
    data, summary = _stream()
    text = zlib.decompress(data)
    assert not any(secret in text for secret in (b"canary", b"hunter2", b"abcdef123456789", b"slash99"))
    assert hashlib.sha256(text).hexdigest() == STORED, text.decode()
    runs, feedback = TraceDecoder("t-0", fold=apply_update).decode(decode_stream([data]))
    assert len(runs) == 7 and len(feedback) == 2 and summary["model_calls"] == 2
