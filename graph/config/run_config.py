"""The one run configuration: built from flags or an experiment file, stored with its run, and the one place its models
are built.

- :meth:`RunConfig.from_flags`: ``python -m graph.run``'s options, the experiment file's values
  under any flag not given on the command line;
- :meth:`RunConfig.from_toml`: an experiment file alone (graph/config/experiment.py checks its keys);
- :meth:`RunConfig.stored_record`: what a run stores in ``runs.config`` (a :class:`checkpoints.run_record.RunRecord`):
  this configuration as a versioned dump (sampling, base URLs, retries and prompt texts pinned as they resolved) and
  the models it resolved to;
  :func:`graph.config.stored.stored_run_config` reads it back with one validate call (a row older code wrote goes
  through
  :func:`checkpoints.run_record.upgrade` first), and :meth:`RunConfig.for_dialogue` adapts it to resume,
  branch or work on one dialogue.

:meth:`RunConfig.build_models` (and :meth:`RunConfig.model_for`, one role) is the only place a
run's, a branch's or a labeller's chat models are built. A value pydantic refuses becomes one
:class:`ConfigError` line.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError, field_validator

import prompts
from checkpoints.location import DbLocation, PostgresURL, locate_db
from checkpoints.outages import parse_duration
from checkpoints.paths import StoreError
from checkpoints.redaction import redact_settings, strip_credentials
from checkpoints.run_record import SCHEMA_VERSION, Resolved, RunRecord
from checkpoints.vocabulary import ROLES, Role
from graph.config.errors import ConfigError, ModelBuildError
from graph.config.flags import (
    FLAG_FIELDS,
    SPECIAL,
    TOML_KEYS,
    flag_name,
    listed_values,
    one_line,
    parse_db_flag,
    parse_rate_limits,
    parse_role_values,
)
from graph.config.model_settings import RetrySettings, RoleSampling, StrictModel, request_record, role_setting
from models.call_policy import CallPolicy
from models.circuit import DEFAULT_OUTAGE_BUDGET_S
from models.registry import DEFAULT_SPEC, ROLE_SAMPLING, ModelSpecError, RoleModel, Sampling, create_role_model
from nodes.context import Models
from prompts import PromptTemplate

if TYPE_CHECKING:
    from graph.config.experiment import Experiment

DEFAULT_TURNS = 5


class ModelChoice(StrictModel):
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


class PromptSource(StrictModel):
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


class RunConfig(StrictModel):
    """Everything a run is played with: what to play, the models and how they sample and are called."""

    modes: list[str] = Field(default_factory=lambda: ["implicit"], min_length=1)
    turns: int = Field(DEFAULT_TURNS, ge=1)
    seeds: str = "builtin"
    per_category: int | None = Field(None, ge=1)
    categories: list[str] | None = None
    limit: int | None = Field(None, ge=1)
    sample_seed: int = 0
    sampling_seed: int = 0
    max_concurrency: int | None = Field(None, ge=1)
    """Dialogues at once; None: 16 (reached from 4, one more per answer: a slow start), adapting per provider up to
    64, when every model is served (an API or a server), else 1 (graph.run resolves it; models/concurrency.py)."""
    samples: int = Field(1, ge=1)
    leakage: Literal["regenerate", "keep"] = "regenerate"
    fairmt_dir: str | None = None
    db: DbLocation | None = None
    """The store: --db, else the experiment file's ``db`` (see :meth:`store_location` for the rest)."""
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
    judge_reasoning: bool = False
    """Label the target's reasoning too (--judge-reasoning): a second label set, ``reasoning``, beside the reply's."""
    strict_sampling: bool = False
    """Refuse a model whose request drops or changes an asked-for setting (--strict-sampling)."""
    schema_version: Literal[1] = SCHEMA_VERSION
    """The version of this configuration's stored form (:mod:`checkpoints.run_record`)."""

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

    def store_location(self) -> DbLocation:
        """Where the run is stored: --db, else the experiment file's ``db``, else ``$DYMT_ESB_DB``, else the default
        file."""
        try:
            return locate_db(self.db)
        except StoreError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def several_targets(self) -> bool:
        """A grid over targets: each dialogue's thread id then names its target."""
        return len(self.models.targets) > 1

    @property
    def fairmt_source(self) -> str | None:
        """--fairmt-dir, or the DIR of ``--seeds fairmt:DIR``."""
        return self.fairmt_dir or (self.seeds.removeprefix("fairmt:") if self.seeds.startswith("fairmt:") else None)

    # ----------------------------------------------------------------- sources

    @classmethod
    def from_flags(
        cls,
        args: Mapping[str, Any] | argparse.Namespace,
        *,
        explicit: AbstractSet[str] = frozenset(),
        experiment: Experiment | None = None,
    ) -> RunConfig:
        """cli.run's parsed flags (a mapping of argparse destinations); the experiment file's values replace those
        whose flag was not given. Errors name the flags; the library's way in is :meth:`from_options`."""
        given = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
        values = {dest: given[dest] for dest in FLAG_FIELDS if dest in given}
        if experiment is not None:
            values |= {dest: value for dest, value in experiment.options.items() if dest not in explicit}
        from_file = set(experiment.options) - set(explicit) if experiment is not None else set()
        return cls._from_options(
            values, experiment=experiment, base_url_wins="base_url" in explicit, from_file=from_file
        )

    @classmethod
    def from_toml(cls, path: str | Path) -> RunConfig:
        """An experiment file alone; a bad key or value raises one graph.config.experiment.ExperimentError line."""
        from graph.config.experiment import load_experiment

        experiment = load_experiment(path)
        return cls._from_options(dict(experiment.options), experiment=experiment, from_file=set(experiment.options))

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, experiment: Experiment | None = None) -> RunConfig:
        """Keyword options named as the command's flags (``target_model=[...]``, ``turns=10``): the library's way in.

        The experiment file's values stand where an option is not given; an unknown name raises one ConfigError line.
        """
        if unknown := sorted(set(options) - set(FLAG_FIELDS)):
            raise ConfigError(f"unknown option {unknown[0]!r}: use one of {', '.join(sorted(FLAG_FIELDS))}")
        values = dict(options)
        if experiment is not None:
            values = {k: v for k, v in experiment.options.items() if k not in options} | values
        from_file = set(experiment.options) - set(options) if experiment is not None else set()
        return cls._from_options(
            values, experiment=experiment, base_url_wins="base_url" in options, from_file=from_file, keywords=True
        )

    @classmethod
    def _from_options(
        cls,
        values: dict[str, Any],
        *,
        experiment: Experiment | None,
        base_url_wins: bool = False,
        from_file: AbstractSet[str] = frozenset(),
        keywords: bool = False,
    ) -> RunConfig:
        """Field values from argparse destinations; an error names the flag (``keywords``: the keyword argument,
        ``turns=``), or the file's key it came from."""
        values = listed_values(values, keywords=keywords)  # one string is one item; other types one line
        data: dict[str, Any] = {}
        for dest, value in values.items():
            if dest == "mode":
                data["modes"] = list(dict.fromkeys([value] if isinstance(value, str) else value))
            elif dest == "no_cache":
                data["cache"] = not value
            elif dest == "outage_budget" and value is None:
                continue  # not given: the default
            elif dest == "db" and value is not None:
                data[dest] = value if isinstance(value, (Path, PostgresURL)) else parse_db_flag(value)
            elif dest == "pricing" and value is not None:
                data[dest] = Path(value)
            elif dest not in SPECIAL:
                data[dest] = value
        models = {role: values[f"{role}_model"] for role in ("user", "judge") if f"{role}_model" in values}
        if "target_model" in values:
            target = values["target_model"]
            models["targets"] = [target] if isinstance(target, str) else list(target)
        data["models"] = models
        data["prompts"] = {
            role: {"path": Path(values[f"{role}_prompt"])} for role in ROLES if values.get(f"{role}_prompt") is not None
        }
        data["rate_limits"] = (dict(experiment.rate_limits) if experiment else {}) | parse_rate_limits(
            values.get("rate_limit") or []
        )
        retry = dict(experiment.retry) if experiment else {}
        if values.get("retries") is not None:
            retry["attempts"] = values["retries"] + 1
        if values.get("request_timeout") is not None:
            retry["timeout"] = values["request_timeout"]
        data["retry"] = retry
        if experiment is not None:
            data["sampling"] = dict(experiment.sampling)
            data["config_file"] = experiment.path
        for dest in ("thinking", "max_tokens"):
            flag = f"{dest}=" if keywords else "--" + dest.replace("_", "-")
            for role, value in parse_role_values(values.get(dest), flag=flag).items():
                tables = data.setdefault("sampling", {})
                tables[role] = {**tables.get(role, {}), dest: role_setting(dest, value, flag=flag)}
        data["base_url_wins"] = base_url_wins
        try:
            return cls.model_validate(data)
        except ValidationError as exc:

            def name(loc: tuple[Any, ...]) -> str:
                flag = flag_name(loc)
                dest = flag.removeprefix("--").replace("-", "_")
                if experiment is not None and dest in from_file:
                    key = TOML_KEYS.get(dest, dest)
                    return f"{experiment.at(*key.split('.'))}: {key}"
                return f"{dest}=" if keywords and flag.startswith("--") else flag

            raise ConfigError(one_line(exc, name)) from None

    def for_dialogue(
        self,
        *,
        target: str | None = None,
        overrides: Mapping[str, str] | None = None,
        base_url: str | None = None,
        sampling_seed: int | None = None,
    ) -> RunConfig:
        """This (stored) configuration for playing one dialogue on: resuming, branching or a worker's job.

        ``target``: the dialogue's own target (a grid run); ``overrides``: roles given another model
        (a stored base URL then no longer applies to them); ``base_url`` (--base-url) beats the stored ones.
        """
        overrides = dict(overrides or {})
        current = {"user": self.models.user, "judge": self.models.judge, "target": target or self.models.target}
        for role, wanted in overrides.items():
            if wanted == current[role]:
                raise ConfigError(
                    f"{role}_model={wanted!r} is the model the dialogue already uses: choose another or rerun="
                )
        specs = current | overrides
        sampling = dict(self.sampling)
        for role in overrides:
            if role in sampling:
                sampling[role] = sampling[role].model_copy(update={"base_url": None})
        update: dict[str, Any] = {
            "models": ModelChoice(user=specs["user"], judge=specs["judge"], targets=[specs["target"]]),
            "sampling": sampling,
        }
        if base_url is not None:
            update |= {"base_url": base_url, "base_url_wins": True}
        if sampling_seed is not None:
            update["sampling_seed"] = sampling_seed
        return self.model_copy(update=update)

    # ----------------------------------------------------------------- building the models

    def sampling_for(self, role: Role, spec: str, *, seed: int | None = None) -> Sampling:
        """ROLE_SAMPLING ← the role's table ← the spec's; the base URL applies to openai: specs."""
        default = ROLE_SAMPLING[role]
        settings: dict[str, Any] = {
            "temperature": default.temperature,
            "max_tokens": default.max_tokens,
            "base_url": None,
            "extra": {},
            "thinking": None,
        }
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
                from graph.config.experiment import given_in_file

                where = given_in_file(self.config_file, (f"{role}_prompt",), source.path)
                raise ConfigError(f"{where}: {exc}" if where else f"--{role}-prompt: {exc}") from None
        return loaded

    def model_for(
        self,
        role: Role,
        spec: str | None = None,
        *,
        policy: CallPolicy | None = None,
        seed: int | None = None,
        prompt: PromptTemplate | None = None,
    ) -> RoleModel:
        """One role's model (``spec``: one of the grid's targets), with its prompt file if any."""
        spec = spec or (self.models.target if role == "target" else getattr(self.models, role))
        try:
            model = create_role_model(spec, role=role, sampling=self.sampling_for(role, spec, seed=seed), policy=policy)
        except ModelSpecError as exc:
            raise ModelBuildError(role, spec, str(exc)) from None
        if self.strict_sampling and model.sent.notes:
            raise ModelBuildError(
                role,
                spec,
                f"{spec} does not sample as asked ({model.sent.notes[0]}): ask for what it sends, or drop "
                "--strict-sampling",
            )
        return dataclasses.replace(model, prompt=prompt) if prompt is not None else model

    def build_models(
        self,
        policy: CallPolicy | None = None,
        *,
        seed: int | None = None,
        templates: Mapping[Role, PromptTemplate] | None = None,
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
        return CallPolicy(
            retry=self.retry.policy(), rate_limits=dict(self.rate_limits), cache=cache, outage_budget=self.outage_budget
        )

    # ----------------------------------------------------------------- what a run stores

    def run_record(self, models: Models, targets: Sequence[RoleModel] | None = None) -> dict[str, Any]:
        """:meth:`stored_record` as the JSON object the store keeps (for callers that still pass the dict)."""
        return self.stored_record(models, targets).to_stored()

    def stored_record(self, models: Models, targets: Sequence[RoleModel] | None = None) -> RunRecord:
        """What a run stores in ``runs.config``: this configuration, pinned as it resolved, and the models it played.

        Pinned: each role's sampling (the defaults it fell back on included), each built model's base URL
        beside its spec (credentials stripped), the retry policy, and the prompt files' text, so resuming the
        run later plays with the same settings; extra sampling arguments are redacted.
        """
        targets = list(targets or [models.target])
        built = {"user": models.user, "judge": models.judge}
        grid = len(targets) > 1
        fallback = {
            "user": models.user.sampling,
            "judge": models.judge.sampling,
            "target": self.sampling_for("target", "") if grid else targets[0].sampling,
        }
        tables = {name: table.given() for name, table in self.sampling.items()}
        for role, used in fallback.items():  # each role's sampling as it resolved (a spec's own table still beats it)
            tables[role] = tables.get(role, {}) | {"temperature": used.temperature, "max_tokens": used.max_tokens}
            if used.thinking is not None:
                tables[role]["thinking"] = used.thinking
        for model in (models.user, models.judge, *targets):
            if model.sampling.base_url:
                tables.setdefault(model.spec, {})["base_url"] = model.sampling.base_url
        for table in tables.values():
            if table.get("base_url"):
                table["base_url"] = strip_credentials(table["base_url"])
            if table.get("extra"):
                table["extra"] = redact_settings(table["extra"])
        dump = self.model_dump(mode="json", exclude={"db", "base_url", "base_url_wins"})
        dump |= {
            "sampling": tables,
            "retry": {
                k: v for k, v in dataclasses.asdict(self.retry.policy()).items() if k in RetrySettings.model_fields
            },
            "prompts": {
                role: {"path": str(Path(model.prompt.name).resolve()), "text": model.prompt.source}
                for role in ROLES
                if (model := getattr(models, role)).prompt is not None
            },
            "config_file": str(self.config_file.resolve()) if self.config_file else None,
        }
        sampling = {**{role: model.sampling for role, model in built.items()}}
        sampling |= {f"target:{t.spec}": t.sampling for t in targets} if grid else {"target": targets[0].sampling}
        if grid:
            sampling["target"] = self.sampling_for("target", "")
        resolved = Resolved(
            models={role: getattr(models, role).spec for role in ROLES},
            model_ids={
                **{role: getattr(models, role).model_id for role in ROLES},
                **({f"target:{t.spec}": t.model_id for t in targets} if grid else {}),
            },
            sampling=sampling_identity(sampling),
            prompt_files={
                role: getattr(models, role).prompt.sha256 for role in ROLES if getattr(models, role).prompt is not None
            },
            requests={
                **{role: request_record(model) for role, model in built.items()},
                **(
                    {f"target:{t.spec}": request_record(t) for t in targets}
                    if grid
                    else {"target": request_record(targets[0])}
                ),
            },
        )
        return RunRecord(dump, resolved)


def sampling_identity(sampling: Mapping[str, Sampling]) -> dict[str, dict[str, Any]]:
    """What a resumed run must share: temperature, max tokens and thinking per role (and extra arguments if any)."""
    record: dict[str, dict[str, Any]] = {}
    for name, s in sampling.items():
        record[name] = {"temperature": s.temperature, "max_tokens": s.max_tokens}
        if s.thinking is not None:
            record[name]["thinking"] = s.thinking
        if s.extra:
            record[name]["extra"] = redact_settings(s.extra)
    return record
