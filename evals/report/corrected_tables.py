"""The report's rates corrected for the judge's error: per target × mode, per paired comparison, and their tables.

Each (run, target, mode) cell is corrected with its run's validation (:mod:`evals.judge_error.run_blocks`);
a report row (target, mode) spanning several runs pools its cells when they share one validation,
and says why not otherwise. Paired comparisons get B − A corrected on shared validation draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from evals.dataset import Dataset
from evals.judge_error.block_texts import beyond_note, drift_line, flag_lines, interval_text, validation_line
from evals.judge_error.cells import Cell
from evals.judge_error.correction import CorrectedRun
from evals.judge_error.run_blocks import (
    SHARED_ERROR_NOTE,
    ChosenValidation,
    cell_block,
    correct_run_cells,
    difference_block,
    pooled_block,
    refused_block,
)
from evals.metric_registry import METRIC
from evals.report.plots import label_of
from evals.report.tables import TableData
from evals.stats.group_comparison import Comparison, Group

Key = tuple[str, str]  # (target model, mode), as the report's groups


def _cells(groups: Mapping[Any, Sequence[Any]], *, categories: bool = False) -> dict[Any, Cell]:
    """Dataset dialogues grouped by key as the correction's cells: labels, seed (the cluster), thread, category."""
    return {
        key: Cell(
            [list(d.labels) for d in members],
            [d.seed_id or d.thread_id for d in members],
            [d.thread_id for d in members],
            [d.category for d in members] if categories else None,
        )
        for key, members in groups.items()
    }


@dataclass(frozen=True)
class CorrectedReport:
    """``blocks``: the summary-shaped ``judge_corrected`` block per (target, mode); ``differences`` per comparison."""

    blocks: dict[Key, dict[str, Any]]
    differences: tuple[dict[str, Any], ...]  # aligned with ReportData.comparisons
    # (category, target model, mode) -> its cell corrected with the error the judge makes on that category's items
    # where the validation holds enough of them (``scope`` "category"), else with the whole validation ("all")
    categories: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)


# A category's own items validate its dialogues once they hold at least this many of each kind (truly biased and
# not): fewer, and the category's numbers use the whole validation's error, saying so.
CATEGORY_TABLE_MIN_DIALOGUES = 20


def category_validation(chosen: ChosenValidation, category: str) -> tuple[ChosenValidation, str, str | None]:
    """The validation a category's dialogues are corrected with, its scope ("category" or "all") and, for "all", why."""
    v = chosen.validation
    own = None if v is None else v.category(category)
    if own is not None and min(own.positives, own.negatives) >= CATEGORY_TABLE_MIN_DIALOGUES and own.refusal() is None:
        return replace(chosen, validation=own, refusal=None), "category", None
    held = 0 if own is None else min(own.positives, own.negatives)
    why = (
        f"the judge's error on all items (the validation holds {_count(held)} of each kind of {category} item, "
        f"fewer than {CATEGORY_TABLE_MIN_DIALOGUES})"
    )
    return chosen, "all", why


