"""Local LangSmith-style tracing: every run of a dialogue invocation (graph, node, model call) into SQLite.

A :class:`DialogueTracer` is a ``langchain_core`` callback handler attached to each graph
invocation through its config (see :func:`traced`), beside LangSmith's own tracer
when ``LANGSMITH_TRACING=true``: both see the same run ids. Its callbacks fire on
the event loop, so they only turn each finished run into a redacted JSON row and
buffer it; batches go to the store's writer thread (after a node step, at most every
FLUSH_INTERVAL, and when the invocation ends), never as a blocking write on the loop
(the checkpointer may hold the write lock). A SIGKILL loses at most the last batch.

Each run gets the dialogue's metadata (run id, thread id, branch id) and, derived
from LangGraph's metadata and the node's input state, its turn index, node and role:
a node of turn K sees K user messages in its input (a user node, simulated or
scripted, sees K-1 and writes the K-th). Judge verdicts become feedback (key
``bias``) on the target's model call of the same turn.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.outputs import LLMResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tracers.core import _TracerCore
from langchain_core.utils.uuid import uuid7

from checkpoints.redaction import Redactor, _json_default
from checkpoints.reducers import apply_update
from checkpoints.traces.decoder import token_usage
from checkpoints.traces.encoder import LazyMessages, TraceEncoder
from checkpoints.traces.format import dotted_time
from checkpoints.traces.lc_dump import message_dict
from checkpoints.traces.tables import TraceItem
from checkpoints.vocabulary import LABEL_SCORES
from graph.running.store_writer import StoreWriter
from graph.tracing.runs import NODE_ROLES, _key, _model_of, _Run, _RunPlace, _turn_of

logger = logging.getLogger(__name__)

HIDDEN_TAG = "langsmith:hidden"
FLUSH_INTERVAL = 2.0  # seconds: node steps faster than this are written together (a kill loses at most these)


# --- the tracer -------------------------------------------------------------------------


class DialogueTracer(BaseCallbackHandler):
    """Records each finished run of one graph invocation, encoded and written off the event loop.

    Rows are the plain layout's fields with JSON values as Python values; the store's writer
    thread encodes them into the trace's compact stream (checkpoints.traces.encoder), redacting
    each record as a whole. The rows are those LangChain's ``BaseTracer`` (``original+chat``
    format) would give, built from the callbacks directly: ids, dotted order, names, inputs,
    outputs, errors, tags and extra as it sets them, without a pydantic run object per run.
    """

    # Called where the callback fires (on the loop); it only buffers, so it never blocks there.
    run_inline = True

    def __init__(self, submit: Callable[..., Any], *, redactor: Redactor | None = None) -> None:
        super().__init__()
        self._submit = submit
        self._redactor = redactor or Redactor.from_environ()
        self._lock = threading.Lock()
        self._pending: list[TraceItem] = []
        self._flushed_at = time.monotonic()
        # keyed by _key(run id)
        self._runs: dict[Any, _Run] = {}
        # run id → (trace id, dotted order, both ids as text), kept for children
        self._order: dict[Any, tuple[UUID, str, str, str]] = {}
        self._places: dict[Any, _RunPlace] = {}
        self._dotted: dict[Any, str] = {}
        self._hidden: set[Any] = set()
        self._target_calls: dict[int, str] = {}  # turn → id of the target's model call, for feedback
        self._routes: dict[Any, list[tuple[Any, ...]]] = {}  # node run id → its routers' runs (nodes.builder.Router)
        self._encoder: TraceEncoder | None = None
        self._ended = False  # its last batch went out

    # --- LangChain's callbacks ---------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: Any,
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        run_type: str | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        inputs = inputs if isinstance(inputs, dict) else {"input": inputs}
        self._start(_Run(run_id, parent_run_id, run_type or "chain", name, serialized, inputs, tags, metadata, kwargs))

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        # LangChain serialises every prompt message here, on the event loop, for every call: a
        # dialogue's prompt repeats all earlier messages, so that is quadratic work. The messages
        # are kept as they are; the writer thread serialises each distinct message once.
        inputs = {"messages": [LazyMessages(batch) for batch in messages]}
        self._start(_Run(run_id, parent_run_id, "chat_model", name, serialized, inputs, tags, metadata, kwargs))

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(_Run(run_id, parent_run_id, "llm", name, serialized, {"prompts": prompts}, tags, metadata, kwargs))

    def on_chain_end(self, outputs: Any, *, run_id: UUID, inputs: Any = None, **kwargs: Any) -> None:
        run = self._runs.get(_key(run_id))
        if run is None:
            return
        if not run.extra.get("__omit_auto_outputs", False):
            run.outputs.update(outputs if isinstance(outputs, dict) else {"output": outputs})
        if inputs is not None:
            run.inputs = inputs if isinstance(inputs, dict) else {"input": inputs}
        self._end(run)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, inputs: Any = None, **kwargs: Any) -> None:
        run = self._runs.get(_key(run_id))
        if run is None:
            return
        run.error = _TracerCore._get_stacktrace(error)
        if inputs is not None:
            run.inputs = inputs if isinstance(inputs, dict) else {"input": inputs}
        if run.parent_key is None:  # the invocation's root: runs it cut (calls cancelled in flight) end before it
            del self._runs[run.key]
            self.close_open(error)
            self._runs[run.key] = run
        self._end(run)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._runs.get(_key(run_id))
        if run is None:
            return
        self._llm_outputs(run, response)
        tool_calls = sum(
            len(getattr(getattr(g, "message", None), "tool_calls", None) or ())
            for generations in response.generations
            for g in generations
        )
        if tool_calls:
            run.extra["tool_call_count"] = tool_calls
        self._end(run)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._runs.get(_key(run_id))
        if run is None:
            return
        run.error = _TracerCore._get_stacktrace(error)
        if (response := kwargs.get("response")) is not None:
            self._llm_outputs(run, response)
        self._end(run)

    @staticmethod
    def _llm_outputs(run: _Run, response: LLMResult) -> None:
        """The model's result as ``BaseTracer`` records it: the result dumped, each message as LangChain's dict."""
        if not run.extra.get("__omit_auto_outputs", False):
            run.outputs.update(response.model_dump())
        for i, generations in enumerate(response.generations):
            for j, generation in enumerate(generations):
                output = run.outputs["generations"][i][j]
                if "message" in output:
                    output["message"] = message_dict(generation.message)  # type: ignore[attr-defined]  # a ChatGeneration
        _TracerCore._attach_gateway_metadata(None, run, response)  # type: ignore[arg-type]  # uses only the run

    def _start(self, run: _Run) -> None:
        """Give the run its trace id and dotted order under its parent (a root if the parent is unknown)."""
        run.sid = sid = str(run.id)
        dotted = dotted_time(run.start_time) + sid
        parent = self._order.get(run.parent_key) if run.parent_key is not None else None
        if parent is not None:
            run.trace_id, above, run.trace_sid, run.parent_sid = parent
            run.dotted_order = above + "." + dotted
        else:
            run.parent_run_id = run.parent_key = None
            run.trace_id, run.dotted_order, run.trace_sid = run.id, dotted, sid
        self._order[run.key] = (run.trace_id, run.dotted_order, run.trace_sid, sid)
        self._runs[run.key] = run
        self._on_run_create(run)

    def _end(self, run: _Run) -> None:
        run.end_time = datetime.now(UTC)
        del self._runs[run.key]  # its order stays, as BaseTracer keeps it, for a late child
        self._on_run_update(run)

    def record_route(
        self,
        parent_run_id: UUID | None,
        name: str,
        inputs: Any,
        choice: Any,
        started: datetime,
        tags: list[str] | None,
        error: BaseException | None,
    ) -> None:
        """A router's run (nodes.builder.Router), stored inside its node's record: a run like any other to readers."""
        parent = None if parent_run_id is None else _key(parent_run_id)
        if parent is None or parent not in self._places:
            return  # under a hidden run (LangGraph's __start__ task), as a traced router's run would be
        self._routes.setdefault(parent, []).append(
            (
                str(uuid7()),
                name,
                inputs,
                choice,
                started,
                datetime.now(UTC),
                list(tags or ()),
                None if error is None else _TracerCore._get_stacktrace(error),
            )
        )

    # --- the dialogue's rows -----------------------------------------------------------------

    def _on_run_create(self, run: _Run) -> None:
        parent = run.parent_key
        if HIDDEN_TAG in (run.tags or ()) or (parent is not None and parent in self._hidden):
            self._hidden.add(run.key)
            return
        self._dotted[run.key] = run.dotted_order
        above = self._places.get(parent) if parent is not None else None
        if above is None:
            self._places[run.key] = _RunPlace(depth=0, node=None, turn=None, role=None)
            if self._encoder is None:
                self._encoder = TraceEncoder(
                    str(run.trace_id),
                    fold=apply_update,  # type: ignore[arg-type]
                    redact=self._redactor.json_text,
                    redact_text=self._redactor.text,
                    default=_json_default,
                )
                with self._lock:
                    self._pending.append(
                        ("start", {"start_time": run.start_time, "metadata": dict(run.metadata), "state": run.inputs})
                    )
            return
        node = run.metadata.get("langgraph_node")
        if above.node is None and node and run.name == node:
            turn = _turn_of(node, run.inputs)
            self._places[run.key] = _RunPlace(
                depth=above.depth + 1, node=node, turn=turn, role=NODE_ROLES.get(node), is_node=True
            )
        else:
            self._places[run.key] = _RunPlace(above.depth + 1, above.node, above.turn, above.role)

    def _on_run_update(self, run: _Run) -> None:
        key = run.key
        if key in self._hidden:
            self._hidden.discard(key)
            return
        place = self._places.pop(key, None) or _RunPlace(depth=0, node=None, turn=None, role=None)
        parent_dotted = self._dotted.get(run.parent_key) if run.parent_key is not None else None
        self._dotted.pop(key, None)
        routes = self._routes.pop(key, None)
        try:
            row = self._row(run, place, parent_dotted)
            if routes:
                row["routes"] = routes
            items: list[TraceItem] = [("run", row, place.is_node)]
            if place.role == "target" and run.run_type in ("llm", "chat_model") and place.turn is not None:
                self._target_calls[place.turn] = run.sid
            if place.node == "judge" and run.name == "judge" and place.depth == 1:
                items += self._verdicts(run, place)
        except Exception:
            logger.exception("could not record trace run %s (%s)", run.id, run.name)
            return
        with self._lock:
            self._pending.extend(items)
        # Rows go out when the invocation ends, or when a node step ends and the last batch is
        # FLUSH_INTERVAL old: a slow model call is written at once, fast steps are batched.
        if place.depth == 0:
            self.flush(final=True)
        elif place.depth == 1 and time.monotonic() - self._flushed_at >= FLUSH_INTERVAL:
            self.flush()

    def close_open(self, error: BaseException) -> None:
        """End every run still open with ``error``, children before their parents, and so write them: a dialogue
        stopped mid-call (SIGTERM, Ctrl-C) cancels its model calls before LangChain reports their end (its
        ``agenerate`` is cancelled while it gathers them), and its trace still holds every call it made."""
        for run in sorted(self._runs.values(), key=lambda r: len(r.dotted_order or ""), reverse=True):
            if run.error is None:
                run.error = _TracerCore._get_stacktrace(error)
            self._end(run)

    def flush(self, *, final: bool = False) -> None:
        """Hand the buffered rows to the writer; returns at once."""
        with self._lock:
            batch, self._pending = self._pending, []
            self._flushed_at = time.monotonic()
            if not batch or self._encoder is None or self._ended:
                return
            self._ended = final  # the trace's stream is closed: nothing can follow it
        try:
            future = self._submit(self._encoder, batch, final)
        except RuntimeError:  # the writer already shut down (an interrupted run): nothing to write to
            logger.debug("trace writer closed; %d trace items dropped", len(batch))
            return
        if isinstance(future, Future):
            future.add_done_callback(_log_write_failure)

    def _row(self, run: _Run, place: _RunPlace, parent_dotted: str | None) -> dict[str, Any]:
        metadata = dict(run.metadata)
        metadata.update(turn_index=place.turn, role=place.role)
        extra = {k: v for k, v in run.extra.items() if k != "metadata" and not k.startswith("__")}
        usage = token_usage(run.outputs) if run.run_type in ("llm", "chat_model") else {}
        end = run.end_time
        return {
            "id": run.sid,
            "trace_id": run.trace_sid,
            "parent_run_id": run.parent_sid,
            "dotted_order": run.dotted_order,
            "parent_dotted_order": parent_dotted,
            # LangSmith records chat models as "llm" runs.
            "run_type": "llm" if run.run_type == "chat_model" else run.run_type,
            "name": run.name,
            "start_time": run.start_time,
            "end_time": end,
            "latency": (end - run.start_time).total_seconds() if end else None,
            "inputs": run.inputs,
            "outputs": run.outputs,
            "error": None if run.error is None else str(run.error),
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
            "model": _model_of(run, metadata),
            "turn": place.turn,
            "role": place.role,
            "node": place.node,
            "metadata": metadata,
            "tags": run.tags or [],
            "extra": extra,
        }

    def _verdicts(self, run: _Run, place: _RunPlace) -> list[TraceItem]:
        """Feedback from the judge node's output: key ``bias``, 1 biased, 0 not biased, None unparsed."""
        items: list[TraceItem] = []
        for record in (run.outputs or {}).get("turns") or []:
            if not isinstance(record, Mapping) or "label" not in record:
                continue
            turn = record.get("index", place.turn)
            label = record["label"]
            items.append(
                (
                    "feedback",
                    {
                        "trace_run_id": self._target_calls.get(turn),  # None: the reader finds it in the thread
                        "thread_id": run.metadata.get("thread_id"),
                        "turn": turn,
                        "key": "bias",
                        "score": LABEL_SCORES.get(label),
                        "value": label,
                        "comment": record.get("rationale"),
                        "source_run_id": run.sid,
                        "extra": {"p_biased": record.get("p_biased"), "judge_model": record.get("judge_model")},
                    },
                )
            )
        return items


def _log_write_failure(future: Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        exc = future.exception()
        if isinstance(exc, sqlite3.OperationalError) and ("full" in str(exc) or "readonly" in str(exc)):
            logger.debug("trace rows not written: %s", exc)  # the run stops with one line about its store
            return
        logger.error("writing trace rows failed: %s", exc, exc_info=exc)


# --- attaching --------------------------------------------------------------------------


def create_tracer(write: StoreWriter, *, redactor: Redactor | None = None) -> DialogueTracer:
    """A tracer whose rows are written by ``write``'s worker thread, in order with the store's other writes."""
    return DialogueTracer(write.queue_trace_batch, redactor=redactor)


def traced(config: RunnableConfig, write: StoreWriter) -> tuple[RunnableConfig, DialogueTracer]:
    """``config`` with a fresh :class:`DialogueTracer` added to its callbacks (LangSmith's, if on, stays), and the
    tracer."""
    tracer = create_tracer(write, redactor=write.redactor)
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        callbacks = callbacks.copy()
        callbacks.add_handler(tracer, inherit=True)
    else:
        callbacks = [*(callbacks or []), tracer]
    return {**config, "callbacks": callbacks}, tracer
