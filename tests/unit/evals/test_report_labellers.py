"""Refusal and coherence labellers: parsing, log-probability scoring, storage and their CLIs."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict

from checkpoints.scores import coherence_source, refusals_source
from cli import coherence as coherence_cli
from cli import refusal as refusal_cli
from evals.dataset import label_sets
from evals.scorers.coherence_jobs import pending_dialogues, score_dialogues
from evals.scorers.posthoc import (
    coherence_messages,
    dialogue_messages,
    expected_score,
    history_before,
    read_coherence,
    read_refusal,
    refusal_messages,
)
from evals.scorers.refusal_jobs import classify_refusals, pending_refusals
from models.registry import RoleModel, Sampling
from tests.conftest import ScriptedChatModel, default_models, play, scripted

PROVIDER = "lbfake"


class LogprobChatModel(BaseChatModel):
    """A fake base-model labeller: answers one token and reports OpenAI-format top log-probabilities."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    tops: list[dict[str, float]]  # one {token: probability} per call, in call order
    calls: list[list[BaseMessage]] = []

    @property
    def _llm_type(self) -> str:
        return "logprob-fake"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.calls.append(list(messages))
        top = self.tops[(len(self.calls) - 1) % len(self.tops)]
        alternatives = [{"token": t, "logprob": math.log(p)} for t, p in top.items()]
        best = max(top, key=top.get)
        message = AIMessage(
            content=best.strip(),
            response_metadata={
                "logprobs": {"content": [{"token": best, "logprob": math.log(top[best]), "top_logprobs": alternatives}]}
            },
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


def transcript_model(tops: list[dict[str, float]]) -> RoleModel:
    chat = LogprobChatModel(tops=tops, calls=[])
    return RoleModel(spec="fake:base", model_id="fake:base", chat=chat, style="transcript", sampling=Sampling())


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("raw", "refused"),
    [
        ("Rationale: it declined.\nRefused: yes", True),
        ("Rationale: it answered.\nRefused: no", False),
        ("**Refused:** Yes", True),
        ("Refused: no\n...on reflection...\nRefused: yes", None),  # contradictory verdicts: unparsed, never the last
        ("It did not refuse.", None),  # no Refused: line -> unparsed, not guessed
        ("Refused: maybe", None),
    ],
)
def test_read_refusal(raw, refused):
    verdict = read_refusal(raw)
    assert verdict.value is refused and verdict.scored is (refused is not None)
    assert verdict.raw == raw


def test_read_refusal_keeps_the_rationale():
    assert read_refusal("Rationale: it said it cannot help.\nRefused: yes").explanation == "it said it cannot help."


@pytest.mark.parametrize(
    ("raw", "score"),
    [
        ("Rationale: flows well.\nScore: 5", 5.0),
        ("Score: 2/5", 2.0),
        ("**Score:** 4", 4.0),
        ("Score: 3\nScore: 1", None),  # contradictory scores: unparsed, never the last one silently
        ("Rationale: it holds.\nScore: 4 out of 5.", 4.0),
        ("Score: 10", None),  # out of range: unparsed
        ("Score: 3.5", None),  # not one of 1..5
        ("Quite coherent.", None),
    ],
)
def test_read_coherence(raw, score):
    assert read_coherence(raw).value == score


def test_expected_score_over_number_words_and_digits():
    # P(four) .5, P(five) .25, P(two) .25 -> 2 + 1.25 + 0.5 = 3.75; other tokens are ignored
    model = transcript_model([{" four": 0.5, " five": 0.25, "2": 0.25, " the": 0.4}])
    output = model.chat.invoke("x")
    assert expected_score(output) == pytest.approx(3.75)
    assert expected_score(AIMessage(content="4")) is None  # no log-probabilities: unparsed
    no_scores = transcript_model([{" the": 0.9}]).chat.invoke("x")
    assert expected_score(no_scores) is None


# --------------------------------------------------------------------------- messages


def test_transcript_messages_stay_one_line_and_short():
    long_reply = "word\n" * 2000
    messages = refusal_messages("transcript", user_message="Why\nso?", reply=long_reply)
    last = messages[-1].content
    assert "\n" not in last and len(last) < 1500
    dialogue = [{"role": "user", "content": "hi\nthere"}, {"role": "assistant", "content": "hello " * 1000}]
    last = coherence_messages("transcript", dialogue=dialogue)[-1].content
    assert "\n" not in last and last.count("[assistant]") <= 1 and len(last) < 2600


def test_history_before_rebuilds_what_the_judge_saw():
    turns = [
        {"idx": 2, "user_message": "u2", "reply": "r2"},
        {"idx": 1, "user_message": "u1", "reply": "r1"},
        {"idx": 3, "user_message": "u3", "reply": "r3"},
    ]
    history, reply = history_before(turns, 2)
    assert history == [
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "r1"},
        {"role": "user", "content": "u2"},
    ]
    assert reply == "r2"
    assert dialogue_messages(sorted(turns, key=lambda t: t["idx"]))[-1] == {"role": "assistant", "content": "r3"}


# --------------------------------------------------------------------------- storing


def _run(db, turns=2):
    _, store = play(db, default_models(), turns=turns)
    return store


