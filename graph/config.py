"""The one run configuration: built from flags, an experiment file or a stored run, and the one place its models are built.

Three sources, one type:

- :meth:`RunConfig.from_flags`: ``python -m graph.run``'s options, the experiment file's values
  under any flag not given on the command line;
- :meth:`RunConfig.from_toml`: an experiment file alone (graph/experiment.py checks its keys);
- :meth:`RunConfig.from_stored`: the ``spec`` a run stored in the ``runs`` table (runs written
  by older code load too), to resume or branch its dialogues.

:meth:`RunConfig.build_models` (and :meth:`RunConfig.model_for`, one role) is the only place a
run's, a branch's or a labeller's chat models are built; :meth:`RunConfig.run_spec` is what a
run stores. A value pydantic refuses becomes one :class:`ConfigError` line.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

import prompts
from checkpoints.redaction import redact_settings, strip_credentials
from checkpoints.vocabulary import ROLES, Role
from nodes.context import Models
from graph.playing import RunSpec
from models.registry import DEFAULT_SPEC, ROLE_SAMPLING, ModelSpecError, RoleModel, Sampling, create_role_model
from checkpoints.outages import parse_duration
from models.call_policy import CallPolicy
from models.circuit import DEFAULT_OUTAGE_BUDGET_S
from models.retries import RetryPolicy
from prompts import PromptTemplate

if TYPE_CHECKING:
    from graph.experiment import Experiment

DEFAULT_TURNS = 5


class ConfigError(ValueError):
    """Settings that do not make a valid run; the message is one line naming the value and the fix."""


class ModelBuildError(ValueError):
    """A role's model that cannot be built here; each command words it with its own flag."""

    def __init__(self, role: Role, spec: str, reason: str) -> None:
        super().__init__(f"{role} model {spec}: {reason}")
        self.role, self.spec, self.reason = role, spec, reason


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class RoleSampling(_Strict):
    """Sampling for a role or a spec (``[sampling.ROLE]``, ``[sampling."SPEC"]``); unset keys fall through."""

    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1)
    base_url: str | None = Field(None, pattern=r"\S")
    extra: dict[str, Any] | None = None

    def given(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True, exclude_none=True)


class RetrySettings(_Strict):
    """``[retry]`` and --retries / --request-timeout; unset keys keep RetryPolicy's defaults."""

    attempts: int | None = Field(None, ge=1)
    base_delay: float | None = Field(None, ge=0)
    max_delay: float | None = Field(None, ge=0)
    max_retry_after: float | None = Field(None, ge=0)
    timeout: float | None = Field(None, gt=0)
    """Seconds per attempt; set to None: the provider's own (``timeout = false`` in a file)."""

    def policy(self) -> RetryPolicy:
        return RetryPolicy(**self.model_dump(exclude_unset=True))


class ModelChoice(_Strict):
    """The model spec of each role; several targets make a grid (the first stands in ``Models.target``)."""

    user: str = DEFAULT_SPEC
    judge: str = DEFAULT_SPEC
    targets: list[str] = Field(default_factory=lambda: [DEFAULT_SPEC], min_length=1)

    @field_validator("targets")
    @classmethod
    def _each_once(cls, targets: list[str]) -> list[str]:
        if len(set(targets)) != len(targets):
            raise ValueError(f"lists a spec twice ({', '.join(targets)}): give each target once")
        return targets

    @property
    def target(self) -> str:
        return self.targets[0]


class PromptSource(_Strict):
    """A prompt file replacing a role's built-in prompt: a path given, or the path and text a run stored."""

    path: Path
    text: str | None = None

    def load(self, role: Role) -> PromptTemplate:
        if self.text is not None:
            return prompts.parse(str(self.path), self.text, path=self.path)
        return prompts.load_file(self.path, role=role)


@dataclass(frozen=True)
class RunModels:
    """A run's built models: one per role, every target of a grid, and the sampling each was built with."""

    models: Models
    targets: list[RoleModel]
    sampling: dict[str, Sampling]
    """By role; in a grid ``target:SPEC`` per target, and ``target`` the targets' role defaults."""


