"""``python -m evals.report``: the bias-dynamics report of one or several runs, as Markdown, PNG plots and data files.

``--out DIR`` receives ``report.md`` (tables by model and mode: bias, coherence, refusal;
cumulative and per-turn bias by turn; categories; re-emergence; paired comparisons of
targets and modes on the same seeds; the spread of repeated samples; tokens and cost
(``--pricing FILE``); agreement between label sets; the runs, models, prompt hashes,
label sets and sample sizes it was computed from), ``cumulative_bias.png``, ``per_turn_bias.png``, ``bias_by_category.png``, and
``turns.csv``, ``dialogues.csv`` and ``turns.jsonl``. The headline tables also print to
the terminal. Every rate has a seeded dialogue-level bootstrap 95% interval.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from checkpoints.samples import sample_of
from checkpoints.queries import PRIMARY_LABELS, StoreQueries
from checkpoints.vocabulary import BIASED, NOT_BIASED
from evals.agreement import Agreement
from evals.breakdown import (
    DELTA_WINDOW,
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
from evals.comparison import Comparison, Group, Unit, compare_groups, needs_run_names
from evals.cost import run_usage, usage_summary
from cli.labelling import db_help, describe, read_existing
from evals.formatting import interval, number, pct as percent
from evals.dataset import Dataset, DatasetError, DialogueRow, load_dataset
from evals.html_report import collect, render_html
from evals.metrics import Summary, first_bias_turn, re_emerges
from evals.plots import label_of, plot_by_turn, plot_categories
from evals.agreement import label_set_agreement
from evals.summary import BASE_MODEL_NOTE
from evals.validation import run_validation, validation_text
from nodes.leakage import count_leakage
from cli.common import ArgumentParser, console, fail, positive_int, pricing_option

PLOTS = {
    "cumulative": "cumulative_bias.png",
    "per_turn": "per_turn_bias.png",
    "categories": "bias_by_category.png",
}
DATA_FILES = ("turns.csv", "dialogues.csv", "turns.jsonl")
HTML_FILE = "report.html"
TURN_COLUMNS = (
    "run_id", "thread_id", "seed_id", "category", "mode", "target_model", "turn", "utterance_type",
    "user_message", "leakage", "leaked", "user_attempts", "reply", "label_set", "label", "p_biased", "judge_model", "rationale",
    "refusal_classifier", "refusal",
)
DIALOGUE_COLUMNS = (
    "run_id", "thread_id", "seed_id", "category", "statement", "mode", "target_model", "status", "max_turns",
    "turns_played", "replies_labelled", "biased_replies", "unparsed_labels", "first_bias_turn", "any_bias",
    "re_emerges", "coherence_scorer", "coherence", "refusal_classifier", "refusal_turns_1_5",
)
CONTENT_WARNING = (
    "Content warning: the data files hold generated dialogues that can contain stereotypes and other "
    "harmful text. Keep them local."
)


def model_mode(d: DialogueRow) -> tuple[str, str]:
    return (d.model, d.mode)


def category_model_mode(d: DialogueRow) -> tuple[str, str, str]:
    return (d.category, d.model, d.mode)


# --------------------------------------------------------------------------- the numbers


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
    validations: tuple[tuple[str, dict[str, Any]], ...] = ()  # (run id, evals.validation.run_validation)


def compute_report(
    dataset: Dataset, *, n_boot: int = 1000, seed: int = 0, agreements: Sequence[tuple[str, str, Agreement]] = (),
    validations: Sequence[tuple[str, dict[str, Any]]] = (),
) -> ReportData:
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
    return ReportData(
        dataset=dataset,
        bias=bias_table(matrices, **clustered),
        series=turn_series(matrices, **clustered),
        categories=bias_table(
            {key: [d.labels for d in ds] for key, ds in by_category.items()},
            **boot, **({"clusters": {key: [seed_cluster(d) for d in ds] for key, ds in by_category.items()}} if samples > 1 else {}),
        ),
        refusal=refusal_table({key: [d.refusals for d in ds] for key, ds in refused.items()}, window=REFUSAL_WINDOW, **boot),
        coherence=coherence_table({key: [d.coherence for d in ds] for key, ds in scored.items()}, **boot),
        agreements=list(agreements),
        n_boot=n_boot,
        seed=seed,
        comparisons=compare_groups(comparison_units(dataset), n_boot=n_boot, seed=seed) if len(by_group) > 1 or len(dataset.runs) > 1 else [],
        samples=samples,
        validations=tuple(validations),
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
        Unit(group=Group(d.run_id, d.model, d.mode), seed_id=d.seed_id, sample=sample_of(d.thread_id), labels=tuple(d.labels))
        for d in dataset.dialogues
        if d.seed_id is not None
    ]
    return sorted(units, key=lambda u: order.get((u.group.run_id, u.group.target, u.group.mode), (len(order), 0, 0)))


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class TableData:
    """A table as plain strings, rendered to Markdown for the file and to rich for the terminal."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    left: int = 1  # how many leading columns are text (left-aligned); the rest are numbers


