"""Compact trace storage: each trace (one graph invocation) is one compressed stream of run records.

A trace is written as it runs, one chunk per tracer batch (``trace_chunks``: trace id,
sequence number, zlib bytes ending in a sync flush, so every prefix of the chunks
decompresses). The decompressed stream is JSON lines; each line is one record:

* ``{"k": "s", ...}`` starts the trace: its format (``fv``), start time, base metadata and input state;
* ``{"k": "r", ...}`` one finished run (graph, node or model call); a node's routers (``rr``:
  LangGraph's conditional edges, see nodes.builder.Router) inside its record;
* ``{"k": "f", ...}`` one feedback item (the judge's verdict on the target's model call).

What makes it small without losing anything a reader needs:

* **States are stored once.** A LangGraph node's inputs are the dialogue state, which
  grows every turn. The writer keeps the states of the invocation (the input state,
  then after each node the state folded with that node's output through the graph's
  own reducers); an inputs or outputs value equal to one of them is stored as
  ``{"$state": n}``. The reader folds the same outputs in the same order, so it
  rebuilds the very same values. A value that differs is stored whole.
* **Long strings are stored once per trace.** A string of ``MIN_INTERN`` characters or
  more is written the first time as ``{"$d": n, "v": text}`` and then as ``{"$s": n}``;
  a long multi-line string is split into lines first (a prompt's history repeats the
  lines of the previous prompt).
* **A prompt message is stored once per trace.** A dialogue's prompt repeats every earlier
  message: the first time a message is written as ``{"$M": n, "v": ...}`` (LangChain's
  serialised form, walked), then as ``{"$m": n}``.
* **A model call is stored as what changed since the last call of its role.** Its ``extra``
  (invocation parameters: only the seed changes) and its outputs (the reply, its ids and
  token counts change; the rest of LangChain's result does not) are patches on that run's:
  ``{"$p": {key: patch or value}, "$x": [removed keys]}`` for a dict, ``{"$pl": [[i, patch
  or value], ...]}`` for a list of the same length.
* **What follows from other fields is not stored:** a run's metadata is stored as its
  difference from a reference run's (``mr``: the last run of the same name and node, else
  its parent; LangGraph's metadata changes by the step and namespace from turn to turn),
  or from the trace's base metadata, times as microseconds from the trace's
  start, the dotted order only when it is not the parent's plus this run's own, tokens,
  status and the thread/run/branch columns are derived from the stored fields.

The zlib stream then compresses field names and the rest. Records are redacted as
whole lines before compression (``redact``). Decoding rebuilds exactly the rows of
the plain layout (``trace_runs``), so every reader is unchanged. Streams of format 1
(before shared messages, patches and reference runs) decode as they always did.
"""

from __future__ import annotations

import datetime as dt
import json
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

MIN_INTERN = 40  # characters: shorter strings are cheaper inline than as references
SPLIT_MIN = 160  # characters: longer multi-line strings are interned line by line
KEEP_STATES = 6  # the writer compares a value with this many of the newest states
_MARKERS = ("$s", "$d", "$state", "$j", "$lit", "$m", "$M", "$p", "$pl", "$x")
FORMAT = 2  # 1: before prompt messages were shared, model calls patched and metadata referenced
_MARKER_SET = frozenset(_MARKERS)
_LEVEL = 3
# Dates and dataclasses go to the encoder's ``default``, as json.dumps sends them (orjson would write its own forms).
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS

Fold = Callable[[dict[str, Any], Mapping[str, Any]], dict[str, Any]]


def dotted_time(start: dt.datetime) -> str:
    """The time part of LangSmith's dotted order (``%Y%m%dT%H%M%S%fZ``, formatted without ``strftime``: twice as fast)."""
    if start.year < 1000:  # strftime does not pad such years: keep its exact text
        return start.strftime("%Y%m%dT%H%M%S%fZ")
    return "%04d%02d%02dT%02d%02d%02d%06dZ" % (
        start.year, start.month, start.day, start.hour, start.minute, start.second, start.microsecond)


