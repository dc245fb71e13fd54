"""The reader of compact traces (the format: checkpoints/traces/format.py): zlib chunks in, the plain rows out.

Decoding rebuilds exactly the rows of the plain layout (``trace_runs``); streams of format 1 decode as they always did.
"""

from __future__ import annotations

import datetime as dt
import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from checkpoints.traces.format import Fold, branch_of, dotted_time, is_patch, text_or_none


def decode_stream(chunks: Sequence[bytes]) -> list[dict[str, Any]]:
    """The JSON records of one trace from its chunks in order; a cut-off tail (a killed writer) is dropped."""
    decompressor = zlib.decompressobj()
    data = bytearray()
    for chunk in chunks:
        try:
            data += decompressor.decompress(chunk)
        except zlib.error:
            break
    records = []
    for line in bytes(data).decode("utf-8", errors="replace").split("\n"):
        if line:
            try:
                records.append(json.loads(line))
            except ValueError:
                break
    return records


class TraceDecoder:
    """Rebuilds the plain rows (and feedback items) of one trace from its records."""

    def __init__(self, trace_id: str, *, fold: Fold) -> None:
        self.trace_id = trace_id
        self._fold = fold
        self._strings: dict[int, str] = {}
        self._states: list[Any] = []
        self._base_time: dt.datetime | None = None
        self._base_metadata: dict[str, Any] = {}
        self._format = 1
        self._messages: dict[int, Any] = {}  # n → the walked message as first stored
        self._seen: list[tuple[dict[str, Any], Any, Any]] = []  # by ordinal: (metadata, extra, outputs)

    def decode(self, records: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        runs, feedback = [], []
        own: dict[str, tuple[str | None, str]] = {}  # run id → (parent id, own part or whole stored dotted order)
        for record in records:
            kind = record.get("k")
            if kind == "s":
                self._format = record.get("fv", 1)
                self._base_time = dt.datetime.fromisoformat(record["t0"])
                self._base_metadata = self._unwalk(record.get("md") or {})
                if "state" in record:
                    self._states.append(self._unwalk(record["state"]))
            elif kind == "r":
                row = self._run(record)
                own[row["id"]] = (
                    (None, record["do"]) if record.get("do") else (row["parent_run_id"], row["dotted_order"])
                )
                runs.append(row)
                for route in record.get("rr") or ():
                    sub = self._route(route, row)
                    own[sub["id"]] = (row["id"], sub["dotted_order"])
                    runs.append(sub)
            elif kind == "f":
                feedback.append({k: self._unwalk(v) for k, v in record.items() if k != "k"})
        # Children end (and are stored) before their parents: dotted orders are joined up at the end.
        dotted: dict[str, str] = {}

        def full(run_id: str) -> str:
            if run_id not in dotted:
                parent, part = own[run_id]
                dotted[run_id] = f"{full(parent)}.{part}" if parent in own else part
            return dotted[run_id]

        for row in runs:
            row["dotted_order"] = full(row["id"])
        return runs, feedback

    def _run(self, record: dict[str, Any]) -> dict[str, Any]:
        run_id, parent = record["id"], record.get("p")
        base = self._base_time or dt.datetime.now(dt.UTC)
        start_us, end_us = record["t"]
        start = base + dt.timedelta(microseconds=start_us)
        end = None if end_us is None else base + dt.timedelta(microseconds=end_us)
        dotted = dotted_time(start) + run_id  # this run's own part: joined to its parent's in decode()
        reference = self._seen[record["mr"]] if 0 <= record.get("mr", -1) < len(self._seen) else None
        missing = set(record.get("mx") or ())
        metadata = {
            k: v for k, v in (self._base_metadata if reference is None else reference[0]).items() if k not in missing
        }
        metadata.update(self._unwalk(record.get("md") or {}))
        turn, role = record.get("turn"), record.get("role")
        metadata.update(turn_index=turn, role=role)
        inputs = self._value(record.get("in"))
        extra = self._apply(record.get("x") or {}, None if reference is None else reference[1])
        if record.get("f"):
            outputs = self._unwalk(record.get("out"))
            if not (isinstance(record.get("in"), dict) and "$state" in record["in"]):
                self._states.append(inputs)
            self._states.append(self._fold(inputs, outputs))
        elif reference is not None and self._format >= 2 and is_patch(record.get("out")):
            outputs = self._apply(record["out"], reference[2])
        else:
            outputs = self._value(record.get("out"))
        self._seen.append((metadata, extra, outputs))
        usage = token_usage(outputs) if record["rt"] == "llm" else {}
        error = record.get("e")
        return {
            "id": run_id,
            "trace_id": self.trace_id,
            "parent_run_id": parent,
            "dotted_order": dotted,
            "run_type": record["rt"],
            "name": record["n"],
            "status": "error" if error else "success",
            "start_time": start.isoformat(),
            "end_time": end.isoformat() if end else None,
            "latency": (end - start).total_seconds() if end else None,
            "inputs": inputs,
            "outputs": outputs,
            "error": error,
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
            "total_tokens": usage.get("total_tokens"),
            "model": record.get("model"),
            "run_id": text_or_none(metadata.get("run_id")),
            "thread_id": text_or_none(metadata.get("thread_id")),
            "checkpoint_id": text_or_none(metadata.get("checkpoint_id")) if parent is None else None,
            "checkpoint_ns": text_or_none(metadata.get("langgraph_checkpoint_ns")),
            "branch_id": branch_of(metadata),
            "turn": turn,
            "role": role,
            "node": record.get("node"),
            "step": metadata.get("langgraph_step"),
            "metadata": metadata,
            "tags": record.get("tags") or [],
            "extra": extra,
        }

    def _route(self, route: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
        """A router's run from its node's record: the node's place and metadata, its own id, times, input and choice."""
        base = self._base_time or dt.datetime.now(dt.UTC)
        start = base + dt.timedelta(microseconds=route["t"][0])
        end = base + dt.timedelta(microseconds=route["t"][1])
        error = route.get("e")
        return {
            **node,
            "id": route["id"],
            "parent_run_id": node["id"],
            "dotted_order": dotted_time(start) + route["id"],  # joined to its node's in decode()
            "run_type": "chain",
            "name": route["n"],
            "status": "error" if error else "success",
            "start_time": start.isoformat(),
            "end_time": end.isoformat(),
            "latency": (end - start).total_seconds(),
            "inputs": self._value(route.get("in")),
            "outputs": {"output": self._unwalk(route["o"])} if "o" in route else {},
            "error": error,
            "prompt_tokens": None,
            "completion_tokens": None,
            "total_tokens": None,
            "model": None,
            "metadata": _copy(node["metadata"]),
            "tags": route.get("tags") or [],
            "extra": {},
        }

    def _value(self, value: Any) -> Any:
        if isinstance(value, dict) and len(value) == 1 and "$state" in value:
            index = value["$state"]
            return self._states[index] if 0 <= index < len(self._states) else None
        return self._unwalk(value)

    def _apply(self, value: Any, old: Any) -> Any:
        """A stored value that may be a patch on ``old`` (format 2), as the value it stands for."""
        if self._format >= 2 and is_patch(value):
            if "$p" in value and isinstance(old, dict):
                removed = set(value.get("$x") or ())
                new = {k: _copy(v) for k, v in old.items() if k not in removed}
                for k, change in value["$p"].items():
                    new[k] = self._apply(change, old.get(k))
                return new
            if "$pl" in value and isinstance(old, list):
                items = [_copy(v) for v in old]
                for i, change in value["$pl"]:
                    if 0 <= i < len(items):
                        items[i] = self._apply(change, old[i])
                return items
            return None  # a patch on nothing: its run's reference was lost
        return self._unwalk(value)

    def _unwalk(self, value: Any) -> Any:
        if isinstance(value, dict):
            if len(value) <= 2:
                if "$s" in value and len(value) == 1:
                    return self._strings.get(value["$s"], "[redacted]")
                if "$d" in value and "v" in value:
                    text = value["v"] if isinstance(value["v"], str) else str(value["v"])
                    self._strings[value["$d"]] = text
                    return text
                if "$j" in value and len(value) == 1:
                    return "".join(self._unwalk(p) for p in value["$j"])
                if "$lit" in value and len(value) == 1:
                    return {k: self._unwalk(v) for k, v in value["$lit"].items()}
                if self._format >= 2:
                    if "$M" in value and "v" in value:
                        self._messages[value["$M"]] = value["v"]
                        return self._unwalk(value["v"])
                    if "$m" in value and len(value) == 1:  # walked again: each use gets objects of its own
                        return self._unwalk(self._messages.get(value["$m"]))
            return {k: self._unwalk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._unwalk(v) for v in value]
        return value


def _copy(value: Any) -> Any:
    """A decoded value copied, so that no two rows share a dict or list."""
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy(v) for v in value]
    return value


def token_usage(outputs: Mapping[str, Any] | None) -> dict[str, int]:
    """Input, output and total tokens of a model run, summed over its generations (LangChain's usage_metadata)."""
    totals: dict[str, int] = {}
    if not outputs:
        return totals
    for batch in outputs.get("generations") or []:
        for generation in batch or []:
            message = generation.get("message") if isinstance(generation, Mapping) else None
            kwargs = message.get("kwargs") if isinstance(message, Mapping) else None
            usage = kwargs.get("usage_metadata") if isinstance(kwargs, Mapping) else None
            if isinstance(usage, Mapping):
                for key in ("input_tokens", "output_tokens", "total_tokens"):
                    if isinstance(usage.get(key), int):
                        totals[key] = totals.get(key, 0) + usage[key]
    if not totals:  # older integrations report usage only in llm_output
        usage = (outputs.get("llm_output") or {}).get("token_usage") or {}
        for ours, theirs in (
            ("input_tokens", "prompt_tokens"),
            ("output_tokens", "completion_tokens"),
            ("total_tokens", "total_tokens"),
        ):
            if isinstance(usage.get(theirs), int):
                totals[ours] = usage[theirs]
    if "total_tokens" not in totals and ("input_tokens" in totals or "output_tokens" in totals):
        totals["total_tokens"] = totals.get("input_tokens", 0) + totals.get("output_tokens", 0)
    return totals
