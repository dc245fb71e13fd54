"""Experiment files: a TOML description of a run (``python -m graph.run --config FILE``).

Top-level keys are the command-line flags with underscores (``turns``, ``seeds``,
``max_concurrency``...), plus ``modes`` (a list) and ``cache``; tables:

- ``[models]``: ``user``, ``judge``, and ``target`` (one spec) or ``targets`` (a list);
- ``[sampling.ROLE]`` (``user``, ``target``, ``judge``) and ``[sampling."SPEC"]``:
  ``temperature``, ``max_tokens`` (the visible reply's cap), ``thinking`` (``"off"``, ``"on"`` or a
  reasoning budget in tokens), ``base_url`` and ``extra`` (a table passed to the provider's constructor
  as is); a spec's table overrides its role's;
- ``[rate_limits]``: requests per minute by provider (``openai``) or by spec;
- ``[retry]``: ``attempts``, ``base_delay``, ``max_delay``, ``max_retry_after``, ``timeout``.

Relative paths (``seeds``, ``db``, ``fairmt_dir``) are relative to the file. Flags
given on the command line override the file. See examples/paper.toml.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from checkpoints.location import DbLocation, is_postgres_url, parse_db
from checkpoints.outages import parse_duration
from checkpoints.paths import StoreError
from checkpoints.vocabulary import ROLES
from graph.config.model_settings import RetrySettings, RoleSampling
from graph.config.toml_lines import TomlSource
from nodes.modes import ALL_MODES

SAMPLING_KEYS = ("temperature", "max_tokens", "base_url", "extra", "thinking")
RETRY_KEYS = ("attempts", "base_delay", "max_delay", "max_retry_after", "timeout")


class ExperimentError(ValueError):
    """An experiment file that cannot be read or holds a wrong key or value; says which and the fix."""


@dataclass
class Experiment:
    """A parsed experiment file."""

    path: Path
    options: dict[str, Any] = field(default_factory=dict)
    """Values by command-line destination (``turns``, ``target_model``...), used where no flag was given."""
    sampling: dict[str, dict[str, Any]] = field(default_factory=dict)
    rate_limits: dict[str, float] = field(default_factory=dict)
    retry: dict[str, Any] = field(default_factory=dict)
    source: TomlSource | None = None
    """The file's text: ``source.at("models", "user")`` names the file and the line of a key."""

    def at(self, *keys: str) -> str:
        """``FILE:LINE`` of a (dotted) key, as an error about its value begins (``modes`` may be written ``mode``,
        ``models.targets`` ``models.target``)."""
        if self.source is None:
            return str(self.path)
        return self.source.at(keys, *([_SPELLED[keys]] if keys in _SPELLED else []))


_SPELLED = {("modes",): ("mode",), ("models", "targets"): ("models", "target")}


