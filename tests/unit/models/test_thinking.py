"""Reasoning split off replies, thinking mapped per provider, and what each role's requests really send.

No network: the providers' own LangChain integrations build their requests offline (a fake key is enough).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from langchain_core.messages import AIMessage

from models.answers import CUT_WHILE_REASONING, EMPTY_MESSAGE, REFUSAL, non_reply
from models.reasoning import capped_answer, split_reply, split_text, token_split
from models.registry import ModelSpecError, Sampling, create_role_model
from tests.conftest import REPO


@pytest.mark.parametrize(
    ("text", "answer", "reasoning", "cut"),
    [
        ("<think>weigh it</think>\n\nHello", "Hello", "weigh it", False),
        ("<thinking>a</thinking><reasoning>b</reasoning> c", "c", "a\n\nb", False),
        ("weigh it</think>Hello", "Hello", "weigh it", False),  # the template opened the block
        ("<think>weigh it and", "", "weigh it and", True),  # the cap cut it
        ("<think>\n\n</think>\n\nHello", "Hello", None, False),  # Qwen3 with thinking off: an empty block
        ("I wrote <think>x</think> here", "I wrote <think>x</think> here", None, False),  # the answer's own text
    ],
)
def test_reasoning_tags_are_split_only_before_the_answer(text, answer, reasoning, cut) -> None:
    split = split_text(text)
    assert (split.answer, split.reasoning, split.cut) == (answer, reasoning, cut)


def test_each_carrier_is_read_through_langchains_content_blocks() -> None:
    field = AIMessage(
        "A", additional_kwargs={"reasoning_content": "R"}, response_metadata={"model_provider": "deepseek"}
    )
    gemini = AIMessage(
        [{"type": "thinking", "thinking": "T"}, {"type": "text", "text": "A"}],
        response_metadata={"model_provider": "google_genai"},
    )
    summary = AIMessage(
        [
            {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "S"}]},
            {"type": "text", "text": "A"},
        ],
        response_metadata={"model_provider": "openai"},
    )
    assert [(m.answer, m.reasoning, m.carrier) for m in map(split_reply, (field, gemini, summary))] == [
        ("A", "R", "reasoning_content field"),
        ("A", "T", "thought parts"),
        ("A", "S", "reasoning summary"),
    ]


def test_non_replies_of_thinking_models_are_named() -> None:
    cut = AIMessage("<think>still thinking", response_metadata={"finish_reason": "length"})
    empty = AIMessage("<think>done</think>", response_metadata={"finish_reason": "stop"})
    refused = AIMessage("", additional_kwargs={"refusal": "No."}, response_metadata={"finish_reason": "stop"})
    assert non_reply(cut, "", split_reply(cut)) == CUT_WHILE_REASONING
    assert non_reply(empty, "", split_reply(empty)) == EMPTY_MESSAGE
    assert split_reply(refused).answer == "No." and non_reply(refused, "No.", split_reply(refused)) == REFUSAL


def test_tokens_split_by_the_providers_count_else_estimated_and_answers_cut_to_the_cap() -> None:
    reported = AIMessage(
        "<think>x</think>an answer",
        usage_metadata={
            "input_tokens": 5,
            "output_tokens": 30,
            "total_tokens": 35,
            "output_token_details": {"reasoning": 20},
        },
    )
    guessed = AIMessage(
        "<think>" + "r" * 300 + "</think>" + "a" * 100,
        usage_metadata={"input_tokens": 1, "output_tokens": 40, "total_tokens": 41},
    )
    exact = token_split(reported, split_reply(reported))
    assert (exact.answer, exact.reasoning, exact.estimated) == (10, 20, False)
    estimate = token_split(guessed, split_reply(guessed))
    assert (estimate.answer, estimate.reasoning, estimate.estimated) == (10, 30, True)
    assert capped_answer("one two three four five six", 6, 3) == "one two three"
    assert capped_answer("short", 1, 3) == "short"


def _model(spec: str, monkeypatch, **sampling) -> object:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    monkeypatch.setenv("GOOGLE_API_KEY", "test-not-real")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return create_role_model(spec, role="target", sampling=Sampling(seed=1, **sampling))


def test_openai_gpt5_temperature_dropped_by_langchain_is_recorded(monkeypatch) -> None:
    gpt5 = _model("openai:gpt-5", monkeypatch)
    assert "temperature" not in gpt5.sent.sent
    assert gpt5.sent.notes[0].startswith("temperature 0.7 not sent: langchain-openai sends none to gpt-5")
    assert gpt5.sent.sent["max_completion_tokens"] == 250 + 4096  # a reasoning model: its reasoning has a budget
    mini = _model("openai:gpt-4o-mini", monkeypatch)
    assert mini.sent.notes == () and mini.sent.sent["temperature"] == 0.7 and mini.request_cap == 250


def test_openai_thinking_maps_to_the_models_own_effort_levels(monkeypatch) -> None:
    assert _model("openai:gpt-5.1", monkeypatch, thinking="off").sent.sent["reasoning_effort"] == "none"
    gpt5_off = _model("openai:gpt-5", monkeypatch, thinking="off")
    assert gpt5_off.sent.sent["reasoning_effort"] == "minimal"
    assert "cannot turn its reasoning off" in gpt5_off.sent.notes[0]
    budget = _model("openai:gpt-5", monkeypatch, thinking=512)
    assert budget.sent.sent["reasoning_effort"] == "low" and budget.request_cap == 250 + 512
    with pytest.raises(ModelSpecError, match="does not reason"):
        _model("openai:gpt-4o-mini", monkeypatch, thinking="on")


def test_gemini_thinking_maps_to_its_budget(monkeypatch) -> None:
    off = _model("google_genai:gemini-2.5-flash", monkeypatch, thinking="off")
    assert off.sent.sent["thinking_config"] == {"thinking_budget": 0} and off.request_cap == 250
    budget = _model("google_genai:gemini-2.5-flash", monkeypatch, thinking=1000)
    assert budget.sent.sent["thinking_config"] == {"thinking_budget": 1000, "include_thoughts": True}
    assert budget.sent.sent["max_output_tokens"] == 1250


def test_strict_sampling_refuses_a_model_that_drops_a_setting_in_one_line(tmp_path) -> None:
    env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "sk-test-not-real", "HOME": str(tmp_path)}
    command = [sys.executable, "-m", "graph.run", "--target-model", "openai:gpt-5", "--strict-sampling"]
    result = subprocess.run(
        [*command, "--db", str(tmp_path / "d.db")], cwd=REPO, capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "--target-model" in line and "temperature 0.7 not sent" in line and "--strict-sampling" in line
    assert not (tmp_path / "d.db").exists()  # nothing written


def test_a_thinking_setting_a_model_profile_cannot_vouch_for_is_not_sent_but_said() -> None:
    from models.thinking import openai_plan

    unknown = openai_plan("off", model="ft:gpt-4o-mini:lab", max_tokens=250, profile={})
    assert unknown.arguments == {} and unknown.cap == 250 and "not sent" in unknown.notes[0]
    o3 = openai_plan("off", model="o3", max_tokens=250, profile={"reasoning_output": True})
    assert o3.arguments == {"reasoning_effort": "low"} and "cannot turn its reasoning off" in o3.notes[0]
