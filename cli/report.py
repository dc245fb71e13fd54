"""``python -m evals.report``: the bias-dynamics report of one or several runs, as Markdown, PNG plots and data files.

``--out DIR`` receives ``report.md`` (tables by model and mode: bias, coherence, refusal;
cumulative and per-turn bias by turn; categories; re-emergence; paired comparisons of
targets and modes on the same seeds; the spread of repeated samples; tokens and cost
(``--pricing FILE``); agreement between label sets; the runs, models, prompt hashes,
label sets and sample sizes it was computed from), ``cumulative_bias.png``, ``per_turn_bias.png``,
``bias_by_category.png``, and ``turns.csv``, ``dialogues.csv`` and ``turns.jsonl``. The headline tables also print to
the terminal. Every rate has a seeded dialogue-level bootstrap 95% interval.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.text import Text

import dymt
from checkpoints.vocabulary import PRIMARY_LABELS
from cli.common import ArgumentParser, console, positive_int
from cli.flag_words import bad_input
from cli.labelling import describe
from cli.store_option import add_db_option, store_errors
from dymt.errors import DymtError
from evals.report.corrected_tables import corrected_headline_table, validation_lines
from evals.report.data import ReportData, comparison_units
from evals.report.exports import HTML_FILE
from evals.report.markdown import sample_sizes, uses_embedded_model
from evals.report.paired_tables import paired_overview_table
from evals.report.result_tables import agreement_report_table, by_turn_table, headline_table, leakage_report_table
from evals.report.summary import BASE_MODEL_NOTE
from evals.report.tables import rich_table
from evals.scorers.judge_validation import validation_text
from evals.stats.group_comparison import needs_run_names


def print_summary(report: ReportData, out: Path, terminal: Console) -> None:
    terminal.print(rich_table(headline_table(report)))
    terminal.print(rich_table(by_turn_table(report, cumulative=True)))
    if report.judge_corrected:
        if any(not b["refusal"] for b in report.judge_corrected.values()):
            terminal.print(rich_table(corrected_headline_table(report.judge_corrected, report.series)))
        for line in validation_lines(report.judge_corrected):
            terminal.print(Text(line, style="dim" if line.startswith("corrected with") else "yellow"))
    if report.comparisons:
        with_run = needs_run_names([u.group for u in comparison_units(report.dataset)])
        terminal.print(rich_table(paired_overview_table(report.comparisons, with_run=with_run)))
    if report.agreements:
        terminal.print(rich_table(agreement_report_table(report)))
    terminal.print(Text(sample_sizes(report)))
    if (leak := leakage_report_table(report)).rows:
        terminal.print(rich_table(leak))
    for run_id, entry in report.validations:
        if (
            entry.get("validation") or entry.get("used") or not report.judge_corrected
        ):  # else the corrected section said how to validate
            terminal.print(
                Text(
                    f"{run_id}: {validation_text(entry, entry.get('used'))}",
                    style="" if entry.get("validation") or entry.get("used") else "yellow",
                )
            )
    terminal.print(
        Text(
            f"report written to {out / 'report.md'} (plots, turns.csv, dialogues.csv, turns.jsonl beside it)",
            style="dim",
        ),
        soft_wrap=True,
    )
    if uses_embedded_model(report.dataset):
        terminal.print(Text(BASE_MODEL_NOTE, style="bold yellow"))


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evals.report", description=describe(__doc__))
    p.add_argument("--run-id", action="append", required=True, help="a run to report; repeat for several runs")
    p.add_argument("--out", type=Path, required=True, help="folder for report.md, plots and data files")
    p.add_argument(
        "--label-set", default=PRIMARY_LABELS, help="bias labels to use (default primary: each run's own judge)"
    )
    p.add_argument("--refusals", default=None, metavar="NAME", help="refusal classifier to use when a run has several")
    p.add_argument("--coherence", default=None, metavar="NAME", help="coherence scorer to use when a run has several")
    p.add_argument(
        "--pricing",
        type=Path,
        default=None,
        metavar="FILE",
        help="prices per model spec (TOML, USD per million tokens; see examples/pricing.toml): cost by run and role",
    )
    p.add_argument("--n-boot", type=positive_int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument(
        "--html",
        action="store_true",
        help="also write report.html: the results (tables, curves) and every dialogue with its "
        "branch tree, filters and review marks (opens offline)",
    )
    add_db_option(p)
    p.add_argument(
        "--json", action="store_true", help="print what the report holds (files, headline rates) as JSON on stdout"
    )
    return p


@store_errors("evals.report")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = dymt.report(
            args.run_id,
            out=args.out,
            db=args.db,
            label_set=args.label_set,
            refusals=args.refusals,
            coherence=args.coherence,
            pricing=args.pricing,
            n_boot=args.n_boot,
            seed=args.seed,
            html=args.html,
        )
    except DymtError as exc:
        bad_input(exc, build_parser())
    if args.json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
        return 0
    print_summary(result.data, args.out, console)
    if args.html:
        console.print(Text(f"open {args.out / HTML_FILE} in a browser (works offline)", style="dim"), soft_wrap=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
