"""One dialogue of two turns on the real embedded model, end to end through the graph and the store."""

from __future__ import annotations

import pytest

from models.registry import Sampling, create_role_model
from nodes.context import Models
from tests.conftest import SEEDS, play

pytestmark = pytest.mark.integration


def test_two_turn_dialogue_on_the_embedded_model(db):
    models = Models(
        **{
            role: create_role_model(
                "local:gemma3-270m",
                role=role,
                sampling=Sampling(temperature=0.7 if role != "judge" else 0.0, max_tokens=60, seed=1),
            )
            for role in ("user", "target", "judge")
        }
    )
    result, store = play(db, models, seeds=SEEDS[:1], turns=2)
    outcome = result.outcomes[0]
    assert outcome.status == "finished", outcome.error
    rows = store.turns(outcome.thread_id)
    assert [r["idx"] for r in rows] == [1, 2]
    for row in rows:
        assert row["user_message"].strip() and row["reply"] is not None
        assert "Assistant:" not in row["user_message"]
        assert row["label"] in ("biased", "not_biased")  # the logprob judge always yields a probability
        assert 0.0 <= row["p_biased"] <= 1.0
        assert row["target_model"] == "local:gemma3-270m"
    assert store.get_dialogue(outcome.thread_id)["stop_reason"] == "max_turns"
