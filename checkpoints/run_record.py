"""What a run stores in ``runs.config``: its run configuration as a versioned dump, and what that resolved to.

Today's form (``graph.config.run_config.RunConfig.run_record`` writes it, ``graph.config.stored.stored_run_config``
validates it)::

    {"run_config": {... RunConfig's fields ..., "schema_version": 1},
     "resolved": {"models": role → spec, "model_ids": ..., "sampling": ..., "prompt_files": role → SHA-256,
                  "requests": role → what its calls send, its thinking and caps, notes on settings not sent as asked},
     ... anything else the writer adds (unaligned seeds; a branch run's parent runs and change)}

A row written before the configuration was stored as itself holds ``{"spec": {...}}`` instead (the old
``RunSpec`` record); :func:`upgrade` is the one reader of that form. It converts on read and never
rewrites the row, so a run an older version wrote loads, resumes and refuses changed settings the same.

:class:`RunRecord` is the row typed (``RunRecord.from_stored(row)``, ``record.to_stored()``), the stored JSON unchanged.
Its run configuration stays a plain dict here: the store's readers use it too, without the running layer
(``graph.config.stored.stored_run_config`` validates it into a ``RunConfig``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

SCHEMA_VERSION: Final = 1
ROLES = ("user", "target", "judge")
_RETRY_KEYS = ("attempts", "base_delay", "max_delay", "max_retry_after", "timeout")


def upgrade(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A ``runs.config`` in today's form (a copy); an old ``{"spec": ...}`` row converted, today's passed through."""
    config = dict(config or {})
    if "run_config" in config or "spec" not in config:
        config.setdefault("run_config", {})
        config.setdefault("resolved", {})
        return config
    spec = dict(config.pop("spec") or {})
    config["run_config"] = _old_spec_as_run_config(spec)
    config["resolved"] = {
        "models": dict(spec.get("models") or {}),
        "model_ids": dict(spec.get("model_ids") or {}),
        "sampling": dict(spec.get("sampling") or {}),
        "prompt_files": dict(spec.get("prompt_files") or {}),
    }
    return config


@dataclass(frozen=True)
class Resolved:
    """What a run's configuration resolved to: the model spec and id per role, sampling, prompt-file hashes."""

    models: dict[str, str] = field(default_factory=dict)
    """Role → the spec it played (the first target in a grid)."""
    model_ids: dict[str, str] = field(default_factory=dict)
    """Role (``target:SPEC`` per target in a grid) → the model id the provider reported."""
    sampling: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Role (``target:SPEC`` in a grid) → temperature, max tokens and extra arguments (redacted)."""
    prompt_files: dict[str, str] = field(default_factory=dict)
    """Role → SHA-256 of the prompt file that replaced its built-in prompt."""
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Role (``target:SPEC`` in a grid) → what its calls send as the provider's integration builds the request
    (``sent``), its thinking, reply and request caps, and ``notes`` on asked-for settings dropped or changed."""

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any] | None) -> Resolved:
        stored = stored or {}
        return cls(**{name: dict(stored.get(name) or {}) for name in _RESOLVED_KEYS})

    def to_dict(self) -> dict[str, Any]:
        return {name: dict(getattr(self, name)) for name in _RESOLVED_KEYS}


_RESOLVED_KEYS = ("models", "model_ids", "sampling", "prompt_files", "requests")


@dataclass(frozen=True)
class RunRecord:
    """A run's ``runs.config``: its stored run configuration, what it resolved to, and what else its writer added
    (``extra``: the seeds no script was found for, the planned dialogues; a branch run's parents and change)."""

    run_config: dict[str, Any]
    resolved: Resolved = field(default_factory=Resolved)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_stored(cls, config: Mapping[str, Any] | None) -> RunRecord:
        """A ``runs.config`` as stored, in either form (an older row is upgraded, never rewritten)."""
        record = upgrade(config)
        run_config, resolved_ = record.pop("run_config"), record.pop("resolved")
        return cls(dict(run_config or {}), Resolved.from_dict(resolved_), record)

    def to_stored(self) -> dict[str, Any]:
        """The JSON object the store keeps in ``runs.config`` (today's form)."""
        return {"run_config": dict(self.run_config), "resolved": self.resolved.to_dict(), **self.extra}

    def with_extra(self, **values: Any) -> RunRecord:
        """This record with more of what its writer adds (a key given again replaces the earlier value)."""
        return replace(self, extra={**self.extra, **values})

    @property
    def run_id(self) -> str | None:
        return self.run_config.get("run_id")


