"""Named label sets: the labeller model, the set's name, a clash with a stored set, and registering a new set."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from checkpoints.queries import StoreQueries
from checkpoints.run_record import endpoint_of
from checkpoints.store import Writer
from checkpoints.vocabulary import PRIMARY_LABELS
from evals.dataset import DatasetError, LabelSetInfo, RunInfo, label_sets, run_info
from evals.scorers.posthoc import prompt_hash, prompt_name
from graph.config.flags import one_line
from graph.config.model_settings import RoleSampling
from graph.config.run_config import ModelBuildError, ModelChoice, RunConfig
from models.registry import ROLE_SAMPLING, RoleModel
from prompts import PromptTemplate

# The live judge's settings (graph.run): greedy, room for a rationale and a label.
LABELLER_TEMPERATURE = ROLE_SAMPLING["judge"].temperature
LABELLER_MAX_TOKENS = ROLE_SAMPLING["judge"].max_tokens


class SetConflictError(ValueError):
    """A label set name already used on the run by another model or prompt."""


class LabellerError(ValueError):
    """A labelling pass that cannot start (bad model, run or set name): one line saying what to pass instead."""


def build_labeller(
    spec: str,
    *,
    flag: str,
    base_url: str | None = None,
    seed: int = 0,
    max_tokens: int = LABELLER_MAX_TOKENS,
    cache: Any = None,
) -> RoleModel:
    """A model in the judge role (greedy; the embedded model answers one token with log-probabilities).

    ``cache`` (a checkpoints.cache.ResponseCache) answers requests sent before and keeps new replies.
    A spec that cannot be built raises LabellerError naming ``flag``.
    """
    try:
        config = RunConfig(
            models=ModelChoice(judge=spec),
            sampling_seed=seed,
            sampling={
                "judge": RoleSampling(temperature=LABELLER_TEMPERATURE, max_tokens=max_tokens, base_url=base_url)
            },
        )
        return config.model_for("judge", policy=None if cache is None else config.call_policy(cache))
    except ModelBuildError as exc:
        raise LabellerError(f"{flag}: {exc.reason}") from exc
    except ValidationError as exc:
        raise LabellerError(one_line(exc, lambda loc: flag)) from exc


def stored_endpoint(store: StoreQueries, spec: str, run_id: str | None = None) -> str | None:
    """The base URL the store's runs called ``spec`` at: run ``run_id``'s, else the newest run's that used it (None:
    none stored).

    Scorers run later take it by default, so a model a run played on a local server is found there again;
    only openai: specs have one.
    """
    if not spec.startswith("openai:"):
        return None
    ids = [run_id] if run_id is not None else [r["id"] for r in reversed(store.runs())]
    for rid in ids:
        run = store.get_run(rid)
        if run is not None and (url := endpoint_of(run["config"], spec)):
            return url
    return None


def existing_set(
    store: Writer, run_id: str, kind: str, name: str, *, model: RoleModel, prompt_hash: str
) -> LabelSetInfo | None:
    """The set already stored under this name, if any; SetConflictError if another model or prompt made it."""
    for info in label_sets(store, run_id, kind):
        if info.name != name:
            continue
        if info.model != model.spec or info.prompt_hash != prompt_hash:
            raise SetConflictError(
                f"{kind} labels {name!r} on run {run_id!r} were made by {info.model} with prompt {info.prompt} "
                f"(sha256 {str(info.prompt_hash)[:12]}), not {model.spec} with sha256 {prompt_hash[:12]}: "
                "pass another --name"
            )
        return info
    return None


def register_set(
    store: Writer,
    run_id: str,
    kind: str,
    name: str,
    *,
    model: RoleModel,
    prompt: str,
    prompt_hash: str,
    content_free_p_yes: float | None,
) -> None:
    store.add_label_set(
        run_id,
        kind,
        name,
        model=model.spec,
        model_id=model.model_id,
        prompt=prompt,
        prompt_hash=prompt_hash,
        content_free_p_yes=content_free_p_yes,
    )


def primary_prompt(judge_spec: str | None, prompt_hashes: dict[str, str]) -> tuple[str, str | None]:
    """(name, SHA-256) of the prompt a run's own judge labels were made with: its --judge-prompt file, else the
    built-in judge prompt of its style (the embedded model's is the transcript one)."""
    if prompt_hashes.get("judge prompt file"):
        return "judge prompt file", prompt_hashes["judge prompt file"]
    name = prompt_name("judge_bias", "transcript" if (judge_spec or "").startswith("local:") else "chat")
    return name, prompt_hashes.get(name)


def check_set_name(name: str) -> None:
    """LabellerError for an empty name or the run's own judge labels' name."""
    if not name.strip():
        raise LabellerError("--name must not be empty")
    if name == PRIMARY_LABELS:
        raise LabellerError(f"--name {PRIMARY_LABELS!r} is the run's own judge labels: choose another name")


@dataclass(frozen=True)
class Labeller:
    """Everything a labelling pass (re-judging, refusal, coherence) needs before its first model call."""

    run: RunInfo
    name: str
    model: RoleModel
    template: str
    digest: str
    existing: LabelSetInfo | None


def prepare_labeller(
    store: Writer,
    run_id: str,
    *,
    kind: str,
    prompt: str,
    spec: str | None,
    name: str | None,
    flag: str,
    base_url: str | None,
    max_tokens: int = LABELLER_MAX_TOKENS,
    template: PromptTemplate | None = None,
    cache: Any = None,
) -> Labeller:
    """Resolve the run, the model (default: the run's judge, at the base URL the run called it), the set name and any
    set already stored.

    ``template`` (a --judge-prompt file) replaces the built-in prompt of ``prompt``. Anything that
    stops the pass before its first call raises LabellerError.
    """
    try:
        run = run_info(store, run_id)
    except DatasetError as exc:
        raise LabellerError(str(exc)) from exc
    spec = spec or run.models.get("judge")
    if not spec:
        raise LabellerError(f"run {run.run_id!r} records no judge model: pass {flag} SPEC")
    name = name or spec
    check_set_name(name)
    base_url = base_url or stored_endpoint(store, spec, run.run_id) or stored_endpoint(store, spec)
    model = build_labeller(
        spec, flag=flag, base_url=base_url, seed=run.sampling_seed or 0, max_tokens=max_tokens, cache=cache
    )
    if template is not None:
        model = dataclasses.replace(model, prompt=template)
    try:
        digest = template.sha256 if template is not None else prompt_hash(prompt, model.style)
        existing = existing_set(store, run.run_id, kind, name, model=model, prompt_hash=digest)
    except (SetConflictError, ValueError) as exc:
        raise LabellerError(str(exc)) from exc
    return Labeller(
        run, name, model, template.name if template is not None else prompt_name(prompt, model.style), digest, existing
    )
