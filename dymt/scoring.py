"""Post-hoc scoring of a stored run: refusals (``dymt.classify_refusals``), dialogue coherence
(``dymt.score_coherence``) and a simulated safety filter (``dymt.simulate_filter``).

The first two are one labelling pass over a run's stored replies or dialogues, with the run's judge model as the
default labeller; every verdict is stored under the labeller's name, so calling again continues where it stopped.
Progress is a :class:`~dymt.events.Labelled` event per item; nothing is printed. Errors are :class:`DymtError`
lines naming the keyword argument to change (``model=``, ``threshold=``).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from checkpoints.cache import caching_for
from checkpoints.run_record import role_specs
from checkpoints.store import Writer
from dymt.errors import DymtError
from dymt.events import EventSink, Labelled, ignore
from dymt.running import run_coroutine
from dymt.stores import Db, reader, writer
from dymt.stores import run_ids as as_run_ids
from evals.scorers.coherence_jobs import MAX_TOKENS as COHERENCE_MAX_TOKENS
from evals.scorers.coherence_jobs import pending_dialogues, score_dialogues
from evals.scorers.guard import POLICIES
from evals.scorers.guard import guard_model as build_guard
from evals.scorers.label_sets import (
    LABELLER_MAX_TOKENS,
    Labeller,
    LabellerError,
    SetConflictError,
    prepare_labeller,
    register_set,
    stored_endpoint,
)
from evals.scorers.loop import Tally
from evals.scorers.posthoc import REFUSAL_VARIABLES, content_free_yes
from evals.scorers.refusal_jobs import classify_refusals as classify_jobs
from evals.scorers.refusal_jobs import pending_refusals
from evals.scorers.safety_filter import simulate_filter as filter_runs

REFUSAL_SCHEMA, COHERENCE_SCHEMA, FILTER_SCHEMA = "dymt.refusal/1", "dymt.coherence/1", "dymt.filter/1"


@dataclass(frozen=True)
class ScoringResult:
    """One labelling pass over a run: what it labelled now, what was already done, what failed."""

    kind: str
    """``refusal`` (each reply) or ``coherence`` (each dialogue)."""
    run_id: str
    name: str
    """The labeller's name in the store (default: its model spec)."""
    model: str
    labelled: int
    unparsed: int
    skipped: int
    failed: int
    first_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": REFUSAL_SCHEMA if self.kind == "refusal" else COHERENCE_SCHEMA,
            "kind": self.kind,
            "run_id": self.run_id,
            "name": self.name,
            "model": self.model,
            "labelled": self.labelled,
            "unparsed": self.unparsed,
            "skipped": self.skipped,
            "failed": self.failed,
            "first_error": self.first_error,
        }


@dataclass(frozen=True)
class FilterResult:
    """A simulated post-hoc safety filter over one or more runs: per mode, what it blocks at the threshold."""

    report: dict[str, Any]
    """threshold, policy, guard model, new model calls, and per mode the blocked shares and the bias left."""
    turns: int
    """The longest run's turn count (the report's per-turn columns)."""
    failed: int
    first_error: str | None = None

    @property
    def model_calls(self) -> int:
        return int(self.report["model_calls"])

    def to_json(self) -> dict[str, Any]:
        return {"schema": FILTER_SCHEMA, **self.report}


@dataclass(frozen=True)
class _Pass:
    """What differs between the labelling passes: the items, the prompt, how each batch is scored."""

    kind: str
    prompt: str
    pending: Callable[..., tuple[list[Any], int]]
    nothing: str
    max_tokens: int = LABELLER_MAX_TOKENS
    calibrated: bool = False
    """A base model's Yes is calibrated against a content-free case (refusal only)."""


_REFUSAL = _Pass("refusal", "refusal", pending_refusals, "has no stored replies to classify", calibrated=True)
_COHERENCE = _Pass(
    "coherence",
    "coherence",
    pending_dialogues,
    "has no stored dialogues with replies to score",
    max_tokens=COHERENCE_MAX_TOKENS,
)


def _label_run(
    kind: _Pass,
    run_id: str,
    *,
    model: str | None = None,
    name: str | None = None,
    base_url: str | None = None,
    max_concurrency: int = 4,
    redo: bool = False,
    db: Db = None,
    on_event: EventSink = ignore,
) -> ScoringResult:
    _check_run_id(run_id)
    _check_concurrency(max_concurrency)
    store = writer(db)
    try:
        try:
            lab = prepare_labeller(
                store,
                run_id,
                kind=kind.kind,
                prompt=kind.prompt,
                spec=model,
                name=name,
                flag="model=",
                base_url=base_url,
                max_tokens=kind.max_tokens,
            )
        except LabellerError as exc:
            raise DymtError(str(exc)) from None
        jobs, skipped = kind.pending(store, lab.run.run_id, lab.name, redo=redo)
        if lab.existing is None and not jobs:
            raise DymtError(f"run {lab.run.run_id!r} {kind.nothing}")
        with caching_for(lab.run.run_id):  # the replies it caches are the run's (deleted with it)
            tally = run_coroutine(_score(kind, store, lab, jobs, concurrency=max_concurrency, on_event=on_event))
    finally:
        store.close()
    return ScoringResult(
        kind=kind.kind,
        run_id=lab.run.run_id,
        name=lab.name,
        model=lab.model.spec,
        labelled=tally.done,
        unparsed=tally.unparsed,
        skipped=skipped,
        failed=tally.failed,
        first_error=tally.first_error,
    )