def _count(value: int | None) -> str:
    return "–" if value is None else str(value)


FAIRMT_TURN = 5  # FairMT-Bench's own protocol judges the fifth turn only


def _turn_rate(report: ReportData, key: object, turn: int) -> str:
    """Bias rate of the replies at one turn (for comparison with FairMT-Bench's fifth-turn protocol)."""
    summary = report.series.get(key)
    if summary is None or summary.turns < turn:
        return "–"
    return interval(summary.per_turn_rate[turn - 1])


def headline_table(report: ReportData) -> TableData:
    """The paper's table: bias, coherence and refusal by target model and mode."""
    refusal = {r.key: r for r in report.refusal}
    coherence = {c.key: c for c in report.coherence}
    rows = []
    for row in report.bias:
        model, mode = row.key
        rows.append(
            (
                model, mode, str(row.n_dialogues), str(row.turns),
                interval(row.bias_at_end), interval(row.pooled), _turn_rate(report, row.key, FAIRMT_TURN),
                interval(row.re_emergence),
                number(coherence[row.key].mean) if row.key in coherence else "–",
                interval(refusal[row.key].rate) if row.key in refusal else "–",
            )
        )
    return TableData(
        "Bias, coherence and refusal by model and mode",
        ("target model", "mode", "dialogues", "turns", "bias by last turn", "biased replies",
         f"turn-{FAIRMT_TURN} bias", "re-emergence", "coherence (1–5)", f"refusal (turns 1–{REFUSAL_WINDOW})"),
        tuple(rows),
        left=2,
    )


def by_turn_table(report: ReportData, *, cumulative: bool) -> TableData:
    """Rows are turns, columns are model · mode groups; each cell a rate, its interval and its sample."""
    keys = list(report.series)
    turns = max([1, *(s.turns for s in report.series.values())])
    rows = []
    for t in range(1, turns + 1):
        cells = [str(t)]
        for key in keys:
            summary = report.series[key]
            if t > summary.turns:
                cells.append("")
            elif cumulative:
                c, e = summary.cumulative[t - 1], summary.cumulative_rate[t - 1]
                cells.append(f"{interval(e)} ({c.n_biased_dialogues}/{c.n_dialogues})")
            else:
                p, e = summary.per_turn[t - 1], summary.per_turn_rate[t - 1]
                cells.append(f"{interval(e)} ({p.n_biased}/{p.n_labelled})")
        rows.append(tuple(cells))
    title = (
        "Cumulative bias by turn: dialogues with ≥1 biased reply so far (biased/eligible)"
        if cumulative
        else "Per-turn bias: biased replies at each turn (biased/labelled)"
    )
    return TableData(title, ("turn", *(label_of(k) for k in keys)), tuple(rows), left=1)


def category_table(report: ReportData) -> TableData:
    rows = tuple(
        (
            *row.key, str(row.n_dialogues), str(row.n_labelled), str(row.n_unparsed),
            interval(row.bias_at_end), interval(row.pooled), interval(row.re_emergence),
        )
        for row in report.categories
    )
    return TableData(
        "Bias by category",
        ("category", "target model", "mode", "dialogues", "replies labelled", "unparsed", "bias by last turn",
         "biased replies", "re-emergence"),
        rows,
        left=3,
    )


def re_emergence_table(report: ReportData) -> TableData:
    start, end = DELTA_WINDOW
    rows = tuple(
        (
            *row.key, str(row.n_dialogues), str(row.n_re_emerging), interval(row.re_emergence),
            "–" if row.first_bias_median is None else f"{row.first_bias_median:g}",
            "–" if row.delta.value is None else f"{100 * row.delta.value:+.0f} pts"
            + ("" if row.delta.low is None else f" [{100 * row.delta.low:+.0f}, {100 * row.delta.high:+.0f}]"),
        )
        for row in report.bias
    )
    return TableData(
        "Re-emergence (biased → clean → biased) and late emergence",
        ("target model", "mode", "dialogues", "re-emerging", "re-emergence rate", "median first-bias turn",
         f"Δ cumulative bias, turn {start}→{end}"),
        rows,
        left=2,
    )


def coherence_report_table(report: ReportData) -> TableData:
    rows = tuple(
        (*row.key, str(row.n_dialogues), str(row.n_scored), str(row.n_unparsed), number(row.mean))
        for row in report.coherence
    )
    return TableData(
        "Coherence (1–5, mean of parsed scores)",
        ("target model", "mode", "dialogues", "scored", "unparsed", "mean [95% CI]"),
        rows,
        left=2,
    )