class RunConfig(_Strict):
    """Everything a run is played with: what to play, the models and how they sample and are called."""

    modes: list[str] = Field(default_factory=lambda: ["implicit"], min_length=1)
    turns: int = Field(DEFAULT_TURNS, ge=1)
    seeds: str = "builtin"
    per_category: int | None = Field(None, ge=1)
    categories: list[str] | None = None
    limit: int | None = Field(None, ge=1)
    sample_seed: int = 0
    sampling_seed: int = 0
    max_concurrency: int = Field(1, ge=1)
    samples: int = Field(1, ge=1)
    leakage: Literal["regenerate", "keep"] = "regenerate"
    fairmt_dir: str | None = None
    db: Path | None = None
    run_id: str | None = None
    pricing: Path | None = None
    max_cost: float | None = Field(None, gt=0)
    cache: bool = True
    models: ModelChoice = Field(default_factory=ModelChoice)
    base_url: str | None = None
    """For openai: specs (an OpenAI-compatible server)."""
    base_url_wins: bool = False
    """The base URL was given on the command line: it beats the sampling tables' (for openai: specs)."""
    sampling: dict[str, RoleSampling] = Field(default_factory=dict)
    """By role or by spec; a spec's settings override its role's, which override ROLE_SAMPLING."""
    rate_limits: dict[str, float] = Field(default_factory=dict)
    retry: RetrySettings = Field(default_factory=RetrySettings)
    outage_budget: float = Field(DEFAULT_OUTAGE_BUDGET_S, gt=0)
    """Seconds a provider may stay unreachable before its dialogues fail (--outage-budget; 600, 90s, 10m, 1h)."""
    prompts: dict[Role, PromptSource] = Field(default_factory=dict)
    config_file: Path | None = None

    @field_validator("outage_budget", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value) if isinstance(value, str) else value

    @field_validator("rate_limits")
    @classmethod
    def _positive_rates(cls, limits: dict[str, float]) -> dict[str, float]:
        for name, rpm in limits.items():
            if rpm <= 0:
                raise ValueError(f"{name} must be requests per minute > 0, got {rpm!r}")
        return limits

    @property
    def mode(self) -> str:
        return self.modes[0]

    @property
    def fairmt_source(self) -> str | None:
        """--fairmt-dir, or the DIR of ``--seeds fairmt:DIR``."""
        return self.fairmt_dir or (self.seeds.removeprefix("fairmt:") if self.seeds.startswith("fairmt:") else None)

    # ----------------------------------------------------------------- sources

    @classmethod
    def from_flags(cls, args: argparse.Namespace, *, explicit: set[str] = frozenset(), experiment: Experiment | None = None) -> RunConfig:
        """cli.run's options; the experiment file's values replace those whose flag was not given."""
        values = {dest: getattr(args, dest) for dest in _FLAG_FIELDS if hasattr(args, dest)}
        if experiment is not None:
            values |= {dest: value for dest, value in experiment.options.items() if dest not in explicit}
        from_file = set(experiment.options) - set(explicit) if experiment is not None else set()
        return cls._from_options(values, experiment=experiment, base_url_wins="base_url" in explicit, from_file=from_file)

    @classmethod
    def from_toml(cls, path: str | Path) -> RunConfig:
        """An experiment file alone; a bad key or value raises one graph.experiment.ExperimentError line."""
        from graph.experiment import load_experiment

        experiment = load_experiment(path)
        return cls._from_options(dict(experiment.options), experiment=experiment, from_file=set(experiment.options))

    @classmethod
    def _from_options(
        cls, values: dict[str, Any], *, experiment: Experiment | None, base_url_wins: bool = False, from_file: set[str] = frozenset(),
    ) -> RunConfig:
        """Field values from argparse destinations; an error names the flag, or the file's key it came from."""
        data: dict[str, Any] = {}
        for dest, value in values.items():
            if dest == "mode":
                data["modes"] = list(dict.fromkeys([value] if isinstance(value, str) else value))
            elif dest == "no_cache":
                data["cache"] = not value
            elif dest == "outage_budget" and value is None:
                continue  # not given: the default
            elif dest in ("db", "pricing") and value is not None:
                data[dest] = Path(value)
            elif dest not in _SPECIAL:
                data[dest] = value
        models = {role: values[f"{role}_model"] for role in ("user", "judge") if f"{role}_model" in values}
        if "target_model" in values:
            target = values["target_model"]
            models["targets"] = [target] if isinstance(target, str) else list(target)
        data["models"] = models
        data["prompts"] = {role: {"path": Path(values[f"{role}_prompt"])} for role in ROLES if values.get(f"{role}_prompt") is not None}
        data["rate_limits"] = (dict(experiment.rate_limits) if experiment else {}) | parse_rate_limits(values.get("rate_limit") or [])
        retry = dict(experiment.retry) if experiment else {}
        if values.get("retries") is not None:
            retry["attempts"] = values["retries"] + 1
        if values.get("request_timeout") is not None:
            retry["timeout"] = values["request_timeout"]
        data["retry"] = retry
        if experiment is not None:
            data["sampling"] = dict(experiment.sampling)
            data["config_file"] = experiment.path
        data["base_url_wins"] = base_url_wins
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            def name(loc: tuple[Any, ...]) -> str:
                flag = _flag_name(loc)
                dest = flag.removeprefix("--").replace("-", "_")
                if experiment is not None and dest in from_file:
                    return f"{experiment.path.name}: {_TOML_KEYS.get(dest, dest)}"
                return flag

            raise ConfigError(one_line(exc, name)) from None

    @classmethod
    def from_stored(
        cls, spec: Mapping[str, Any], *, run_id: str, target: str | None = None, overrides: Mapping[str, str] | None = None,
        base_url: str | None = None, sampling_seed: int | None = None,
    ) -> RunConfig:
        """The settings a stored run (its ``runs.config["spec"]``) played a dialogue with, to play it on.

        ``target``: the dialogue's own target (a grid run); ``overrides``: roles given another model
        (the run's base URL then no longer applies to it); ``base_url`` (--base-url) beats the stored ones.
        """
        overrides = dict(overrides or {})
        specs = stored_model_specs(spec, run_id=run_id, target=target)
        for role, wanted in overrides.items():
            if wanted == specs[role]:
                raise ConfigError(f"--{role}-model {wanted} is the model the dialogue already uses: choose another or --rerun")
        specs |= overrides
        stored_sampling = spec.get("sampling") or {}
        calls = spec.get("calls") or {}
        stored_urls = calls.get("base_urls") or {}
        sampling: dict[str, dict[str, Any]] = {}
        for role in ROLES:
            stored = stored_sampling.get(f"{role}:{specs[role]}") or stored_sampling.get(role) or {}
            settings = {key: stored[key] for key in ("temperature", "max_tokens") if stored.get(key) is not None}
            if isinstance(settings.get("temperature"), int):
                settings["temperature"] = float(settings["temperature"])
            url = None if role in overrides else stored_urls.get(f"{role}:{specs[role]}") or stored_urls.get(role)
            if url and specs[role].startswith("openai:"):
                settings["base_url"] = url
            sampling[role] = settings
        data = {
            "models": {"user": specs["user"], "judge": specs["judge"], "targets": [specs["target"]]},
            "sampling": sampling,
            "sampling_seed": int(spec.get("sampling_seed") or 0) if sampling_seed is None else sampling_seed,
            "leakage": str(spec.get("leakage") or "regenerate"),
            "prompts": {role: {"path": Path(p["path"]), "text": p["text"]} for role, p in (calls.get("prompt_files") or {}).items()},
            "base_url": base_url,
            "base_url_wins": base_url is not None,
            "run_id": run_id,
            "retry": {k: v for k, v in (calls.get("retry") or {}).items() if k in RetrySettings.model_fields},
            "rate_limits": dict(calls.get("rate_limits") or {}),
            **({"outage_budget": calls["outage_budget"]} if calls.get("outage_budget") else {}),
        }
        try:
            return cls.model_validate(data)
        except (ValidationError, KeyError, TypeError) as exc:
            where = one_line(exc, lambda loc: ".".join(map(str, loc))) if isinstance(exc, ValidationError) else f"{type(exc).__name__}: {exc}"
            raise ConfigError(f"run {run_id}: its stored settings cannot be read ({where}): rerun it with graph.run") from None

    # ----------------------------------------------------------------- building the models

    def sampling_for(self, role: Role, spec: str, *, seed: int | None = None) -> Sampling:
        """ROLE_SAMPLING ← the role's table ← the spec's; the base URL applies to openai: specs."""
        default = ROLE_SAMPLING[role]
        settings: dict[str, Any] = {"temperature": default.temperature, "max_tokens": default.max_tokens, "base_url": None, "extra": {}}
        openai_compatible = spec.startswith("openai:")
        if openai_compatible:
            settings["base_url"] = self.base_url
        for name in (role, spec):
            if name in self.sampling:
                settings.update(self.sampling[name].given())
        if self.base_url_wins and openai_compatible:
            settings["base_url"] = self.base_url
        return Sampling(seed=self.sampling_seed if seed is None else seed, **settings)

    def load_prompts(self) -> dict[Role, PromptTemplate]:
        """The prompt files replacing built-in prompts, read and checked (before anything is written)."""
        loaded = {}
        for role, source in self.prompts.items():
            try:
                loaded[role] = source.load(role)
            except prompts.PromptError as exc:
                raise ConfigError(f"--{role}-prompt: {exc}") from None
        return loaded

    def model_for(
        self, role: Role, spec: str | None = None, *, policy: CallPolicy | None = None, seed: int | None = None,
        prompt: PromptTemplate | None = None,
    ) -> RoleModel:
        """One role's model (``spec``: one of the grid's targets), with its prompt file if any."""
        spec = spec or (self.models.target if role == "target" else getattr(self.models, role))
        try:
            model = create_role_model(spec, role=role, sampling=self.sampling_for(role, spec, seed=seed), policy=policy)
        except ModelSpecError as exc:
            raise ModelBuildError(role, spec, str(exc)) from None
        return dataclasses.replace(model, prompt=prompt) if prompt is not None else model

    def build_models(
        self, policy: CallPolicy | None = None, *, seed: int | None = None, templates: Mapping[Role, PromptTemplate] | None = None,
    ) -> RunModels:
        """Every model of the run (``seed``: another sampling seed, for repeated samples)."""
        templates = self.load_prompts() if templates is None else templates
        grid = len(self.models.targets) > 1

        def build(role: Role, spec: str) -> RoleModel:
            return self.model_for(role, spec, policy=policy, seed=seed, prompt=templates.get(role))

        user, judge = build("user", self.models.user), build("judge", self.models.judge)
        targets = [build("target", spec) for spec in self.models.targets]
        sampling = {"user": user.sampling, "judge": judge.sampling}
        sampling |= {f"target:{t.spec}": t.sampling for t in targets} if grid else {"target": targets[0].sampling}
        if grid:
            sampling["target"] = self.sampling_for("target", "", seed=seed)
        return RunModels(Models(user=user, target=targets[0], judge=judge), targets, sampling)

    def call_policy(self, cache: Any = None) -> CallPolicy:
        """Retries and rate limits shared by every model of the run, with the response cache if any."""
        return CallPolicy(retry=self.retry.policy(), rate_limits=dict(self.rate_limits), cache=cache,
                          outage_budget=self.outage_budget)

    # ----------------------------------------------------------------- what a run stores

    def run_spec(
        self, built: RunModels, policy: CallPolicy, templates: Mapping[Role, PromptTemplate], *, run_id: str, turns: int,
        per_category: int | None,
    ) -> RunSpec:
        """The record stored with the run (the same JSON older code wrote, read back by :meth:`from_stored`)."""
        models, targets = built.models, built.targets
        calls = self._calls_record(policy, built.sampling)
        if templates:
            calls["prompt_files"] = {
                role: {"path": str(Path(t.name).resolve()), "sha256": t.sha256, "text": t.source} for role, t in templates.items()
            }
        return RunSpec(
            run_id=run_id,
            mode=self.mode,
            turns=turns,
            seed_source=self.seeds,
            per_category=per_category,
            categories=self.categories,
            limit=self.limit,
            models={role: getattr(models, role).spec for role in ROLES},
            model_ids={
                **{role: getattr(models, role).model_id for role in ROLES},
                **({f"target:{t.spec}": t.model_id for t in targets} if len(targets) > 1 else {}),
            },
            sampling=sampling_identity(built.sampling),
            sampling_seed=self.sampling_seed,
            max_concurrency=self.max_concurrency,
            fairmt_dir=self.fairmt_source,
            modes=self.modes if len(self.modes) > 1 else None,
            targets=[t.spec for t in targets] if len(targets) > 1 else None,
            samples=self.samples,
            calls=calls,
            leakage=self.leakage,
            prompt_files={role: t.sha256 for role, t in templates.items()} or None,
        )

    def _calls_record(self, policy: CallPolicy, sampling: Mapping[str, Sampling]) -> dict[str, Any]:
        """How the run called its models (base URLs without credentials, no secrets): recorded, not identity."""
        return {
            "config_file": str(self.config_file.resolve()) if self.config_file else None,
            "cache": policy.cache is not None,
            "retry": dataclasses.asdict(policy.retry),
            "rate_limits": dict(policy.rate_limits),
            "outage_budget": policy.outage_budget,
            "base_urls": {name: strip_credentials(s.base_url) for name, s in sampling.items() if s.base_url},
        }


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
            raise ConfigError(f"--rate-limit {item!r} is not NAME=RPM (for example openai=500 or openai:gpt-4o=60)")
        limits[name] = rate
    return limits


