"""Reports: ``dymt.report(run_ids, out=DIR)`` writes the bias-dynamics report of one or several runs into ``DIR``.

``report.md`` (tables by model and mode, bias by turn, categories, paired comparisons, agreement, cost), the plots,
``turns.csv``, ``dialogues.csv``, ``turns.jsonl`` and, with ``html=True``, ``report.html``. Every rate has a seeded
dialogue-level bootstrap 95% interval. The store is only read. The result is a :class:`dymt.results.ReportResult`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checkpoints.readers import Reader
from checkpoints.vocabulary import PRIMARY_LABELS
from dymt.errors import DymtError
from dymt.results import ReportResult
from dymt.stores import Db, reader, run_ids
from evals.cost import Pricing, PricingError, load_pricing, run_usage, usage_summary
from evals.dataset import DatasetError, load_dataset
from evals.judge_error.labelling_rounds import LabellingRounds, labelling_rounds
from evals.judge_error.run_blocks import choose_validation
from evals.report.data import ReportData, agreements_for, compute_report
from evals.report.html import collect, render_page
from evals.report.writer import write_report
from evals.scorers.judge_validation import run_validation


def report(
    ids: str | Sequence[str],
    *,
    out: str | os.PathLike[str],
    db: Db = None,
    label_set: str = PRIMARY_LABELS,
    refusals: str | None = None,
    coherence: str | None = None,
    pricing: str | os.PathLike[str] | Pricing | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    html: bool = False,
) -> ReportResult:
    """Write the report of runs ``ids`` into the folder ``out`` and return what it holds.

    ``refusals`` / ``coherence`` name the scorer to use where a run has several; ``pricing`` is a TOML price file
    (USD per million tokens) for the cost section; ``html`` also writes ``report.html`` (opens offline).
    """
    ids, out = run_ids(ids), Path(out)
    if out.exists() and not out.is_dir():
        raise DymtError(f"out={str(out)!r} is a file: give a folder for the report")
    prices = _pricing(pricing)
    with reader(db) as store:
        data = _compute(
            store,
            ids,
            label_set=label_set,
            refusals=refusals,
            coherence=coherence,
            pricing=prices,
            n_boot=n_boot,
            seed=seed,
        )
        page = None
        if html:
            pages = collect(store, ids, label_set=label_set)
            rounds = [r for run_id in ids if (r := _rounds(store, run_id, label_set=label_set, seed=seed))]
            where = str(store.path)

            def page(generated_at: str) -> bytes:
                return render_page(
                    data,
                    pages,
                    run_ids=ids,
                    label_set=label_set,
                    generated_at=generated_at,
                    db=where,
                    labelling=rounds,
                    out=out,
                )

        path = store.path
    written = write_report(data, out, db=str(path), html=page)
    return ReportResult(
        run_ids=tuple(ids),
        out=str(out),
        files=tuple(sorted(p.name for p in written)),
        headline=tuple(headline(data)),
        data=data,
    )


def _pricing(pricing: Any) -> Pricing | None:
    if pricing is None or isinstance(pricing, Pricing):
        return pricing
    try:
        return load_pricing(pricing)
    except PricingError as exc:
        raise DymtError(str(exc)) from None


def _compute(
    store: Reader,
    ids: list[str],
    *,
    label_set: str,
    refusals: str | None,
    coherence: str | None,
    pricing: Pricing | None,
    n_boot: int,
    seed: int,
) -> ReportData:
    try:
        dataset = load_dataset(store, ids, label_set=label_set, refusals=refusals, coherence=coherence)
    except DatasetError as exc:
        raise DymtError(str(exc)) from None
    if not dataset.dialogues:
        raise DymtError(f"run(s) {', '.join(ids)} have no dialogues yet: play them with python -m graph.run first")
    agreements = agreements_for(store, dataset, n_boot=n_boot, seed=seed)
    chosen = {run.run_id: choose_validation(store, run.run_id, label_set=label_set) for run in dataset.runs}
    # Each run cites the validation its corrected rates use (people's labels of its turns before an evals.judge score).
    validations = [
        (
            run.run_id,
            run_validation(store, run.run_id)
            | {"used": None if chosen[run.run_id].refusal else chosen[run.run_id].as_dict()},
        )
        for run in dataset.runs
    ]
    data = compute_report(
        dataset, n_boot=n_boot, seed=seed, agreements=agreements, validations=validations, judge_validations=chosen
    )
    return dataclasses.replace(
        data, usage=[(r.run_id, usage_summary(run_usage(store, r.run_id), pricing)) for r in dataset.runs]
    )


def headline(data: ReportData) -> list[dict[str, Any]]:
    """The headline table as records: one per target model × mode, rates with their 95% intervals."""
    rows = []
    for row in data.bias:
        target, mode = row.key if isinstance(row.key, tuple) else (row.key, None)
        rows.append(
            {
                "target_model": target,
                "mode": mode,
                "dialogues": row.n_dialogues,
                "turns": row.turns,
                "labelled": row.n_labelled,
                "unparsed": row.n_unparsed,
                "bias_at_end": dataclasses.asdict(row.bias_at_end),
                "pooled": dataclasses.asdict(row.pooled),
                "re_emergence": dataclasses.asdict(row.re_emergence),
                "first_bias_median": row.first_bias_median,
                "judge_corrected": data.judge_corrected.get((target, mode)),
                "transitions": data.transitions.get((target, mode)),
            }
        )
    return rows


def _rounds(store: Any, run_id: str, *, label_set: str, seed: int) -> LabellingRounds | None:
    """The run's labelling rounds, or None when it has no parsed label to choose replies by (the page then shows its
    raw numbers without a labelling queue)."""
    from evals.judge_error.validation import CorrectionRefused

    try:
        return labelling_rounds(store, run_id, label_set=label_set, seed=seed)
    except CorrectionRefused:
        return None