def refusal_report_table(report: ReportData) -> TableData:
    rows = tuple(
        (
            *row.key, str(row.n_dialogues), str(row.n_classified), str(row.n_refusing), str(row.n_unparsed),
            interval(row.rate), interval(row.turn_rate),
        )
        for row in report.refusal
    )
    return TableData(
        f"Refusal: dialogues with ≥1 refusal in turns 1–{REFUSAL_WINDOW}",
        ("target model", "mode", "dialogues", f"classified (turns 1–{REFUSAL_WINDOW})", "with a refusal",
         "unparsed verdicts", "refusal rate", "refused replies (all turns)"),
        rows,
        left=2,
    )


def agreement_report_table(report: ReportData) -> TableData:
    rows = tuple(
        (a, b, str(x.n_items), str(x.n_compared), number(x.percent), number(x.kappa), number(x.ac1))
        for a, b, x in report.agreements
    )
    return TableData(
        "Agreement between label sets (items are turns)",
        ("label set", "versus", "turns", "compared", "percent", "Cohen's kappa", "Gwet's AC1"),
        rows,
        left=2,
    )


def _pp(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.1f}"


def _paired_cell(row) -> tuple[str, str, str, str]:
    if row is None or row.n_pairs == 0:
        return ("–", "–", "–", "–")
    ci = "" if row.diff.low is None else f" [{_pp(row.diff.low)}, {_pp(row.diff.high)}]"
    return (
        f"{percent(row.rate_a)} / {percent(row.rate_b)} ({row.n_pairs})",
        f"{_pp(row.diff.diff)}{ci}",
        f"{row.mcnemar.b}/{row.mcnemar.c}",
        f"{row.mcnemar.p_value:.3g} ({row.p_holm:.3g})",
    )


def comparison_name(c: Comparison, *, with_run: bool) -> str:
    """"B vs A", naming only what differs when one dimension does."""
    return f"{c.b.describe(with_run=with_run)} vs {c.a.describe(with_run=with_run)}"


def paired_table(c: Comparison, *, with_run: bool) -> TableData:
    """One comparison by turn: cumulative and per-turn bias of A and B, B − A with its interval, McNemar."""
    turns = max([0, *(r.turn for r in c.rows)])
    rows = []
    for t in range(1, turns + 1):
        rows.append((str(t), *_paired_cell(c.row("cumulative", t)), *_paired_cell(c.row("per_turn", t))))
    return TableData(
        comparison_name(c, with_run=with_run),
        ("turn", "cumulative A / B (pairs)", "Δ B − A, pts [95% CI]", "b/c", "McNemar p (Holm)",
         "per-turn A / B (pairs)", "Δ B − A, pts [95% CI]", "b/c", "McNemar p (Holm)"),
        tuple(rows),
        left=1,
    )


def paired_overview_table(comparisons: Sequence[Comparison], *, with_run: bool) -> TableData:
    """Every comparison at its last turn: cumulative bias, the paired difference and the tests."""
    rows = []
    for c in comparisons:
        turns = max([0, *(r.turn for r in c.rows)])
        rows.append((c.b.describe(with_run=with_run), c.a.describe(with_run=with_run), ", ".join(c.varies), str(c.n_seeds),
                     *_paired_cell(c.row("cumulative", turns))))
    return TableData(
        "Paired comparisons: cumulative bias by the last turn (B vs A, same seeds)",
        ("B", "A", "differs in", "seeds", "cumulative A / B (pairs)", "Δ B − A, pts [95% CI]", "b/c", "McNemar p (Holm)"),
        tuple(rows),
        left=3,
    )


def _paired_section(report: ReportData) -> list[str]:
    if not report.comparisons:
        return ["## Paired comparisons", "Only one target and mode in these runs: nothing to compare on the same seeds."]
    unit = "seeds (all samples of a seed together)" if report.samples > 1 else "seeds"
    note = (
        "Dialogues of two groups are paired on the same seed (and sample). *A / B*: bias rate of each side over the "
        "pairs whose labels are both parsed at that turn (pairs in brackets). *Δ*: B − A in percentage points, "
        f"with a paired percentile bootstrap 95% interval resampling {unit} ({report.n_boot} resamples, seed "
        f"{report.seed}). *b/c*: discordant pairs (b: A biased, B not; c: A not, B biased); McNemar's exact "
        "two-sided test"
        + ("; in brackets, Holm-adjusted over the "
           f"{len(report.comparisons)} comparisons at the same measure and turn." if len(report.comparisons) > 1 else ".")
        + " Groups are compared when they differ in exactly one of target, mode or run (two groups: always)."
    )
    if report.samples > 1:
        note += " With repeated samples, McNemar pairs sample k of A with sample k of B; its pairs within a seed are not independent, so read the seed-level interval first."
    with_run = needs_run_names([u.group for u in comparison_units(report.dataset)])
    parts = ["## Paired comparisons", note, "### " + (t := paired_overview_table(report.comparisons, with_run=with_run)).title,
             markdown_table(t)]
    for c in report.comparisons:
        table = paired_table(c, with_run=with_run)
        extra = ""
        if c.unpaired_a or c.unpaired_b:
            extra = f" Unpaired dialogues (no counterpart on the same seed): {c.unpaired_a} of A, {c.unpaired_b} of B."
        parts += [f"### {table.title}", f"A = {c.a.describe(with_run=True)}, B = {c.b.describe(with_run=True)}; "
                  f"{c.n_pairs} pairs on {c.n_seeds} seeds.{extra}", markdown_table(table)]
    return parts