class LazyMessages(list):
    """A prompt's messages as the model got them, serialised by the encoder (each distinct message once)."""


class TraceEncoder:
    """Turns one trace's run records into compressed chunks; lives as long as the invocation.

    ``fold(state, update)`` applies a node's output to the dialogue state exactly as the
    graph's reducers do; ``redact(line)`` removes secrets from one JSON line.
    """

    def __init__(self, trace_id: str, *, fold: Fold, redact: Callable[[str], str], redact_text: Callable[[str], str],
                 default: Callable[[Any], Any]) -> None:
        self.trace_id = trace_id
        self._fold = fold
        self._redact = redact
        self._redact_text = redact_text
        self._default = default
        # json.dumps(record, ensure_ascii=False, default=default, skipkeys=True), the encoder built once; records
        # are trees (no cycles), so the check for cycles is skipped (a cycle still fails, as RecursionError).
        # It writes what orjson refuses (a key that is not a string, an int beyond 64 bits, nesting deeper than 254).
        self._json_dumps = json.JSONEncoder(ensure_ascii=False, default=default, skipkeys=True,
                                            check_circular=False, separators=(",", ":")).encode

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
        self._seen: dict[str, tuple[int, Mapping[str, Any], Any, Any]] = {}  # run id → (ordinal, metadata, extra, outputs)
        self._last_of: dict[tuple[Any, Any], str] = {}  # (name, node) → id of the last such run
        self._states: list[tuple[int, Any]] = []  # (index, state), newest last; at most KEEP_STATES
        self._state_count = 0
        self._first: tuple[int, Any] | None = None  # the input state: the root run's inputs at the very end
        self._base_time: dt.datetime | None = None
        self._base_metadata: dict[str, Any] = {}
        self.seq = 0
        self.summary: dict[str, Any] = {
            "trace_id": trace_id, "model_calls": 0, "prompt_tokens": None, "completion_tokens": None, "errors": 0,
            "first_turn": None, "last_turn": None, "status": "unfinished",
        }

    # --- records ---------------------------------------------------------------------------

    def start(self, *, start_time: dt.datetime, metadata: Mapping[str, Any], state: Any) -> dict[str, Any]:
        """The trace's first record: start time, base metadata and (a new dialogue's) input state."""
        self._base_time = start_time
        self._base_metadata = dict(metadata)
        record: dict[str, Any] = {"k": "s", "fv": FORMAT, "t0": start_time.isoformat(), "md": self._walk(self._base_metadata)}
        if isinstance(state, dict):
            record["state"] = self._walk(state)
            self._remember(state)
        self.summary.update(
            start_time=start_time.isoformat(), run_id=_str(metadata.get("run_id")),
            thread_id=_str(metadata.get("thread_id")), branch_id=_branch_of(metadata),
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
        entry = {"id": run_id, "n": name, "t": [_micros(started - base), _micros(ended - base)],
                 "in": {"$state": found[0]} if found is not None else self._walk(inputs)}
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
        data = (self._redact("\n".join(lines)) + "\n").encode("utf-8") if lines else b""
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
        return {k: self._redact_text(v) if isinstance(v, str) and k not in ("trace_id", "start_time", "end_time", "status") else v
                for k, v in self.summary.items()}

    def finish_root(self, row: Mapping[str, Any]) -> None:
        end = row["end_time"]
        self.summary.update(
            end_time=end.isoformat() if end else None, latency=row["latency"], name=row["name"],
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
        if len(value) <= 2 and not _MARKER_SET.isdisjoint(value):
            return {"$lit": walked}
        return walked

    def _message(self, message: Any) -> Any:
        """A prompt message: LangChain's serialised form (:func:`message_dict`), walked, the first time; then its number."""
        known = self._message_objects.get(id(message))
        if known is not None and known[0] is message and known[1] is getattr(message, "content", None):
            return {"$m": known[2]}
        try:
            # a field's value by its text (a string is its own; three items keep the two kinds apart)
            key = (type(message), tuple((k, v) if type(v) is str else (k, repr(v), 0) for k, v in vars(message).items()))
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


_ABSENT = object()
_SAME = object()


class _NotPlain(Exception):
    """A value ``dumpd`` would do more with than copy: an object, a dict with an ``lc`` key, a key not a string."""


def _plain_copy(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        if "lc" in value:
            raise _NotPlain
        copy = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _NotPlain
            leaf = type(v)  # leaves copied here: most values are, and a call each costs more than the copy
            copy[k] = v if leaf is str or leaf is int or v is None or leaf is float or leaf is bool else _plain_copy(v)
        return copy
    if kind is list or kind is tuple:
        return [_plain_copy(v) for v in value]
    raise _NotPlain


class _Plan:
    """What ``Serializable.to_json`` does for one message class, worked out once (see :func:`_plan_of`)."""

    __slots__ = ("id", "fields", "attributes")

    def __init__(self, lc_id: list[str], fields: dict[str, tuple[bool, bool, Any]], attributes: list[type | None]) -> None:
        self.id = lc_id
        # field name → (required, excluded, what its default makes of a falsy value: _NONE, dict, list or None)
        self.fields = fields
        self.attributes = attributes  # each class whose ``super(c, m).lc_attributes`` is a distinct definition


_PLANS: dict[type, _Plan | None] = {}  # message class → its plan, None: dumpd itself


def _plan_of(kind: type) -> _Plan | None:
    """How ``to_json`` serialises a message class, or None where it does more than copy its useful fields.

    ``to_json`` walks the class's MRO (up to ``Serializable``) asking each level for ``lc_secrets`` and
    ``lc_attributes``, and for deprecated class attributes (which make it raise). All of that depends on the
    class only, except the values of ``lc_attributes``: a class with no secrets keeps, per instance, its useful
    fields in ``__dict__`` order and the ``lc_attributes`` of each distinct definition, in MRO order.
    """
    from langchain_core.load.serializable import Serializable
    from langchain_core.messages import BaseMessage

    if not (isinstance(kind, type) and issubclass(kind, BaseMessage)) or not kind.is_lc_serializable():
        return None
    levels: list[type | None] = [None]
    for cls in kind.__mro__:
        if cls is Serializable:
            break
        if "lc_secrets" in vars(cls) or hasattr(cls, "lc_namespace") or hasattr(cls, "lc_serializable"):
            return None
        levels.append(cls)
    else:
        return None
    # The level asking ``super(level, m).lc_attributes`` gets the first definition after it in the MRO;
    # consecutive levels reaching the same definition update the kwargs with the same values again.
    mro = kind.__mro__
    attributes: list[type | None] = []
    seen: set[type] = set()
    for level in levels:
        after = mro if level is None else mro[mro.index(level) + 1:]
        owner = next(c for c in after if "lc_attributes" in vars(c))
        if owner is not Serializable and owner not in seen:
            seen.add(owner)
            attributes.append(level)
    try:
        fields = {name: (field.is_required(), bool(field.exclude), _empty_default(field))
                  for name, field in kind.model_fields.items()}
        return _Plan(list(kind.lc_id()), fields, attributes)
    except Exception:  # noqa: BLE001 - an unusual class: dumpd knows best
        return None


_NONE = object()


def _empty_default(field: Any) -> Any:
    """The falsy value ``_is_field_useful`` drops for ``field`` without comparing: None (_NONE), {} (dict), [] (list)."""
    if field.default_factory is dict or field.default_factory is list:
        return field.default_factory
    if field.default_factory is None and field.default is None:
        return _NONE
    return None


def message_dict(message: Any) -> Any:
    """``langchain_core.load.dumpd(message)``, at a fifth of its cost for a message whose fields are plain JSON.

    ``dumpd`` is ``to_json()`` with each constructor argument copied, dicts with an ``lc`` key escaped and
    objects inside serialised; for a message with none of those (nearly every one) this builds the same
    dict from the class's plan (:func:`_plan_of`) and the instance's fields. Anything else goes through
    ``dumpd`` itself (tests/unit/checkpoints/test_trace_bytes.py compares the two).
    """
    kind = type(message)
    plan = _PLANS.get(kind, _ABSENT)
    if plan is _ABSENT:
        plan = _PLANS[kind] = _plan_of(kind)
    if plan is not None and not message.__pydantic_extra__:
        try:
            return {"lc": 1, "type": "constructor", "id": list(plan.id), "kwargs": _kwargs(message, plan)}
        except _NotPlain:
            pass
    from langchain_core.load import dumpd

    return dumpd(message)


def _kwargs(message: Any, plan: _Plan) -> dict[str, Any]:
    """``to_json()``'s constructor arguments of ``message``, copied as plain JSON (else _NotPlain)."""
    from langchain_core.load.serializable import _is_field_useful

    fields = plan.fields
    kwargs: dict[str, Any] = {}
    for name, value in message.__dict__.items():
        field = fields.get(name)
        if field is None or name[0] == "_":  # not a field: never a constructor argument
            continue
        required, excluded, empty = field
        if not required:
            try:
                truthy = bool(value)
            except Exception:  # noqa: BLE001 - as _is_field_useful treats it
                truthy = False
            if not truthy:
                # _is_field_useful's common answers without its lookups, else its own answer
                if value is None and empty is _NONE or type(value) is empty:
                    continue
                if not _is_field_useful(message, name, value):
                    continue
        if excluded:
            continue
        kwargs[name] = value
    for level in plan.attributes:
        kwargs.update((message if level is None else super(level, message)).lc_attributes)
    return {k: _plain_copy(v) for k, v in kwargs.items()}


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


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _branch_of(metadata: Mapping[str, Any]) -> str | None:
    """A branch is a thread of its own (graph.running.forking): its metadata names the thread it forked from."""
    value = metadata.get("branch_id") or (metadata.get("thread_id") if metadata.get("parent_thread_id") else None)
    return _str(value)


# --- decoding ---------------------------------------------------------------------------------


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
                own[row["id"]] = (None, record["do"]) if record.get("do") else (row["parent_run_id"], row["dotted_order"])
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
        base = self._base_time or dt.datetime.now(dt.timezone.utc)
        start_us, end_us = record["t"]
        start = base + dt.timedelta(microseconds=start_us)
        end = None if end_us is None else base + dt.timedelta(microseconds=end_us)
        dotted = dotted_time(start) + run_id  # this run's own part: joined to its parent's in decode()
        reference = self._seen[record["mr"]] if 0 <= record.get("mr", -1) < len(self._seen) else None
        missing = set(record.get("mx") or ())
        metadata = {k: v for k, v in (self._base_metadata if reference is None else reference[0]).items() if k not in missing}
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
        elif reference is not None and self._format >= 2 and _is_patch(record.get("out")):
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
            "run_id": _str(metadata.get("run_id")),
            "thread_id": _str(metadata.get("thread_id")),
            "checkpoint_id": _str(metadata.get("checkpoint_id")) if parent is None else None,
            "checkpoint_ns": _str(metadata.get("langgraph_checkpoint_ns")),
            "branch_id": _branch_of(metadata),
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
        base = self._base_time or dt.datetime.now(dt.timezone.utc)
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
            "prompt_tokens": None, "completion_tokens": None, "total_tokens": None, "model": None,
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
        if self._format >= 2 and _is_patch(value):
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


def _is_patch(value: Any) -> bool:
    return (isinstance(value, dict) and 0 < len(value) <= 2
            and (("$p" in value and (len(value) == 1 or "$x" in value)) or ("$pl" in value and len(value) == 1)))


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
        for ours, theirs in (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens"), ("total_tokens", "total_tokens")):
            if isinstance(usage.get(theirs), int):
                totals[ours] = usage[theirs]
    if "total_tokens" not in totals and ("input_tokens" in totals or "output_tokens" in totals):
        totals["total_tokens"] = totals.get("input_tokens", 0) + totals.get("output_tokens", 0)
    return totals