# key → (argparse destination, check)
def _text(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _texts(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(_text(x) for x in v)


def _duration(v: Any) -> bool:
    try:
        parse_duration(v)
    except (ValueError, TypeError):
        return False
    return not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_TOP: dict[str, tuple[str, Any, str]] = {
    "mode": ("mode", _text, "a mode name"),
    "modes": ("mode", _texts, "a list of mode names"),
    "turns": ("turns", _count, "a whole number >= 1"),
    "seeds": ("seeds", _text, "builtin, FILE.jsonl or fairmt:DIR"),
    "per_category": ("per_category", _count, "a whole number >= 1"),
    "categories": ("categories", _texts, "a list of categories"),
    "limit": ("limit", _count, "a whole number >= 1"),
    "sample_seed": ("sample_seed", _whole, "a whole number"),
    "sampling_seed": ("sampling_seed", _whole, "a whole number"),
    "max_concurrency": ("max_concurrency", _count, "a whole number >= 1"),
    "db": ("db", _text, "a file path or a postgresql:// URL"),
    "run_id": ("run_id", _text, "a run id"),
    "base_url": ("base_url", _text, "a URL"),
    "fairmt_dir": ("fairmt_dir", _text, "a directory"),
    "cache": ("no_cache", lambda v: isinstance(v, bool), "true or false"),
    "samples": ("samples", _count, "a whole number >= 1"),
    "pricing": ("pricing", _text, "a pricing file (TOML)"),
    "max_cost": ("max_cost", lambda v: _number(v) and v > 0, "a number of USD > 0"),
    "outage_budget": ("outage_budget", _duration, 'seconds (a number) or a duration such as "10m"'),
    "judge_reasoning": ("judge_reasoning", lambda v: isinstance(v, bool), "true or false"),
    "strict_sampling": ("strict_sampling", lambda v: isinstance(v, bool), "true or false"),
    "leakage": ("leakage", lambda v: v in ("regenerate", "keep"), '"regenerate" or "keep"'),
    "judge_prompt": ("judge_prompt", _text, "a prompt file path (relative to this file)"),
    "user_prompt": ("user_prompt", _text, "a prompt file path (relative to this file)"),
    "target_prompt": ("target_prompt", _text, "a prompt file path (relative to this file)"),
}
_PROMPT_KEYS = ("judge_prompt", "user_prompt", "target_prompt")
_TABLES = ("models", "sampling", "rate_limits", "retry")


def read_toml(
    path: Path, error: type[Exception], *, what: str, flag: str, hint: str = ""
) -> tuple[dict[str, Any], TomlSource]:
    """A TOML file's top table and its source (for the line of a key); a missing file, a directory, bytes that are not
    UTF-8 or bad TOML raise one ``error`` line."""
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8-sig")  # a byte order mark, as some editors write one, is no content
        return tomllib.loads(text), TomlSource(path, text)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error(f"{path}:{line}: byte 0x{raw[exc.start]:02x} is not UTF-8: save the file as UTF-8") from None
    except FileNotFoundError:
        raise error(f"{what} file {path} not found: check the {flag} path{hint}") from None
    except IsADirectoryError:
        raise error(f"{flag} {path} is a directory: give a .toml file{hint}") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path} is not valid TOML ({exc}): fix the file") from None


def _store_location(path: Path, value: str, where: str) -> DbLocation:
    """The file's ``db``: a postgresql:// URL (checked, no password in it) or a SQLite path relative to the file."""
    try:
        return parse_db(value if is_postgres_url(value) else _relative_to(path, value), source=f"{where}: db")
    except StoreError as exc:
        raise ExperimentError(str(exc)) from None


def load_experiment(path: str | Path) -> Experiment:
    """Read and check an experiment file; every problem is one :class:`ExperimentError` line."""
    path = Path(path).expanduser()
    data, source = read_toml(path, ExperimentError, what="experiment", flag="--config")
    experiment = Experiment(path=path, source=source)
    at = experiment.at
    for key, value in data.items():
        if key in _TABLES:
            if not isinstance(value, dict):
                raise ExperimentError(f"{at(key)}: {key} must be a table ([{key}])")
            continue
        if key not in _TOP:
            known = ", ".join([*_TOP, *(f"[{t}]" for t in _TABLES)])
            raise ExperimentError(f"{at(key)}: unknown key {key!r}: use {known}")
        dest, check, what = _TOP[key]
        if not check(value):
            raise ExperimentError(f"{at(key)}: {key} must be {what}, got {value!r}")
        if key == "cache":
            value = not value
        elif key == "db":
            value = _store_location(path, value, at(key))
        elif key in ("fairmt_dir", "pricing"):
            value = _relative_to(path, value)
        elif key in _PROMPT_KEYS:
            value = Path(_relative_to(path, value))
        elif key == "seeds":
            value = _seed_source(path, value)
        if dest in experiment.options and dest == "mode":
            raise ExperimentError(f"{at(key)}: give either mode or modes, not both")
        if key in ("mode", "modes") and (
            unknown := [m for m in ([value] if key == "mode" else value) if m not in ALL_MODES]
        ):
            raise ExperimentError(f"{at(key)}: unknown mode {unknown[0]!r}: use one of {', '.join(ALL_MODES)}")
        experiment.options[dest] = Path(value) if key == "pricing" else value
    _models(data.get("models", {}), experiment)
    _sampling(data.get("sampling", {}), experiment)
    for name, rpm in data.get("rate_limits", {}).items():
        if not _number(rpm) or rpm <= 0:
            raise ExperimentError(
                f"{at('rate_limits', name)}: rate_limits.{name} must be requests per minute > 0, got {rpm!r}"
            )
        experiment.rate_limits[name] = float(rpm)
    retry = {key: None if value is False else value for key, value in data.get("retry", {}).items()}
    experiment.retry = _checked(RetrySettings, retry, experiment, ("retry",), RETRY_KEYS)
    return experiment


def _checked(
    model: type[BaseModel], table: dict[str, Any], experiment: Experiment, name: tuple[str, ...], keys: tuple[str, ...]
) -> dict[str, Any]:
    """``table`` validated by ``model``; its first error as one line (an unknown key lists the known ones)."""
    try:
        return model.model_validate(table).model_dump(exclude_unset=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0])
        where, dotted = experiment.at(*name, key), ".".join((*name, key))
        if error["type"] == "extra_forbidden":
            raise ExperimentError(f"{where}: unknown key {dotted}: use {', '.join(keys)}") from None
        value = table[key]
        raise ExperimentError(f"{where}: {dotted} has a wrong value {False if value is None else value!r}") from None


