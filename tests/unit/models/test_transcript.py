"""The local model's transcript rendering, stop sequences and Yes/No scoring, without loading a model."""

from __future__ import annotations

import math

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

import prompts
from models.llama.logprobs import calibrated_yes_probability, yes_probability
from models.llama.model import LlamaTranscriptChatModel, create_local_model
from models.llama.transcript import render_transcript, transcript_stops

DIALOGUE = [
    SystemMessage("A conversation with an assistant."),
    HumanMessage("Why is the sky blue?"),
    AIMessage("Air scatters blue light.\n\nMore than red light."),
    HumanMessage("  And at sunset?  "),
]


def model(**overrides: object) -> LlamaTranscriptChatModel:
    return LlamaTranscriptChatModel(model_path="/nonexistent.gguf", **overrides)


def test_renders_system_then_one_line_per_turn_ending_with_the_assistant_label() -> None:
    assert model().render(DIALOGUE) == (
        "A conversation with an assistant.\n"
        "\n"
        "User: Why is the sky blue?\n"
        "Assistant: Air scatters blue light. More than red light.\n"
        "User: And at sunset?\n"
        "Assistant:"
    )


def test_generating_as_human_ends_with_the_user_label() -> None:
    text = model(generate_as="human").render(DIALOGUE[:3])
    assert text.endswith("Assistant: Air scatters blue light. More than red light.\nUser:")


def test_custom_labels_and_no_system_message() -> None:
    text = render_transcript(
        [HumanMessage("hi"), AIMessage("hello")], human_label="Q", ai_label="A", generate_as="human"
    )
    assert text == "Q: hi\nA: hello\nQ:"


def test_a_first_turn_with_only_a_system_message_is_just_the_label() -> None:
    assert model(generate_as="human").render([SystemMessage("Frame.")]) == "Frame.\n\nUser:"


def test_list_content_blocks_are_rendered_as_their_text() -> None:
    message = HumanMessage(content=[{"type": "text", "text": "part one"}, {"type": "text", "text": "two"}])
    assert model().render([message]).startswith("User: part one")


def test_a_system_message_inside_the_dialogue_is_refused() -> None:
    with pytest.raises(ValueError, match="system messages first"):
        model().render([HumanMessage("hi"), SystemMessage("late")])


def test_tool_messages_are_refused() -> None:
    with pytest.raises(ValueError, match="ToolMessage"):
        model().render([ToolMessage("x", tool_call_id="1")])


def test_stop_sequences_for_both_perspectives() -> None:
    assert transcript_stops(generate_as="ai") == ["\nUser:", "\nAssistant:"]
    assert transcript_stops(generate_as="human") == ["\nAssistant:", "\nUser:"]
    assert transcript_stops(generate_as="ai", stop=["END", "\nUser:"]) == ["\nUser:", "\nAssistant:", "END"]


def test_the_model_also_stops_at_a_newline_unless_told_otherwise() -> None:
    assert model().stop_sequences(["END"]) == ["\nUser:", "\nAssistant:", "\n", "END"]
    assert model(generate_as="human", one_line=False).stop_sequences() == ["\nAssistant:", "\nUser:"]


def test_factory_configures_each_role() -> None:
    common = {"temperature": 0.7, "max_tokens": 99, "model_path": "/nonexistent.gguf"}
    user = create_local_model("gemma3-270m", role="user", seed=5, **common)
    target = create_local_model("gemma3-270m", role="target", **common)
    judge = create_local_model("gemma3-270m", role="judge", **common)
    assert (user.generate_as, user.instance_key, user.seed, user.max_tokens) == ("human", "user", 5, 99)
    assert (user.human_label, user.ai_label) == ("User", "Assistant")
    assert (target.generate_as, target.instance_key, target.logprobs) == ("ai", "target", False)
    assert (judge.logprobs, judge.max_tokens, judge.temperature, judge.instance_key) == (True, 1, 0.0, "judge")


def test_factory_rejects_unknown_names_and_roles() -> None:
    with pytest.raises(ValueError, match="known: gemma3-270m"):
        create_local_model("gemma-7b", role="target", temperature=0.7, max_tokens=10)
    with pytest.raises(ValueError, match="known: user, target, judge"):
        create_local_model("gemma3-270m", role="critic", temperature=0.7, max_tokens=10)


def test_unknown_call_options_are_refused_before_loading_anything() -> None:
    with pytest.raises(TypeError, match="top_p"):
        model().invoke("hi", top_p=0.5)


def _alternative(token: str, p: float) -> dict[str, object]:
    return {"token": token, "logprob": math.log(p)}


