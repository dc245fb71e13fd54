"""A stored run's configuration: read back from its ``runs.config`` with one validate call, and given again.

Given again (``python -m graph.run --run-id R`` with some flags, or ``dymt.run(run_id=...)``), a flag that would
change what the run plays must repeat the stored value; one for how it is played replaces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from pydantic import ValidationError

from checkpoints.run_record import RunRecord
from checkpoints.vocabulary import ROLES, Role
from graph.config.errors import ConfigError
from graph.config.flags import PLAYING, RUN_DEFINING, one_line
from graph.config.run_config import RunConfig


def stored_run_config(config: RunRecord | Mapping[str, Any] | None, *, run_id: str) -> RunConfig:
    """A run's stored configuration (its ``runs.config``), read back with one validate call; older rows are upgraded
    first."""
    record = config if isinstance(config, RunRecord) else RunRecord.from_stored(config)
    missing = [role for role in ROLES if not record.resolved.models.get(role)]
    if missing:
        raise ConfigError(f"run {run_id} records no model for {', '.join(missing)}")
    try:
        return RunConfig.model_validate(record.run_config, strict=False)
    except ValidationError as exc:
        where = one_line(exc, lambda loc: ".".join(map(str, loc)))
        raise ConfigError(
            f"run {run_id}: its stored settings cannot be read ({where}): rerun it with graph.run"
        ) from None


def given_again(run, given: RunConfig, *, flags: set[str], run_id: str) -> RunConfig:
    """A stored run's configuration (``run``) with the flags given again (``flags``: their argparse destinations).

    A flag not given keeps the stored value. A given flag that would change what the run plays (its
    seeds, modes, turns, models, prompts, samples) must repeat the stored value, else one ConfigError
    names it; a flag for how it is played (concurrency, retries, rate limits, base URL, cache, cost)
    replaces the stored value.
    """
    for dest in sorted(flags & set(RUN_DEFINING)):
        stored, wanted = _defining_value(run, dest), _defining_value(given, dest)
        if stored != wanted:
            flag = f"{dest}="  # the keyword argument; a command says its flag (cli/flag_words.py)
            if dest.endswith("_prompt"):
                source = given.prompts.get(cast(Role, dest.removesuffix("_prompt")))
                wanted, stored = (
                    (source.path if source else None),
                    ("another prompt" if stored is not None else "the built-in one"),
                )
            raise ConfigError(
                f"{flag}{_shown(wanted)} contradicts run {run_id}, stored with {_shown(stored)}: drop {flag} "
                "(an option not given comes from the run) or choose a new run_id="
            )
    update: dict[str, Any] = {"db": given.db, "run_id": given.run_id}
    retry = run.retry
    for dest in flags:
        if dest == "no_cache":
            update["cache"] = given.cache
        elif dest == "rate_limit":
            update["rate_limits"] = run.rate_limits | given.rate_limits
        elif dest == "retries":
            retry = retry.model_copy(update={"attempts": given.retry.attempts})
        elif dest == "request_timeout":
            retry = retry.model_copy(update={"timeout": given.retry.timeout})
        elif dest == "base_url":
            update |= {"base_url": given.base_url, "base_url_wins": True}
        elif dest in PLAYING and dest in RunConfig.model_fields:
            update[dest] = getattr(given, dest)
    if given.config_file is not None:  # an experiment file given again: its tables over the stored ones
        update |= {
            "sampling": run.sampling | given.sampling,
            "rate_limits": run.rate_limits | given.rate_limits,
            "config_file": given.config_file,
        }
        retry = given.retry  # the file's [retry] with --retries and --request-timeout over it
    update["retry"] = retry
    return run.model_copy(update=update)


def _defining_value(config: RunConfig, dest: str) -> Any:
    """The value behind a run-defining flag, comparable between a stored configuration and one given."""
    if dest == "mode":
        return config.modes
    if dest in ("user_model", "judge_model"):
        return getattr(config.models, dest.removesuffix("_model"))
    if dest == "target_model":
        return config.models.targets
    if dest in ("thinking", "max_tokens"):  # per role, as each resolved
        models = config.models
        specs: dict[Role, str] = {"user": models.user, "judge": models.judge, "target": models.target}
        return {role: getattr(config.sampling_for(role, spec), dest) for role, spec in specs.items()}
    if dest.endswith("_prompt"):
        source = config.prompts.get(cast(Role, dest.removesuffix("_prompt")))
        if source is None:
            return None
        try:
            return source.text if source.text is not None else source.path.read_text(encoding="utf-8")
        except OSError:
            return str(source.path)
    return getattr(config, dest)


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(map(str, value))
    if value is None:
        return "none"
    return str(value) if len(str(value)) <= 60 else "another file"
