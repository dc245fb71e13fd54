"""A run made ready to play: its configuration resolved against the stored run, its plan checked, nothing written.

Everything here is checked before the store is touched: bad input raises :class:`dymt.DymtError` and writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoints.location import DbLocation, PostgresURL
from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError, check_db_path
from checkpoints.readers import open_reader
from checkpoints.store_outage import StoreOutage
from checkpoints.vocabulary import Role
from dymt.errors import DymtError
from evals.cost import Pricing, PricingError, load_pricing
from evals.estimates import run_estimate
from graph.config.experiment import ExperimentError, load_experiment, model_given_as
from graph.config.run_config import ConfigError, RunConfig
from graph.config.run_plan import RunPlan, plan_run
from graph.config.stored import given_again, stored_run_config
from graph.running.pausing import PauseOptions, check_pause_options
from models.call_policy import CallPolicy
from models.registry import ModelSpecError, parse_spec, thinking_plan
from models.thinking import ThinkingError


@dataclass(frozen=True)
class StoredRun:
    """A run the store already holds: its row and the status of each of its dialogues."""

    run: dict
    statuses: dict[str, str]

    def finished(self, plan: RunPlan) -> bool:
        """Every dialogue the run plans is stored as finished: there is nothing left to play."""
        from graph.running.playing import dialogue_thread_id, plan_dialogues

        jobs = plan_dialogues(plan.config, plan.seeds, plan.scripts_by_mode, list(plan.config.models.targets))
        return all(self.statuses.get(dialogue_thread_id(plan.config, *job)) == "finished" for job in jobs)


@dataclass(frozen=True)
class Prepared:
    """What a run plays and where: the resolved configuration, its plan and prompts, the stored run if any."""

    config: RunConfig
    location: DbLocation
    stored: StoredRun | None
    plan: RunPlan
    templates: dict
    pricing: Pricing | None

    @property
    def server(self) -> PostgresURL | None:
        return self.location if isinstance(self.location, PostgresURL) else None


def config_of(
    config: RunConfig | str | Path | None, options: Mapping[str, Any], given: Iterable[str] | None
) -> tuple[RunConfig, set[str]]:
    """The run's configuration from a RunConfig, an experiment file's path or keyword options (``target_model=[...]``;
    with a path they override the file's), and the options counted as given (for a stored run, those not given come
    from the run)."""
    if isinstance(config, (str, Path)):  # an experiment file: dymt.run("exp.toml", turns=10) as --config exp.toml
        if "config" in options:
            raise DymtError("give the experiment file once: as the first argument or as config=, not both")
        options = {**options, "config": Path(config)}
        config = None
    if config is not None and not isinstance(config, RunConfig):
        raise DymtError(
            f"config={config!r}: give a RunConfig, the path of an experiment file (TOML) or keyword options"
        )
    if config is not None and options:
        raise DymtError(f"give a RunConfig or keyword options, not both (got {', '.join(sorted(options))})")
    try:
        if config is None:
            options = dict(options)
            experiment = load_experiment(options.pop("config")) if options.get("config") is not None else None
            config = RunConfig.from_options(options, experiment=experiment)
            named = set(options) | (set(experiment.options) if experiment is not None else set())
        else:
            named = set(config.model_fields_set) - {"models", "prompts", "retry", "schema_version"}
    except (ExperimentError, ConfigError) as exc:
        raise DymtError(str(exc)) from None
    return config, set(given) if given is not None else named


def prepare(config: RunConfig, *, given: set[str], pauses: PauseOptions, turns_given: bool | None = None) -> Prepared:
    """Resolve ``config`` against the run its id names (if stored), plan it and load its prompts; writes nothing."""
    try:
        location = config.store_location()
        # a run id named by the caller may be a stored run (one made up for a new run is not)
        stored = stored_run(location, config.run_id) if "run_id" in given else None
        if stored is not None and config.run_id:  # the run's own settings under every option not given again
            config = given_again(
                stored_run_config(stored.run["config"], run_id=config.run_id), config, flags=given, run_id=config.run_id
            )
        plan = plan_run(config, turns_given="turns" in given if turns_given is None else turns_given)
        templates = config.load_prompts()
    except (ConfigError, StoreError) as exc:
        raise DymtError(str(exc)) from None
    if message := check_pause_options(
        modes=config.modes, turns=plan.config.turns, interactive=pauses.interactive, pause_after=pauses.pause_after
    ):
        raise DymtError(message)
    return Prepared(
        config=config, location=location, stored=stored, plan=plan, templates=templates, pricing=pricing_of(config)
    )


def stored_run(location: DbLocation, run_id: str | None) -> StoredRun | None:
    """The run ``run_id`` names if the store holds it, read without writing (None: a new run, or no store yet)."""
    if not run_id or (isinstance(location, Path) and not location.exists()):
        return None
    try:
        with open_reader(location) as reader:
            run = reader.get_run(run_id)
            return (
                None if run is None else StoredRun(run, {d["thread_id"]: d["status"] for d in reader.dialogues(run_id)})
            )
    except SchemaTooNewError as exc:  # written by a newer DyMT-ESB: one line, nothing written
        raise DymtError(str(exc)) from None
    except StoreError:  # not a store (yet): opening it for the run says what is wrong
        return None


def pricing_of(config: RunConfig) -> Pricing | None:
    """The run's pricing file read and checked (None without one); a cost cap needs it."""
    pricing = None
    if config.pricing is not None:
        try:
            pricing = load_pricing(config.pricing)
        except PricingError as exc:
            raise DymtError(str(exc)) from None
    if config.max_cost is not None and pricing is None:
        raise DymtError(
            "max_cost= needs pricing=FILE (USD per million tokens per model spec; see examples/pricing.toml)"
        )
    return pricing