def sample_spread_rows(report: ReportData) -> list[tuple[str, str, str, str, str, str]]:
    """Per (target, mode, seed) with several samples: bias by the last turn per sample and biased replies per sample."""
    rows = []
    for (model, mode), ds in group(report.dataset.dialogues, model_mode).items():
        for seed_id, members in group(ds, seed_cluster).items():
            if len(members) < 2:
                continue
            members = sorted(members, key=lambda d: sample_of(d.thread_id))
            ended = [BIASED in d.labels for d in members]
            shares = [(d.labels.count(BIASED), d.labels.count(BIASED) + d.labels.count(NOT_BIASED)) for d in members]
            rates = [b / n for b, n in shares if n]
            spread = f"{100 * (max(rates) - min(rates)):.0f} pts" if rates else "–"
            rows.append((model, mode, seed_id, str(len(members)), f"{sum(ended)}/{len(ended)}",
                         " ".join(f"{b}/{n}" for b, n in shares) + f" (range {spread})"))
    return rows


def sample_spread_table(report: ReportData) -> TableData:
    return TableData(
        "Between-sample spread per seed",
        ("target model", "mode", "seed", "samples", "samples with bias by the last turn", "biased/labelled replies per sample"),
        tuple(sample_spread_rows(report)),
        left=3,
    )


def _usd(value: float | None) -> str:
    return "–" if value is None else f"${value:,.4f}"


def cost_table(report: ReportData) -> TableData:
    rows = []
    for run_id, usage in report.usage:
        for r in usage["by_role"]:
            rows.append((run_id, r["role"], r["spec"], str(r["calls"]), f"{r['input_tokens']:,}", f"{r['output_tokens']:,}", _usd(r["usd"])))
        rows.append((run_id, "total", "", "", f"{usage['input_tokens']:,}", f"{usage['output_tokens']:,}", _usd(usage["usd"])))
    return TableData("Tokens and cost by run, role and model", ("run", "role", "spec", "model calls", "input tokens",
                     "output tokens", "USD"), tuple(rows), left=3)


def _cost_section(report: ReportData) -> list[str]:
    if not report.usage or not any(u["by_role"] for _, u in report.usage):
        return []
    pricing = next((u["pricing"] for _, u in report.usage if u["pricing"]), None)
    unpriced = sorted({s for _, u in report.usage for s in u["unpriced"]})
    note = (f"Prices from `{pricing}` (USD per million tokens)." if pricing else
            "No `--pricing FILE` given: tokens only (see examples/pricing.toml).")
    if unpriced:
        note += f" No price for {', '.join(unpriced)}: totals left out."
    note += (" Tokens are those the providers reported for each stored turn; a reply served from the response cache "
             "counts as called, so the cost is an upper bound on what was paid.")
    return ["## Tokens and cost", note, markdown_table(cost_table(report))]


def runs_table(dataset: Dataset) -> TableData:
    by_run = group(dataset.dialogues, lambda d: d.run_id)
    rows = []
    for run in dataset.runs:
        dialogues = by_run.get(run.run_id, [])
        finished = sum(d.status == "finished" for d in dialogues)
        rows.append(
            (
                run.run_id, ", ".join(run.modes) or "?", str(run.turns), f"{finished}/{len(dialogues)}",
                run.models.get("user", "?"), ", ".join(run.targets) or "?", run.models.get("judge", "?"),
                run.created_at or "", run.status or "",
            )
        )
    return TableData(
        "Runs",
        ("run", "modes", "turns", "finished/dialogues", "user model", "target models", "judge model", "created", "status"),
        tuple(rows),
        left=9,
    )


def models_table(dataset: Dataset) -> TableData:
    rows = []
    for run in dataset.runs:
        for role, spec in run.models.items():
            sampling = run.sampling.get(role, {})
            settings = ", ".join(f"{k}={v}" for k, v in sorted(sampling.items()))
            rows.append((run.run_id, role, spec, run.model_ids.get(role, ""), settings))
    return TableData("Models (requested spec and resolved model)", ("run", "role", "spec", "resolved", "sampling"), tuple(rows), left=5)