def _scored(*alternatives: dict[str, object]) -> AIMessage:
    first = {"token": " Yes", "logprob": -0.1, "top_logprobs": list(alternatives)}
    return AIMessage(content="Yes", response_metadata={"logprobs": {"content": [first]}})


def test_yes_probability_sums_case_and_space_variants() -> None:
    message = _scored(
        _alternative(" Yes", 0.4),
        _alternative("yes", 0.1),
        _alternative(" No", 0.2),
        _alternative("NO ", 0.05),
        _alternative("\n", 0.2),
        _alternative(" Nope", 0.05),
    )
    assert yes_probability(message) == pytest.approx(0.5 / 0.75)


def test_yes_probability_with_only_one_answer_word() -> None:
    assert yes_probability(_scored(_alternative(" No", 0.3), _alternative(" maybe", 0.3))) == 0.0
    assert yes_probability(_scored(_alternative("Yes", 0.3))) == 1.0


def test_yes_probability_is_none_without_either_word_or_without_logprobs() -> None:
    assert yes_probability(_scored(_alternative(" Maybe", 0.9))) is None
    assert yes_probability(AIMessage(content="Yes")) is None
    assert yes_probability(AIMessage(content="", response_metadata={"logprobs": {"content": []}})) is None


def test_yes_probability_reads_openai_chat_logprobs() -> None:
    openai_metadata = {
        "logprobs": {
            "content": [
                {
                    "token": "No",
                    "bytes": [78, 111],
                    "logprob": -0.2,
                    "top_logprobs": [
                        {"token": "No", "bytes": [78, 111], "logprob": -0.2},
                        {"token": "Yes", "bytes": [89, 101, 115], "logprob": -1.8},
                    ],
                }
            ],
            "refusal": None,
        }
    }
    p = yes_probability(AIMessage(content="No", response_metadata=openai_metadata))
    assert p == pytest.approx(math.exp(-1.8) / (math.exp(-1.8) + math.exp(-0.2)))


def test_calibration_divides_out_the_content_free_prior() -> None:
    # A prompt that says "yes" 80% of the time on nothing: 0.8 is then a neutral answer.
    assert calibrated_yes_probability(0.8, 0.8) == pytest.approx(0.5)
    # 0.9 vs prior 0.8: yes 0.9/0.8 = 1.125, no 0.1/0.2 = 0.5 -> 1.125 / 1.625.
    assert calibrated_yes_probability(0.9, 0.8) == pytest.approx(1.125 / 1.625)
    assert calibrated_yes_probability(0.6, 0.8) < 0.5 < calibrated_yes_probability(0.3, 0.2)
    assert calibrated_yes_probability(0.7, 0.5) == pytest.approx(0.7)


def test_calibration_keeps_certainty_and_survives_a_degenerate_prior() -> None:
    assert calibrated_yes_probability(1.0, 0.3) == 1.0
    assert calibrated_yes_probability(0.0, 0.3) == 0.0
    assert 0.0 < calibrated_yes_probability(0.5, 1.0) < 0.5
    assert 0.5 < calibrated_yes_probability(0.5, 0.0) < 1.0


def test_calibration_rejects_values_outside_0_1() -> None:
    with pytest.raises(ValueError, match="p_yes must be a probability"):
        calibrated_yes_probability(1.2, 0.5)


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("user_implicit.transcript", {"statement": "Cats are lazy."}),
        ("user_assessment.transcript", {"statement": "Cats are lazy.", "utterance_type": "reasoning"}),
        ("target.transcript", {}),
        ("judge_bias.transcript", {"statement": "Cats are lazy.", "context": "", "reply": "They nap."}),
    ],
)
def test_transcript_prompts_render_with_exactly_their_variables(name: str, values: dict[str, str]) -> None:
    template = prompts.load(name)
    assert template.variables == frozenset(values)
    text = model().render(template.render(**values))
    assert all(value in text for value in values.values())
    assert "$" not in text


def test_judge_prompt_asks_about_the_judged_reply_last_with_balanced_examples() -> None:
    messages = prompts.load("judge_bias.transcript").render(
        statement="Cats are lazy.", context="(none)", reply="They nap a lot."
    )
    answers = [m.text for m in messages if isinstance(m, AIMessage) and m.text in ("Yes", "No")]
    assert isinstance(messages[-1], HumanMessage) and "Yes or No" in messages[-1].text
    assert isinstance(messages[-2], AIMessage) and messages[-2].text == "They nap a lot."
    assert "Cats are lazy." in messages[-3].text
    assert 4 <= len(answers) <= 6 and answers.count("Yes") == answers.count("No")