def _models(table: dict[str, Any], experiment: Experiment) -> None:
    at = experiment.at
    for key, value in table.items():
        if key in ("user", "judge", "target"):
            if not _text(value):
                raise ExperimentError(
                    f"{at('models', key)}: models.{key} must be a model spec such as openai:gpt-4o-mini"
                )
            experiment.options[f"{key}_model"] = [value] if key == "target" else value
        elif key == "targets":
            if not _texts(value):
                raise ExperimentError(f"{at('models', key)}: models.targets must be a list of model specs")
            if "target_model" in experiment.options:
                raise ExperimentError(f"{at('models', key)}: give either models.target or models.targets, not both")
            experiment.options["target_model"] = list(value)
        else:
            raise ExperimentError(f"{at('models', key)}: unknown key models.{key}: use user, judge, target or targets")


def _sampling(table: dict[str, Any], experiment: Experiment) -> None:
    at = experiment.at
    for name, settings in table.items():
        where = at("sampling", name)
        if not isinstance(settings, dict):
            raise ExperimentError(f'{where}: sampling.{name} must be a table ([sampling.{name}] or [sampling."SPEC"])')
        if name not in ROLES and ":" not in name:
            raise ExperimentError(
                f"{where}: [sampling.{name}] is neither a role ({', '.join(ROLES)}) nor a provider:model spec"
            )
        experiment.sampling[name] = _checked(RoleSampling, settings, experiment, ("sampling", name), SAMPLING_KEYS)


def given_in_file(path: Path | None, keys: tuple[str, ...], value: object) -> str | None:
    """``FILE:LINE: dotted.key`` of the key of experiment file ``path`` that holds ``value`` (as written, or resolved
    against the file as its paths are), for an error found only when the run is built; None when the file does not
    hold it there (a flag gave the value) or there is no file."""
    if path is None:
        return None
    try:
        data, source = read_toml(path, ExperimentError, what="experiment", flag="--config")
    except ExperimentError:
        return None
    for spelled in (keys, *([_SPELLED[keys]] if keys in _SPELLED else [])):
        node: Any = data
        for key in spelled:
            node = node.get(key) if isinstance(node, dict) else None
        written = [item for item in (node if isinstance(node, list) else [node]) if isinstance(item, str)]
        forms = {form for item in written for form in (item, _relative_to(path, item), _seed_source(path, item))}
        if str(value) in forms:
            return f"{source.at(spelled)}: {'.'.join(spelled)}"
    return None


def model_given_as(path: Path | None, role: str, spec: str) -> str:
    """How an error about a role's model spec, found only as the run is built, names where it was given: experiment
    file ``path``'s ``FILE:LINE: models.judge = 'spec'`` when the file gave it, else ``judge_model='spec'`` (which
    commands say as their flag)."""
    where = given_in_file(path, ("models", "targets" if role == "target" else role), spec)
    return f"{where} = {spec!r}" if where else f"{role}_model={spec!r}"


def _relative_to(path: Path, value: str) -> str:
    target = Path(value).expanduser()
    return str(target if target.is_absolute() else (path.parent / target).resolve())


def _seed_source(path: Path, value: str) -> str:
    if value == "builtin":
        return value
    if value.startswith("fairmt:"):
        return "fairmt:" + _relative_to(path, value.removeprefix("fairmt:"))
    return _relative_to(path, value)