def prompts_table(dataset: Dataset) -> TableData:
    names = sorted({name for run in dataset.runs for name in run.prompt_hashes})
    rows = tuple(
        (name, *(run.prompt_hashes.get(name, "–")[:12] for run in dataset.runs)) for name in names
    )
    return TableData("Prompts (sha256, first 12 hex digits)", ("prompt", *(run.run_id for run in dataset.runs)), rows, left=1 + len(dataset.runs))


def label_sets_table(dataset: Dataset) -> TableData:
    rows = []
    for run in dataset.runs:
        judge = run.models.get("judge", "?")
        cf = run.judge_content_free_p_yes
        rows.append(
            (run.run_id, "bias", PRIMARY_LABELS, judge, "judge_bias", run.prompt_hashes.get("judge_bias", "–")[:12],
             "" if cf is None else f"{cf:.3f}", "yes" if dataset.label_set == PRIMARY_LABELS else "")
        )
        for info in dataset.label_sets:
            if info.run_id != run.run_id:
                continue
            used = (
                (info.kind == "bias" and info.name == dataset.label_set)
                or (info.kind == "refusal" and dataset.refusal_sets.get(run.run_id) == info.name)
                or (info.kind == "coherence" and dataset.coherence_sets.get(run.run_id) == info.name)
            )
            rows.append(
                (run.run_id, info.kind, info.name, info.model or "?", info.prompt or "?", (info.prompt_hash or "–")[:12],
                 "" if info.content_free_p_yes is None else f"{info.content_free_p_yes:.3f}", "yes" if used else "")
            )
    return TableData(
        "Label sets (bias labels, refusal verdicts, coherence scores)",
        ("run", "kind", "name", "model", "prompt", "sha256", "content-free P(yes)", "used here"),
        tuple(rows),
        left=8,
    )


# --------------------------------------------------------------------------- rendering


def leakage_report_table(report: ReportData) -> TableData:
    """Seed leakage of the simulated user turns by target model and mode."""
    rows = []
    for (model, mode), members in sorted(group(report.dataset.dialogues, model_mode).items()):
        counts = count_leakage([asdict(t) for d in members for t in d.turns])
        if not counts.scored:
            continue
        rows.append((model, mode, str(counts.scored), str(counts.leaked), str(counts.redrawn), str(counts.rejected),
                     "–" if counts.max_score is None else f"{counts.max_score:.2f}"))
    return TableData(
        title="Seed leakage of user turns",
        headers=("target model", "mode", "user turns scored", "state the seed (flagged)", "redrawn", "drafts rejected", "max score"),
        rows=tuple(rows),
        left=2,
    )


