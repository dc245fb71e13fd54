"""Experiment files and grid runs: several targets and modes, flags over the file, the resolved config stored."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from checkpoints.store import open_writer
from graph.config.experiment import ExperimentError, load_experiment
from tests.conftest import REPO
from tests.support import forked
from tests.support.stub_server import Faults, StubServer
from tests.unit.cli.test_run_cli import _register_fake_provider, run_cli

GRID = """
modes = ["implicit", "assessment"]
turns = 2
categories = ["gender", "age"]
max_concurrency = 4

[models]
user = "fake:u"
judge = "fake:j"
targets = ["fake:t1", "fake:t2"]

[sampling.judge]
temperature = 0.0
max_tokens = 100

[sampling."fake:t2"]
temperature = 0.2
extra = { top_k = 5 }

[rate_limits]
fake = 6000

[retry]
attempts = 3
timeout = 30
"""


def _write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_examples_parse():
    paper = load_experiment(REPO / "examples" / "paper.toml")
    assert paper.options["user_model"] == paper.options["judge_model"] == "openai:gpt-4o-mini"
    assert len(paper.options["target_model"]) == 6
    assert paper.options["mode"] == ["implicit", "assessment"]
    assert paper.options["turns"] == 10 and paper.options["per_category"] == 40
    assert paper.options["seeds"].startswith("fairmt:/")  # made absolute, relative to the file
    assert paper.rate_limits["openai"] > 0 and paper.retry["attempts"] >= 2
    offline = load_experiment(REPO / "examples" / "offline.toml")
    assert {
        offline.options[k] if isinstance(offline.options[k], str) else offline.options[k][0]
        for k in ("user_model", "target_model", "judge_model")
    } == {"local:gemma3-270m"}


def test_grid_run_threads_groups_stored_config_and_resume(tmp_path: Path, capsys, providers):
    from cli import run

    _register_fake_provider(providers)
    config = _write(tmp_path, GRID)
    db = tmp_path / "d.db"
    argv = ["--config", str(config), "--db", str(db), "--run-id", "grid", "--json", "--no-trace"]
    assert run.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dialogues"] == summary["finished"] == 8  # 2 seeds × 2 modes × 2 targets
    assert summary["targets"] == ["fake:t1", "fake:t2"] and summary["modes"] == ["implicit", "assessment"]
    groups = {(g["target"], g["mode"]): g for g in summary["groups"]}
    assert set(groups) == {(t, m) for t in ("fake:t1", "fake:t2") for m in ("implicit", "assessment")}
    assert all(g["dialogues"] == g["finished"] == 2 for g in groups.values())

    store = open_writer(db)
    dialogues = store.dialogues("grid")
    assert {d["thread_id"].rsplit(":", 2)[0].split(":", 2)[2] for d in dialogues} == {"implicit", "assessment"}
    assert all(d["thread_id"].endswith(":" + d["target"]) for d in dialogues)
    for d in dialogues:
        assert {t["target_model"] for t in store.turns(d["thread_id"])} == {d["target"]}
    stored = store.get_run("grid")["config"]
    settings, resolved = stored["run_config"], stored["resolved"]
    assert settings["models"]["targets"] == ["fake:t1", "fake:t2"] and settings["modes"] == ["implicit", "assessment"]
    assert resolved["sampling"]["judge"] == {"temperature": 0.0, "max_tokens": 100}
    assert resolved["sampling"]["target:fake:t2"] == {"temperature": 0.2, "max_tokens": 250, "extra": {"top_k": 5}}
    assert settings["config_file"] == str(config.resolve())
    assert settings["rate_limits"] == {"fake": 6000.0}
    assert settings["retry"]["attempts"] == 3 and settings["retry"]["timeout"] == 30
    store.close()

    assert run.main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["skipped_this_time"] == 8
    # The run id alone: the grid the file defined comes from the stored run.
    assert run.main(["--db", str(db), "--run-id", "grid", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert alone["skipped_this_time"] == 8 and alone["groups"] == again["groups"]


def test_flags_override_the_file(tmp_path: Path, capsys, providers):
    from cli import run

    _register_fake_provider(providers)
    config = _write(tmp_path, GRID)
    db = tmp_path / "d.db"
    argv = [
        "--config",
        str(config),
        "--db",
        str(db),
        "--run-id",
        "one",
        "--json",
        "--no-trace",
        "--turns",
        "1",
        "--mode",
        "implicit",
        "--target-model",
        "fake:only",
        "--categories",
        "race",
        "--retries",
        "0",
        "--rate-limit",
        "fake=100",
        "--no-cache",
    ]
    assert run.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dialogues"] == 1 and summary["turns"] == 1
    assert summary["cache"]["enabled"] is False
    store = open_writer(db)
    (dialogue,) = store.dialogues("one")
    # One target: the thread id keeps the form runs always had, so older runs still resume.
    assert dialogue["thread_id"] == f"one:{dialogue['seed_id']}:implicit"
    stored = store.get_run("one")["config"]
    settings, resolved = stored["run_config"], stored["resolved"]
    assert (
        settings["models"]["targets"] == ["fake:only"]
        and settings["modes"] == ["implicit"]
        and resolved["models"]["target"] == "fake:only"
    )
    assert settings["retry"]["attempts"] == 1 and settings["rate_limits"] == {"fake": 100.0}
    assert resolved["sampling"]["judge"] == {"temperature": 0.0, "max_tokens": 100}  # still from the file


@pytest.mark.parametrize(
    "text, expected",
    [
        ("turns = 'ten'\n", "turns must be a whole number"),
        ("colour = 'red'\n", "unknown key 'colour'"),
        ("mode = 'implicit'\nmodes = ['assessment']\n", "either mode or modes"),
        ("[models]\nuser = 'fake:u'\ncritic = 'fake:c'\n", "unknown key models.critic"),
        ("[sampling.user]\ntemprature = 0.1\n", "unknown key sampling.user.temprature"),
        ("[sampling.boss]\ntemperature = 0.1\n", "[sampling.boss] is neither a role"),
        ("[rate_limits]\nopenai = -5\n", "rate_limits.openai must be requests per minute"),
        ("[retry]\nattempts = 0\n", "retry.attempts"),
        ("turns = [\n", "is not valid TOML"),
    ],
)
@pytest.mark.slow
def test_bad_experiment_file_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, text, expected):
    config = _write(tmp_path, text)
    db = tmp_path / "out" / "d.db"
    result = run_cli("--config", str(config), "--db", str(db))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert not db.parent.exists()
    with pytest.raises(ExperimentError):
        load_experiment(config)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--config", "/nonexistent/exp.toml"], "not found"),
        (["--mode", "implicit", "zero-shot"], "different numbers of turns"),
        (["--target-model", "fake:a", "fake:a"], "lists a spec twice"),
        (["--rate-limit", "openai"], "is not NAME=RPM"),
        (["--retries", "-1"], "--retries"),
        (["--request-timeout", "0"], "--request-timeout"),
        (["--target-model", "hf:https://x.endpoints.huggingface.cloud"], "HF_TOKEN"),
    ],
)
@pytest.mark.slow
def test_bad_grid_flags_are_one_line_exit_2(tmp_path: Path, args, expected):
    db = tmp_path / "out" / "d.db"
    env = {"PYTHONPATH": str(REPO)}
    result = forked.run(
        "tests.support.fake_cli",
        "run",
        "--user-model",
        "fake:u",
        "--judge-model",
        "fake:j",
        *args,
        "--db",
        str(db),
        cwd=REPO,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))} | env,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert not db.parent.exists()


@pytest.mark.slow
def test_a_target_that_exhausts_its_retries_fails_alone_and_a_rerun_retries_only_it(tmp_path: Path):
    """Through the openai: provider against two stub servers, one of them answering every request 429 (a per-call
    error).

    (Every request answered 500 would be the provider's outage, which the circuit rides out:
    tests/unit/models/test_provider_outage.py.)
    """
    flaky_reply = lambda body, n: f"Flaky target reply {n}."  # noqa: E731 - never equal to a healthy reply
    with (
        StubServer() as healthy,
        StubServer(faults=Faults(rate_limit_429=1.0, retry_after=None), reply=flaky_reply) as flaky,
    ):
        config = _write(
            tmp_path,
            f"""