def sampling_identity(sampling: Mapping[str, Sampling]) -> dict[str, dict[str, Any]]:
    """What a resumed run must share: temperature and max tokens per role (and extra arguments if any)."""
    record: dict[str, dict[str, Any]] = {}
    for name, s in sampling.items():
        record[name] = {"temperature": s.temperature, "max_tokens": s.max_tokens}
        if s.extra:
            record[name]["extra"] = redact_settings(s.extra)
    return record


def stored_model_specs(spec: Mapping[str, Any], *, run_id: str, target: str | None = None) -> dict[str, str]:
    """The model spec of each role a stored run played (``target``: a grid dialogue's own)."""
    specs = dict(spec.get("models") or {})
    if target:
        specs["target"] = target
    missing = [role for role in ROLES if not specs.get(role)]
    if missing:
        raise ConfigError(f"run {run_id} records no model for {', '.join(missing)}")
    return specs


def one_line(exc: ValidationError, name: Callable[[tuple[Any, ...]], str]) -> str:
    """pydantic's first error as one line: ``NAME has a wrong value V (why)`` or a validator's own words."""
    error = exc.errors()[0]
    where = name(tuple(error["loc"]))
    if error["type"] == "value_error":
        return f"{where} {str(error['msg']).removeprefix('Value error, ')}"
    if error["type"] == "extra_forbidden":
        return f"unknown setting {where}"
    return f"{where} has a wrong value {error.get('input')!r} ({error['msg'].lower()})"


