"""FairMT-Bench's scripted tracks, aligned to the same seeds as the dynamic runs.

A track item is five pre-written user turns. An item belongs to a seed when its
turns contain the seed statement (both normalised: lower case, punctuation and
extra spaces removed). The data is read from the directory the user gives and is
never copied into this repository.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from seeds.loaders import Seed, SeedError

# mode name → FairMT_10K/Stereotype/<directory>
TRACKS: dict[str, str] = {
    "anaphora_ellipsis": "Anaphora_Ellipsis",
    "jailbreak_tips": "Jailbreak_Tips",
    "interference_misinformation": "Interference_Misinformation",
    "negative_feedback": "Negative_Feedback",
    "fixed_format": "Fixed_Format",
}
TURNS_PER_ITEM = 5
_FILE_NAMES = {"disability": "disable"}


@dataclass
class Alignment:
    """Scripts per seed id for one track, and the seeds no item matched (reported, never dropped silently)."""

    track: str
    scripts: dict[str, list[str]] = field(default_factory=dict)
    item_index: dict[str, int] = field(default_factory=dict)
    unaligned: list[str] = field(default_factory=list)


def normalise(text: str) -> str:
    """Lower case, punctuation to spaces, whitespace collapsed: the matching form of a statement."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def align_track(root: str | Path, track: str, seeds: Sequence[Seed]) -> Alignment:
    """For each seed, the first item (in file order) of ``track`` whose turns contain its statement."""
    if track not in TRACKS:
        raise SeedError(f"unknown FairMT track {track!r}: use one of {', '.join(TRACKS)}")
    folder = Path(root).expanduser() / "FairMT_10K" / "Stereotype" / TRACKS[track]
    alignment = Alignment(track=track)
    items_by_category: dict[str, list[list[str]]] = {}
    for seed in seeds:
        if seed.category not in items_by_category:
            items_by_category[seed.category] = _read_items(folder, seed.category)
        wanted = normalise(seed.statement)
        for index, turns in enumerate(items_by_category[seed.category]):
            if wanted and wanted in normalise(" ".join(turns)):
                alignment.scripts[seed.id] = turns
                alignment.item_index[seed.id] = index
                break
        else:
            alignment.unaligned.append(seed.id)
    return alignment


def _read_items(folder: Path, category: str) -> list[list[str]]:
    path = folder / f"prompt_{_FILE_NAMES.get(category, category)}.json"
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SeedError(
            f"FairMT track file not found: {path} (pass the FairMT-Bench directory with --fairmt-dir)"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise SeedError(f"cannot read FairMT track file {path}: {exc}") from None
    scripts = []
    for item in items:
        turns = [str(item.get(f"{i}-turn Conv", "")).strip() for i in range(TURNS_PER_ITEM)]
        if all(turns):
            scripts.append(turns)
    return scripts
