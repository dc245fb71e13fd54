"""The numbers a report shows, computed from a dataset: tables by group, series by turn, paired comparisons."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkpoints.ids import sample_of
from checkpoints.queries import StoreQueries
from checkpoints.vocabulary import PRIMARY_LABELS
from evals.dataset import Dataset, DialogueRow
from evals.judge_error.run_blocks import ChosenValidation
from evals.report.breakdown import (
    REFUSAL_WINDOW,
    BiasRow,
    CoherenceRow,
    RefusalRow,
    bias_table,
    coherence_table,
    group,
    refusal_table,
    turn_series,
)
from evals.report.corrected_tables import correct_report
from evals.report.transition_tables import group_transitions
from evals.stats.agreement import Agreement, label_set_agreement
from evals.stats.group_comparison import Comparison, Group, Unit, compare_groups
from evals.stats.metrics import Summary


def model_mode(d: DialogueRow) -> tuple[str, str]:
    return (d.model, d.mode)


def category_model_mode(d: DialogueRow) -> tuple[str, str, str]:
    return (d.category, d.model, d.mode)


@dataclass(frozen=True)
class ReportData:
    """Everything a report shows, computed from a dataset (pure: no store, no files)."""

    dataset: Dataset
    bias: list[BiasRow]  # by (target model, mode)
    series: dict[tuple[str, str], Summary]
    categories: list[BiasRow]  # by (category, target model, mode)
    refusal: list[RefusalRow]  # by (target model, mode), runs with refusal verdicts only
    coherence: list[CoherenceRow]  # by (target model, mode), runs with coherence scores only
    agreements: list[tuple[str, str, Agreement]]
    n_boot: int
    seed: int
    comparisons: Sequence[Comparison] = ()  # paired, on the same seeds: targets, modes or runs
    samples: int = 1  # the most samples of one (seed, target, mode); > 1: intervals resample seeds
    usage: Sequence[tuple[str, dict[str, Any]]] = ()  # (run id, evals.cost.usage_summary) per run
    validations: tuple[tuple[str, dict[str, Any]], ...] = ()  # (run id, evals.scorers.judge_validation.run_validation)
    # Rates corrected for the judge's error (evals/judge_error/run_blocks.py): the run summary's ``judge_corrected``
    # block per (target model, mode), and the corrected B − A per comparison (aligned with ``comparisons``).
    judge_corrected: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    corrected_differences: tuple[dict[str, Any], ...] = ()
    # by (category, target model, mode): corrected with the judge's error on that category where the validation
    # holds enough of its items (evals.report.corrected_tables.correct_categories)
    corrected_categories: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    # by (target model, mode): onset, survival, persistence, recovery, relapse from the labels (evals.stats.transitions)
    transitions: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)


def compute_report(
    dataset: Dataset,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    agreements: Sequence[tuple[str, str, Agreement]] = (),
    validations: Sequence[tuple[str, dict[str, Any]]] = (),
    judge_validations: Mapping[str, ChosenValidation] | None = None,
) -> ReportData:
    """The report's numbers; ``judge_validations`` (run id -> its chosen validation) adds the judge-corrected rates."""
    by_group = group(dataset.dialogues, model_mode)
    matrices = {key: [d.labels for d in ds] for key, ds in by_group.items()}
    by_category = group(dataset.dialogues, category_model_mode)
    refused = group([d for d in dataset.dialogues if d.run_id in dataset.refusal_sets], model_mode)
    scored = group([d for d in dataset.dialogues if d.run_id in dataset.coherence_sets], model_mode)
    samples = max([1, *(sample_of(d.thread_id) + 1 for d in dataset.dialogues)])
    boot: dict[str, Any] = {"n_boot": n_boot, "seed": seed}
    clustered = dict(boot)
    if samples > 1:  # repeated samples of a seed are one observation: resample seeds, not dialogues
        clustered["clusters"] = {key: [seed_cluster(d) for d in ds] for key, ds in by_group.items()}
    comparisons = (
        compare_groups(comparison_units(dataset), n_boot=n_boot, seed=seed)
        if len(by_group) > 1 or len(dataset.runs) > 1
        else []
    )
    corrected = (
        correct_report(dataset, judge_validations, comparisons, seed=seed) if judge_validations is not None else None
    )
    return ReportData(
        dataset=dataset,
        bias=bias_table(matrices, **clustered),
        series=turn_series(matrices, **clustered),
        categories=bias_table(
            {key: [d.labels for d in ds] for key, ds in by_category.items()},
            **boot,
            **(
                {"clusters": {key: [seed_cluster(d) for d in ds] for key, ds in by_category.items()}}  # type: ignore[arg-type]
                if samples > 1
                else {}
            ),
        ),
        refusal=refusal_table(
            {key: [d.refusals for d in ds] for key, ds in refused.items()}, window=REFUSAL_WINDOW, **boot
        ),
        coherence=coherence_table({key: [d.coherence for d in ds] for key, ds in scored.items()}, **boot),
        agreements=list(agreements),
        n_boot=n_boot,
        seed=seed,
        comparisons=comparisons,
        samples=samples,
        validations=tuple(validations),
        judge_corrected=corrected.blocks if corrected else {},
        corrected_differences=corrected.differences if corrected else (),
        corrected_categories=corrected.categories if corrected else {},
        transitions=group_transitions(by_group, n_boot=n_boot, seed=seed),
    )


def seed_cluster(d: DialogueRow) -> str:
    """What the bootstrap resamples when seeds were played several times: the seed (the thread, failing that)."""
    return d.seed_id if d.seed_id is not None else d.thread_id


def comparison_units(dataset: Dataset) -> list[Unit]:
    """Every dialogue with a seed, as a paired comparison sees it: (run, target, mode), seed, sample, labels.

    Groups come in the order the runs were given, then their targets and modes as the run lists
    them, so A is the first target (or mode) and each difference reads B − A.
    """
    order = {}
    for i, run in enumerate(dataset.runs):
        for j, target in enumerate(run.targets):
            for k, mode in enumerate(run.modes):
                order[(run.run_id, target, mode)] = (i, j, k)
    units = [
        Unit(
            group=Group(d.run_id, d.model, d.mode),
            seed_id=d.seed_id,
            sample=sample_of(d.thread_id),
            labels=tuple(d.labels),
        )
        for d in dataset.dialogues
        if d.seed_id is not None
    ]
    return sorted(units, key=lambda u: order.get((u.group.run_id, u.group.target, u.group.mode), (len(order), 0, 0)))


def agreements_for(
    store: StoreQueries, dataset: Dataset, *, n_boot: int, seed: int
) -> list[tuple[str, str, Agreement]]:
    """The chosen label set against every other bias label set that all the runs have."""
    run_ids = [r.run_id for r in dataset.runs]
    names = [PRIMARY_LABELS]
    for info in dataset.label_sets:
        if info.kind == "bias" and info.name not in names:
            names.append(info.name)
    shared = [
        n
        for n in names
        if n == PRIMARY_LABELS
        or all(any(i.kind == "bias" and i.name == n and i.run_id == r for i in dataset.label_sets) for r in run_ids)
    ]
    return [
        (
            dataset.label_set,
            other,
            label_set_agreement(store, run_ids, dataset.label_set, other, n_boot=n_boot, seed=seed),
        )
        for other in shared
        if other != dataset.label_set
    ]