turns = 2
categories = ["gender", "age"]
max_concurrency = 4

[models]
user = "openai:helper"
judge = "openai:helper"
targets = ["openai:steady", "openai:flaky"]

[sampling.user]
base_url = "{healthy.url}"
[sampling.judge]
base_url = "{healthy.url}"
[sampling."openai:steady"]
base_url = "{healthy.url}"
[sampling."openai:flaky"]
base_url = "{flaky.url}"

[retry]
attempts = 2
base_delay = 0.01
timeout = 10
""",
        )
        db = tmp_path / "d.db"
        args = ["--config", str(config), "--db", str(db), "--run-id", "r", "--json", "--no-trace"]
        first = run_cli(*args)
        assert first.returncode == 1, first.stderr  # two dialogues failed
        summary = json.loads(first.stdout)
        assert summary["finished"] == 2 and len(summary["failed"]) == 2
        for item in summary["failed"]:
            assert item["thread_id"].endswith(":openai:flaky")
            assert "gave up after 2 attempts (HTTP 429)" in item["error"]
        assert summary["retries"]["gave_up"] == 2 and summary["retries"]["by_reason"] == {"HTTP 429": 2}
        assert len(flaky.requests) == 4  # two dialogues × two attempts at turn 1

        healthy_before = len(healthy.requests)
        flaky.faults = Faults()
        second = run_cli(*args)
        assert second.returncode == 0, second.stderr
        again = json.loads(second.stdout)
        assert again["finished"] == 4 and again["failed"] == [] and again["skipped_this_time"] == 2
        # Only the failed dialogues ran again: 2 turns × 1 target call each on the flaky server...
        assert len(flaky.requests) == 4 + 4
        # ...and on the healthy one their judge calls and turn 2's user call (turn 1's user message is in the
        # checkpoint).
        assert len(healthy.requests) - healthy_before == 2 * (2 + 1)
        store = open_writer(db)
        for d in store.dialogues("r"):
            assert [t["idx"] for t in store.turns(d["thread_id"])] == [1, 2]
        store.close()


@pytest.mark.parametrize(
    "text, line, expected",
    [
        ("# a study\nturns = 5\n\nlimit = 0\n", 4, "limit must be a whole number >= 1"),
        ('user_prompt = """\ncolour = 1\n"""\ncolour = 2\n', 4, "unknown key 'colour'"),
        ("[models]\nuser = 'fake:u'\n\n  critic = 'fake:c'\n", 4, "unknown key models.critic"),
        ("[sampling]\nuser.temperature = 0.1\nuser.temprature = 0.1\n", 3, "unknown key sampling.user.temprature"),
        ("[sampling.'openai:x']\ntemperature = 0.1\n[sampling.boss]\n", 3, "[sampling.boss] is neither a role"),
        ("[rate_limits]\nopenai = 5\n'hf' = -5 # per minute\n", 3, "rate_limits.hf must be requests per minute"),
        ("[retry]\n\nattempts = [\n  1,\n]\n", 3, "retry.attempts has a wrong value [1]"),
        ("mode = 'implicit'\nseeds = 'builtin'\nmodes = ['assessment']\n", 3, "either mode or modes"),
        ("[models]\ntargets = ['fake:a', 'fake:a']\n", 2, "models.targets lists a spec twice"),
        ("\ufeffturns = 'ten'\n", 1, "turns must be a whole number"),
        ("turns = 3\nmodes = [\n  'implicit',\n  'sideways',\n]\n", 2, "unknown mode 'sideways': use one of implicit"),
    ],
    ids=[
        "top",
        "after a string",
        "table",
        "dotted",
        "quoted",
        "comment",
        "array",
        "mode and modes",
        "config",
        "bom",
        "an unknown mode",
    ],
)
def test_a_wrong_value_names_the_path_and_the_line_of_its_key(tmp_path: Path, text, line, expected):
    from graph.config.run_config import ConfigError, RunConfig

    config = _write(tmp_path, text)
    with pytest.raises((ExperimentError, ConfigError)) as caught:
        RunConfig.from_toml(config)
    message = str(caught.value)
    assert message.startswith(f"{config}:{line}: ") and expected in message and "\n" not in message, message


def test_bytes_that_are_not_utf8_name_their_line(tmp_path: Path):
    config = tmp_path / "exp.toml"
    config.write_bytes(b"turns = 5\n# caf\xe9\n")
    with pytest.raises(ExperimentError, match=r"exp\.toml:2: byte 0xe9 is not UTF-8: save the file as UTF-8"):
        load_experiment(config)


@pytest.mark.parametrize(
    "text, line, expected",
    [
        ("turns = 2\n\n[models]\nuser = 'local:gemma3-270m'\njudge = 'nope:x'\n", 5, "models.judge = 'nope:x'"),
        ("turns = 2\n[models]\ntargets = ['local:gemma3-270m', 'nope:t']\n", 3, "models.targets = 'nope:t'"),
        ("turns = 2\nseeds = 'absent/seeds.jsonl'\n", 2, "seeds: seed source"),
        ("turns = 2\n# the judge's own prompt\njudge_prompt = 'absent.md'\n", 3, "judge_prompt: cannot read"),
    ],
    ids=["a model spec", "a grid's target", "the seeds path", "a prompt path"],
)
def test_a_value_found_wrong_as_the_run_is_built_names_the_files_line(tmp_path: Path, text, line, expected):
    """Values checked only when the run is built (a model's provider, the seeds file, a prompt file) still name the
    experiment file's path and the line of their key; given by a flag instead, the flag is named."""
    config = _write(tmp_path, text)
    db = tmp_path / "out" / "d.db"
    result = run_cli("--config", str(config), "--db", str(db), "--estimate")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {config}:{line}: ") and expected in lines[0], lines
    assert not db.parent.exists()


def test_a_flag_that_overrides_the_file_is_named_rather_than_the_file(tmp_path: Path):
    config = _write(tmp_path, "turns = 2\n[models]\njudge = 'local:gemma3-270m'\n")
    result = run_cli("--config", str(config), "--db", str(tmp_path / "d.db"), "--judge-model", "nope:y", "--estimate")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --judge-model 'nope:y': unknown model provider"), lines