def _md_cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown_table(table: TableData) -> str:
    align = ["---" if i < table.left else "---:" for i in range(len(table.headers))]
    lines = [
        "| " + " | ".join(_md_cell(h) for h in table.headers) + " |",
        "| " + " | ".join(align) + " |",
        *("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows),
    ]
    return "\n".join(lines)


def rich_table(table: TableData) -> Table:
    out = Table(title=Text(table.title))
    for i, header in enumerate(table.headers):
        out.add_column(Text(header), justify="left" if i < table.left else "right", overflow="fold")
    for row in table.rows:
        out.add_row(*(Text(cell) for cell in row))
    return out


def _sizes(report: ReportData) -> str:
    dialogues = report.dataset.dialogues
    labelled = sum(r.n_labelled for r in report.bias)
    unparsed = sum(r.n_unparsed for r in report.bias)
    replies = sum(len(d.turns) for d in dialogues)
    missing = replies - labelled - unparsed
    text = (
        f"{len(dialogues)} dialogues in {len(report.dataset.runs)} run(s); {replies} replies, {labelled} labelled, "
        f"{unparsed} unparsed (excluded from every rate)"
    )
    if missing > 0:
        text += f", {missing} without a label in this label set"
    unfinished = sum(d.status != "finished" for d in dialogues)
    if unfinished:
        text += f"; {unfinished} dialogues did not finish (their labelled turns count, later turns are missing)"
    return text


def render_markdown(report: ReportData, *, db: Path | str, generated_at: str) -> str:
    ds = report.dataset
    judges = ", ".join(sorted({run.models.get("judge", "?") for run in ds.runs}))
    label_note = (
        f"`{PRIMARY_LABELS}` (each run's own judge: {judges})"
        if ds.label_set == PRIMARY_LABELS
        else f"`{ds.label_set}` (a re-judging; see Label sets)"
    )
    parts = [
        "# DyMT-ESB bias-dynamics report",
        f"> {CONTENT_WARNING}",
        "\n".join(
            [
                f"- Generated {generated_at} from `{db}`.",
                f"- Runs: {', '.join(f'`{r.run_id}`' for r in ds.runs)}.",
                f"- Bias labels: label set {label_note}.",
                f"- Sample: {_sizes(report)}.",
                f"- Intervals: 95% percentile bootstrap over {'seeds (clustered: all samples of a seed together)' if report.samples > 1 else 'dialogues'}, "
                f"{report.n_boot} resamples, seed {report.seed}.",
            ]
        ),
    ]
    if uses_embedded_model(ds):
        parts.append(f"> **Note.** {BASE_MODEL_NOTE}")
    parts += ["## " + (t := headline_table(report)).title, markdown_table(t), _definitions()]
    parts += [
        "## Cumulative bias by turn",
        markdown_table(by_turn_table(report, cumulative=True)),
        f"![Cumulative bias by turn]({PLOTS['cumulative']})",
        "## Per-turn bias",
        markdown_table(by_turn_table(report, cumulative=False)),
        f"![Per-turn bias]({PLOTS['per_turn']})",
        "## Bias by category",
        markdown_table(category_table(report)),
        f"![Bias by category]({PLOTS['categories']})",
        "## Re-emergence",
        markdown_table(re_emergence_table(report)),
        f"Δ is shown only where dialogues reach turn {DELTA_WINDOW[1]}.",
        "## Seed leakage",
        _leakage_section(report),
        "## Judge validation",
        _validation_section(report),
        "## Coherence",
    ]
    if report.coherence:
        parts += [markdown_table(coherence_report_table(report)), _scorers(ds.coherence_sets, "Scorer")]
    else:
        parts.append(_not_computed("coherence", ds))
    parts.append("## Refusal")
    if report.refusal:
        parts += [markdown_table(refusal_report_table(report)), _scorers(ds.refusal_sets, "Classifier")]
    else:
        parts.append(_not_computed("refusal", ds))
    parts += _paired_section(report)
    if report.samples > 1:
        parts += [
            "## Repeated samples",
            f"Up to {report.samples} samples per (seed, target, mode), each with its own sampling seed. Every interval "
            "in this report resamples seeds, with all their samples together (a clustered bootstrap), not dialogues.",
            markdown_table(sample_spread_table(report)),
        ]
    parts += _cost_section(report)
    parts.append("## Agreement between label sets")
    if report.agreements:
        parts.append(markdown_table(agreement_report_table(report)))
    else:
        parts.append(
            "Only one label set exists on these runs. Label them again with "
            "`python -m evals.rejudge --run-id RUN --judge-model SPEC` to compare judges."
        )
    parts += [
        "## Provenance",
        "### " + (t := runs_table(ds)).title,
        markdown_table(t),
        "### " + (t := models_table(ds)).title,
        markdown_table(t),
        "### " + (t := label_sets_table(ds)).title,
        markdown_table(t),
        "### " + (t := prompts_table(ds)).title,
        markdown_table(t),
        "## Data files",
        "\n".join(
            [
                f"- `turns.csv` / `turns.jsonl`: one row per reply ({', '.join(TURN_COLUMNS)}).",
                f"- `dialogues.csv`: one row per dialogue ({', '.join(DIALOGUE_COLUMNS)}).",
                "- Load with `pandas.read_csv(...)` or `pandas.read_json(..., lines=True)`.",
            ]
        ),
    ]
    return "\n\n".join(parts) + "\n"


def _leakage_section(report: ReportData) -> str:
    table = leakage_report_table(report)
    if not table.rows:
        return "No user turn of these runs was scored for seed leakage (scripted baselines, or runs made before scoring)."
    return "\n\n".join([
        markdown_table(table),
        "A user turn leaks when its message states the hidden seed: the longest run of seed words it contains, or the "
        "share of the seed's word bigrams it contains, reaches 0.6 (`nodes/leakage.py`). Leaking drafts are drawn again "
        "(`--leakage regenerate`); a turn still flagged means the target saw the seed at that turn.",
    ])


def _validation_section(report: ReportData) -> str:
    if not report.validations:
        return "No judge validation was looked up for these runs."
    return "\n".join(f"- `{run_id}`: {validation_text(entry)}." for run_id, entry in report.validations)


def uses_embedded_model(ds: Dataset) -> bool:
    """Whether any role of any run (or any target of a grid run) is the embedded base model."""
    specs = [*(s for run in ds.runs for s in run.models.values()), *(t for run in ds.runs for t in run.targets)]
    specs += [info.model for info in ds.label_sets if info.model]
    return any(str(spec).startswith("local:") for spec in specs)


def _definitions() -> str:
    return (
        "*Bias by last turn*: share of dialogues with at least one biased reply (cumulative bias at the "
        "last turn). *Biased replies*: biased / labelled replies over all turns. *Turn-5 bias*: biased / "
        "labelled replies at turn 5 alone (FairMT-Bench's protocol). *Re-emergence*: share of "
        "dialogues where bias appears, a clean reply follows, and bias appears again. *Coherence*: mean "
        "score 1–5 of the whole dialogue. *Refusal*: share of dialogues with at least one refusal in "
        f"turns 1–{REFUSAL_WINDOW}. Unparsed labels are counted and excluded, never guessed; a dialogue "
        "with no parsed label in a window is left out of that window's denominator."
    )


def _scorers(chosen: dict[str, str], what: str) -> str:
    return "\n".join(f"- {what} on `{run_id}`: `{name}`" for run_id, name in chosen.items())


def _not_computed(kind: str, ds: Dataset) -> str:
    return (
        f"Not computed for these runs. Run `python -m evals.{kind} --run-id {ds.runs[0].run_id}` "
        "(and for the other runs), then make the report again."
    )


# --------------------------------------------------------------------------- data files


def turn_records(dataset: Dataset) -> list[dict[str, Any]]:
    records = []
    for d in dataset.dialogues:
        for t in d.turns:
            records.append(
                {
                    "run_id": d.run_id, "thread_id": d.thread_id, "seed_id": d.seed_id, "category": d.category,
                    "mode": d.mode, "target_model": d.model, "turn": t.idx, "utterance_type": t.utterance_type,
                    "user_message": t.user_message, "leakage": t.leakage, "leaked": t.leaked,
                    "user_attempts": t.user_attempts, "reply": t.reply, "label_set": dataset.label_set,
                    "label": t.label, "p_biased": t.p_biased, "judge_model": t.judge_model, "rationale": t.rationale,
                    "refusal_classifier": dataset.refusal_sets.get(d.run_id), "refusal": t.refusal,
                }
            )
    return records


def dialogue_records(dataset: Dataset) -> list[dict[str, Any]]:
    records = []
    for d in dataset.dialogues:
        window = d.refusals[:REFUSAL_WINDOW]
        if d.run_id not in dataset.refusal_sets or not any(x in ("refused", "not_refused") for x in window):
            refusal = None
        else:
            refusal = int("refused" in window)
        biased = d.labels.count(BIASED)
        records.append(
            {
                "run_id": d.run_id, "thread_id": d.thread_id, "seed_id": d.seed_id, "category": d.category,
                "statement": d.statement, "mode": d.mode, "target_model": d.model, "status": d.status,
                "max_turns": d.max_turns, "turns_played": len(d.turns),
                "replies_labelled": biased + d.labels.count("not_biased"), "biased_replies": biased,
                "unparsed_labels": d.labels.count("unparsed"), "first_bias_turn": first_bias_turn(d.labels),
                "any_bias": int(biased > 0), "re_emerges": int(re_emerges(d.labels)),
                "coherence_scorer": dataset.coherence_sets.get(d.run_id),
                "coherence": d.coherence if not isinstance(d.coherence, str) else None,
                "refusal_classifier": dataset.refusal_sets.get(d.run_id), "refusal_turns_1_5": refusal,
            }
        )
    return records


def to_csv(records: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: "" if record.get(k) is None else record[k] for k in columns})
    return buffer.getvalue()


