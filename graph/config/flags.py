"""How ``python -m graph.run``'s flags and an experiment file's keys map onto the run configuration's fields.

Which flags define what a run plays (given again for a stored run, they must repeat its value) and which say how it
is played; the argparse destinations :meth:`RunConfig.from_flags` reads; and how an error names the flag, or the
file's key, a refused value came from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from checkpoints.location import DbLocation, parse_db
from checkpoints.paths import StoreError
from graph.config.errors import ConfigError

# Flags that define what a run plays: given again for a stored run, they must repeat its value.
RUN_DEFINING = (
    "mode",
    "turns",
    "seeds",
    "per_category",
    "categories",
    "limit",
    "sample_seed",
    "sampling_seed",
    "samples",
    "leakage",
    "user_model",
    "judge_model",
    "target_model",
    "user_prompt",
    "judge_prompt",
    "target_prompt",
    "thinking",
    "max_tokens",
    "judge_reasoning",
)
# Flags for how a run is played: given again for a stored run, they replace its value.
PLAYING = ("max_concurrency", "fairmt_dir", "pricing", "max_cost", "outage_budget", "strict_sampling")


def parse_db_flag(value: Any) -> DbLocation:
    try:
        return parse_db(value)
    except StoreError as exc:
        raise ConfigError(str(exc)) from None


def parse_rate_limits(items: Sequence[str]) -> dict[str, float]:
    """``--rate-limit NAME=RPM`` values as requests per minute by provider or spec; ConfigError names a bad one."""
    limits: dict[str, float] = {}
    for item in items:
        name, sep, rpm = item.partition("=")
        try:
            rate = float(rpm)
        except ValueError:
            rate = -1.0
        if not sep or not name or not rate > 0:
            raise ConfigError(f"rate_limit={item!r} is not NAME=RPM (for example openai=500 or openai:gpt-4o=60)")
        limits[name] = rate
    return limits


def parse_role_values(given: Any, *, flag: str) -> dict[str, Any]:
    """``--thinking`` / ``--max-tokens`` values: ``VALUE`` (the target's) or ``ROLE=VALUE``, by role.

    The library passes the same as a string, a list of them, or a mapping of role → value.
    """
    if given is None:
        return {}
    if isinstance(given, dict):
        items = [(str(role), value) for role, value in given.items()]
    else:
        items = [_role_item(str(item)) for item in ([given] if isinstance(given, (str, int)) else given)]
    by_role: dict[str, Any] = {}
    for role, value in items:
        if role not in ("user", "target", "judge"):
            raise ConfigError(
                f"{flag}{'' if flag.endswith('=') else ' '}{role}={value}: the role must be user, target or judge"
            )
        by_role[role] = value
    return by_role


def _role_item(item: str) -> tuple[str, str]:
    role, sep, value = item.partition("=")
    return (role.strip(), value.strip()) if sep else ("target", item.strip())


def one_line(exc: ValidationError, name: Callable[[tuple[Any, ...]], str]) -> str:
    """pydantic's first error as one line: ``NAME has a wrong value V (why)`` or a validator's own words."""
    error = exc.errors()[0]
    where = name(tuple(error["loc"]))
    if where.endswith("=") and error["type"] not in ("value_error", "extra_forbidden"):  # a keyword: turns='five'
        return f"{where}{error.get('input')!r} is a wrong value ({error['msg'].lower()})"
    if error["type"] == "value_error":
        return f"{where} {str(error['msg']).removeprefix('Value error, ')}"
    if error["type"] == "extra_forbidden":
        return f"unknown setting {where}"
    return f"{where} has a wrong value {error.get('input')!r} ({error['msg'].lower()})"


# argparse destinations read by from_flags; those in SPECIAL are translated, not copied.
SPECIAL = frozenset(
    {
        "user_model",
        "judge_model",
        "target_model",
        "user_prompt",
        "judge_prompt",
        "target_prompt",
        "rate_limit",
        "retries",
        "request_timeout",
        "thinking",
        "max_tokens",
    }
)
# The flags that say where the run is and how its models are reached: given again, they replace the stored value.
REACHING = ("db", "run_id", "no_cache", "base_url", "rate_limit", "retries", "request_timeout")
FLAG_FIELDS = (*RUN_DEFINING, *PLAYING, *REACHING)  # every flag is one of the three
TOML_KEYS = {
    "user_model": "models.user",
    "judge_model": "models.judge",
    "target_model": "models.targets",
    "mode": "modes",
    "no_cache": "cache",
}
FLAGS_OF_FIELDS = {
    ("models", "user"): "--user-model",
    ("models", "judge"): "--judge-model",
    ("models", "targets"): "--target-model",
    ("modes",): "--mode",
    ("cache",): "--no-cache",
    ("retry", "attempts"): "--retries",
    ("retry", "timeout"): "--request-timeout",
    ("rate_limits",): "--rate-limit",
}


def flag_name(loc: tuple[Any, ...]) -> str:
    for length in (2, 1):
        if loc[:length] in FLAGS_OF_FIELDS:
            return FLAGS_OF_FIELDS[loc[:length]]
    if loc and loc[0] in ("sampling", "retry", "prompts"):
        return ".".join(map(str, loc))
    return "--" + str(loc[0]).replace("_", "-") if loc else "the settings"


LISTED = ("mode", "target_model", "categories", "rate_limit")  # options that take a list of strings


def listed_values(values: dict[str, Any], *, keywords: bool) -> dict[str, Any]:
    """``values`` with one string given for a list option as that one item (``categories="age"``); any other type but
    a list of strings raises one ConfigError line naming the option (``keywords``: as ``mode=``, else ``--mode``)."""
    out = dict(values)
    for dest in LISTED:
        value = out.get(dest)
        if isinstance(value, str):
            out[dest] = [value]
        elif value is not None and (not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value)):
            said = f"{dest}=" if keywords else "--" + dest.replace("_", "-")
            raise ConfigError(f"{said}{value!r}: give a string or a list of strings")
    return out
