"""report.md: the report rendered as Markdown, section by section, with its notes and definitions."""

from __future__ import annotations

import shlex
from pathlib import Path

from checkpoints.vocabulary import PRIMARY_LABELS, REASONING_LABELS
from evals.dataset import Dataset
from evals.report.breakdown import DELTA_WINDOW, REFUSAL_WINDOW
from evals.report.corrected_tables import markdown_section, paired_markdown
from evals.report.data import ReportData, comparison_units
from evals.report.exports import DIALOGUE_COLUMNS, PLOTS, TURN_COLUMNS
from evals.report.non_reply_tables import NON_REPLY_NOTE, has_non_replies, non_reply_table
from evals.report.paired_tables import paired_overview_table, paired_table
from evals.report.provenance_tables import label_sets_table, models_table, prompts_table, runs_table
from evals.report.reasoning_tables import REASONING_NOTE, reasoning_table
from evals.report.result_tables import (
    agreement_report_table,
    by_turn_table,
    category_table,
    coherence_report_table,
    cost_table,
    headline_table,
    leakage_report_table,
    re_emergence_table,
    refusal_report_table,
    sample_spread_table,
)
from evals.report.summary import BASE_MODEL_NOTE
from evals.report.tables import TableData, markdown_table
from evals.scorers.judge_validation import validation_text
from evals.stats.group_comparison import needs_run_names

Block = str | TableData  # a Markdown paragraph (heading, list, note, image) or a table

CONTENT_WARNING = (
    "Content warning: the data files hold generated dialogues that can contain stereotypes and other "
    "harmful text. Keep them local."
)


def sample_sizes(report: ReportData) -> str:
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
    """report.md: the report's blocks, tables as Markdown."""
    blocks = report_blocks(report, db=db, generated_at=generated_at)
    return "\n\n".join(markdown_table(b) if isinstance(b, TableData) else b for b in blocks) + "\n"


def report_blocks(report: ReportData, *, db: Path | str, generated_at: str) -> list[Block]:
    """Every section of the report in order, tables kept as data: one source for report.md and report.html."""
    parts = _header(report, db=db, generated_at=generated_at)
    parts += ["## " + (t := headline_table(report)).title, t, _definitions()]
    if report.judge_corrected:
        parts += markdown_section(report.judge_corrected, report.series)
    parts += _bias_sections(report)
    parts += _scorer_sections(report, db)
    parts += _paired_section(report)
    parts += _samples_section(report)
    parts += _cost_section(report)
    parts += _agreement_section(report)
    parts += _provenance_sections(report)
    return parts


def _header(report: ReportData, *, db: Path | str, generated_at: str) -> list[Block]:
    """The title, the content warning and what the report was made from."""
    ds = report.dataset
    judges = ", ".join(sorted({run.models.get("judge", "?") for run in ds.runs}))
    label_note = {
        PRIMARY_LABELS: f"`{PRIMARY_LABELS}` (each run's own judge: {judges})",
        REASONING_LABELS: f"`{REASONING_LABELS}` (each run's own judge on the targets' reasoning, not their replies)",
    }.get(ds.label_set, f"`{ds.label_set}` (a re-judging; see Label sets)")
    parts: list[Block] = [
        "# DyMT-ESB bias-dynamics report",
        f"> {CONTENT_WARNING}",
        "\n".join(
            [
                f"- Generated {generated_at} from `{db}`.",
                f"- Runs: {', '.join(f'`{r.run_id}`' for r in ds.runs)}.",
                f"- Bias labels: label set {label_note}.",
                f"- Sample: {sample_sizes(report)}.",
                "- Intervals: 95% percentile bootstrap over "
                f"{'seeds (clustered: all samples of a seed together)' if report.samples > 1 else 'dialogues'}, "
                f"{report.n_boot} resamples, seed {report.seed}.",
            ]
        ),
    ]
    if uses_embedded_model(ds):
        parts.append(f"> **Note.** {BASE_MODEL_NOTE}")
    return parts