def _count(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def correct_categories(
    dataset: Dataset, validations: Mapping[str, ChosenValidation], *, seed: int = 0
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Each (category, target, mode) cell of a report corrected with its category's error where the validation
    knows it (one run per cell: a row that spans runs validated differently is refused, as the main table's)."""
    by_cell: dict[tuple[str, str, str, str], list] = {}
    for d in dataset.dialogues:
        by_cell.setdefault((d.category, d.run_id, d.model, d.mode), []).append(d)
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for (category, run_id, model, mode), members in sorted(by_cell.items()):
        key = (category, model, mode)
        if key in out:
            out[key] = refused_block(
                out[key].get("_chosen") or ChosenValidation(None, None, "", None),
                "no corrected rate: this row spans several runs (report them one run at a time)",
            )
            continue
        chosen = validations.get(run_id) or ChosenValidation(None, None, "", "no validation was looked up for this run")
        used, scope, why = category_validation(chosen, category)
        result = correct_run_cells(_cells({key: members}), used, seed=seed)[key]
        out[key] = {**cell_block(result, used), "scope": scope, "scope_note": why}
    return out


def correct_report(
    dataset: Dataset,
    validations: Mapping[str, ChosenValidation],
    comparisons: Sequence[Comparison] = (),
    *,
    seed: int = 0,
) -> CorrectedReport:
    """Correct every (run, target, mode) cell with its run's validation; pool them per (target, mode); corrected Δ per
    comparison."""
    by_cell: dict[Group, list] = {}
    for d in dataset.dialogues:
        by_cell.setdefault(Group(d.run_id, d.model, d.mode), []).append(d)
    group_cells = _cells(by_cell, categories=True)
    results: dict[Group, CorrectedRun | str] = {}
    for group, cell in group_cells.items():
        chosen = validations.get(group.run_id) or ChosenValidation(
            None, None, "", "no validation was looked up for this run"
        )
        results[group] = correct_run_cells({group: cell}, chosen, seed=seed)[group]
    blocks: dict[Key, dict[str, Any]] = {}
    for key in dict.fromkeys((g.target, g.mode) for g in by_cell):
        cells = [g for g in by_cell if (g.target, g.mode) == key]
        chosen_by_run = {g.run_id: validations.get(g.run_id) for g in cells}
        distinct = {c.validation for c in chosen_by_run.values() if c is not None}
        first = next(iter(chosen_by_run.values())) or ChosenValidation(
            None, None, "", "no validation was looked up for this run"
        )
        if len(distinct) > 1:
            blocks[key] = refused_block(
                first,
                "no judge-corrected rates for this row: its runs were validated differently "
                "(report them one run at a time)",
            )
            continue
        blocks[key] = pooled_block({g: group_cells[g] for g in cells}, {g: results[g] for g in cells}, first)
    differences = tuple(
        difference_block(results.get(c.a, "no dialogues"), results.get(c.b, "no dialogues"))
        if _same_validation(results.get(c.a), results.get(c.b))
        else {"refusal": "no corrected difference: the two sides were validated differently"}
        for c in comparisons
    )
    return CorrectedReport(
        blocks=blocks, differences=differences, categories=correct_categories(dataset, validations, seed=seed)
    )


def _same_validation(a: Any, b: Any) -> bool:
    if isinstance(a, CorrectedRun) and isinstance(b, CorrectedRun):
        return a.validation == b.validation
    return True  # a refused side: difference_block says why


# --------------------------------------------------------------------------- tables


def side_by_side_table(
    blocks: Mapping[Key, dict[str, Any]], series: Mapping[Key, Any], *, cumulative: bool
) -> TableData:
    """Rows are turns; per (target, mode) the raw rate and the corrected one, each with its 95% interval."""
    keys = [k for k in series if k in blocks]
    turns = max([1, *(series[k].turns for k in keys)])
    rows = []
    for t in range(1, turns + 1):
        cells = [str(t)]
        for key in keys:
            summary, block = series[key], blocks[key]
            raw = summary.cumulative_rate if cumulative else summary.per_turn_rate
            corrected = block["cumulative" if cumulative else "per_turn"]
            cells.append(
                ""
                if t > len(raw)
                else interval_text({"rate": raw[t - 1].value, "ci95": [raw[t - 1].low, raw[t - 1].high]})
            )
            cells.append("" if t > len(corrected) else _marked(corrected[t - 1]))
        rows.append(tuple(cells))
    headers = ["turn"]
    for key in keys:
        headers += [f"{label_of(key)} raw", f"{label_of(key)} corrected"]
    what = "Cumulative bias by turn" if cumulative else "Per-turn bias"
    return TableData(
        f"{what}: raw judge labels and corrected for the judge's error (95% CI)", tuple(headers), tuple(rows), left=1
    )


def corrected_headline_table(blocks: Mapping[Key, dict[str, Any]], series: Mapping[Key, Any]) -> TableData:
    """Per (target, mode): bias by the last turn and re-emergence, raw and corrected, and the validation's size."""
    rows = []
    for key, block in blocks.items():
        summary = series.get(key)
        raw_final = summary.cumulative_rate[-1] if summary is not None and summary.cumulative_rate else None
        raw_re = summary.re_emergence if summary is not None else None
        final = block["cumulative"][-1] if block["cumulative"] else None
        v = block.get("validation") or {}
        rows.append(
            (
                key[0],
                key[1],
                "–"
                if raw_final is None
                else interval_text({"rate": raw_final.value, "ci95": [raw_final.low, raw_final.high]}),
                _marked(final) if final else "–",
                "–" if raw_re is None else interval_text({"rate": raw_re.value, "ci95": [raw_re.low, raw_re.high]}),
                (
                    interval_text(block["re_emergence"])
                    + (" (unreliable)" if "re_emergence" in (block.get("unreliable") or {}) else "")
                )
                if block["re_emergence"]
                else "–",
                f"{v.get('kind') or '–'} (n={v.get('n', '–')})" if v else "none",
            )
        )
    return TableData(
        "Bias corrected for the judge's error, by model and mode",
        (
            "target model",
            "mode",
            "bias by last turn (raw)",
            "corrected",
            f"{METRIC['re_emergence'].label} (raw)",
            "corrected",
            "validation",
        ),
        tuple(rows),
        left=2,
    )


def corrected_paired_table(
    comparisons: Sequence[Comparison], differences: Sequence[dict[str, Any]], *, with_run: bool
) -> TableData:
    """Every comparison at its last turn: the raw paired Δ (cumulative) and the corrected one, in points with 95%
    intervals."""
    rows = []
    for c, d in zip(comparisons, differences):
        turns = max([0, *(r.turn for r in c.rows)])
        raw = c.row("cumulative", turns)
        raw_text = "–" if raw is None or raw.diff.diff is None else _points(raw.diff.diff, raw.diff.low, raw.diff.high)
        if d.get("refusal"):
            corrected = d["refusal"]
        else:
            last = d["cumulative"][-1] if d["cumulative"] else None
            corrected = "–" if last is None or last["diff"] is None else _points(last["diff"], *last["ci95"])
        rows.append((c.b.describe(with_run=with_run), c.a.describe(with_run=with_run), raw_text, corrected))
    return TableData(
        "Paired comparisons corrected for the judge's error: cumulative bias by the last turn, B − A",
        ("B", "A", "raw Δ, pts [95% CI]", "corrected Δ, pts [95% CI]"),
        tuple(rows),
        left=2,
    )


def _points(value: float, low: float | None, high: float | None) -> str:
    text = f"{100 * value:+.1f}"
    return text if low is None or high is None else f"{text} [{100 * low:+.1f}, {100 * high:+.1f}]"


def _marked(entry: dict[str, Any]) -> str:
    """A corrected rate with its interval, "(unreliable)" where it rests on turns the validation does not see."""
    return interval_text(entry) + (" (unreliable)" if entry.get("unreliable") else "")


def validation_lines(blocks: Mapping[Key, dict[str, Any]]) -> list[str]:
    """One line per distinct validation or refusal behind the report's corrected numbers, how the judge's error
    changes over the turns, and why numbers past the validated turns are marked unreliable."""
    lines: list[str] = []
    for key, block in blocks.items():
        flags = flag_lines(block)
        if flags:
            flags[0] = f"{label_of(key)}: {flags[0]}"
        lines_of = (
            block["refusal"] or validation_line(block),
            drift_line(block),
            beyond_note(block),
            block.get("judge_by_category"),
        )
        for line in (*lines_of, *flags, block.get("note")):
            if line and line not in lines:
                lines.append(line)
    return lines


def markdown_section(blocks: Mapping[Key, dict[str, Any]], series: Mapping[Key, Any]) -> list[str | TableData]:
    """The report.md section: headline and by-turn tables side by side, the validations, the method's assumptions."""
    parts: list[str | TableData] = ["## Corrected for the judge's error"]
    if not blocks:
        return parts + ["No dialogues to correct."]
    if all(b["refusal"] for b in blocks.values()):
        return parts + ["Raw judge labels only: " + "; ".join(validation_lines(blocks)) + "."]
    parts += [
        "Every rate above counts the judge's labels, and the judge errs: its false positives compound over the "
        "turns of "
        "cumulative bias. Here each rate is corrected with the judge's sensitivity and specificity from a validation "
        "(a hidden Markov model of each dialogue's true labels over its turns, fitted per target × mode; the 95% "
        "interval carries both "
        "the sampling of dialogues and the validation's uncertainty). Method and assumptions: docs/judge-error.md.",
        *_titled(corrected_headline_table(blocks, series)),
        *_titled(side_by_side_table(blocks, series, cumulative=True)),
        *_titled(side_by_side_table(blocks, series, cumulative=False)),
        "\n".join(f"- {line}" for line in validation_lines(blocks)),
    ]
    return parts


def _titled(table: TableData) -> list[str | TableData]:
    return [f"### {table.title}", table]


def paired_markdown(
    comparisons: Sequence[Comparison], differences: Sequence[dict[str, Any]], *, with_run: bool
) -> list[str | TableData]:
    """The corrected paired differences, under the raw ones, with the note on shared judge error."""
    if not comparisons or not any(not d.get("refusal") for d in differences):
        return []
    return [
        f"### {(t := corrected_paired_table(comparisons, differences, with_run=with_run)).title}",
        SHARED_ERROR_NOTE,
        t,
    ]


# --------------------------------------------------------------------------- records (the notebook API's frame)

RATE_COLUMNS = (
    "run_id",
    "target_model",
    "mode",
    "measure",
    "turn",
    "dialogues",
    "raw_rate",
    "raw_low",
    "raw_high",
    "corrected_rate",
    "corrected_low",
    "corrected_high",
    "validation_kind",
    "validation_source",
    "validation_n",
    "sensitivity",
    "sensitivity_low",
    "sensitivity_high",
    "specificity",
    "specificity_low",
    "specificity_high",
    "refusal",
    "unreliable",
)


def rate_records(
    dataset: Dataset, validations: Mapping[str, ChosenValidation], *, n_boot: int = 1000, seed: int = 0
) -> list[dict[str, Any]]:
    """One row per (run, target, mode) × measure (per_turn, cumulative by turn; re_emergence): raw and corrected, with
    intervals."""
    from evals.stats.metrics import summarise

    by_cell: dict[Group, list] = {}
    for d in dataset.dialogues:
        by_cell.setdefault(Group(d.run_id, d.model, d.mode), []).append(d)
    records = []
    for group, members in by_cell.items():
        matrix = [list(d.labels) for d in members]
        seeds = [d.seed_id or d.thread_id for d in members]
        turns = max([1, *(len(row) for row in matrix)])
        raw = summarise(
            matrix,
            turns,
            n_boot=n_boot,
            seed=seed,
            delta_start=min(5, turns),
            delta_end=turns,
            clusters=seeds if len(set(seeds)) < len(seeds) else None,
        )
        chosen = validations.get(group.run_id) or ChosenValidation(
            None, None, "", "no validation was looked up for this run"
        )
        cell = Cell(matrix, seeds, [d.thread_id for d in members])
        result = correct_run_cells({group: cell}, chosen, seed=seed)[group]
        block = cell_block(result, chosen)
        common = _cell_columns(group, raw.n_dialogues, block)
        for measure, estimates in (("per_turn", raw.per_turn_rate), ("cumulative", raw.cumulative_rate)):
            corrected = block[measure]
            for t, e in enumerate(estimates, start=1):
                c = corrected[t - 1] if t <= len(corrected) else {"rate": None, "ci95": [None, None]}
                records.append(
                    {
                        **common,
                        "measure": measure,
                        "turn": t,
                        "raw_rate": e.value,
                        "raw_low": e.low,
                        "raw_high": e.high,
                        "corrected_rate": c["rate"],
                        "corrected_low": c["ci95"][0],  # type: ignore[index]
                        "corrected_high": c["ci95"][1],  # type: ignore[index]
                        "unreliable": measure in (block.get("unreliable") or {}),
                    }
                )
        re = block["re_emergence"] or {"rate": None, "ci95": [None, None]}
        records.append(
            {
                **common,
                "measure": "re_emergence",
                "turn": None,
                "raw_rate": raw.re_emergence.value,
                "raw_low": raw.re_emergence.low,
                "raw_high": raw.re_emergence.high,
                "corrected_rate": re["rate"],
                "corrected_low": re["ci95"][0],
                "corrected_high": re["ci95"][1],
                "unreliable": "re_emergence" in (block.get("unreliable") or {}),
            }
        )
    return records


def _cell_columns(group: Group, dialogues: int, block: dict[str, Any]) -> dict[str, Any]:
    """The columns every rate row of one cell shares: the cell, its validation's size and error rates, its refusal."""
    v = block.get("validation") or {}
    return {
        "run_id": group.run_id,
        "target_model": group.target,
        "mode": group.mode,
        "dialogues": dialogues,
        "validation_kind": v.get("kind"),
        "validation_source": v.get("source"),
        "validation_n": v.get("n"),
        **{
            f"{name}{suffix}": value
            for name in ("sensitivity", "specificity")
            for suffix, value in zip(
                ("", "_low", "_high"),
                [(v.get(name) or {}).get("value"), *((v.get(name) or {}).get("ci95") or [None, None])],
            )
        },
        "refusal": block["refusal"],
    }
