"""The writer of compact traces (the format: checkpoints/traces/format.py): run records in, zlib chunks out."""

from __future__ import annotations

import datetime as dt
import json
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

from checkpoints.text import valid_utf8
from checkpoints.traces.format import (
    FORMAT,
    KEEP_STATES,
    MARKER_SET,
    MIN_INTERN,
    SPLIT_MIN,
    Fold,
    branch_of,
    dotted_time,
    text_or_none,
)
from checkpoints.traces.lc_dump import message_dict

_LEVEL = 3
# Dates and dataclasses go to the encoder's ``default``, as json.dumps sends them (orjson would write its own forms).
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_ABSENT = object()
_SAME = object()


class LazyMessages(list):
    """A prompt's messages as the model got them, serialised by the encoder (each distinct message once)."""


class TraceEncoder:
    """Turns one trace's run records into compressed chunks; lives as long as the invocation.

    ``fold(state, update)`` applies a node's output to the dialogue state exactly as the
    graph's reducers do; ``redact(line)`` removes secrets from one JSON line.
    """

    def __init__(
        self,
        trace_id: str,
        *,
        fold: Fold,
        redact: Callable[[str], str],
        redact_text: Callable[[str], str],
        default: Callable[[Any], Any],
    ) -> None:
        self.trace_id = trace_id
        self._fold = fold
        self._redact = redact
        self._redact_text = redact_text
        self._default = default
        # json.dumps(record, ensure_ascii=False, default=default, skipkeys=True), the encoder built once; records
        # are trees (no cycles), so the check for cycles is skipped (a cycle still fails, as RecursionError).
        # It writes what orjson refuses (a key that is not a string, an int beyond 64 bits, nesting deeper than 254).
        self._json_dumps = json.JSONEncoder(
            ensure_ascii=False, default=default, skipkeys=True, check_circular=False, separators=(",", ":")
        ).encode

        def orjson_default(value: Any) -> Any:
            # float subclasses (numpy's float64) are numbers to json.dumps, not a repr
            return float(value) if isinstance(value, float) else default(value)

        self._orjson_default = orjson_default
        self._compressor = zlib.compressobj(_LEVEL)
        self._strings: dict[str, int] = {}
        self._messages: dict[Any, int] = {}  # message key → its number in the trace
        # id(message) → (the message, its content, its number): a prompt's history is the same objects every turn
        self._message_objects: dict[int, tuple[Any, Any, int]] = {}
        self._runs = 0  # run records written: a run's ordinal is its place among them
        self._seen: dict[
            str, tuple[int, Mapping[str, Any], Any, Any]
        ] = {}  # run id → (ordinal, metadata, extra, outputs)
        self._last_of: dict[tuple[Any, Any], str] = {}  # (name, node) → id of the last such run
        self._states: list[tuple[int, Any]] = []  # (index, state), newest last; at most KEEP_STATES
        self._state_count = 0
        self._first: tuple[int, Any] | None = None  # the input state: the root run's inputs at the very end
        self._base_time: dt.datetime | None = None
        self._base_metadata: dict[str, Any] = {}
        self.seq = 0
        self.summary: dict[str, Any] = {
            "trace_id": trace_id,
            "model_calls": 0,
            "prompt_tokens": None,
            "completion_tokens": None,
            "errors": 0,
            "first_turn": None,
            "last_turn": None,
            "status": "unfinished",
        }

    # --- records ---------------------------------------------------------------------------

    def start(self, *, start_time: dt.datetime, metadata: Mapping[str, Any], state: Any) -> dict[str, Any]:
        """The trace's first record: start time, base metadata and (a new dialogue's) input state."""
        self._base_time = start_time
        self._base_metadata = dict(metadata)
        record: dict[str, Any] = {
            "k": "s",
            "fv": FORMAT,
            "t0": start_time.isoformat(),
            "md": self._walk(self._base_metadata),
        }
        if isinstance(state, dict):
            record["state"] = self._walk(state)
            self._remember(state)
        self.summary.update(
            start_time=start_time.isoformat(),
            run_id=text_or_none(metadata.get("run_id")),
            thread_id=text_or_none(metadata.get("thread_id")),
            branch_id=branch_of(metadata),
        )
        return record

    def run(self, row: Mapping[str, Any], *, is_node: bool) -> dict[str, Any]:
        """One finished run as a record. ``row`` has the plain layout's fields, JSON ones as values."""
        run_id, parent = row["id"], row["parent_run_id"]
        start, end = row["start_time"], row["end_time"]
        record: dict[str, Any] = {"k": "r", "id": run_id, "rt": row["run_type"], "n": row["name"]}
        if parent:
            record["p"] = parent
        base = self._base_time or start
        record["t"] = [_micros(start - base), None if end is None else _micros(end - base)]
        own = dotted_time(start) + run_id
        expected = f"{row['parent_dotted_order']}.{own}" if parent and row.get("parent_dotted_order") else own
        if row["dotted_order"] != expected or (parent and not row.get("parent_dotted_order")):
            record["do"] = row["dotted_order"]
        if row["error"] is not None:
            record["e"] = row["error"]
        for key, field in (("turn", "turn"), ("role", "role"), ("node", "node"), ("model", "model")):
            if row[field] is not None:
                record[key] = row[field]
        metadata = row["metadata"] or {}
        # The reference run: the last of the same name and node (the same role's model call a turn
        # before), else the parent. Model calls are patches on the first, when there is one.
        sibling = self._seen.get(self._last_of.get((row["name"], row["node"]), ""))
        reference = sibling or (self._seen.get(parent) if parent else None)
        if reference is not None:
            record["mr"] = reference[0]
            delta, missing = _metadata_delta(metadata, reference[1])
        else:
            delta, missing = _metadata_delta(metadata, self._base_metadata)
        if delta:
            record["md"] = self._walk(delta)
        if missing:
            record["mx"] = missing
        if row["tags"]:
            record["tags"] = row["tags"]
        if row["extra"]:
            record["x"] = self._walk(row["extra"]) if sibling is None else self._patch(row["extra"], sibling[2])
        inputs, outputs = row["inputs"], row["outputs"]
        found = self._match(inputs)
        record["in"] = {"$state": found[0]} if found is not None else self._walk(inputs)
        if is_node and isinstance(outputs, Mapping):
            base_state = found[1] if found is not None else None
            if base_state is None and isinstance(inputs, dict):
                self._remember(inputs)  # stored whole above: now a state both sides know
                base_state = inputs
            record["out"] = self._walk(outputs)
            if base_state is not None:
                record["f"] = 1  # the reader folds this node's output into its input state
                self._remember(self._fold(base_state, outputs))
        elif sibling is not None and row["run_type"] == "llm":
            record["out"] = self._patch(outputs, sibling[3])
        else:
            record["out"] = self._value(outputs)
        if row.get("routes"):  # after the fold above: a router's input is the node's output state
            record["rr"] = [self._route(route, start) for route in row["routes"]]
        self._count(row)
        # Only now is the record sure to be written: the reader numbers runs as it meets them.
        self._seen[run_id] = (self._runs, metadata, row["extra"], outputs)
        self._last_of[(row["name"], row["node"])] = run_id
        self._runs += 1
        return record

    def _route(self, route: Sequence[Any], start: dt.datetime) -> dict[str, Any]:
        """A router's run inside its node's record: id, name, times, input (a known state), choice, tags, error."""
        run_id, name, inputs, choice, started, ended, tags, error = route
        base = self._base_time or start
        found = self._match(inputs)
        entry = {
            "id": run_id,
            "n": name,
            "t": [_micros(started - base), _micros(ended - base)],
            "in": {"$state": found[0]} if found is not None else self._walk(inputs),
        }
        if error is None:
            entry["o"] = self._walk(choice)
        else:  # no output, as a traced run that raised has none
            entry["e"] = error
            self.summary["errors"] += 1
        if tags:
            entry["tags"] = tags
        return entry

    def feedback(self, fields: Mapping[str, Any], created_at: str) -> dict[str, Any]:
        return {"k": "f", **{k: self._walk(v) for k, v in fields.items()}, "at": created_at}

    def encode(self, records: Iterable[dict[str, Any]], *, final: bool = False) -> bytes:
        """Redacted JSON lines, compressed, ending in a sync flush (or the stream's end)."""
        lines = []
        dumps, default = orjson.dumps, self._orjson_default
        for record in records:
            try:  # about 4 times faster than json.dumps, the same values (but NaN and infinity: null, as JSON has it)
                lines.append(dumps(record, default=default, option=_ORJSON_OPTIONS).decode())
            except TypeError:
                lines.append(self._dumps_slowly(record))
        # Redacted together: a JSON line holds no raw line break, starts with "{" and ends with "}", so no
        # pattern reaches from one line into the next (tests/unit/checkpoints/test_trace_bytes.py checks this).
        text = self._redact("\n".join(lines)) + "\n" if lines else ""
        data = valid_utf8(text).encode("utf-8")  # a lone surrogate in a reply: U+FFFD, never a failed trace
        chunk = self._compressor.compress(data)
        chunk += self._compressor.flush(zlib.Z_FINISH if final else zlib.Z_SYNC_FLUSH)
        self.seq += 1
        return chunk

    def _dumps_slowly(self, record: dict[str, Any]) -> str:
        try:
            return self._json_dumps(record)
        except (TypeError, ValueError, RecursionError):
            return json.dumps(record, ensure_ascii=False, default=repr, skipkeys=True, separators=(",", ":"))

    def summary_row(self) -> dict[str, Any]:
        """The trace's row in ``trace_index`` (text fields redacted)."""
        return {
            k: self._redact_text(v)
            if isinstance(v, str) and k not in ("trace_id", "start_time", "end_time", "status")
            else v
            for k, v in self.summary.items()
        }

    def finish_root(self, row: Mapping[str, Any]) -> None:
        end = row["end_time"]
        self.summary.update(
            end_time=end.isoformat() if end else None,
            latency=row["latency"],
            name=row["name"],
            status="error" if row["error"] else "success",
        )

    # --- values ------------------------------------------------------------------------------

    def _value(self, value: Any) -> Any:
        found = self._match(value)
        return {"$state": found[0]} if found is not None else self._walk(value)

    def _match(self, value: Any) -> tuple[int, Any] | None:
        """(index, state) of a known state equal to ``value``, newest first."""
        if not isinstance(value, dict):
            return None
        for index, state in reversed(self._states):
            if value == state:
                return index, state
        if self._first is not None and value == self._first[1]:
            return self._first
        return None

    def _remember(self, state: Any) -> None:
        if self._first is None:
            self._first = (self._state_count, state)
        self._states.append((self._state_count, state))
        self._state_count += 1
        del self._states[:-KEEP_STATES]

    def _walk(self, value: Any) -> Any:
        kind = type(value)  # exact types first: the common cases skip the isinstance chain
        if kind is str:
            return value if len(value) < MIN_INTERN else self._string(value)
        if kind is dict:
            return self._walk_dict(value)
        if kind is list:
            walk = self._walk
            return [walk(v) for v in value]
        if value is None or kind is int or kind is bool or kind is float:
            return value
        if isinstance(value, str):
            return self._string(value)
        if isinstance(value, dict):
            return self._walk_dict(value)
        if isinstance(value, LazyMessages):
            return [self._message(m) for m in value]
        if isinstance(value, (list, tuple)):
            return [self._walk(v) for v in value]
        return value

    def _walk_dict(self, value: dict[Any, Any]) -> Any:
        walk = self._walk
        walked = {k: walk(v) for k, v in value.items()}
        if len(value) <= 2 and not MARKER_SET.isdisjoint(value):
            return {"$lit": walked}
        return walked

    def _message(self, message: Any) -> Any:
        """A prompt message: LangChain's serialised form (:func:`message_dict`), walked, the first time; then its
        number."""
        known = self._message_objects.get(id(message))
        if known is not None and known[0] is message and known[1] is getattr(message, "content", None):
            return {"$m": known[2]}
        try:
            # a field's value by its text (a string is its own; three items keep the two kinds apart)
            key = (
                type(message),
                tuple((k, v) if type(v) is str else (k, repr(v), 0) for k, v in vars(message).items()),
            )
        except TypeError:
            key = None
        if key is not None:
            index = self._messages.get(key)
            if index is not None:
                self._message_objects[id(message)] = (message, getattr(message, "content", None), index)
                return {"$m": index}
        walked = self._walk(message_dict(message))
        if key is None:
            return walked
        index = self._messages[key] = len(self._messages)
        self._message_objects[id(message)] = (message, getattr(message, "content", None), index)
        return {"$M": index, "v": walked}

    def _patch(self, new: Any, old: Any) -> Any:
        """``new`` as a patch on ``old`` (a dict or list at the top; an empty patch when they are equal)."""
        patch = self._difference(new, old)
        if patch is not _SAME:
            return patch
        return {"$p": {}} if type(new) is dict else {"$pl": []} if type(new) is list else self._walk(new)

    def _difference(self, new: Any, old: Any) -> Any:
        """What changed from ``old`` to ``new``: _SAME, a patch, or ``new`` walked whole.

        Equal means ``==``: a value of another type is stored whole, but inside lists or dicts that
        compare equal, ``1`` and ``True`` (or ``1.0``) are not told apart.
        """
        if new is old:
            return _SAME
        kind = type(new)
        if kind is not type(old):
            return self._walk(new)
        if kind is dict:
            if new == old:
                return _SAME
            changes = {}
            for k, v in new.items():
                was = old.get(k, _ABSENT)
                if was is v:
                    continue
                if was is _ABSENT:
                    changes[k] = self._walk(v)
                    continue
                kind = type(v)
                if kind is str or kind is int or kind is float or kind is bool:  # a leaf: as the call below decides
                    if kind is not type(was) or v != was:
                        changes[k] = self._walk(v)
                    continue
                change = self._difference(v, was)
                if change is not _SAME:
                    changes[k] = change
            removed = [k for k in old if k not in new]
            return {"$p": changes, "$x": removed} if removed else {"$p": changes}
        if kind is list:
            if len(new) != len(old):
                return self._walk(new)
            if new == old:
                return _SAME
            items = []
            for i, (v, was) in enumerate(zip(new, old)):
                change = self._difference(v, was)
                if change is not _SAME:
                    items.append([i, change])
            return {"$pl": items}
        return _SAME if new == old else self._walk(new)

    def _string(self, text: str) -> Any:
        if len(text) < MIN_INTERN:
            return text
        index = self._strings.get(text)
        if index is not None:
            return {"$s": index}
        if len(text) >= SPLIT_MIN and "\n" in text:
            parts = text.splitlines(keepends=True)
            if len(parts) > 1:
                return {"$j": [self._string(p) for p in parts]}
        index = self._strings[text] = len(self._strings)
        return {"$d": index, "v": text}

    def _count(self, row: Mapping[str, Any]) -> None:
        s = self.summary
        if row["run_type"] == "llm":
            s["model_calls"] += 1
        for key in ("prompt_tokens", "completion_tokens"):
            if row[key] is not None:
                s[key] = (s[key] or 0) + row[key]
        if row["error"] is not None:
            s["errors"] += 1
        turn = row["turn"]
        if turn is not None:
            s["first_turn"] = turn if s["first_turn"] is None else min(s["first_turn"], turn)
            s["last_turn"] = turn if s["last_turn"] is None else max(s["last_turn"], turn)


def _metadata_delta(metadata: Mapping[str, Any], reference: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """What ``metadata`` sets differently from ``reference``, and the keys it lacks (turn and role are stored apart)."""
    delta = {}
    for k, v in metadata.items():
        if k == "turn_index" or k == "role":
            continue
        was = reference.get(k, _ABSENT)
        if was is not v and (type(was) is not type(v) or was != v):
            delta[k] = v
    missing = [k for k in reference if k not in metadata and k != "turn_index" and k != "role"]
    return delta, missing


def _micros(delta: dt.timedelta) -> int:
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
