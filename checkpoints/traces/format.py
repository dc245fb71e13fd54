"""Compact trace storage, its format: each trace (one graph invocation) is one compressed stream of run records.

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

The writer is :mod:`checkpoints.traces.encoder` (with :mod:`checkpoints.traces.lc_dump`, LangChain's message dump
at a fraction of its cost), the reader :mod:`checkpoints.traces.decoder`; this module holds what both share.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

MIN_INTERN = 40  # characters: shorter strings are cheaper inline than as references
SPLIT_MIN = 160  # characters: longer multi-line strings are interned line by line
KEEP_STATES = 6  # the writer compares a value with this many of the newest states
MARKERS = ("$s", "$d", "$state", "$j", "$lit", "$m", "$M", "$p", "$pl", "$x")
FORMAT = 2  # 1: before prompt messages were shared, model calls patched and metadata referenced
MARKER_SET = frozenset(MARKERS)

# The graph's own reducers: (state, a node's output) -> the state after it.
Fold = Callable[[dict[str, Any], Mapping[str, Any]], dict[str, Any]]


def dotted_time(start: dt.datetime) -> str:
    """The time part of LangSmith's dotted order (``%Y%m%dT%H%M%S%fZ``, formatted without ``strftime``: twice as
    fast)."""
    if start.year < 1000:  # strftime does not pad such years: keep its exact text
        return start.strftime("%Y%m%dT%H%M%S%fZ")
    return "%04d%02d%02dT%02d%02d%02d%06dZ" % (  # noqa: UP031 - the fast path: one %-format, no strftime
        start.year,
        start.month,
        start.day,
        start.hour,
        start.minute,
        start.second,
        start.microsecond,
    )


def text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def branch_of(metadata: Mapping[str, Any]) -> str | None:
    """A branch is a thread of its own (graph.running.forking): its metadata names the thread it forked from."""
    value = metadata.get("branch_id") or (metadata.get("thread_id") if metadata.get("parent_thread_id") else None)
    return text_or_none(value)


def is_patch(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and 0 < len(value) <= 2
        and (("$p" in value and (len(value) == 1 or "$x" in value)) or ("$pl" in value and len(value) == 1))
    )