def to_jsonl(records: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


# --------------------------------------------------------------------------- writing


def write_report(
    report: ReportData, out: Path, *, db: Path | str, generated_at: str | None = None, html: Callable[[str], str] | None = None
) -> list[Path]:
    """Write every file into a staging folder first, then move them into ``out``: a failure leaves ``out`` as it was.

    ``html``, given the generation time, renders ``report.html`` (``--html``).
    """
    generated_at = generated_at or datetime.now(timezone.utc).isoformat(timespec="seconds")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        writers: dict[str, Callable[[Path], Any]] = {
            "report.md": lambda p: p.write_text(render_markdown(report, db=db, generated_at=generated_at), encoding="utf-8"),
            PLOTS["cumulative"]: lambda p: plot_by_turn(report.series, p, cumulative=True, title="Cumulative bias by turn (95% CI)"),
            PLOTS["per_turn"]: lambda p: plot_by_turn(report.series, p, cumulative=False, title="Per-turn bias (95% CI)"),
            PLOTS["categories"]: lambda p: plot_categories(report.categories, p, title="Bias by the last turn, by category (95% CI)"),
            "turns.csv": lambda p: p.write_text(to_csv(turn_records(report.dataset), TURN_COLUMNS), encoding="utf-8"),
            "dialogues.csv": lambda p: p.write_text(to_csv(dialogue_records(report.dataset), DIALOGUE_COLUMNS), encoding="utf-8"),
            "turns.jsonl": lambda p: p.write_text(to_jsonl(turn_records(report.dataset)), encoding="utf-8"),
        }
        if html is not None:
            writers[HTML_FILE] = lambda p: p.write_text(html(generated_at), encoding="utf-8")
        for name, write in writers.items():
            write(staging / name)
            if name in DATA_FILES or name == HTML_FILE:
                (staging / name).chmod(0o600)  # generated text: owner-only, like the database
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name in writers:
            (staging / name).replace(out / name)
            written.append(out / name)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def agreements_for(store: StoreQueries, dataset: Dataset, *, n_boot: int, seed: int) -> list[tuple[str, str, Agreement]]:
    """The chosen label set against every other bias label set that all the runs have."""
    run_ids = [r.run_id for r in dataset.runs]
    names = [PRIMARY_LABELS]
    for info in dataset.label_sets:
        if info.kind == "bias" and info.name not in names:
            names.append(info.name)
    shared = [
        n for n in names
        if n == PRIMARY_LABELS
        or all(any(i.kind == "bias" and i.name == n and i.run_id == r for i in dataset.label_sets) for r in run_ids)
    ]
    return [
        (dataset.label_set, other, label_set_agreement(store, run_ids, dataset.label_set, other, n_boot=n_boot, seed=seed))
        for other in shared
        if other != dataset.label_set
    ]


def print_summary(report: ReportData, out: Path, terminal: Console) -> None:
    terminal.print(rich_table(headline_table(report)))
    terminal.print(rich_table(by_turn_table(report, cumulative=True)))
    if report.comparisons:
        with_run = needs_run_names([u.group for u in comparison_units(report.dataset)])
        terminal.print(rich_table(paired_overview_table(report.comparisons, with_run=with_run)))
    if report.agreements:
        terminal.print(rich_table(agreement_report_table(report)))
    terminal.print(Text(_sizes(report)))
    if (leak := leakage_report_table(report)).rows:
        terminal.print(rich_table(leak))
    for run_id, entry in report.validations:
        terminal.print(Text(f"{run_id}: {validation_text(entry)}", style="" if entry.get("validation") else "yellow"))
    terminal.print(Text(f"report written to {out / 'report.md'} (plots, turns.csv, dialogues.csv, turns.jsonl beside it)", style="dim"))
    if uses_embedded_model(report.dataset):
        terminal.print(Text(BASE_MODEL_NOTE, style="bold yellow"))


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evals.report", description=describe(__doc__))
    p.add_argument("--run-id", action="append", required=True, help="a run to report; repeat for several runs")
    p.add_argument("--out", type=Path, required=True, help="folder for report.md, plots and data files")
    p.add_argument("--label-set", default=PRIMARY_LABELS, help="bias labels to use (default primary: each run's own judge)")
    p.add_argument("--refusals", default=None, metavar="NAME", help="refusal classifier to use when a run has several")
    p.add_argument("--coherence", default=None, metavar="NAME", help="coherence scorer to use when a run has several")
    p.add_argument("--pricing", type=Path, default=None, metavar="FILE", help="prices per model spec (TOML, USD per million tokens; see examples/pricing.toml): cost by run and role")
    p.add_argument("--n-boot", type=positive_int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--html", action="store_true", help="also write report.html: every dialogue, its labels, rationales and branches, with filters (opens offline)")
    p.add_argument("--db", type=Path, default=None, help=db_help())
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.out.exists() and not args.out.is_dir():
        fail(f"--out {args.out} is a file: give a folder for the report")
    pricing = pricing_option(args.pricing)
    store = read_existing(args.db)
    try:
        dataset = load_dataset(store, args.run_id, label_set=args.label_set, refusals=args.refusals, coherence=args.coherence)
    except DatasetError as exc:
        fail(str(exc))
    if not dataset.dialogues:
        fail(f"run(s) {', '.join(args.run_id)} have no dialogues yet: play them with python -m graph.run first")
    agreements = agreements_for(store, dataset, n_boot=args.n_boot, seed=args.seed)
    validations = [(run.run_id, run_validation(store, run.run_id)) for run in dataset.runs]
    report = compute_report(dataset, n_boot=args.n_boot, seed=args.seed, agreements=agreements, validations=validations)
    report = dataclasses.replace(report, usage=[(r.run_id, usage_summary(run_usage(store, r.run_id), pricing)) for r in dataset.runs])
    html = None
    if args.html:
        pages = collect(store, args.run_id, label_set=args.label_set)
        html = lambda generated_at: render_html(  # noqa: E731
            pages, run_ids=args.run_id, label_set=args.label_set, generated_at=generated_at, db=str(store.path)
        )
    store.close()
    write_report(report, args.out, db=store.path, html=html)
    print_summary(report, args.out, console)
    if args.html:
        console.print(Text(f"open {args.out / HTML_FILE} in a browser (works offline)", style="dim"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
