"""The report's result tables, by model and mode: bias, turns, categories, re-emergence, coherence, refusal, leakage,
agreement, samples, cost."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from checkpoints.ids import sample_of
from checkpoints.vocabulary import BIASED, NOT_BIASED
from evals.judge_error.block_texts import interval_text
from evals.metric_registry import METRIC
from evals.report.breakdown import DELTA_WINDOW, REFUSAL_WINDOW, group
from evals.report.data import ReportData, model_mode, seed_cluster
from evals.report.formatting import estimate_text, number
from evals.report.plots import label_of
from evals.report.tables import TableData
from nodes.leakage import count_leakage

FAIRMT_TURN = 5  # FairMT-Bench's own protocol judges the fifth turn only


def _row(key: Any, counts: Iterable[int], texts: Iterable[str]) -> tuple[str, ...]:
    """A table row: its group's key (target model, mode, …), its counts, then its formatted numbers."""
    return (*key, *map(str, counts), *texts)


def _turn_rate(report: ReportData, key: object, turn: int) -> str:
    """Bias rate of the replies at one turn (for comparison with FairMT-Bench's fifth-turn protocol)."""
    summary = report.series.get(key)  # type: ignore[call-overload]
    if summary is None or summary.turns < turn:
        return "–"
    return estimate_text(summary.per_turn_rate[turn - 1])


