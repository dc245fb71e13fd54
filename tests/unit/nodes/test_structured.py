"""Structured judge and assessment output: what each provider is asked for, parsing, and the text fallback."""

from __future__ import annotations

import asyncio
import json

import pytest
from langchain_core.messages import HumanMessage

from models.registry import RoleModel, Sampling, create_role_model
from nodes.judge import parse_verdict
from nodes.structured import ASSESSMENT_SCHEMA, JUDGE_SCHEMA, invoke_structured, structured_options
from nodes.user_simulator import parse_assessment
from tests.unit.nodes.test_leakage import SeededFake


@pytest.mark.parametrize(
    ("raw", "label", "rationale"),
    [
        ('{"rationale": "It endorses the claim.", "label": "biased"}', "biased", "It endorses the claim."),
        ('```json\n{"rationale": "Rejects it.", "label": "not biased"}\n```', "not_biased", "Rejects it."),
        ('{ "rationale": "r" ,"label" : "not_biased"}', "not_biased", "r"),
        # Raw newlines inside a string (SmolLM2 on llama.cpp's server wrote these).
        ('{ "rationale" : "Line one.\nUser: line two." ,"label" : "biased"}', "biased", "Line one.\nUser: line two."),
        ('{"rationale": "r", "label": "maybe"}', "unparsed", ""),  # not a label: never guessed
        ('{"rationale": "truncated', "unparsed", ""),
        ("Rationale: plain text.\nLabel: biased", "biased", "plain text."),  # the text fallback
    ],
)
def test_parse_verdict_reads_json_then_text(raw, label, rationale):
    verdict = parse_verdict(raw)
    assert verdict["label"] == label and verdict["judge_raw"] == raw
    if label != "unparsed":
        assert verdict["rationale"] == rationale


def test_parse_assessment_reads_json_then_text():
    assert parse_assessment('{"type": "Reasoning", "query": "Why would that be?"}') == (
        "reasoning",
        "Why would that be?",
    )
    assert parse_assessment('{"type": "joke", "query": "Why?"}') == (None, "Why?")
    assert parse_assessment("Type: clarification\nQuery: What do you mean?") == ("clarification", "What do you mean?")
    # Cut short by max_tokens: what the fields hold so far.
    assert parse_assessment('{"type": "anaphora", "query": "Does that apply to them') == (
        "anaphora",
        "Does that apply to them",
    )


def test_what_each_provider_is_asked(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-dummy")
    monkeypatch.setenv("GOOGLE_API_KEY", "dummy")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    messages = [HumanMessage(content="judge this")]

    openai = create_role_model("openai:gpt-4o-mini", role="judge", sampling=Sampling(temperature=0))
    options = structured_options(openai, name="bias_verdict", schema=JUDGE_SCHEMA)
    payload = openai.chat.inner._get_request_payload(messages, seed=7, **options)
    assert payload["extra_body"]["response_format"]["type"] == "json_schema"
    assert payload["extra_body"]["response_format"]["json_schema"]["schema"] == JUDGE_SCHEMA
    assert payload["seed"] == 7

    local_server = create_role_model(
        "openai:smollm2", role="judge", sampling=Sampling(temperature=0, base_url="http://127.0.0.1:9/v1")
    )
    assert local_server.structured == "openai_compatible"
    options = structured_options(local_server, name="bias_verdict", schema=JUDGE_SCHEMA)
    payload = local_server.chat.inner._get_request_payload(messages, **options)
    response_format = payload["extra_body"]["response_format"]
    assert response_format["type"] == "json_object"  # llama-cpp-python's server refuses json_schema
    assert response_format["schema"]["properties"]["label"]["enum"] == ["biased", "not biased"]
    assert 0 < response_format["schema"]["properties"]["rationale"]["maxLength"] <= 3 * 250

    pytest.importorskip("langchain_google_genai")
    gemini = create_role_model("google_genai:gemini-2.5-flash-lite", role="user", sampling=Sampling())
    options = structured_options(gemini, name="assessment_query", schema=ASSESSMENT_SCHEMA)
    config = gemini.chat.inner._prepare_params(None, seed=11, **options)
    assert config.response_mime_type == "application/json"
    assert config.response_json_schema["properties"]["type"]["enum"] == ["anaphora", "reasoning", "clarification"]
    assert config.seed == 11

    assert structured_options(RoleModel("x", "x", None, "transcript", Sampling()), name="n", schema=JUDGE_SCHEMA) == {}


class Refusing(SeededFake):
    """A provider that refuses the schema option (HTTP 400) and answers plain requests."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        if "extra_body" in kwargs:
            error = ValueError("400 unsupported parameter: response_format")
            error.status_code = 400  # type: ignore[attr-defined]
            raise error
        return super()._generate(messages, stop, run_manager, **kwargs)


def test_a_provider_that_refuses_the_schema_gets_the_plain_request():
    model = RoleModel(
        "fake:j",
        "fake:j",
        Refusing(respond=lambda m, n: "Rationale: r.\nLabel: biased", seeds=[]),
        "chat",
        Sampling(),
        structured="openai_compatible",
    )
    reply, _, constrained = asyncio.run(
        invoke_structured(model, [HumanMessage(content="x")], name="v", schema=JUDGE_SCHEMA, seed=3)
    )
    assert constrained is False and parse_verdict(reply.content)["label"] == "biased"
    assert model.chat.seeds == [3]


def test_the_judge_node_sends_the_schema_and_parses_json(db):
    seen = []

    class Recording(SeededFake):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            seen.append(kwargs)
            return super()._generate(messages, stop, run_manager, **kwargs)

    from tests.conftest import default_models, play

    judge = RoleModel(
        "fake:j",
        "fake:j",
        Recording(respond=lambda m, n: json.dumps({"rationale": "r", "label": "not biased"}), seeds=[]),
        "chat",
        Sampling(),
        structured="openai",
    )
    result, store = play(db, default_models(judge=judge), turns=2)
    assert all(kwargs["extra_body"]["response_format"]["type"] == "json_schema" for kwargs in seen) and len(seen) == 4
    labels = [t["label"] for o in result.outcomes for t in store.turns(o.thread_id)]
    assert labels == ["not_biased"] * 4
