"""Safety-filter simulation: block propagation on hand-made scores, and stored scores reused."""

from __future__ import annotations

import json

from evals.scorers.safety_filter import DialogueScores, blocked_turn, filter_report
from tests.conftest import default_models, play


def test_blocked_turn_is_the_first_turn_over_threshold_on_either_side():
    scores = {1: {"user": 0.1, "reply": 0.2}, 2: {"user": 0.7, "reply": 0.1}, 3: {"user": 0.9, "reply": 0.9}}
    assert blocked_turn(scores, 0.5) == 2
    assert blocked_turn(scores, 0.8) == 3
    assert blocked_turn(scores, 0.95) is None
    assert blocked_turn({1: {"user": None, "reply": 0.5}}, 0.5) == 1  # reaching the threshold blocks


def test_block_propagates_to_later_turns_and_passing_bias_rate():
    # d1 blocked at turn 2: only turn 1 passes (biased). d2 never blocked: turns 1-3 pass (N, B, U).
    # d3 blocked at turn 1: nothing passes. Blocked by turn: t1 1/3, t2 2/3, t3 2/3.
    # Passing labelled turns: B (d1), N, B (d2) → bias rate 2/3; the unparsed one is excluded.
    d1 = DialogueScores(
        "d1",
        "implicit",
        {1: {"user": 0.1}, 2: {"reply": 0.6}, 3: {"user": 0.0}},
        {1: "biased", 2: "biased", 3: "biased"},
    )
    d2 = DialogueScores(
        "d2",
        "implicit",
        {1: {"user": 0.1}, 2: {"user": 0.2}, 3: {"user": 0.3}},
        {1: "not_biased", 2: "biased", 3: "unparsed"},
    )
    d3 = DialogueScores("d3", "implicit", {1: {"user": 0.9}}, {1: "not_biased", 2: "not_biased", 3: "biased"})
    s1 = DialogueScores("s1", "fairmt:jailbreak_tips", {1: {"user": 0.2}}, {1: "biased"})
    report = filter_report([d1, d2, d3, s1], threshold=0.5, turns=3)
    implicit = report["implicit"]
    assert [b["share"] for b in implicit["blocked_by_turn"]] == [1 / 3, 2 / 3, 2 / 3]
    assert implicit["passing_turns"] == 4 and implicit["passing_labelled"] == 3
    assert implicit["bias_rate_passing"] == 2 / 3
    assert report["fairmt:jailbreak_tips"]["bias_rate_passing"] == 1.0


def test_cli_scores_once_and_reuses_stored_scores(db, capsys, providers):
    from cli import filter as guard
    from tests.conftest import ScriptedChatModel

    play(db, default_models(), turns=2)
    calls = []

    def factory(name, role, sampling):
        def respond(messages, n):
            calls.append(n)
            return "Yes" if "number 2" in str(messages[-1].content) else "No"

        return ScriptedChatModel(respond=respond, calls=[]), f"guardfake:{name}", "chat"

    providers("guardfake", factory)
    argv = ["--run-id", "r1", "--guard-model", "guardfake:g", "--db", str(db), "--json"]
    assert guard.main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["model_calls"] == 8  # 2 dialogues × 2 turns × (user + reply)
    # "User question number 2?" is the 2nd simulated message (dialogue 1, turn 2): blocked there.
    blocked = first["modes"]["implicit"]["blocked_by_turn"]
    assert blocked[-1]["share"] > 0
    assert guard.main([*argv[:-1], "--threshold", "0.9", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["model_calls"] == 0 and len(calls) == 8


def test_cli_bad_input(db, capsys):
    import pytest

    from cli import filter as guard

    with pytest.raises(SystemExit) as info:
        guard.main(["--run-id", "nope", "--guard-model", "local:gemma3-270m", "--db", str(db)])
    assert info.value.code == 2 and not db.exists()
    with pytest.raises(SystemExit) as info:
        guard.main(["--run-id", "x", "--guard-model", "local:gemma3-270m", "--threshold", "2", "--db", str(db)])
    assert info.value.code == 2
