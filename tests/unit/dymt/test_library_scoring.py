"""``dymt.classify_refusals``, ``dymt.score_coherence`` and ``dymt.simulate_filter``: typed results, progress events,
nothing printed, errors naming keyword arguments; the commands call them and say the same numbers in their flags."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import dymt
from cli import coherence as coherence_cli
from cli import filter as filter_cli
from cli import refusal as refusal_cli
from dymt.events import Collector, Labelled
from tests.conftest import ScriptedChatModel
from tests.unit.dymt.test_library import _play


def _labeller(name, role, sampling):
    def respond(messages, n):
        asked = " ".join(str(m.content) for m in messages).lower()
        return "Rationale: fine.\n" + ("Score: 4" if "coheren" in asked else "Refused: no")

    return ScriptedChatModel(respond=respond, calls=[]), name, "chat"


def _guard(name, role, sampling):
    return ScriptedChatModel(respond=lambda m, n: "Yes", calls=[]), name, "chat"  # every message violates the policy


@pytest.fixture(scope="module")
def played_once(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("scoring") / "dialogues.db"
    _play(db)
    return db


@pytest.fixture
def db(played_once: Path, tmp_path: Path, providers) -> Path:
    """A fresh copy of the played store (r1: two dialogues of three turns), with the scripted labellers registered."""
    for part in played_once.parent.glob(played_once.name + "*"):
        shutil.copyfile(part, tmp_path / part.name)
    providers("lab", _labeller)
    providers("guard", _guard)
    return tmp_path / played_once.name


def test_refusals_are_a_typed_result_with_progress_and_nothing_printed(db, capsys):
    events = Collector()
    result = dymt.classify_refusals("r1", model="lab:x", db=db, on_event=events)
    assert isinstance(result, dymt.ScoringResult)
    assert (result.kind, result.run_id, result.name, result.labelled, result.unparsed, result.skipped) == (
        "refusal",
        "r1",
        "lab:x",
        6,
        0,
        0,
    )
    assert result.failed == 0 and result.first_error is None
    labelled = [e for e in events.events if isinstance(e, Labelled)]
    assert labelled[0] == Labelled(0, 6) and labelled[-1] == Labelled(6, 6)
    assert capsys.readouterr() == ("", "")
    again = dymt.classify_refusals("r1", model="lab:x", db=db)
    assert (again.labelled, again.skipped) == (0, 6)  # calling again continues where it stopped
    assert again.to_json()["schema"] == "dymt.refusal/1" and json.loads(json.dumps(again.to_json()))["skipped"] == 6


def test_the_refusal_and_coherence_commands_say_the_librarys_numbers(db, capsys):
    assert refusal_cli.main(["--run-id", "r1", "--model", "lab:x", "--db", str(db)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "refusal classifier 'lab:x' on run r1: classified 6 replies (0 unparsed), 0 already done, 0 failed" in out
    coherence = dymt.score_coherence("r1", model="lab:x", db=db)
    assert (coherence.kind, coherence.labelled, coherence.unparsed) == ("coherence", 2, 0)
    assert coherence_cli.main(["--run-id", "r1", "--model", "lab:x", "--db", str(db), "--redo"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "coherence scorer 'lab:x' on run r1: scored 2 dialogues (0 unparsed), 0 already done, 0 failed" in out


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda db: dymt.classify_refusals("nope", model="lab:x", db=db), "no run 'nope'"),
        (lambda db: dymt.classify_refusals(["r1"], model="lab:x", db=db), "run_id=['r1']"),
        (lambda db: dymt.score_coherence("r1", model="lab:x", max_concurrency=0, db=db), "max_concurrency=0"),
        (lambda db: dymt.score_coherence("r1", model="nowhere:x", db=db), "model="),
        (lambda db: dymt.simulate_filter("r1", guard_model="guard:g", threshold=2, db=db), "threshold=2 is not"),
        (lambda db: dymt.simulate_filter("r1", guard_model="guard:g", policy="rude", db=db), "policy='rude'"),
        (lambda db: dymt.simulate_filter(["r1", "gone"], guard_model="guard:g", db=db), "no run 'gone'"),
    ],
)
def test_bad_input_is_one_dymt_error_line_naming_the_keyword(db, call, says):
    with pytest.raises(dymt.DymtError) as raised:
        call(db)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_the_commands_name_their_flags_for_the_same_errors(db, capsys):
    with pytest.raises(SystemExit) as exit_info:
        coherence_cli.main(["--run-id", "r1", "--model", "nowhere:x", "--db", str(db)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --model") and "unknown model provider 'nowhere'" in err
    with pytest.raises(SystemExit) as exit_info:
        filter_cli.main(["--run-id", "r1", "--guard-model", "guard:g", "--threshold", "2", "--db", str(db)])
    assert exit_info.value.code == 2
    assert "--threshold 2.0 is not a probability" in capsys.readouterr().err


def test_a_simulated_filter_is_a_typed_result_and_the_commands_json_is_its_json(db, capsys):
    result = dymt.simulate_filter("r1", guard_model="guard:g", db=db)  # one run id as a string
    assert isinstance(result, dymt.FilterResult) and result.failed == 0
    assert result.model_calls == 12  # 2 dialogues × 3 turns × (user message + reply)
    blocked = result.report["modes"]["implicit"]["blocked_by_turn"]
    assert blocked[0]["share"] == 1.0  # both dialogues block at their first turn
    assert result.to_json()["schema"] == "dymt.filter/1" and result.to_json()["threshold"] == 0.5
    assert capsys.readouterr() == ("", "")
    assert filter_cli.main(["--run-id", "r1", "--guard-model", "guard:g", "--db", str(db), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == {**result.to_json(), "model_calls": 0}  # the scores are stored: no new guard call