classify_refusals = functools.partial(_label_run, _REFUSAL)
classify_refusals.__doc__ = """Classify every stored reply of ``run_id`` as a refusal or not (``prompts/refusal.md``),
with ``model`` (default: the run's judge model) as classifier ``name`` (default: the spec); ``redo=True`` classifies
again. Returns a :class:`ScoringResult`."""
score_coherence = functools.partial(_label_run, _COHERENCE)
score_coherence.__doc__ = """Score how coherent each stored dialogue of ``run_id`` is, from 1 to 5
(``prompts/coherence.md``), with ``model`` (default: the run's judge model) as scorer ``name``; unparsed scores are
stored as NULL. Returns a :class:`ScoringResult`."""


async def _score(
    kind: _Pass, store: Writer, lab: Labeller, jobs: list[Any], *, concurrency: int, on_event: EventSink
) -> Tally:
    """Register the labeller's set on its first pass, then label the jobs, one Labelled event per item."""
    if lab.existing is None:
        content_free = await content_free_yes(lab.model, "refusal", REFUSAL_VARIABLES) if kind.calibrated else None
        register_set(
            store,
            lab.run.run_id,
            kind.kind,
            lab.name,
            model=lab.model,
            prompt=lab.template,
            prompt_hash=lab.digest,
            content_free_p_yes=content_free,
        )
    else:
        content_free = lab.existing.content_free_p_yes
    done = 0
    on_event(Labelled(0, len(jobs)))

    def step() -> None:
        nonlocal done
        done += 1
        on_event(Labelled(done, len(jobs)))

    scored: Awaitable[Tally]
    if kind.calibrated:
        scored = classify_jobs(
            store,
            jobs,
            lab.model,
            classifier=lab.name,
            content_free_p_yes=content_free,
            concurrency=concurrency,
            on_step=step,
        )
    else:
        scored = score_dialogues(store, jobs, lab.model, scorer=lab.name, concurrency=concurrency, on_step=step)
    return await scored


def simulate_filter(
    run_ids: str | Sequence[str],
    *,
    guard_model: str | None = None,
    base_url: str | None = None,
    policy: str = "hate",
    name: str | None = None,
    threshold: float = 0.5,
    db: Db = None,
) -> FilterResult:
    """Simulate a post-hoc safety filter over the runs: a guard model scores every user message and target reply
    (stored, so another ``threshold`` costs no call) and a turn is blocked, with every later turn of its dialogue,
    once either score reaches ``threshold``. ``guard_model`` defaults to the first run's judge model."""
    runs = as_run_ids(run_ids)
    if not runs:
        raise DymtError("run_ids=[]: name at least one run")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
        raise DymtError(f"threshold={threshold!r} is not a probability: use a value in [0, 1]")
    if policy not in POLICIES:
        raise DymtError(f"policy={policy!r} is unknown: use one of {', '.join(POLICIES)}")
    if name is not None and not name.strip():
        raise DymtError("name='' must not be empty")
    with reader(db) as stored:  # read-only until the guard is built: a model that cannot run writes nothing
        for run_id in runs:
            if stored.get_run(run_id) is None:
                raise DymtError(f"no run {run_id!r} in {stored.path}: list runs with dymt.open(db).runs()")
        first = stored.get_run(runs[0])
        spec = guard_model or role_specs(first["config"]).get("judge")  # type: ignore[index]
        if not spec:
            raise DymtError(f"run {runs[0]!r} records no judge model: pass guard_model=SPEC")
        base_url = base_url or next(filter(None, (stored_endpoint(stored, spec, r) for r in runs)), None)
    try:
        model = build_guard(spec, base_url=base_url, flag="guard_model=")
    except LabellerError as exc:
        raise DymtError(str(exc)) from None
    store = writer(db)
    try:
        report, turns, tally = filter_runs(store, runs, model, policy=policy, threshold=float(threshold), name=name)
    except SetConflictError as exc:
        raise DymtError(str(exc)) from None
    finally:
        store.close()
    return FilterResult(report=report, turns=turns, failed=tally.failed, first_error=tally.first_error)


def _check_run_id(run_id: object) -> None:
    if not isinstance(run_id, str) or not run_id:
        raise DymtError(f"run_id={run_id!r}: give one run id as a non-empty string")


def _check_concurrency(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DymtError(f"max_concurrency={value!r}: give a whole number of calls at once, 1 or more")