# argparse destinations read by from_flags; those in _SPECIAL are translated, not copied.
_SPECIAL = frozenset({
    "user_model", "judge_model", "target_model", "user_prompt", "judge_prompt", "target_prompt",
    "rate_limit", "retries", "request_timeout",
})
_FLAG_FIELDS = (
    "mode", "turns", "seeds", "per_category", "categories", "limit", "sample_seed", "sampling_seed", "max_concurrency",
    "samples", "leakage", "fairmt_dir", "db", "run_id", "pricing", "max_cost", "no_cache", "base_url", "outage_budget",
    *sorted(_SPECIAL),
)
_TOML_KEYS = {"user_model": "models.user", "judge_model": "models.judge", "target_model": "models.targets", "mode": "modes", "no_cache": "cache"}
_FLAGS_OF_FIELDS = {
    ("models", "user"): "--user-model", ("models", "judge"): "--judge-model", ("models", "targets"): "--target-model",
    ("modes",): "--mode", ("cache",): "--no-cache", ("retry", "attempts"): "--retries", ("retry", "timeout"): "--request-timeout",
    ("rate_limits",): "--rate-limit",
}


def _flag_name(loc: tuple[Any, ...]) -> str:
    for length in (2, 1):
        if loc[:length] in _FLAGS_OF_FIELDS:
            return _FLAGS_OF_FIELDS[loc[:length]]
    if loc and loc[0] in ("sampling", "retry", "prompts"):
        return ".".join(map(str, loc))
    return "--" + str(loc[0]).replace("_", "-") if loc else "the settings"