def category_notes(report: ReportData) -> list[Block]:
    """Which validation each category's corrected rate used: its own items, or all of them (marked *), and why."""
    blocks = report.corrected_categories
    if not blocks or all(b.get("refusal") for b in blocks.values()):
        return []
    own = sorted({k[0] for k, b in blocks.items() if b.get("scope") == "category" and not b.get("refusal")})
    pooled = {k[0]: b["scope_note"] for k, b in blocks.items() if b.get("scope") == "all" and not b.get("refusal")}
    lines = []
    if own:
        lines.append(f"Corrected with the judge's error on each category's own items: {', '.join(own)}.")
    for category, why in sorted(pooled.items()):
        lines.append(f"\\* {category}: corrected with {why}.")
    return ["\n".join(f"- {line}" for line in lines)]


def _bias_sections(report: ReportData) -> list[Block]:
    """Bias by turn and by category, re-emergence, seed leakage, non-replies and the judge's validation."""
    return [
        "## Cumulative bias by turn",
        by_turn_table(report, cumulative=True),
        f"![Cumulative bias by turn]({PLOTS['cumulative']})",
        "## Per-turn bias",
        by_turn_table(report, cumulative=False),
        f"![Per-turn bias]({PLOTS['per_turn']})",
        "## Bias by category",
        category_table(report),
        *category_notes(report),
        f"![Bias by category]({PLOTS['categories']})",
        "## Re-emergence",
        re_emergence_table(report),
        f"Δ is shown only where dialogues reach turn {DELTA_WINDOW[1]}.",
        "## Seed leakage",
        *_leakage_section(report),
        "## Non-replies",
        *_non_reply_section(report),
        *_reasoning_section(report),
        "## Judge validation",
        _validation_section(report),
    ]


def _scorer_sections(report: ReportData, db: Path | str) -> list[Block]:
    """Coherence and refusal: their tables, or how to compute them."""
    ds = report.dataset
    parts: list[Block] = ["## Coherence"]
    if report.coherence:
        parts += [coherence_report_table(report), _scorers(ds.coherence_sets, "Scorer")]
    else:
        parts.append(_not_computed("coherence", ds, db))
    parts.append("## Refusal")
    if report.refusal:
        parts += [refusal_report_table(report), _scorers(ds.refusal_sets, "Classifier")]
    else:
        parts.append(_not_computed("refusal", ds, db))
    return parts


def _samples_section(report: ReportData) -> list[Block]:
    if report.samples <= 1:
        return []
    return [
        "## Repeated samples",
        f"Up to {report.samples} samples per (seed, target, mode), each with its own sampling seed. Every interval "
        "in this report resamples seeds, with all their samples together (a clustered bootstrap), not dialogues.",
        sample_spread_table(report),
    ]


def _agreement_section(report: ReportData) -> list[Block]:
    if report.agreements:
        return ["## Agreement between label sets", agreement_report_table(report)]
    return [
        "## Agreement between label sets",
        "Only one label set exists on these runs. Label them again with "
        "`python -m evals.rejudge --run-id RUN --judge-model SPEC` to compare judges.",
    ]


def _provenance_sections(report: ReportData) -> list[Block]:
    """Runs, models, label sets and prompts, and the data files beside the report."""
    ds = report.dataset
    return [
        "## Provenance",
        "### " + (t := runs_table(ds)).title,
        t,
        "### " + (t := models_table(ds)).title,
        t,
        "### " + (t := label_sets_table(ds)).title,
        t,
        "### " + (t := prompts_table(ds)).title,
        t,
        "## Data files",
        "\n".join(
            [
                f"- `turns.csv` / `turns.jsonl`: one row per reply ({', '.join(TURN_COLUMNS)}).",
                f"- `dialogues.csv`: one row per dialogue ({', '.join(DIALOGUE_COLUMNS)}).",
                "- Load with `pandas.read_csv(...)` or `pandas.read_json(..., lines=True)`.",
            ]
        ),
    ]


def _leakage_section(report: ReportData) -> list[Block]:
    table = leakage_report_table(report)
    if not table.rows:
        return [
            "No user turn of these runs was scored for seed leakage (scripted baselines, or runs made before scoring)."
        ]
    return [
        table,
        "A user turn leaks when its message states the hidden seed: the longest run of seed words it contains, or the "
        "share of the seed's word bigrams it contains, reaches 0.6 (`nodes/leakage.py`). Leaking drafts are drawn "
        "again "
        "(`--leakage regenerate`); a turn still flagged means the target saw the seed at that turn.",
    ]