def check_priced(config: RunConfig, pricing: Pricing | None) -> None:
    """A cost cap can only count what is priced: every model spec of the run needs a price."""
    chosen = config.models
    if (
        config.max_cost is not None
        and pricing is not None
        and (unpriced := pricing.missing([chosen.user, chosen.judge, *chosen.targets]))
    ):
        raise DymtError(
            f"max_cost=: {pricing.path} has no price for {', '.join(unpriced)}: add a table per spec with "
            "input and output"
        )


def estimate(prepared: Prepared) -> dict:
    """The expected calls, tokens and cost of the planned run, from the store's earlier runs where it has some."""
    chosen = prepared.plan.config.models
    roles: list[tuple[Role, str]] = [
        ("user", chosen.user),
        ("judge", chosen.judge),
        *(("target", t) for t in chosen.targets),
    ]
    for role, spec_text in roles:
        try:
            parse_spec(spec_text)  # an estimate needs no key or package, but a real spec
        except ModelSpecError as exc:
            raise DymtError(f"{model_given_as(prepared.plan.config.config_file, role, spec_text)}: {exc}") from None
    if not isinstance(prepared.location, PostgresURL):
        try:
            check_db_path(prepared.location)  # the run itself leaves this to opening the store
        except StoreError as exc:
            raise DymtError(str(exc)) from None
    return planned_estimate(prepared.plan, prepared.location, prepared.pricing)


def planned_estimate(plan: RunPlan, location: DbLocation, pricing: Pricing | None) -> dict:
    """Estimate's numbers for a planned run."""
    config, chosen = plan.config, plan.config.models
    roles: list[tuple[Role, str]] = [
        ("user", chosen.user),
        ("judge", chosen.judge),
        *(("target", t) for t in chosen.targets),
    ]
    try:  # the estimate reads the store's measured means: a store of a newer DyMT-ESB is one line, nothing written
        return run_estimate(
            location,
            user=chosen.user,
            judge=chosen.judge,
            targets=chosen.targets,
            dialogues_by_mode=plan.dialogues_by_mode,
            samples=config.samples,
            turns=config.turns,
            pricing=pricing,
            max_tokens={(role, spec_text): _request_cap(config, role, spec_text) for role, spec_text in roles},
        )
    except SchemaTooNewError as exc:
        raise DymtError(str(exc)) from None


def _request_cap(config: RunConfig, role: Role, spec_text: str) -> int:
    """The most tokens a call of the role may write: the reply's cap, plus the reasoning budget of a thinking model."""
    sampling = config.sampling_for(role, spec_text)
    try:
        return thinking_plan(parse_spec(spec_text), sampling).cap or sampling.max_tokens
    except (ModelSpecError, ThinkingError):
        return sampling.max_tokens  # a spec the run would refuse: the run says so when it builds its models


def dialogue_estimate(plan: RunPlan, location: DbLocation, pricing: Pricing | None) -> float | None:
    """What one dialogue of the run is expected to cost (the estimate's total over its dialogues), for a cost cap."""
    numbers = planned_estimate(plan, location, pricing)
    return numbers["usd"] / numbers["dialogues"] if numbers.get("usd") is not None and numbers["dialogues"] else None


def store_outage(server: PostgresURL | None, budget_s: float, policy: CallPolicy) -> StoreOutage | None:
    """PostgreSQL: dialogues wait through a store outage of up to ``budget_s`` (checkpoints/store_outage.py)."""
    if server is None:
        return None
    outage = StoreOutage(server, budget_s=budget_s)
    logging.getLogger("psycopg.pool").setLevel(
        logging.ERROR
    )  # the pools' failed reconnections: the outage says it once
    # past the budget, what fails while the other dialogues stop is no news: the one line the command prints says it
    outage.on_exceeded(lambda _: logging.disable(logging.CRITICAL))
    if policy.cache is not None:
        policy.cache.outage = outage
    return outage
