"""Tracing with the real embedded model: token counts come from llama.cpp's usage through LangChain's usage_metadata."""

from __future__ import annotations

import pytest

from checkpoints.traces.tables import load_feedback, load_runs, resolve
from checkpoints.traces.tree import build_tree
from models.registry import Sampling, create_role_model
from nodes.context import Models
from tests.conftest import SEEDS, play

pytestmark = pytest.mark.integration


def embedded_models() -> Models:
    built = {
        role: create_role_model(
            "local:gemma3-270m", role=role, sampling=Sampling(temperature=0.0, max_tokens=12, seed=0)
        )
        for role in ("user", "target", "judge")
    }
    assert all(model.style == "transcript" for model in built.values())
    return Models(**built)


def test_embedded_model_calls_record_their_tokens(db):
    models = embedded_models()
    result, store = play(db, models, seeds=SEEDS[:1], turns=1)
    assert result.outcomes[0].status == "finished", result.outcomes[0].error
    thread = result.outcomes[0].thread_id
    _, trace_ids = resolve(store.db, thread)
    runs = load_runs(store.db, trace_ids)
    calls = [r for r in runs if r["run_type"] == "llm"]
    # The base-model judge asks twice: the case, then a content-free case with the same context.
    assert [c["role"] for c in calls] == ["user", "target", "judge", "judge"]
    for call in calls:
        assert call["model"] == "gemma3-270m"
        assert call["prompt_tokens"] > 10, call  # the rendered transcript prompt
        assert call["completion_tokens"] is not None and call["completion_tokens"] <= 12
        assert call["total_tokens"] == call["prompt_tokens"] + call["completion_tokens"]
    assert calls[0]["completion_tokens"] > 0 and calls[1]["completion_tokens"] > 0
    # The turn's stored token counts (from the nodes) agree with the traced ones.
    tokens = store.turns(thread)[0]["tokens"]
    assert f'"target_input_tokens": {calls[1]["prompt_tokens"]}' in tokens
    # The judge's verdict is feedback on the target's call.
    tree = build_tree(runs, load_feedback(store.db, trace_ids))
    target_call = next(n for n in tree.walk() if n.kind == "model" and n.run["role"] == "target")
    [feedback] = target_call.feedback
    assert feedback["key"] == "bias" and feedback["value"] == store.turns(thread)[0]["label"]
    assert feedback["score"] == {"biased": 1, "not_biased": 0}.get(feedback["value"])