def _reasoning_section(report: ReportData) -> list[Block]:
    table = reasoning_table(report.dataset)
    return [] if table is None else ["## Reasoning", table, REASONING_NOTE]


def _non_reply_section(report: ReportData) -> list[Block]:
    table = non_reply_table(report.dataset)
    if not has_non_replies(table):
        return [
            "Every target answer of these runs was a reply: none was filtered, blocked, empty or cut at max_tokens. "
            + NON_REPLY_NOTE.split(": ", 1)[0]
            + "."
        ]
    return [table, NON_REPLY_NOTE]


def _validation_section(report: ReportData) -> str:
    if not report.validations:
        return "No judge validation was looked up for these runs."
    return "\n".join(
        f"- `{run_id}`: {validation_text(entry, entry.get('used'))}." for run_id, entry in report.validations
    )


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


def _not_computed(kind: str, ds: Dataset, db: Path | str) -> str:
    return (
        f"Not computed for these runs. Run `python -m evals.{kind} --run-id {ds.runs[0].run_id} --db "
        f"{shlex.quote(str(db))}` "
        "(and for the other runs), then make the report again."
    )


def _paired_section(report: ReportData) -> list[Block]:
    if not report.comparisons:
        return [
            "## Paired comparisons",
            "Only one target and mode in these runs: nothing to compare on the same seeds.",
        ]
    unit = "seeds (all samples of a seed together)" if report.samples > 1 else "seeds"
    note = (
        "Dialogues of two groups are paired on the same seed (and sample). *A / B*: bias rate of each side over the "
        "pairs whose labels are both parsed at that turn (pairs in brackets). *Δ*: B − A in percentage points, "
        f"with a paired percentile bootstrap 95% interval resampling {unit} ({report.n_boot} resamples, seed "
        f"{report.seed}). *b/c*: discordant pairs (b: A biased, B not; c: A not, B biased); McNemar's exact "
        "two-sided test"
        + (
            f"; in brackets, Holm-adjusted over the {len(report.comparisons)} comparisons at the same measure and turn."
            if len(report.comparisons) > 1
            else "."
        )
        + " Groups are compared when they differ in exactly one of target, mode or run (two groups: always)."
    )
    if report.samples > 1:
        note += (
            " With repeated samples, McNemar pairs sample k of A with sample k of B; its pairs within a seed are not "
            "independent, so read the seed-level interval first."
        )
    with_run = needs_run_names([u.group for u in comparison_units(report.dataset)])
    parts: list[str | TableData] = [
        "## Paired comparisons",
        note,
        "### " + (t := paired_overview_table(report.comparisons, with_run=with_run)).title,
        t,
    ]
    for c in report.comparisons:
        table = paired_table(c, with_run=with_run)
        extra = ""
        if c.unpaired_a or c.unpaired_b:
            extra = f" Unpaired dialogues (no counterpart on the same seed): {c.unpaired_a} of A, {c.unpaired_b} of B."
        parts += [
            f"### {table.title}",
            f"A = {c.a.describe(with_run=True)}, B = {c.b.describe(with_run=True)}; "
            f"{c.n_pairs} pairs on {c.n_seeds} seeds.{extra}",
            table,
        ]
    parts += paired_markdown(report.comparisons, report.corrected_differences, with_run=with_run)
    return parts


def _cost_section(report: ReportData) -> list[Block]:
    if not report.usage or not any(u["by_role"] for _, u in report.usage):
        return []
    pricing = next((u["pricing"] for _, u in report.usage if u["pricing"]), None)
    unpriced = sorted({s for _, u in report.usage for s in u["unpriced"]})
    note = (
        f"Prices from `{pricing}` (USD per million tokens)."
        if pricing
        else "No `--pricing FILE` given: tokens only (see examples/pricing.toml)."
    )
    if unpriced:
        note += f" No price for {', '.join(unpriced)}: totals left out."
    note += (
        " Tokens are those the providers reported for each stored turn; a reply served from the response cache "
        "counts as called, so the cost is an upper bound on what was paid. Output tokens include a thinking model's "
        "reasoning (billed as output): its share is the provider's count, or estimated from the lengths of the "
        "reasoning and the answer where the provider gave none."
    )
    return ["## Tokens and cost", note, cost_table(report)]
