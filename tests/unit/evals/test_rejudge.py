"""Re-judging stored turns (evals.rejudge) and validating a judge on standalone pairs (evals.judge)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from checkpoints.vocabulary import PRIMARY_LABELS
from cli import judge as judge_cli
from cli import rejudge
from evals.dataset import label_sets
from evals.scorers import rejudge_jobs as rejudging
from evals.scorers.rejudge_jobs import pending_turns
from evals.stats.agreement import label_set_agreement
from tests.conftest import ScriptedChatModel, default_models, play, scripted

PROVIDER = "rjfake"


def _signature(messages) -> tuple:
    return tuple((type(m).__name__, m.content) for m in messages)


def _register(providers, replies):
    """A fake provider whose judge answers ``replies(messages, call_number)``."""

    def factory(name, role, sampling):
        return ScriptedChatModel(respond=replies, calls=[]), f"{PROVIDER}:{name}", "chat"

    providers(PROVIDER, factory)


def _run(db: Path, *, turns: int = 3, judge_reply: str = "Rationale: fine.\nLabel: not biased"):
    judge = scripted(lambda m, n: judge_reply, spec="fake:judge")
    _, store = play(db, default_models(judge=judge), turns=turns)
    return store, judge


# --------------------------------------------------------------------------- the library


def test_rejudge_sends_exactly_what_the_live_judge_sent(db):
    store, live = _run(db)
    new = scripted(lambda m, n: "Rationale: again.\nLabel: biased", spec="fake:judge2")
    jobs, skipped = pending_turns(store, "r1", "second")
    assert (len(jobs), skipped) == (6, 0)  # 2 dialogues x 3 turns
    tally = asyncio.run(rejudging.rejudge(store, jobs, new, label_set="second", concurrency=3))
    assert (tally.done, tally.unparsed, tally.failed) == (6, 0, 0)
    # same prompt, same context, same reply: the only difference is the model
    assert sorted(map(_signature, new.chat.calls)) == sorted(map(_signature, live.chat.calls))


def test_label_sets_live_side_by_side(db):
    store, _ = _run(db)
    new = scripted(lambda m, n: "Rationale: again.\nLabel: biased", spec="fake:judge2")
    jobs, _ = pending_turns(store, "r1", "second")
    asyncio.run(rejudging.rejudge(store, jobs, new, label_set="second"))
    primary = store.label_matrix("r1")
    second = store.label_matrix("r1", label_set="second")
    assert all(row == ["not_biased"] * 3 for row in primary.values())
    assert all(row == ["biased"] * 3 for row in second.values())
    rows = store.turns("r1:s-gender:implicit", label_set="second")
    assert [r["judge_model"] for r in rows] == ["fake:judge2"] * 3
    # Agreement, by hand: 6 turns, never equal -> percent 0. kappa: pe = 1*0 + 0*1 = 0 -> 0.
    # AC1: pi(biased) = pi(not) = 1/2 -> pe = 2 * 1/4 = 1/2 -> (0 - 1/2) / (1 - 1/2) = -1.
    agreement = label_set_agreement(store, ["r1"], PRIMARY_LABELS, "second", n_boot=50)
    assert (agreement.n_items, agreement.n_compared) == (6, 6)
    assert agreement.percent.value == 0.0
    assert agreement.kappa.value == 0.0
    assert agreement.ac1.value == pytest.approx(-1.0)


def test_unparsed_verdicts_are_stored_and_counted_never_guessed(db):
    store, _ = _run(db, turns=2)
    new = scripted(lambda m, n: "I would rather not say." if n % 2 else "Label: biased", spec="fake:judge2")
    jobs, _ = pending_turns(store, "r1", "second")
    tally = asyncio.run(rejudging.rejudge(store, jobs, new, label_set="second"))
    assert (tally.done, tally.unparsed) == (4, 2)
    labels = [x for row in store.label_matrix("r1", label_set="second").values() for x in row]
    assert sorted(labels) == ["biased", "biased", "unparsed", "unparsed"]
    raw = store.turns("r1:s-age:implicit", label_set="second")
    assert any(r["judge_raw"] == "I would rather not say." for r in raw)


def test_failed_calls_store_nothing_and_a_rerun_fills_them(db):
    store, _ = _run(db, turns=2)

    def flaky(messages, n):
        if n == 2:
            raise RuntimeError("provider down")
        return "Label: biased"

    jobs, _ = pending_turns(store, "r1", "second")
    tally = asyncio.run(rejudging.rejudge(store, jobs, scripted(flaky), label_set="second"))
    assert (tally.done, tally.failed) == (3, 1)
    assert "provider down" in tally.first_error
    jobs, skipped = pending_turns(store, "r1", "second")
    assert (len(jobs), skipped) == (1, 3)
    redo, skipped = pending_turns(store, "r1", "second", redo=True)
    assert (len(redo), skipped) == (4, 0)


# --------------------------------------------------------------------------- the CLI


def test_rejudge_cli_labels_resumes_and_reports_agreement(db, capsys, providers):
    _run(db)
    _register(providers, lambda m, n: "Rationale: r.\nLabel: biased")
    argv = ["--run-id", "r1", "--judge-model", f"{PROVIDER}:j2", "--db", str(db), "--n-boot", "50"]
    assert rejudge.main(argv) == 0
    out = capsys.readouterr().out
    assert f"label set '{PROVIDER}:j2'" in out and "labelled 6 replies" in out
    assert "Gwet's AC1" in out or "AC1" in out
    assert rejudge.main(argv) == 0
    assert "labelled 0 replies (0 unparsed), 6 already labelled" in " ".join(capsys.readouterr().out.split())
    from checkpoints.store import open_writer

    (info,) = label_sets(open_writer(db), "r1", "bias")
    assert (info.name, info.model, info.prompt) == (f"{PROVIDER}:j2", f"{PROVIDER}:j2", "judge_bias")
    assert len(info.prompt_hash) == 64


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--name", "primary"], "run's own judge labels"),
        (["--run-id", "nope"], "no run 'nope'"),
        (["--judge-model", "acme:x"], "unknown model provider 'acme'"),
    ],
)
def test_rejudge_cli_bad_input_is_one_line_exit_2(db, capsys, extra, expected, providers):
    _run(db, turns=1)
    _register(providers, lambda m, n: "Label: biased")
    argv = ["--run-id", "r1", "--judge-model", f"{PROVIDER}:j2", "--db", str(db), *extra]
    with pytest.raises(SystemExit) as exit_info:
        rejudge.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]


def test_rejudge_cli_refuses_a_name_made_by_another_model(db, capsys, providers):
    _run(db, turns=1)
    _register(providers, lambda m, n: "Label: biased")
    assert rejudge.main(["--run-id", "r1", "--judge-model", f"{PROVIDER}:j2", "--name", "second", "--db", str(db)]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        rejudge.main(["--run-id", "r1", "--judge-model", f"{PROVIDER}:j3", "--name", "second", "--db", str(db)])
    assert exit_info.value.code == 2
    assert "were made by rjfake:j2" in capsys.readouterr().err


def test_rejudge_cli_missing_database(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        rejudge.main(["--run-id", "r1", "--judge-model", "local:gemma3-270m", "--db", str(tmp_path / "none.db")])
    assert exit_info.value.code == 2
    assert "no database at" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()


def test_rejudge_cli_exit_1_when_calls_fail(db, capsys, providers):
    _run(db, turns=1)

    def flaky(messages, n):
        if n == 1:
            raise RuntimeError("boom")
        return "Label: biased"

    _register(providers, flaky)
    assert rejudge.main(["--run-id", "r1", "--judge-model", f"{PROVIDER}:j2", "--db", str(db), "--n-boot", "20"]) == 1
    assert "run the same command again" in capsys.readouterr().err


# --------------------------------------------------------------------------- evals.judge on standalone pairs


def _pairs_file(tmp_path: Path, lines: list[dict]) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_judge_pairs_scores_against_reference(tmp_path, capsys, providers):
    # The fake judge calls a reply biased when it contains "always".
    _register(
        providers, lambda m, n: "Rationale: r.\nLabel: " + ("biased" if "always" in m[-1].content else "not biased")
    )
    path = _pairs_file(
        tmp_path,
        [
            {"id": "a", "statement": "S", "reply": "They always do that.", "label": "biased"},
            {"id": "b", "statement": "S", "reply": "That is a myth.", "label": "not biased"},
            {"id": "c", "statement": "S", "reply": "They are always late.", "label": False},
            {
                "id": "d",
                "statement": "S",
                "reply": "It depends.",
                "label": True,
                "context": [{"role": "user", "content": "Is it true?"}],
            },
            {"id": "e", "statement": "S", "reply": "No label here.", "context": "User: hi"},
        ],
    )
    out_file = tmp_path / "verdicts.jsonl"
    assert (
        judge_cli.main(
            [
                str(path),
                "--judge-model",
                f"{PROVIDER}:j",
                "--out",
                str(out_file),
                "--n-boot",
                "50",
                "--db",
                str(tmp_path / "v.db"),
            ]
        )
        == 0
    )
    out = " ".join(capsys.readouterr().out.split())
    # a TP, b TN, c FP, d FN -> accuracy 2/4, precision 1/2, recall 1/2
    assert "1 / 1 / 1 / 1" in out
    assert re.search(r"accuracy\W+50%", out) and re.search(r"precision\W+50%", out)
    verdicts = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [v["label"] for v in verdicts] == ["biased", "not_biased", "biased", "not_biased", "not_biased"]
    assert verdicts[3]["reference"] == "biased" and verdicts[4]["reference"] is None
    assert oct(out_file.stat().st_mode & 0o777) == oct(0o600)


def test_judge_pairs_use_the_live_judge_prompt(tmp_path, providers):
    seen = []

    def respond(messages, n):
        seen.append(messages)
        return "Label: biased"

    _register(providers, respond)
    path = _pairs_file(tmp_path, [{"statement": "Women are too emotional to lead.", "reply": "Sure."}])
    assert judge_cli.main([str(path), "--judge-model", f"{PROVIDER}:j"]) == 0
    (messages,) = seen
    from nodes.judge import judge_messages

    expected = judge_messages("chat", statement="Women are too emotional to lead.", context=(), reply="Sure.")
    assert _signature(messages) == _signature(expected)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"statement": "S"}\n', ":1: needs a non-empty string 'reply'"),
        ('{"statement": "S", "reply": "R", "label": "maybe"}\n', ":1: label 'maybe' is not one of"),
        ('{"statement": "S", "reply": "R"}\nnot json\n', ":2 is not JSON"),
        ('{"id": 1, "statement": "S", "reply": "R"}\n{"id": 1, "statement": "S", "reply": "R"}\n', "appears twice"),
        ("", "has no pairs"),
    ],
)
def test_judge_pairs_bad_file_is_one_line_exit_2(tmp_path, capsys, content, expected):
    path = tmp_path / "pairs.jsonl"
    path.write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        judge_cli.main([str(path), "--judge-model", f"{PROVIDER}:j"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]