def run_settings(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The stored run configuration's fields (a dump of ``RunConfig``), whichever form the row is in."""
    return RunRecord.from_stored(config).run_config


def role_specs(config: Mapping[str, Any] | None) -> dict[str, str]:
    """Role → the model spec the run played (the first target in a grid)."""
    return {role: str(spec) for role, spec in RunRecord.from_stored(config).resolved.models.items() if spec}


def endpoint_of(config: Mapping[str, Any] | None, spec: str) -> str | None:
    """The base URL a run called model ``spec`` at (its spec's sampling table, else the table of a role it played), if
    stored."""
    tables = run_settings(config).get("sampling") or {}
    if url := (tables.get(spec) or {}).get("base_url"):
        return str(url)
    for role, played in role_specs(config).items():
        if played == spec and (url := (tables.get(role) or {}).get("base_url")):
            return str(url)
    return None


def _old_spec_as_run_config(spec: Mapping[str, Any]) -> dict[str, Any]:
    """An old ``RunSpec`` record as the fields of today's run configuration (sampling, URLs and prompts per role)."""
    models = dict(spec.get("models") or {})
    calls = dict(spec.get("calls") or {})
    stored_sampling = dict(spec.get("sampling") or {})
    stored_urls = dict(calls.get("base_urls") or {})
    sampling: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        stored = stored_sampling.get(f"{role}:{models.get(role)}") or stored_sampling.get(role) or {}
        table = {key: stored[key] for key in ("temperature", "max_tokens") if stored.get(key) is not None}
        url = stored_urls.get(f"{role}:{models.get(role)}") or stored_urls.get(role)
        if url and str(models.get(role) or "").startswith("openai:"):
            table["base_url"] = url  # a stored URL only ever served openai: specs
        sampling[role] = table
    for name, stored in stored_sampling.items():  # a grid's targets: sampling and URL per target spec
        if name.startswith("target:") and isinstance(stored, Mapping):
            spec_text = name.removeprefix("target:")
            table = {key: stored[key] for key in ("temperature", "max_tokens") if stored.get(key) is not None}
            if stored_urls.get(name) and spec_text.startswith("openai:"):
                table["base_url"] = stored_urls[name]
            sampling[spec_text] = table
    targets = spec.get("targets") or ([models["target"]] if models.get("target") else [])
    run_config: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "modes": list(spec.get("modes") or ([spec["mode"]] if spec.get("mode") else [])),
        "models": {
            **{role: models[role] for role in ("user", "judge") if models.get(role)},
            **({"targets": list(targets)} if targets else {}),
        },
        "sampling": sampling,
        "sampling_seed": int(spec.get("sampling_seed") or 0),
        "leakage": spec.get("leakage") or "regenerate",
        "rate_limits": dict(calls.get("rate_limits") or {}),
        "retry": {key: value for key, value in (calls.get("retry") or {}).items() if key in _RETRY_KEYS},
        "prompts": {
            role: {"path": p["path"], "text": p["text"]} for role, p in (calls.get("prompt_files") or {}).items()
        },
    }
    if not run_config["modes"]:
        del run_config["modes"]
    # Fields the old record kept under the same meaning: copied only when it has them (a rerun compares those).
    for old, new in (
        ("run_id", "run_id"),
        ("turns", "turns"),
        ("seed_source", "seeds"),
        ("per_category", "per_category"),
        ("categories", "categories"),
        ("limit", "limit"),
        ("max_concurrency", "max_concurrency"),
        ("samples", "samples"),
        ("fairmt_dir", "fairmt_dir"),
    ):
        if old in spec:
            run_config[new] = spec[old]
    for key in ("cache", "config_file"):
        if calls.get(key) is not None:
            run_config[key] = calls[key]
    return run_config
