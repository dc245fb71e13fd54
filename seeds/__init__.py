"""Seed stereotype statements for DyMT-ESB dialogues: built-in, JSONL or FairMT-Bench sources."""

from seeds.loaders import CATEGORIES, Seed, SeedError, load_seeds

__all__ = ["CATEGORIES", "Seed", "SeedError", "load_seeds"]
