"""The dialogue graph for LangGraph Studio (``langgraph dev``, see ``langgraph.json``): built with no arguments.

Studio imports ``graph`` from here and runs it on its own persistence. The graph
is the one ``python -m graph.run`` plays (same nodes, same edges); only its
runtime context differs: :class:`EnvContext` names each role's model spec and
builds the models from the environment when a node first asks for them, so a run
started in Studio with no context at all uses the same defaults as the command.

Environment: ``DYMT_USER_MODEL``, ``DYMT_TARGET_MODEL``, ``DYMT_JUDGE_MODEL``
(default ``local:gemma3-270m``), ``DYMT_BASE_URL`` (for ``openai:`` specs) and
``DYMT_SAMPLING_SEED`` (default 0). Studio's context form can override each.
An input needs ``seed`` (``{"id", "category", "statement"}``), ``mode``,
``max_turns``, and empty ``messages`` and ``turns``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any

from langgraph.graph.state import CompiledStateGraph

from graph.config.run_config import ModelChoice, RunConfig
from models.registry import DEFAULT_SPEC
from nodes.builder import build_graph
from nodes.context import Models, RunContext


def _env(name: str, default: str) -> Any:
    return field(default_factory=lambda: os.environ.get(name) or default)


@dataclass(frozen=True)
class EnvContext:
    """A runtime context with a default for everything, read from the environment."""

    user_model: str = _env("DYMT_USER_MODEL", DEFAULT_SPEC)
    target_model: str = _env("DYMT_TARGET_MODEL", DEFAULT_SPEC)
    judge_model: str = _env("DYMT_JUDGE_MODEL", DEFAULT_SPEC)
    base_url: str = _env("DYMT_BASE_URL", "")
    sampling_seed: int = field(default_factory=lambda: int(os.environ.get("DYMT_SAMPLING_SEED") or 0))
    leakage: str = RunContext.leakage
    leakage_attempts: int = RunContext.leakage_attempts
    judge_reasoning: bool = RunContext.judge_reasoning

    @functools.cached_property
    def models(self) -> Models:
        """The three role models, built when a node first asks (the embedded model's weights load once per process).

        Built by the run configuration as ``python -m graph.run`` builds them, with its sampling defaults.
        """
        config = RunConfig(
            models=ModelChoice(user=self.user_model, targets=[self.target_model], judge=self.judge_model),
            base_url=self.base_url or None,
            sampling_seed=int(self.sampling_seed),
        )
        return config.build_models(templates={}).models


class _DefaultContextGraph(CompiledStateGraph):
    """The compiled graph, supplying ``EnvContext()`` when a caller passes no context."""

    def stream(self, input: Any, config: Any = None, *, context: Any = None, **kwargs: Any):  # noqa: A002
        return super().stream(input, config, context=_context(context), **kwargs)  # type: ignore[call-overload]

    def astream(self, input: Any, config: Any = None, *, context: Any = None, **kwargs: Any):  # noqa: A002
        return super().astream(input, config, context=_context(context), **kwargs)  # type: ignore[call-overload]


def _context(context: Any) -> EnvContext:
    if context is None:
        return EnvContext()
    if isinstance(context, dict):
        return EnvContext(**{k: v for k, v in context.items() if v not in (None, "")})
    return context


def make_graph() -> CompiledStateGraph:
    """The dialogue graph with the environment's default context (no checkpointer: Studio brings its own)."""
    compiled = build_graph(context_schema=EnvContext)
    # The same object under a subclass, as CompiledStateGraph.copy() builds its copies.
    return _DefaultContextGraph(**{k: v for k, v in compiled.__dict__.items() if k != "__orig_class__"})


graph = make_graph()
