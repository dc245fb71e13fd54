"""What a run will play, checked before anything is written: its modes' turns, its seeds and the scripted turns of each
mode."""

from __future__ import annotations

from dataclasses import dataclass

from graph.config.experiment import given_in_file
from graph.config.run_config import ConfigError, RunConfig
from nodes.modes import ALL_MODES, ModeScripts, fixed_turns, scripts_for
from seeds import Seed, SeedError, load_seeds


@dataclass(frozen=True)
class RunPlan:
    """A run configuration with its turns and per-category count resolved, and the seeds and scripts it plays."""

    config: RunConfig
    seeds: list[Seed]
    scripts_by_mode: dict[str, ModeScripts]

    @property
    def dialogues_by_mode(self) -> dict[str, int]:
        """Dialogues per mode for one target and one sample (a scripted mode plays only the seeds it has items for)."""
        return {
            mode: len(self.seeds)
            if not fixed_turns(mode)
            else sum(1 for s in self.seeds if self.scripts_by_mode[mode].plays(s.id))
            for mode in self.config.modes
        }

    @property
    def n_dialogues(self) -> int:
        return len(self.config.models.targets) * self.config.samples * sum(self.dialogues_by_mode.values())


def plan_run(config: RunConfig, *, turns_given: bool = False) -> RunPlan:
    """Check the modes, turns and seeds of ``config`` and load them; every problem is one :class:`ConfigError` line.

    ``turns_given``: --turns was on the command line (a baseline mode's fixed length then refuses another).
    """
    modes = config.modes
    for mode in modes:
        if mode not in ALL_MODES:
            raise ConfigError(f"unknown mode={mode!r}: use one of {', '.join(ALL_MODES)}")
    if len({fixed_turns(mode) or config.turns for mode in modes}) > 1:
        raise ConfigError(
            f"modes {', '.join(modes)} have different numbers of turns: run the baselines in a run of their own"
        )
    turns = fixed_turns(config.mode) or config.turns
    if fixed_turns(config.mode) and turns_given and config.turns != turns:
        raise ConfigError(f"mode={config.mode!r} always has {turns} turn(s): drop turns=")
    for mode in modes:
        if mode.startswith("fairmt:") and not config.fairmt_source:
            raise ConfigError(f"mode={mode!r} replays FairMT-Bench items: pass fairmt_dir= (or seeds='fairmt:DIR')")
    per_category = 1 if config.per_category is None and config.seeds == "builtin" else config.per_category
    try:
        seeds = load_seeds(
            config.seeds,
            per_category=per_category,
            categories=config.categories,
            limit=config.limit,
            sample_seed=config.sample_seed,
        )
    except SeedError as exc:
        where = given_in_file(config.config_file, ("seeds",), config.seeds)
        raise ConfigError(f"{where}: {exc}" if where else str(exc)) from None
    if not seeds:
        raise ConfigError(f"no seeds selected from {config.seeds}: check categories= and the seed file")
    scripts_by_mode: dict[str, ModeScripts] = {}
    for mode in modes:
        try:
            scripts_by_mode[mode] = scripts_for(mode, seeds, fairmt_dir=config.fairmt_source)
        except (SeedError, ValueError) as exc:
            raise ConfigError(str(exc)) from None
        if fixed_turns(mode) and not scripts_by_mode[mode].by_seed:
            raise ConfigError(
                f"none of the {len(seeds)} seeds has an item in {mode}: choose other seeds or another track"
            )
    return RunPlan(config.model_copy(update={"turns": turns, "per_category": per_category}), seeds, scripts_by_mode)
