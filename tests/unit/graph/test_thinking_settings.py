"""--thinking and --max-tokens as run settings: flags and experiment-file keys onto the sampling tables, one line for a
bad value, recorded with the run, and a run given again with another thinking setting refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from graph.config.experiment import ExperimentError, load_experiment
from graph.config.run_config import ConfigError, RunConfig, sampling_identity
from graph.config.stored import given_again


def _config(*argv: str, experiment=None) -> RunConfig:
    from cli import run

    args = run.build_parser().parse_args(list(argv))
    return RunConfig.from_flags(args, explicit=run._explicit_flags(list(argv)), experiment=experiment)


def test_a_bare_value_is_the_targets_and_role_values_set_each_role() -> None:
    config = _config("--thinking", "on", "judge=off", "--max-tokens", "300", "user=80")
    assert config.sampling_for("target", "openai:t").thinking == "on"
    assert config.sampling_for("judge", "openai:j").thinking == "off"
    assert config.sampling_for("user", "openai:u").thinking is None
    assert config.sampling_for("target", "openai:t").max_tokens == 300
    assert config.sampling_for("user", "openai:u").max_tokens == 80
    assert config.sampling_for("judge", "openai:j").max_tokens == 250
    assert _config("--thinking", "2048").sampling_for("target", "x:y").thinking == 2048


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--thinking", "maybe"], "--thinking maybe: thinking must be off, on or a number of tokens"),
        (["--thinking", "0"], "--thinking 0: a thinking budget must be 1 or more tokens"),
        (["--thinking", "critic=on"], "--thinking critic=on: the role must be user, target or judge"),
        (["--max-tokens", "lots"], "--max-tokens lots: give the reply's cap as a number of tokens"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_flag(argv, said) -> None:
    with pytest.raises(ConfigError, match="^" + said.replace("(", r"\(")):
        _config(*argv)


def test_experiment_files_take_thinking_and_the_judge_reasoning_keys(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    path.write_text(
        "judge_reasoning = true\nstrict_sampling = true\n[sampling.target]\nthinking = 512\nmax_tokens = 200\n"
    )
    config = _config("--config", str(path), experiment=load_experiment(path))
    assert config.judge_reasoning and config.strict_sampling
    assert config.sampling_for("target", "openai:t").thinking == 512
    assert (
        _config("--config", str(path), "--thinking", "off", experiment=load_experiment(path))
        .sampling_for("target", "openai:t")
        .thinking
        == "off"
    )  # a flag over the file
    path.write_text('[sampling.target]\nthinking = "sometimes"\n')
    with pytest.raises(ExperimentError, match="sampling.target.thinking has a wrong value 'sometimes'"):
        load_experiment(path)


def test_a_run_given_again_with_another_thinking_setting_is_refused() -> None:
    stored = _config("--thinking", "on")
    again = _config("--thinking", "off", "--run-id", "r")
    with pytest.raises(ConfigError, match="thinking=.* contradicts run r"):
        given_again(stored, again, flags={"thinking"}, run_id="r")
    same = given_again(stored, _config("--thinking", "on", "--run-id", "r"), flags={"thinking"}, run_id="r")
    assert same.sampling_for("target", "openai:t").thinking == "on"
    # A resumed run compares each role's sampling, thinking included (only where it is set: older runs compare as
    # they did).
    on, off = stored.sampling_for("target", "openai:t"), again.sampling_for("target", "openai:t")
    assert sampling_identity({"target": on}) != sampling_identity({"target": off})
    assert "thinking" not in sampling_identity({"user": stored.sampling_for("user", "openai:u")})["user"]
