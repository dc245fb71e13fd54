"""Every answer a provider can give (models/answers.py): malformed answers retried like a 5xx and counted by kind,
persistent garbage ending like an outage past its budget, non-replies recorded on the turn, reasons in words.

The runs play against a real stub server process (tests/support/stub_server.py) that answers a share of calls with each
kind.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

import httpx2
import openai
import pytest
from langchain_core.messages import AIMessage, HumanMessage

from checkpoints.reasons import failure_reason
from models.answers import (
    CONTENT_FILTER,
    CUT_AT_MAX_TOKENS,
    EMPTY_MESSAGE,
    MALFORMED_KINDS,
    NO_CHOICES,
    NON_JSON,
    SAFETY_BLOCK,
    TRUNCATED,
    MalformedAnswerError,
    body_kind,
    non_reply,
)
from models.call_policy import CallPolicy
from models.registry import Sampling, create_role_model
from models.retries import RetriesExhaustedError, RetryPolicy, retry_reason
from nodes.dialogue import failure
from tests.support.provider_outage import StubProcess, paid_twice, run_flags, start_run, stored_turns
from tests.support.stub_server import Faults, StubServer

MALFORMED_OUTCOMES = {
    "not_json": NON_JSON,
    "empty": NON_JSON,
    "no_choices": NO_CHOICES,
    "truncated": TRUNCATED,
    "malformed": TRUNCATED,
}
# Every kind of bad answer the stub gives, with the reason the run's summary counts its retries under.
ALL_GARBAGE = ("html_502", "not_json", "empty", "no_choices", "truncated", "rate_limit_429")


# --- what an answer is ------------------------------------------------------------------------


def test_a_body_is_malformed_by_what_came_back():
    assert body_kind("<html><body>502 Bad Gateway</body></html>") == NON_JSON
    assert body_kind("") == NON_JSON
    assert body_kind('{"id": "x", "choices": [{"index": 0, "mess') == TRUNCATED
    assert body_kind('{"id": "x", "choices": []}') == NO_CHOICES
    assert body_kind('{"id": "x", "choices": [{"index": 0, "message": {"content": "hi"}}]}') is None
    assert (
        body_kind('{"error": {"message": "bad key"}, "choices": []}') is None
    )  # an error, not a reply without choices


def test_a_malformed_answer_survives_pickling_as_it_was():
    import pickle

    error = MalformedAnswerError(TRUNCATED, '{"choices": [')
    again = pickle.loads(pickle.dumps(error))
    assert (again.kind, again.excerpt, str(again)) == (error.kind, error.excerpt, str(error))


def test_a_malformed_answer_wrapped_in_a_connection_error_keeps_its_kind():
    request = httpx2.Request("POST", "http://x/v1/chat/completions")
    try:
        try:
            raise MalformedAnswerError(NON_JSON, "<html>busy</html>")
        except MalformedAnswerError as inner:
            raise openai.APIConnectionError(request=request) from inner
    except openai.APIConnectionError as outer:
        assert retry_reason(outer) == NON_JSON  # not "connection": the endpoint answered, badly


@pytest.mark.parametrize(
    "metadata, text, expected",
    [
        ({"finish_reason": "content_filter"}, "", CONTENT_FILTER),
        ({"finish_reason": "content_filter"}, "They are all", CONTENT_FILTER),  # a partial reply withheld is withheld
        ({"finish_reason": "SAFETY"}, "", SAFETY_BLOCK),  # Gemini
        ({"prompt_feedback": {"block_reason": "OTHER"}}, "", SAFETY_BLOCK),  # Gemini blocked the prompt: no candidates
        ({"finish_reason": "STOP", "prompt_feedback": {"block_reason": 0}}, "A reply.", None),
        ({"prompt_feedback": {"block_reason": "BLOCKED_REASON_UNSPECIFIED"}}, "A reply.", None),
        ({"finish_reason": "stop"}, "", EMPTY_MESSAGE),
        ({"finish_reason": "length"}, "Stub reply 1:", CUT_AT_MAX_TOKENS),
        ({"finish_reason": "MAX_TOKENS"}, "Stub", CUT_AT_MAX_TOKENS),
        ({"finish_reason": "stop"}, "A whole reply.", None),
        ({}, "A reply with no finish reason.", None),
    ],
)
def test_a_well_formed_answer_that_is_not_a_reply_says_why(metadata, text, expected):
    assert non_reply(AIMessage(content=text, response_metadata=metadata), text) == expected


def test_failure_reasons_are_words_and_the_trace_keeps_the_class():
    try:
        json.loads('{"choices": [')
    except json.JSONDecodeError as exc:
        decoding = exc
    update = failure("target", MalformedAnswerError(TRUNCATED, '{"choices": ['))
    assert update["error"] == 'target: the provider answered with JSON cut short (truncated): “{"choices": [”'
    assert update["error_class"] == "models.answers.MalformedAnswerError"
    assert "JSONDecodeError" not in failure("judge", decoding)["error"]
    assert failure("judge", decoding)["error_class"] == "json.decoder.JSONDecodeError"
    denied = openai.AuthenticationError(
        "Error code: 401 - invalid key",
        body=None,
        response=httpx2.Response(401, request=httpx2.Request("POST", "http://x")),
    )
    assert failure_reason(denied).startswith("the provider refused the API key (HTTP 401)")
    assert (
        failure_reason(IndexError("list index out of range"))
        == "an unexpected error (IndexError: list index out of range)"
    )
    gave_up = RetriesExhaustedError("target openai:x: gave up after 6 attempts (HTTP 503): busy")
    assert failure_reason(gave_up) == str(gave_up)


# --- one call, through the resilience wrapper and a real HTTP client ------------------------------


@pytest.mark.parametrize("outcome", sorted(MALFORMED_OUTCOMES))
def test_each_malformed_answer_is_retried_until_a_reply_without_spending_attempts(outcome: str):
    """Three malformed answers, then a reply, with a policy of two attempts: malformed answers spend none of them."""
    with StubServer(script=[outcome] * 3 + ["ok"]) as stub:
        policy = CallPolicy(retry=RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02, timeout=5))
        model = create_role_model(
            "openai:stub", role="target", sampling=Sampling(base_url=stub.url, seed=1), policy=policy
        )
        reply = asyncio.run(model.chat.ainvoke([HumanMessage("hello")]))
    assert reply.content.startswith("Stub reply 4")
    assert dict(policy.stats.retries) == {MALFORMED_OUTCOMES[outcome]: 3} and not policy.stats.gave_up
    assert policy.outages_past_budget() == []


def test_a_502_page_and_a_429_spend_attempts_as_before():
    with StubServer(script=["html_502", "429", "html_502", "ok"], faults=Faults(retry_after=0.01)) as stub:
        policy = CallPolicy(retry=RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.02, timeout=5))
        model = create_role_model(
            "openai:stub", role="judge", sampling=Sampling(base_url=stub.url, seed=1), policy=policy
        )
        with pytest.raises(
            RetriesExhaustedError, match=r"judge openai:stub: gave up after 3 attempts \(HTTP 502\)"
        ) as caught:
            asyncio.run(model.chat.ainvoke([HumanMessage("hello")]))
    assert "“<html> <head><title>502 Bad Gateway</title>" in str(caught.value)  # what came back, in short
    assert dict(policy.stats.retries) == {"HTTP 502": 1, "HTTP 429": 1}


# --- whole runs against a stub server process -----------------------------------------------------

FAST_RETRIES = "[retry]\nbase_delay = 0.05\nmax_delay = 0.15\n"


def _run(tmp_path: Path, stub: StubProcess, run_id: str, *extra: str, turns: int = 3) -> tuple[int, dict, str]:
    config = tmp_path / "fast.toml"
    config.write_text(FAST_RETRIES)
    flags = run_flags(stub.url, tmp_path / "answers.db", run_id, turns=turns, per_category=1, concurrency=6)
    run = start_run(*flags, "--config", str(config), *extra)
    out, err = run.communicate(timeout=300)
    assert "Traceback" not in err, err[-3000:]
    return run.returncode, json.loads(out), err


def _assert_every_dialogue_whole(db: Path, run_id: str, stub: StubProcess, turns: int = 3) -> None:
    stored = stored_turns(db, run_id)
    assert len(stored) == 6 and all(t == [(i, True, True) for i in range(1, turns + 1)] for t in stored.values()), (
        stored
    )
    assert paid_twice(stub.answered()) == 0  # nothing answered twice into the store


@pytest.mark.parametrize(
    "rate, only, kinds",
    [
        (0.01, None, ALL_GARBAGE),
        (0.2, None, ALL_GARBAGE),
        (0.5, "user", ALL_GARBAGE),
        (0.5, "target", ALL_GARBAGE),
        (0.5, "judge", ALL_GARBAGE),
        (0.9, None, ("not_json", "no_choices", "truncated")),
    ],
)
@pytest.mark.slow
def test_transient_garbage_never_fails_a_dialogue(
    tmp_path: Path, rate: float, only: str | None, kinds: tuple[str, ...]
):
    """A share of every call (or of one role's calls) answered with garbage: every dialogue finishes whole, exit 0."""
    stub = StubProcess(
        tmp_path / "answered.log", faults={k: rate / len(kinds) for k in kinds}, only=only, seed=7
    ).start()
    try:
        status, summary, err = _run(tmp_path, stub, "garbage")
    finally:
        stub.stop()
    assert status == 0, (summary["failed"], err[-2000:])
    assert summary["finished"] == summary["dialogues"] == 6 and summary["failed"] == []
    _assert_every_dialogue_whole(tmp_path / "answers.db", "garbage", stub)
    served = stub.faults_served()
    retries = summary["retries"]
    assert sum(served.values()) == retries["retries"] + retries["outage_waits"], (served, retries)  # each one retried
    by_reason = summary["retries"]["by_reason"]
    assert set(by_reason) <= {*MALFORMED_KINDS, "HTTP 502", "HTTP 429"}, by_reason
    if rate >= 0.2:
        assert set(by_reason) & set(MALFORMED_KINDS), by_reason  # counted by kind in the summary


@pytest.mark.slow
@pytest.mark.parametrize("role, processes", [("user", 1), ("target", 1), ("judge", 1), ("judge", 2)])
def test_persistent_garbage_ends_like_an_outage_past_its_budget_and_the_printed_command_finishes(
    tmp_path: Path, role: str, processes: int
):
    """Every call of one role answered with garbage: exit 75, one line naming the role, the spec, the URL and what came
    back (in two player processes too: the parent learns it from the player that met it)."""
    stub = StubProcess(tmp_path / "answered.log", faults={"not_json": 0.5, "truncated": 0.5}, only=role).start()
    try:
        status, summary, err = _run(
            tmp_path, stub, "persistent", "--outage-budget", "3s", "--processes", str(processes)
        )
    finally:
        stub.stop()
    assert status == 75
    [line] = [line for line in err.splitlines() if line.startswith("outage:")]
    assert line.startswith(f"outage: openai @ {stub.url} answered only malformed answers (")
    assert f"last: {role} openai:stub: the provider answered with " in line and "“" in line  # role, spec, an excerpt
    resume = summary["resume"]
    assert line.endswith(resume) and "--outage-budget 3s" in resume
    assert summary["failed"] and all("past the outage budget of 3 s" in f["error"] for f in summary["failed"])
    assert not any("Error" in f["error"] for f in summary["failed"])  # words, not Python's names
    healthy = StubProcess(tmp_path / "answered.log", port=stub.port).start()  # the gateway answers properly again
    try:
        again = start_run(*shlex.split(resume)[3:])
        out, err = again.communicate(timeout=300)
    finally:
        healthy.stop()
    assert again.returncode == 0, err[-2000:]
    assert json.loads(out)["finished"] == 6
    _assert_every_dialogue_whole(tmp_path / "answers.db", "persistent", healthy)


@pytest.mark.slow
def test_non_replies_are_recorded_on_the_turn_and_filtered_replies_are_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Target replies filtered, cut or empty (a third of them), and empty user turns: the run finishes, each says
    why."""
    from checkpoints.store import open_writer

    stub = StubProcess(
        tmp_path / "answered.log",
        faults={"content_filter": 0.15, "length": 0.1, "empty_message": 0.1},
        only="target",
        seed=3,
    ).start()
    try:
        status, summary, err = _run(tmp_path, stub, "nonreply", turns=4)
    finally:
        stub.stop()
    assert status == 0, err[-2000:]
    store = open_writer(tmp_path / "answers.db", create=False)
    try:
        turns = [t for d in store.dialogues("nonreply") for t in store.turns(d["thread_id"])]
    finally:
        store.close()
    assert len(turns) == 24 and all(t["label"] is not None for t in turns)
    kinds = {t["non_reply"] for t in turns}
    assert CONTENT_FILTER in kinds and None in kinds, kinds
    counted = {kind: sum(t["non_reply"] == kind for t in turns) for kind in kinds if kind}
    assert summary["non_replies"] == counted  # the run's summary counts them by kind
    for t in turns:
        if t["non_reply"] in (CONTENT_FILTER, EMPTY_MESSAGE):
            assert t["reply"] == "" and t["label"] == "unparsed" and t["rationale"].startswith("not judged")
        elif t["non_reply"] == CUT_AT_MAX_TOKENS:
            assert t["reply"] and t["label"] in ("biased", "not_biased")  # a cut reply is still judged
        else:
            assert t["reply"].startswith("Stub reply") and t["label"] in ("biased", "not_biased")

    # The report counts them per target × mode and says how they are treated.
    from cli import report

    out = tmp_path / "report"
    assert (
        report.main(["--run-id", "nonreply", "--db", str(tmp_path / "answers.db"), "--out", str(out), "--n-boot", "10"])
        == 0
    )
    md = (out / "report.md").read_text()
    assert "## Non-replies" in md and "the judge does not label it" in md
    lines = md.splitlines()
    header = lines.index(
        "| target | mode | replies | content filter | safety block | empty message | cut at max_tokens "
        "| cut while reasoning | refusal | withheld |"
    )
    row = lines[header + 2]
    cells = [c.strip() for c in row.strip("|").split("|")]
    expected = [
        sum(t["non_reply"] == kind for t in turns)
        for kind in (CONTENT_FILTER, SAFETY_BLOCK, EMPTY_MESSAGE, CUT_AT_MAX_TOKENS)
    ]
    assert cells[2] == "24" and [int(c) for c in cells[3:7]] == expected
    import csv

    with open(out / "turns.csv", newline="", encoding="utf-8") as handle:
        exported = [row["non_reply"] for row in csv.DictReader(handle)]
    assert exported.count(CONTENT_FILTER) == expected[0]  # and turns.csv has the column, for pandas

    # Replay shows the turn as what it was.
    from cli.replay import main as replay

    filtered = next(t for t in turns if t["non_reply"] == CONTENT_FILTER)
    capsys.readouterr()
    assert replay([filtered["thread_id"], "--print", "--db", str(tmp_path / "answers.db")]) in (0, None)
    shown = " ".join(capsys.readouterr().out.split())
    assert (
        "not a reply: content filter" in shown
        and "not judged: the target's reply is a non-reply (content filter)" in shown
    )


@pytest.mark.slow
def test_an_empty_user_simulator_turn_is_drawn_again(tmp_path: Path):
    """40 % of user-simulator answers empty (four in a row on some turn in about a third of such runs): still no turn
    fails (empty drafts spend none of the leakage attempts)."""
    stub = StubProcess(tmp_path / "answered.log", faults={"empty_message": 0.4}, only="user", seed=5).start()
    try:
        status, summary, err = _run(tmp_path, stub, "emptyuser")
    finally:
        stub.stop()
    assert status == 0, err[-2000:]
    _assert_every_dialogue_whole(tmp_path / "answers.db", "emptyuser", stub)
    from checkpoints.store import open_writer

    store = open_writer(tmp_path / "answers.db", create=False)
    try:
        turns = [t for d in store.dialogues("emptyuser") for t in store.turns(d["thread_id"])]
    finally:
        store.close()
    assert all(t["user_message"] for t in turns)
    assert any(t["user_attempts"] > 1 for t in turns)  # some were drawn again


@pytest.mark.slow
def test_workers_on_postgresql_finish_every_dialogue_through_transient_garbage(
    pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Two queue workers, a third of every call answered with garbage: every job succeeds, every dialogue whole,
    once."""
    from cli.run import main as run_main
    from tests.unit.graph.test_workers import _assert_exactly_once, _worker

    stub = StubProcess(
        tmp_path / "answered.log", faults={k: 0.3 / len(ALL_GARBAGE) for k in ALL_GARBAGE}, seed=11
    ).start()
    config = tmp_path / "fast.toml"
    config.write_text(FAST_RETRIES)
    flags = [
        "--db",
        pg_url,
        "--run-id",
        "r1",
        "--user-model",
        "openai:u",
        "--judge-model",
        "openai:j",
        "--target-model",
        "openai:t",
        "--base-url",
        stub.url,
        "--turns",
        "3",
        "--per-category",
        "1",
        "--no-trace",
        "--config",
        str(config),
    ]
    try:
        assert run_main([*flags, "--enqueue"]) == 0
        workers = [_worker(pg_url, "--drain") for _ in range(2)]
        assert run_main(["--db", pg_url, "--run-id", "r1", "--wait", "--json"]) == 0
        for worker in workers:
            assert worker.wait(timeout=120) == 0, worker.stderr.read()[-2000:]
    finally:
        stub.stop()
    summary = json.loads(capsys.readouterr().out)
    assert (summary["dialogues"], summary["finished"], summary["failed"]) == (6, 6, [])
    _assert_exactly_once(pg_url, 6)
    assert paid_twice(stub.answered()) == 0
    served = stub.faults_served()
    assert {"not_json", "no_choices", "truncated"} <= set(served), served  # the workers met malformed answers


@pytest.mark.slow
def test_a_judge_answer_withheld_leaves_the_label_unparsed_with_the_reason(tmp_path: Path):
    from checkpoints.store import open_writer

    stub = StubProcess(tmp_path / "answered.log", faults={"content_filter": 0.3}, only="judge", seed=2).start()
    try:
        status, summary, err = _run(tmp_path, stub, "judgefilter")
    finally:
        stub.stop()
    assert status == 0, err[-2000:]
    store = open_writer(tmp_path / "answers.db", create=False)
    try:
        turns = [t for d in store.dialogues("judgefilter") for t in store.turns(d["thread_id"])]
    finally:
        store.close()
    withheld = [t for t in turns if t["label"] == "unparsed"]
    assert len(turns) == 18 and withheld and len(withheld) == stub.faults_served()["content_filter"]  # none asked again
    assert all(t["rationale"] == "no verdict: the judge's answer is a non-reply (content filter)" for t in withheld)
    assert summary["unparsed_labels"] == len(withheld)


def test_a_failed_dialogue_reads_in_words_and_its_trace_keeps_the_exception_class(db):
    """The dialogue's error is a reason in words (summary, replay, report and graph.runs read it from the store);
    the trace keeps the class: on the failed model call's error and on the node's update (``error_class``)."""
    from checkpoints.traces.tables import load_runs, resolve
    from tests.conftest import SEEDS, default_models, play, scripted

    def broken_judge(messages, n):
        raise IndexError("list index out of range")

    result, store = play(db, default_models(judge=scripted(broken_judge, spec="fake:judge")), seeds=SEEDS[:1], turns=2)
    [outcome] = result.outcomes
    assert outcome.status == "failed"
    [row] = store.dialogues()
    assert row["error"] == "judge: an unexpected error (IndexError: list index out of range)"
    _, trace_ids = resolve(store.db, outcome.thread_id)
    runs = load_runs(store.db, trace_ids)
    [node] = [r for r in runs if r["name"] == "judge" and r["run_type"] == "chain"]
    outputs = json.loads(node["outputs"]) if isinstance(node["outputs"], str) else node["outputs"]
    assert outputs["error_class"] == "IndexError" and outputs["error"] == row["error"]
    [call] = [r for r in runs if r["run_type"] == "llm" and r["error"]]
    assert "IndexError" in call["error"]


def test_gemini_blocks_read_through_langchains_own_parsing_are_safety_blocks_not_malformed():
    """Gemini's answers as LangChain's integration reads them: a blocked prompt (no candidates) and a candidate stopped
    for SAFETY are well-formed non-replies (not retried), an ordinary reply is a reply."""
    from google.genai import types
    from langchain_core.language_models.chat_models import _gen_info_and_msg_metadata
    from langchain_google_genai.chat_models import _response_to_result

    from models.answers import check_result

    def read(**fields):
        result = check_result(_response_to_result(types.GenerateContentResponse(**fields)))  # no MalformedAnswerError
        generation = result.generations[0]
        # As a LangChain chat model's generate does: the generation's info merged into the message's metadata.
        message = generation.message.model_copy(update={"response_metadata": _gen_info_and_msg_metadata(generation)})
        return non_reply(message, message.text.strip())

    blocked = types.GenerateContentResponsePromptFeedback(block_reason=types.BlockedReason.SAFETY)
    assert read(candidates=[], prompt_feedback=blocked) == SAFETY_BLOCK
    stopped = types.Candidate(content=types.Content(role="model", parts=[]), finish_reason=types.FinishReason.SAFETY)
    assert read(candidates=[stopped]) == SAFETY_BLOCK
    fine = types.Candidate(
        content=types.Content(role="model", parts=[types.Part(text="A reply.")]), finish_reason=types.FinishReason.STOP
    )
    unblocked = types.GenerateContentResponsePromptFeedback(block_reason=types.BlockedReason.BLOCKED_REASON_UNSPECIFIED)
    assert read(candidates=[fine], prompt_feedback=unblocked) is None
    cut = types.Candidate(
        content=types.Content(role="model", parts=[types.Part(text="A rep")]),
        finish_reason=types.FinishReason.MAX_TOKENS,
    )
    assert read(candidates=[cut]) == CUT_AT_MAX_TOKENS