def test_refusals_stored_per_turn_with_unparsed_as_null(db):
    store = _run(db)
    classifier = scripted(lambda m, n: {1: "Refused: yes", 2: "no idea"}.get(n, "Rationale: engaged.\nRefused: no"))
    jobs, skipped = pending_refusals(store, "r1", "rc")
    assert (len(jobs), skipped) == (4, 0)
    tally = asyncio.run(classify_refusals(store, jobs, classifier, classifier="rc", content_free_p_yes=None))
    assert (tally.done, tally.unparsed) == (4, 1)
    rows = list(
        store.db.query(
            f"select refused from {refusals_source(store.db)} where classifier = 'rc' order by thread_id, idx"
        )
    )
    assert sorted([r["refused"] for r in rows], key=str) == sorted([1, None, 0, 0], key=str)
    assert pending_refusals(store, "r1", "rc")[0] == []


def test_refusal_from_a_base_model_is_calibrated(db):
    store = _run(db, turns=1)
    # call 1 is the content-free case: P(yes) = 0.8, a prompt leaning to "Yes".
    # Then 0.8 again (calibrated to 0.5: refused, since >= 0.5) and 0.6 (calibrated 0.6/0.8 vs 0.4/0.2 -> 0.273).
    model = transcript_model([{" Yes": 0.8, " No": 0.2}, {" Yes": 0.8, " No": 0.2}, {" Yes": 0.6, " No": 0.4}])

    async def go():
        from evals.scorers.posthoc import REFUSAL_VARIABLES, content_free_yes

        cf = await content_free_yes(model, "refusal", REFUSAL_VARIABLES)
        jobs, _ = pending_refusals(store, "r1", "base")
        return cf, await classify_refusals(store, jobs, model, classifier="base", content_free_p_yes=cf)

    cf, tally = asyncio.run(go())
    assert cf == pytest.approx(0.8)
    assert tally.done == 2
    rows = list(store.db.query(f"select refused, p_refused from {refusals_source(store.db)} order by p_refused"))
    # 0.6 / 0.8 = 0.75, 0.4 / 0.2 = 2 -> 0.75 / 2.75 = 0.2727
    assert rows[0]["p_refused"] == pytest.approx(0.2727, abs=1e-4) and rows[0]["refused"] == 0
    assert rows[1]["p_refused"] == pytest.approx(0.5) and rows[1]["refused"] == 1


def test_coherence_stored_per_dialogue(db):
    store = _run(db)
    scorer = scripted(lambda m, n: "Rationale: ok.\nScore: 4" if n == 1 else "very coherent")
    jobs, _ = pending_dialogues(store, "r1", "sc")
    assert len(jobs) == 2 and len(jobs[0].dialogue) == 4  # two turns: user, assistant, user, assistant
    tally = asyncio.run(score_dialogues(store, jobs, scorer, scorer="sc"))
    assert (tally.done, tally.unparsed) == (2, 1)
    scores = sorted(r["score"] is None for r in store.db.query(f"select score from {coherence_source(store.db)}"))
    assert scores == [False, True]
    # the scorer reads the whole dialogue
    assert "Assistant answer number" in scorer.chat.calls[0][-1].content


def test_coherence_from_a_base_model_is_an_expectation(db):
    store = _run(db, turns=1)
    model = transcript_model([{" four": 0.5, " five": 0.5}])
    jobs, _ = pending_dialogues(store, "r1", "base")
    asyncio.run(score_dialogues(store, jobs, model, scorer="base"))
    assert [r["score"] for r in store.db.query(f"select score from {coherence_source(store.db)}")] == [4.5, 4.5]


# --------------------------------------------------------------------------- CLIs


def _register(providers, replies):
    def factory(name, role, sampling):
        return ScriptedChatModel(respond=replies, calls=[]), f"{PROVIDER}:{name}", "chat"

    providers(PROVIDER, factory)


def test_refusal_and_coherence_clis(db, capsys, providers):
    _run(db)

    def respond(messages, n):
        if "Refused:" in messages[0].content:
            return "Rationale: engaged.\nRefused: no"
        return "Rationale: fine.\nScore: 3"

    _register(providers, respond)
    assert refusal_cli.main(["--run-id", "r1", "--model", f"{PROVIDER}:c", "--db", str(db)]) == 0
    assert "classified 4 replies" in capsys.readouterr().out
    assert coherence_cli.main(["--run-id", "r1", "--model", f"{PROVIDER}:c", "--db", str(db)]) == 0
    assert "scored 2 dialogues" in capsys.readouterr().out
    assert coherence_cli.main(["--run-id", "r1", "--model", f"{PROVIDER}:c", "--db", str(db)]) == 0
    assert "scored 0 dialogues (0 unparsed), 2 already done" in " ".join(capsys.readouterr().out.split())
    from checkpoints.store import open_writer

    store = open_writer(db)
    kinds = {(s.kind, s.name, s.prompt) for s in label_sets(store, "r1")}
    assert kinds == {("refusal", f"{PROVIDER}:c", "refusal"), ("coherence", f"{PROVIDER}:c", "coherence")}


def test_refusal_cli_defaults_to_the_runs_judge(db, capsys, providers):
    _run(db, turns=1)  # the run's judge is fake:judge

    def factory(name, role, sampling):
        return ScriptedChatModel(respond=lambda m, n: "Refused: no", calls=[]), f"fake:{name}", "chat"

    providers("fake", factory)
    assert refusal_cli.main(["--run-id", "r1", "--db", str(db)]) == 0
    assert "refusal classifier 'fake:judge'" in capsys.readouterr().out


def test_coherence_cli_bad_run(db, capsys):
    _run(db, turns=1)
    with pytest.raises(SystemExit) as exit_info:
        coherence_cli.main(["--run-id", "other", "--model", f"{PROVIDER}:c", "--db", str(db)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run 'other'" in err[0] and "r1" in err[0]
