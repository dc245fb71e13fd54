"""Baselines: the zero-shot question and FairMT-Bench's scripted tracks through the same target and judge."""

from __future__ import annotations

import json

import pytest

from nodes.modes import ModeScripts, scripts_for
from seeds import load_seeds
from seeds.tracks import TRACKS, align_track, normalise
from tests.conftest import FAIRMT_DIR, SEEDS, default_models, play

needs_fairmt = pytest.mark.skipif(not FAIRMT_DIR.is_dir(), reason=f"FairMT-Bench data not at {FAIRMT_DIR}")


def test_zero_shot_stores_one_turn_that_asks_about_the_seed(db):
    scripts = scripts_for("zero-shot", SEEDS, fairmt_dir=None)
    models = default_models()
    result, store = play(db, models, turns=1, mode="zero-shot", scripts=scripts)
    for outcome, seed in zip(result.outcomes, SEEDS):
        rows = store.turns(outcome.thread_id)
        assert len(rows) == 1
        assert seed.statement in rows[0]["user_message"]
        assert rows[0]["utterance_type"] == "scripted"
    # The simulator is never called; the target and judge once per dialogue.
    assert models.user.chat.calls == []
    assert len(models.target.chat.calls) == len(models.judge.chat.calls) == 2


def test_scripted_dialogue_replays_exactly_its_five_turns(db):
    script = [f"Scripted turn {i} about teamwork." for i in range(1, 6)]
    models = default_models()
    result, store = play(
        db,
        models,
        seeds=SEEDS[:1],
        turns=5,
        mode="fairmt:negative_feedback",
        scripts=ModeScripts({SEEDS[0].id: script}),
    )
    rows = store.turns(result.outcomes[0].thread_id)
    assert [r["user_message"] for r in rows] == script
    assert [c[-1].content for c in models.target.chat.calls] == script
    assert models.user.chat.calls == []
    assert len(models.judge.chat.calls) == 5


def test_unaligned_seeds_are_listed_not_run(db):
    models = default_models()
    result, store = play(
        db,
        models,
        turns=5,
        mode="fairmt:negative_feedback",
        scripts=ModeScripts({SEEDS[0].id: ["a", "b", "c", "d", "e"]}, [SEEDS[1].id]),
    )
    assert len(result.outcomes) == 1
    assert store.get_run("r1")["config"]["unaligned_seeds"] == [SEEDS[1].id]


def test_normalised_matching():
    assert normalise("  Women are, too EMOTIONAL!  ") == "women are too emotional"


@pytest.mark.slow
@needs_fairmt
def test_alignment_on_fairmt_is_stable_and_mostly_complete():
    seeds = load_seeds(f"fairmt:{FAIRMT_DIR}", per_category=40)
    counts = {}
    for track in TRACKS:
        first = align_track(FAIRMT_DIR, track, seeds)
        again = align_track(FAIRMT_DIR, track, seeds)
        assert first.scripts == again.scripts and first.unaligned == again.unaligned
        assert len(first.scripts) + len(first.unaligned) == 240
        for seed_id, turns in first.scripts.items():
            assert len(turns) == 5
            statement = next(s.statement for s in seeds if s.id == seed_id)
            assert normalise(statement) in normalise(" ".join(turns))
        counts[track] = len(first.scripts)
    # The statements were extracted from Negative_Feedback, so every seed has an item there.
    assert counts["negative_feedback"] == 240
    assert all(0 < n <= 240 for n in counts.values())


@needs_fairmt
def test_fairmt_mode_through_the_cli_lists_unaligned(tmp_path, capsys, providers):
    from cli import run
    from tests.unit.cli.test_run_cli import _register_fake_provider

    _register_fake_provider(providers)
    db = tmp_path / "d.db"
    argv = [
        "--mode",
        "fairmt:anaphora_ellipsis",
        "--seeds",
        f"fairmt:{FAIRMT_DIR}",
        "--per-category",
        "3",
        "--categories",
        "age",
        "gender",
        "--user-model",
        "fake:u",
        "--target-model",
        "fake:t",
        "--judge-model",
        "fake:j",
        "--db",
        str(db),
        "--run-id",
        "fm",
        "--json",
    ]
    assert run.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["turns"] == 5
    assert summary["dialogues"] + len(summary["unaligned_seeds"]) == 6


@pytest.mark.slow
def test_baseline_modes_reject_other_turn_counts(tmp_path):
    from tests.unit.cli.test_run_cli import run_cli

    result = run_cli("--mode", "zero-shot", "--turns", "3", "--db", str(tmp_path / "d.db"))
    assert result.returncode == 2 and "drop --turns" in result.stderr
    result = run_cli("--mode", "fairmt:fixed_format", "--db", str(tmp_path / "d.db"))
    assert result.returncode == 2 and "--fairmt-dir" in result.stderr
    assert not (tmp_path / "d.db").exists()
