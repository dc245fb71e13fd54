"""Graph logic with scripted fake models: what each role sees, turn counts, failure and resume."""

from __future__ import annotations

import re

import pytest
from langchain_core.messages import BaseMessage

from tests.conftest import SEEDS, default_models, play, scripted
from tests.support.backends import Db


@pytest.fixture
def db(backend_db: Db) -> Db:
    """Every test here runs on both backends: a SQLite file, then a PostgreSQL database."""
    return backend_db


def _text(messages: list[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages)


def test_target_never_receives_the_seed(db):
    models = default_models(
        # The simulator echoes nothing of the seed, but we check every target call anyway.
        user=scripted(lambda m, n: f"Tell me more about leadership, part {n}.", spec="fake:user"),
    )
    play(db, models, turns=3)
    target_calls = models.target.chat.calls
    assert len(target_calls) == 6
    for call in target_calls:
        text = _text(call).lower()
        for seed in SEEDS:
            assert seed.statement.lower() not in text
            assert seed.id not in text
    # ...while the user simulator does get it.
    assert any(SEEDS[0].statement in _text(c) for c in models.user.chat.calls)


def test_judge_sees_no_earlier_label(db):
    def judge_reply(messages, n):
        return f"Rationale: marker-{n} reasons.\nLabel: {'biased' if n % 2 else 'not biased'}"

    models = default_models(judge=scripted(judge_reply, spec="fake:judge"))
    play(db, models, seeds=SEEDS[:1], turns=4)
    calls = models.judge.chat.calls
    assert len(calls) == 4
    rubric_labels = len(re.findall(r"Label:", _text(calls[0])))
    for k, call in enumerate(calls, start=1):
        text = _text(call)
        for earlier in range(1, k):
            assert f"marker-{earlier}" not in text
        assert len(re.findall(r"Label:", text)) == rubric_labels
        # It does see the reply under review and the seed statement.
        assert f"Assistant answer number {k}." in text
        assert SEEDS[0].statement in text


def test_each_dialogue_has_exactly_its_turns(db):
    models = default_models()
    result, store = play(db, models, turns=5)
    assert [o.status for o in result.outcomes] == ["finished", "finished"]
    for thread in (o.thread_id for o in result.outcomes):
        rows = store.turns(thread)
        assert [r["idx"] for r in rows] == [1, 2, 3, 4, 5]
        assert all(r["label"] == "not_biased" for r in rows)
        assert store.get_dialogue(thread)["stop_reason"] == "max_turns"
    assert len(models.user.chat.calls) == len(models.target.chat.calls) == len(models.judge.chat.calls) == 10


def test_target_sees_the_conversation_in_order(db):
    models = default_models()
    play(db, models, seeds=SEEDS[:1], turns=3)
    third = models.target.chat.calls[2]
    roles = [m.type for m in third]
    assert roles == ["system", "human", "ai", "human", "ai", "human"]
    assert third[-1].content == "User question number 3?"


def test_failure_mid_dialogue_then_resume_repeats_no_turn(db):
    state = {"fail": True}

    def flaky_target(messages, n):
        if state["fail"] and n == 3:
            raise ConnectionError("provider went away")
        return f"Answer {n}."

    models = default_models(target=scripted(flaky_target, spec="fake:target"))
    result, store = play(db, models, seeds=SEEDS[:1], turns=5)
    thread = result.outcomes[0].thread_id
    assert result.outcomes[0].status == "failed"
    assert "provider went away" in result.outcomes[0].error
    dialogue = store.get_dialogue(thread)
    assert dialogue["status"] == "failed" and dialogue["stop_reason"] == "error"
    assert [r["idx"] for r in store.turns(thread)] == [1, 2]
    user_messages_before = [r["user_message"] for r in store.turns(thread)]
    assert len(models.user.chat.calls) == 3  # turn 3's user message was written before the target failed
    assert (
        len(models.judge.chat.calls) == 2
    )  # the judge, reached by a plain edge, returns at once after a failed target

    state["fail"] = False
    result, store = play(db, models, seeds=SEEDS[:1], turns=5)
    assert result.outcomes[0].status == "finished"
    rows = store.turns(thread)
    assert [r["idx"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["user_message"] for r in rows[:2]] == user_messages_before
    # Turn 3's user message is reused from its checkpoint, not simulated again: 5 user calls in all.
    assert len(models.user.chat.calls) == 5
    assert rows[2]["user_message"] == "User question number 3?"
    assert len(models.judge.chat.calls) == 5


def test_rerun_of_finished_run_calls_no_model(db):
    models = default_models()
    play(db, models, turns=2)
    calls = [len(getattr(models, r).chat.calls) for r in ("user", "target", "judge")]
    result, _ = play(db, models, turns=2)
    assert [o.status for o in result.outcomes] == ["skipped", "skipped"]
    assert [len(getattr(models, r).chat.calls) for r in ("user", "target", "judge")] == calls


def test_unparseable_judge_output_is_unparsed_and_kept(db):
    models = default_models(judge=scripted(lambda m, n: "I would rather not say.", spec="fake:judge"))
    result, store = play(db, models, seeds=SEEDS[:1], turns=2)
    rows = store.turns(result.outcomes[0].thread_id)
    assert [r["label"] for r in rows] == ["unparsed", "unparsed"]
    assert rows[0]["judge_raw"] == "I would rather not say."


def test_assessment_mode_records_utterance_type(db):
    models = default_models(
        user=scripted(lambda m, n: "Type: clarification\nQuery: What do you mean by that?", spec="fake:user")
    )
    result, store = play(db, models, seeds=SEEDS[:1], turns=2, mode="assessment")
    rows = store.turns(result.outcomes[0].thread_id)
    assert [r["utterance_type"] for r in rows] == ["clarification", "clarification"]
    assert rows[0]["user_message"] == "What do you mean by that?"
    assert "safety audit" in _text(models.user.chat.calls[0])


def test_termination_and_the_routers_run_on_the_event_loop_not_in_worker_threads(db, monkeypatch):
    import threading

    import nodes.builder as builder
    from nodes import termination as term

    threads: set[str] = set()

    def spy(fn):
        def wrapped(state):
            threads.add(threading.current_thread().name)
            return fn(state)

        wrapped.__name__ = fn.__name__
        return wrapped

    for name in ("termination", "route_user", "route_after_termination"):
        monkeypatch.setattr(builder, name, spy(getattr(term, name)))
    result, store = play(db, default_models(), seeds=SEEDS[:1], turns=2)
    assert [o.status for o in result.outcomes] == ["finished"]
    assert [r["idx"] for r in store.turns(result.outcomes[0].thread_id)] == [1, 2]
    assert threads == {threading.main_thread().name}
