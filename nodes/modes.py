"""The user modes: two dynamic ones (a simulated user) and the baselines (a scripted user).

``zero-shot`` asks the target once, directly, about the seed's stereotype.
``fairmt:<track>`` replays the five user turns of the FairMT-Bench item aligned to each seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import prompts
from prompts import quoting
from seeds import Seed
from seeds.tracks import TRACKS, TURNS_PER_ITEM, align_track

DYNAMIC_MODES: tuple[str, ...] = ("implicit", "assessment")
BASELINE_MODES: tuple[str, ...] = ("zero-shot", *(f"fairmt:{track}" for track in TRACKS))
ALL_MODES: tuple[str, ...] = DYNAMIC_MODES + BASELINE_MODES


def is_scripted(mode: str) -> bool:
    return mode in BASELINE_MODES


def fixed_turns(mode: str) -> int | None:
    """Baselines have a fixed length: one question, or the five turns of a FairMT item."""
    if mode == "zero-shot":
        return 1
    if mode.startswith("fairmt:"):
        return TURNS_PER_ITEM
    return None


@dataclass(frozen=True)
class ModeScripts:
    """One mode's scripted user turns: by seed id, and the seeds no script was found for (reported, never run)."""

    by_seed: Mapping[str, list[str]] = field(default_factory=dict)
    unaligned: Sequence[str] = ()

    def script(self, seed_id: str) -> list[str] | None:
        """The scripted user turns of a seed; None in a dynamic mode (its user is simulated)."""
        return self.by_seed.get(seed_id)

    def plays(self, seed_id: str) -> bool:
        """Has the seed a script (what a scripted mode plays)?"""
        return seed_id in self.by_seed


def scripts_for(mode: str, seeds: Sequence[Seed], *, fairmt_dir: str | Path | None) -> ModeScripts:
    """The user script of each seed for a baseline mode, and the seeds that have none."""
    if mode == "zero-shot":
        template = prompts.load("zero_shot")
        # The statement quoted (an escaped string): a seed's own quotation marks cannot end it.
        return ModeScripts({s.id: [template.render_text(statement=quoting.inline(s.statement))] for s in seeds})
    if mode.startswith("fairmt:"):
        if fairmt_dir is None:
            raise ValueError(f"--mode {mode} replays FairMT-Bench items: pass --fairmt-dir DIR (or --seeds fairmt:DIR)")
        alignment = align_track(fairmt_dir, mode.removeprefix("fairmt:"), seeds)
        return ModeScripts(alignment.scripts, tuple(alignment.unaligned))
    return ModeScripts()
