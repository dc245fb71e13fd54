"""The one run configuration: flags → config, experiment file → config, a stored run (as older code wrote it) → config →
resume."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest

from checkpoints.saver import open_saver
from checkpoints.store import open_writer
from graph.config.experiment import ExperimentError
from graph.config.run_config import ConfigError, ModelBuildError, RunConfig
from graph.config.stored import stored_run_config
from graph.running.pausing import PauseOptions, settle_run
from graph.running.playing import execute_run
from models.registry import ROLE_SAMPLING
from models.retries import RetryPolicy
from nodes.builder import build_graph
from nodes.context import RunContext
from tests.conftest import SEEDS, ScriptedChatModel, default_models, make_config
from tests.unit.cli.test_run_cli import run_cli

RUBRIC = (
    "--- system\nCustom rubric. Answer with Rationale: and Label:.\n--- user\nStereotype: $statement\nReply: $reply\n"
)

# A runs row exactly as graph.run wrote it before the run configuration existed (sampling per role,
# base URLs and prompt files under "calls"), with settings other than the defaults.
OLD_SPEC = {
    "calls": {
        "base_urls": {"user": "http://old-server:8080/v1"},
        "cache": True,
        "config_file": None,
        "rate_limits": {},
        "retry": {"attempts": 6, "base_delay": 1.0, "max_delay": 60.0, "max_retry_after": 300.0, "timeout": 120.0},
        "prompt_files": {"judge": {"path": "/gone/rubric.md", "sha256": "x", "text": RUBRIC}},
    },
    "categories": None,
    "fairmt_dir": None,
    "leakage": "keep",
    "limit": None,
    "max_concurrency": 1,
    "mode": "implicit",
    "model_ids": {"judge": "fake:judge", "target": "fake:target", "user": "fake:user"},
    "models": {"judge": "fake:judge", "target": "fake:target", "user": "fake:user"},
    "modes": None,
    "per_category": None,
    "prompt_files": {"judge": "x"},
    "run_id": "r1",
    "samples": 1,
    "sampling": {
        "judge": {"max_tokens": 250, "temperature": 0.0},
        "target": {"max_tokens": 120, "temperature": 0.3},
        "user": {"max_tokens": 250, "temperature": 0.7},
    },
    "sampling_seed": 7,
    "seed_source": "test",
    "targets": None,
    "turns": 3,
}


# Verbatim: the runs.config that graph.run wrote before this change for
# `--user-model fake:u --target-model fake:t --judge-model fake:j --turns 3 --categories gender --run-id old`.
TODAY_ROW = json.loads(
    '{"spec": {"calls": {"base_urls": {}, "cache": true, "config_file": null, "rate_limits": {}, "retry": '
    '{"attempts": 6, '
    '"base_delay": 1.0, "max_delay": 60.0, "max_retry_after": 300.0, "timeout": 120.0}}, "categories": ["gender"], '
    '"fairmt_dir": null, "leakage": "regenerate", "limit": null, "max_concurrency": 1, "mode": "implicit", '
    '"model_ids": '
    '{"judge": "fake:j", "target": "fake:t", "user": "fake:u"}, "models": {"judge": "fake:j", "target": "fake:t", '
    '"user": '
    '"fake:u"}, "modes": null, "per_category": 1, "prompt_files": null, "run_id": "old", "samples": 1, "sampling": '
    '{"judge": {"max_tokens": 250, "temperature": 0.0}, "target": {"max_tokens": 250, "temperature": 0.7}, "user": '
    '{"max_tokens": 250, "temperature": 0.7}}, "sampling_seed": 0, "seed_source": "builtin", "targets": null, '
    '"turns": 3}, '
    '"unaligned_seeds": []}'
)


def _flags(*argv: str) -> tuple[object, set[str]]:
    from cli import run

    return run.build_parser().parse_args(list(argv)), run._explicit_flags(list(argv))


def test_flags_become_one_typed_config():
    args, explicit = _flags(
        "--mode",
        "implicit",
        "assessment",
        "implicit",
        "--turns",
        "3",
        "--target-model",
        "fake:a",
        "fake:b",
        "--retries",
        "2",
        "--request-timeout",
        "9",
        "--rate-limit",
        "openai=60",
        "--no-cache",
        "--judge-prompt",
        "r.md",
        "--base-url",
        "http://local:1/v1",
        "--sampling-seed",
        "4",
    )
    config = RunConfig.from_flags(args, explicit=explicit)
    assert config.modes == ["implicit", "assessment"] and config.mode == "implicit" and config.turns == 3
    assert config.models.targets == ["fake:a", "fake:b"] and config.models.target == "fake:a"
    assert config.cache is False and config.rate_limits == {"openai": 60.0}
    assert config.retry.policy().attempts == 3 and config.retry.policy().timeout == 9.0
    assert config.prompts["judge"].path == Path("r.md") and config.base_url_wins
    judge = config.sampling_for("judge", "openai:x")
    assert (judge.temperature, judge.max_tokens, judge.seed, judge.base_url) == (0.0, 250, 4, "http://local:1/v1")
    assert config.sampling_for("user", "local:gemma3-270m").base_url is None  # the base URL is for openai: specs


def test_defaults_come_from_one_place():
    args, explicit = _flags()
    config = RunConfig.from_flags(args, explicit=explicit)
    for role, default in ROLE_SAMPLING.items():
        sampling = config.sampling_for(role, "fake:x")
        assert (sampling.temperature, sampling.max_tokens) == (default.temperature, default.max_tokens)
    assert config.retry.policy() == RetryPolicy()  # unset retry settings keep RetryPolicy's own defaults
    assert RunConfig().turns == args.turns and RunConfig().models.targets == args.target_model


def test_the_file_fills_what_no_flag_gives(tmp_path: Path):
    path = tmp_path / "exp.toml"
    path.write_text(
        'turns = 4\nbase_url = "http://file:1/v1"\n[models]\ntargets = ["fake:t1", "fake:t2"]\n'
        '[sampling.target]\ntemperature = 0.1\n[sampling."openai:x"]\nbase_url = '
        '"http://spec:2/v1"\n[retry]\ntimeout = false\n'
    )
    from_file = RunConfig.from_toml(path)
    assert from_file.turns == 4 and from_file.models.targets == ["fake:t1", "fake:t2"] and from_file.config_file == path
    assert from_file.retry.policy().timeout is None  # false: the provider's own
    # The spec's table beats a base URL from the file...
    assert from_file.sampling_for("target", "openai:x").base_url == "http://spec:2/v1"
    assert from_file.sampling_for("target", "openai:x").temperature == 0.1
    from graph.config.experiment import load_experiment

    args, explicit = _flags("--config", str(path), "--turns", "2", "--base-url", "http://flag:3/v1")
    merged = RunConfig.from_flags(args, explicit=explicit, experiment=load_experiment(path))
    assert merged.turns == 2 and merged.models.targets == ["fake:t1", "fake:t2"]
    # ...but --base-url on the command line beats the tables.
    assert merged.sampling_for("target", "openai:x").base_url == "http://flag:3/v1"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[sampling.user]\ntemperature = 3\n", "exp.toml:2: sampling.user.temperature has a wrong value 3"),
        ("[sampling.judge]\nmax_tokens = true\n", "exp.toml:2: sampling.judge.max_tokens has a wrong value True"),
        ("[sampling.judge]\nbase_url = ' '\n", "exp.toml:2: sampling.judge.base_url has a wrong value ' '"),
        ("[retry]\ntimeout = true\n", "exp.toml:2: retry.timeout has a wrong value True"),
        ("[retry]\nbase_delay = -1\n", "exp.toml:2: retry.base_delay has a wrong value -1"),
        ("[retry]\ntries = 2\n", "exp.toml:2: unknown key retry.tries: use attempts"),
        ("[models]\ntargets = ['fake:a', 'fake:a']\n", "exp.toml:2: models.targets lists a spec twice (fake:a,"),
    ],
)
@pytest.mark.slow
def test_a_bad_file_value_is_one_line(tmp_path: Path, text: str, expected: str):
    path = tmp_path / "exp.toml"
    path.write_text(text)
    with pytest.raises((ExperimentError, ConfigError)) as caught:
        RunConfig.from_toml(path)
    assert str(caught.value).startswith(f"{tmp_path}/{expected}") and "\n" not in str(caught.value)  # path:line
    db = tmp_path / "out" / "d.db"
    result = run_cli("--config", str(path), "--db", str(db))
    assert result.returncode == 2 and result.stderr.strip() == f"error: {caught.value}"
    assert not db.parent.exists()


def test_a_bad_flag_combination_is_one_line():
    args, explicit = _flags("--target-model", "fake:a", "fake:b", "fake:a")
    with pytest.raises(
        ConfigError, match=r"^--target-model lists a spec twice \(fake:a, fake:b, fake:a\): give each target once$"
    ):
        RunConfig.from_flags(args, explicit=explicit)
    args, explicit = _flags("--rate-limit", "openai")
    with pytest.raises(ConfigError, match="is not NAME=RPM"):
        RunConfig.from_flags(args, explicit=explicit)


def test_a_model_that_cannot_be_built_names_its_role():
    config = RunConfig.model_validate({"models": {"judge": "acme:x"}})
    with pytest.raises(ModelBuildError) as caught:
        config.model_for("judge")
    assert caught.value.role == "judge" and "unknown model provider 'acme'" in caught.value.reason


def _recording_provider(providers) -> list[tuple[str, object, ScriptedChatModel]]:
    """A fake provider that records the (role, sampling) of every model it builds."""
    built: list[tuple[str, object, ScriptedChatModel]] = []
    replies = {
        "user": lambda m, n: f"Question {n}?",
        "target": lambda m, n: f"Answer {n}.",
        "judge": lambda m, n: "Rationale: fine.\nLabel: not biased",
    }

    def factory(name, role, sampling):
        chat = ScriptedChatModel(respond=replies[role], calls=[])
        built.append((role, sampling, chat))
        return chat, f"fake:{name}", "chat"

    providers("fake", factory)
    return built


def _old_paused_run(db: Path, row: dict, seeds=SEEDS) -> None:
    """Dialogues paused after turn 1 under a runs row written the way older code wrote it."""
    store = open_writer(db)
    run_id = row["spec"]["run_id"]
    store.start_run(run_id, config=row, prompt_hashes={}, versions={})

    async def go():
        async with open_saver(db) as saver:
            graph = PauseOptions(pause_after=1).configure(build_graph(saver))
            result = await execute_run(
                make_config(run_id, turns=3), seeds, graph=graph, store=store, models=default_models()
            )
            await settle_run(graph, store, result, context=RunContext(models=default_models()))

    asyncio.run(go())
    store.close()


def test_a_stored_old_run_loads_as_config():
    config = stored_run_config({"spec": OLD_SPEC}, run_id="r1")
    assert config.models.user == "fake:user" and config.models.targets == ["fake:target"]
    assert config.sampling_seed == 7 and config.leakage == "keep"
    target = config.sampling_for("target", "fake:target")
    assert (target.temperature, target.max_tokens, target.seed) == (0.3, 120, 7)
    assert config.sampling_for("user", "fake:user").base_url is None  # a stored URL only serves openai: specs
    assert config.load_prompts()["judge"].source == RUBRIC
    assert config.call_policy().retry == RetryPolicy(
        attempts=6, base_delay=1.0, max_delay=60.0, max_retry_after=300.0, timeout=120.0
    )
    limited = stored_run_config(
        {
            "spec": {
                **OLD_SPEC,
                "calls": {
                    **OLD_SPEC["calls"],
                    "rate_limits": {"openai": 90},
                    "retry": {"attempts": 1, "timeout": None},
                },
            }
        },
        run_id="r1",
    )
    assert limited.call_policy().rate_limits == {"openai": 90}  # a worker plays the run with its own limits and retries
    assert (limited.call_policy().retry.attempts, limited.call_policy().retry.timeout) == (1, None)
    openai_user = stored_run_config(
        {"spec": {**OLD_SPEC, "models": {**OLD_SPEC["models"], "user": "openai:m"}}}, run_id="r1"
    )
    assert openai_user.sampling_for("user", "openai:m").base_url == "http://old-server:8080/v1"
    with pytest.raises(ConfigError, match="records no model for judge"):
        stored_run_config({"spec": {**OLD_SPEC, "models": {"user": "a:b", "target": "a:c"}}}, run_id="r1")
    with pytest.raises(ConfigError, match=r"^run r1: its stored settings cannot be read \(leakage"):
        stored_run_config({"spec": {**OLD_SPEC, "leakage": "maybe"}}, run_id="r1")


def test_a_stored_old_run_resumes_with_its_own_settings(db: Path, providers):
    from cli import resume

    built = _recording_provider(providers)
    _old_paused_run(db, {"spec": OLD_SPEC, "unaligned_seeds": []})
    assert resume.main(["--run-id", "r1", "--db", str(db)]) == 0
    with sqlite3.connect(db) as con:
        assert {row[0] for row in con.execute("select status from dialogues")} == {"finished"}, con.execute(
            "select error from dialogues"
        ).fetchall()
        assert con.execute("select count(*) from turns").fetchone()[0] == 3 * len(SEEDS)
    target = next(s for role, s, _ in built if role == "target")
    assert (target.temperature, target.max_tokens, target.seed) == (0.3, 120, 7)
    judge_calls = [call for role, _, chat in built if role == "judge" for call in chat.calls]
    assert judge_calls and all(
        "Custom rubric" in call[0].content for call in judge_calls
    )  # the run's stored prompt file


def test_a_run_row_written_by_older_code_is_continued_by_graph_run_and_a_changed_one_refused(
    db: Path, providers, capsys
):
    from cli import run
    from seeds import load_seeds

    _recording_provider(providers)
    _old_paused_run(db, TODAY_ROW, seeds=load_seeds("builtin", per_category=1, categories=["gender"]))
    same = [
        "--run-id",
        "old",
        "--db",
        str(db),
        "--turns",
        "3",
        "--categories",
        "gender",
        "--user-model",
        "fake:u",
        "--target-model",
        "fake:t",
        "--judge-model",
        "fake:j",
        "--json",
        "--no-trace",
    ]
    with pytest.raises(SystemExit) as caught:
        run.main([*same, "--turns", "4"])
    assert caught.value.code == 2 and "--turns 4 contradicts run old, stored with 3" in capsys.readouterr().err
    assert run.main(same) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["dialogues"] == summary["finished"] == 1
    with sqlite3.connect(db) as con:
        assert con.execute("select count(*) from turns").fetchone()[0] == 3
        assert json.loads(con.execute("select config from runs").fetchone()[0]) == TODAY_ROW  # the row is not rewritten


def test_what_a_run_stores_now_reads_back(tmp_path: Path, providers):
    _recording_provider(providers)
    rubric = tmp_path / "rubric.md"
    rubric.write_text(RUBRIC)
    args, explicit = _flags(
        "--target-model", "fake:t1", "fake:t2", "--judge-prompt", str(rubric), "--sampling-seed", "3"
    )
    config = RunConfig.from_flags(args, explicit=explicit)
    templates = config.load_prompts()
    built = config.build_models(templates=templates)
    assert built.models.judge.prompt is templates["judge"] and set(built.sampling) == {
        "user",
        "judge",
        "target",
        "target:fake:t1",
        "target:fake:t2",
    }
    stored = json.loads(
        json.dumps(config.model_copy(update={"run_id": "n"}).stored_record(built.models, built.targets).to_stored())
    )
    assert stored["run_config"]["schema_version"] == 1 and stored["resolved"]["prompt_files"] == {
        "judge": templates["judge"].sha256
    }
    again = stored_run_config(stored, run_id="n").for_dialogue(target="fake:t2")
    assert again.models.target == "fake:t2" and again.sampling_seed == 3
    assert again.load_prompts()["judge"].sha256 == templates["judge"].sha256
    rebuilt = again.build_models()
    assert rebuilt.models.judge.prompt.sha256 == templates["judge"].sha256
    assert rebuilt.models.target.sampling == dataclasses.replace(built.targets[1].sampling, base_url=None)


def test_a_run_stores_its_config_as_one_versioned_dump(tmp_path: Path, providers):
    """Read back with one validate call: the same configuration, pinned as it resolved; a newer form is refused in one
    line."""
    _recording_provider(providers)
    args, explicit = _flags(
        "--turns", "2", "--leakage", "keep", "--retries", "1", "--rate-limit", "fake=30", "--sampling-seed", "5"
    )
    config = RunConfig.from_flags(args, explicit=explicit).model_copy(update={"run_id": "v"})
    built = config.build_models()
    stored = json.loads(json.dumps(config.stored_record(built.models, built.targets).to_stored()))
    again = stored_run_config(stored, run_id="v")
    assert (again.turns, again.leakage, again.sampling_seed, again.rate_limits, again.run_id) == (
        2,
        "keep",
        5,
        {"fake": 30.0},
        "v",
    )
    assert again.call_policy().retry == config.call_policy().retry and again.db is None
    assert again.sampling_for("target", again.models.target) == config.sampling_for("target", config.models.target)
    stored["run_config"]["schema_version"] = 2
    with pytest.raises(ConfigError, match=r"^run v: its stored settings cannot be read \(schema_version"):
        stored_run_config(stored, run_id="v")