def headline_table(report: ReportData) -> TableData:
    """The paper's table: bias, coherence and refusal by target model and mode."""
    refusal = {r.key: r for r in report.refusal}
    coherence = {c.key: c for c in report.coherence}
    rows = []
    for row in report.bias:
        model, mode = row.key  # type: ignore[misc]
        rows.append(
            (
                model,  # type: ignore[has-type]
                mode,  # type: ignore[has-type]
                str(row.n_dialogues),
                str(row.turns),
                estimate_text(row.bias_at_end),
                estimate_text(row.pooled),
                _turn_rate(report, row.key, FAIRMT_TURN),
                estimate_text(row.re_emergence),
                number(coherence[row.key].mean) if row.key in coherence else "–",
                estimate_text(refusal[row.key].rate) if row.key in refusal else "–",
            )
        )
    return TableData(
        "Bias, coherence and refusal by model and mode",
        (
            "target model",
            "mode",
            "dialogues",
            "turns",
            "bias by last turn",
            "biased replies",
            f"turn-{FAIRMT_TURN} bias",
            METRIC["re_emergence"].label,
            "coherence (1–5)",
            f"refusal (turns 1–{REFUSAL_WINDOW})",
        ),
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
                cells.append(f"{estimate_text(e)} ({c.n_biased_dialogues}/{c.n_dialogues})")
            else:
                p, e = summary.per_turn[t - 1], summary.per_turn_rate[t - 1]
                cells.append(f"{estimate_text(e)} ({p.n_biased}/{p.n_labelled})")
        rows.append(tuple(cells))
    title = (
        "Cumulative bias by turn: dialogues with ≥1 biased reply so far (biased/eligible)"
        if cumulative
        else "Per-turn bias: biased replies at each turn (biased/labelled)"
    )
    return TableData(title, ("turn", *(label_of(k) for k in keys)), tuple(rows), left=1)


def _corrected_final(block: dict | None) -> str:
    """A category's corrected bias by the last turn, "*" where its category's own error was not known."""
    if not block or block.get("refusal") or not block.get("cumulative"):
        return "–"
    final = block["cumulative"][-1]
    text = interval_text(final) + (" (unreliable)" if final.get("unreliable") else "")
    return text + ("" if block.get("scope") == "category" else " *")


def category_table(report: ReportData) -> TableData:
    blocks = report.corrected_categories
    corrected = blocks if any(not b.get("refusal") for b in blocks.values()) else {}
    rows = tuple(
        _row(
            row.key,
            (row.n_dialogues, row.n_labelled, row.n_unparsed),
            (
                estimate_text(row.bias_at_end),
                *((_corrected_final(corrected.get(row.key)),) if corrected else ()),  # type: ignore[call-overload]
                estimate_text(row.pooled),
                estimate_text(row.re_emergence),
            ),
        )
        for row in report.categories
    )
    return TableData(
        "Bias by category",
        (
            "category",
            "target model",
            "mode",
            "dialogues",
            "replies labelled",
            "unparsed",
            "bias by last turn",
            *(("corrected for the judge's error on the category",) if corrected else ()),
            "biased replies",
            METRIC["re_emergence"].label,
        ),
        rows,
        left=3,
    )


def re_emergence_table(report: ReportData) -> TableData:
    start, end = DELTA_WINDOW
    rows = tuple(
        _row(
            row.key,
            (row.n_dialogues, row.n_re_emerging),
            (
                estimate_text(row.re_emergence),
                "–" if row.first_bias_median is None else f"{row.first_bias_median:g}",
                "–"
                if row.delta.value is None
                else f"{100 * row.delta.value:+.0f} pts"
                + ("" if row.delta.low is None else f" [{100 * row.delta.low:+.0f}, {100 * row.delta.high:+.0f}]"),  # type: ignore[operator]
            ),
        )
        for row in report.bias
    )
    return TableData(
        "Re-emergence (biased → clean → biased) and late emergence",
        (
            "target model",
            "mode",
            "dialogues",
            "re-emerging",
            f"{METRIC['re_emergence'].label} rate",
            f"median {METRIC['first_bias_turn'].label}",
            f"Δ cumulative bias, turn {start}→{end}",
        ),
        rows,
        left=2,
    )


def coherence_report_table(report: ReportData) -> TableData:
    rows = tuple(
        _row(row.key, (row.n_dialogues, row.n_scored, row.n_unparsed), (number(row.mean),)) for row in report.coherence
    )
    return TableData(
        "Coherence (1–5, mean of parsed scores)",
        ("target model", "mode", "dialogues", "scored", "unparsed", "mean [95% CI]"),
        rows,
        left=2,
    )


def refusal_report_table(report: ReportData) -> TableData:
    rows = tuple(
        _row(
            row.key,
            (row.n_dialogues, row.n_classified, row.n_refusing, row.n_unparsed),
            (estimate_text(row.rate), estimate_text(row.turn_rate)),
        )
        for row in report.refusal
    )
    return TableData(
        f"Refusal: dialogues with ≥1 refusal in turns 1–{REFUSAL_WINDOW}",
        (
            "target model",
            "mode",
            "dialogues",
            f"classified (turns 1–{REFUSAL_WINDOW})",
            "with a refusal",
            "unparsed verdicts",
            "refusal rate",
            "refused replies (all turns)",
        ),
        rows,
        left=2,
    )


def agreement_report_table(report: ReportData) -> TableData:
    rows = tuple(
        _row((a, b), (x.n_items, x.n_compared), (number(x.percent), number(x.kappa), number(x.ac1)))
        for a, b, x in report.agreements
    )
    return TableData(
        "Agreement between label sets (items are turns)",
        ("label set", "versus", "turns", "compared", "percent", "Cohen's kappa", "Gwet's AC1"),
        rows,
        left=2,
    )


def leakage_report_table(report: ReportData) -> TableData:
    """Seed leakage of the simulated user turns by target model and mode."""
    rows = []
    for (model, mode), members in sorted(group(report.dataset.dialogues, model_mode).items()):
        counts = count_leakage([asdict(t) for d in members for t in d.turns])
        if not counts.scored:
            continue
        rows.append(
            _row(
                (model, mode),
                (counts.scored, counts.leaked, counts.redrawn, counts.rejected),
                ("–" if counts.max_score is None else f"{counts.max_score:.2f}",),
            )
        )
    return TableData(
        title="Seed leakage of user turns",
        headers=(
            "target model",
            "mode",
            "user turns scored",
            "state the seed (flagged)",
            "redrawn",
            "drafts rejected",
            "max score",
        ),
        rows=tuple(rows),
        left=2,
    )


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
            rows.append(
                (
                    model,
                    mode,
                    seed_id,
                    str(len(members)),
                    f"{sum(ended)}/{len(ended)}",
                    " ".join(f"{b}/{n}" for b, n in shares) + f" (range {spread})",
                )
            )
    return rows


def sample_spread_table(report: ReportData) -> TableData:
    return TableData(
        "Between-sample spread per seed",
        (
            "target model",
            "mode",
            "seed",
            "samples",
            "samples with bias by the last turn",
            "biased/labelled replies per sample",
        ),
        tuple(sample_spread_rows(report)),
        left=3,
    )


def _usd(value: float | None) -> str:
    return "–" if value is None else f"${value:,.4f}"


def cost_table(report: ReportData) -> TableData:
    rows = []
    for run_id, usage in report.usage:
        for r in usage["by_role"]:
            rows.append(
                (
                    run_id,
                    r["role"],
                    r["spec"],
                    str(r["calls"]),
                    f"{r['input_tokens']:,}",
                    f"{r['output_tokens']:,}",
                    f"{r.get('reasoning_tokens') or 0:,}",
                    _usd(r["usd"]),
                    _usd(r.get("reasoning_usd")),
                )
            )
        rows.append(
            (
                run_id,
                "total",
                "",
                "",
                f"{usage['input_tokens']:,}",
                f"{usage['output_tokens']:,}",
                f"{usage.get('reasoning_tokens') or 0:,}",
                _usd(usage["usd"]),
                _usd(usage.get("reasoning_usd")),
            )
        )
    return TableData(
        "Tokens and cost by run, role and model",
        (
            "run",
            "role",
            "spec",
            "model calls",
            "input tokens",
            "output tokens",
            "of which reasoning",
            "USD",
            "of which reasoning (USD)",
        ),
        tuple(rows),
        left=3,
    )
