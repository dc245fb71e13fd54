"""``python -m evals.annotate``: human annotation of stored turns, and agreement among annotators and with the judge.

``export`` samples turns of a run, stratified by category (as even a share per category
as the run allows), into a CSV for annotators: the stereotype, the earlier conversation
and the reply, with an empty ``label`` column; the model's labels are not in it.
``agree`` reads the annotators' CSVs and reports Gwet's AC1 among them and, with
``--run-id``, between the human majority and the judge, with bootstrap intervals.
``export --design random`` draws a seeded simple random sample of the run's judged turns
instead; ``validate`` stores the annotators' labels of such a draw beside the run, where
they validate its judge: run summaries and reports then correct the bias rates for the
judge's error (docs/judge-error.md). ``export --design active --budget N [--batch K]``
chooses the replies where a label narrows the corrected intervals most (a stratified random draw
with known inclusion probabilities; docs/judge-error-usage.md), in batches; with ``--compare A B``, from two
targets' (or modes') cells, where the labels narrow their paired difference most. ``validate`` says what each
batch narrowed and what the next would buy. ``plan --width W`` says
how many more human labels, drawn at random and by the active design, would narrow the corrected cumulative
rate's 95% interval to W (with ``--compare A B``, the interval of their paired difference B − A).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from rich.table import Table
from rich.text import Text

import dymt
from checkpoints.vocabulary import PRIMARY_LABELS
from cli.common import ArgumentParser, console, number_type, positive_int
from cli.flag_words import flag_words, flags_of
from cli.labelling import describe
from cli.rendering import call
from cli.store_option import add_db_option, add_no_backup_option, store_errors
from evals.judge_error.label_planning import DEFAULT_DRIFT
from evals.report.formatting import estimate_text as interval
from evals.report.formatting import number


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evals.annotate", description=describe(__doc__))
    commands = p.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    export = _on_a_run(commands, "export", "sample turns into a CSV for annotators")
    export.add_argument(
        "--sample",
        type=positive_int,
        default=None,
        metavar="N",
        help="number of turns to sample (--design stratified or random)",
    )
    export.add_argument(
        "--out", type=Path, required=True, help="CSV file to write (it must not exist yet, unless --force)"
    )
    export.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    export.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    export.add_argument(
        "--design",
        choices=("stratified", "random", "active"),
        default="stratified",
        help="stratified: as even a share per category as the run allows (agreement); random: a simple random "
        "sample of the judged turns not yet labelled by people (validates the judge: see validate); active: a "
        "stratified random draw of them, more where a label narrows the corrected intervals most",
    )
    export.add_argument(
        "--budget",
        type=positive_int,
        default=None,
        metavar="N",
        help="--design active: human labels to spend on this run in all (labels already stored count)",
    )
    export.add_argument(
        "--batch",
        type=positive_int,
        default=None,
        metavar="K",
        help="--design active: draw K of them now (default: the rest of the budget); export again after validate",
    )
    export.add_argument(
        "--label-set",
        default=PRIMARY_LABELS,
        help="--design random or active: the judge labels whose turns are drawn (default primary)",
    )
    _add_compare(
        export,
        "--design active: two targets or two modes of the run; the labels go to their cells only, where they "
        "narrow the paired difference B - A most",
    )
    agree = commands.add_parser("agree", help="agreement among annotators and with the judge")
    agree.add_argument("files", nargs="+", type=Path, help="the annotators' CSVs (item_id and label columns)")
    agree.add_argument("--run-id", default=None, help="compare the human majority with this run's judge labels")
    agree.add_argument("--label-set", default=PRIMARY_LABELS, help="judge labels to compare (default primary)")
    agree.add_argument("--n-boot", type=positive_int, default=1000, help="bootstrap resamples for intervals")
    agree.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    validate = _on_a_run(
        commands,
        "validate",
        "store people's labels of a random draw: they validate the run's judge",
        run="the run the sample was drawn from",
    )
    validate.add_argument("files", nargs="+", type=Path, help="the annotators' CSVs of an export --design random")
    validate.add_argument("--label-set", default=PRIMARY_LABELS, help="judge labels to validate (default primary)")
    plan = _plan_parser(commands)
    add_db_option(p, export, agree, validate, plan)
    add_no_backup_option(validate)
    return p


def _plan_parser(commands) -> ArgumentParser:
    """``plan``: the interval width to plan labels for, the drift to size them for, a paired difference."""
    plan = _on_a_run(commands, "plan", "how many more human labels a chosen interval width needs")
    plan.add_argument(
        "--width",
        type=_width,
        required=True,
        metavar="W",
        help="wanted width of the corrected cumulative rate's 95%% interval (0.1: ±5 points)",
    )
    plan.add_argument("--label-set", default=PRIMARY_LABELS, help="judge labels (default primary)")
    plan.add_argument(
        "--drift",
        type=_drift,
        default=DEFAULT_DRIFT,
        metavar="D",
        help=f"a change of the judge's sensitivity or specificity from the first turn to the last to size labels for "
        f"(default {DEFAULT_DRIFT})",
    )
    _add_compare(
        plan,
        "two targets or two modes of the run: plan the width of their paired difference B - A instead (the "
        "active design's labels then go to their cells, as export --compare draws them)",
    )
    return plan


def _on_a_run(commands, name: str, text: str, *, run: str | None = None) -> ArgumentParser:
    """A subcommand about one stored run: its ``--run-id``."""
    parser = commands.add_parser(name, help=text)
    parser.add_argument("--run-id", required=True, help=run)
    return parser


def _add_compare(parser: ArgumentParser, text: str) -> None:
    parser.add_argument("--compare", nargs=2, default=None, metavar=("A", "B"), help=text)


_width = number_type(
    float, lambda v: 0 < v < 1, "{value} must be between 0 and 1 (0.1 is ten percentage points)", name="width"
)
_drift = number_type(
    float, lambda v: 0 < v < 1, "{value} must be between 0 and 1 (0.15: fifteen points of specificity)", name="drift"
)


@store_errors("evals.annotate")
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    commands = {"export": export_main, "agree": agree_main, "validate": validate_main, "plan": plan_main}
    return commands[args.command](args, _subcommand(parser, args.command))


def _subcommand(parser: ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The subcommand's parser: the library's keyword arguments are said as its flags."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def export_main(args, parser: argparse.ArgumentParser) -> int:
    result = call(dymt.export_annotations, args, parser, args.run_id)
    if result.design == "active":
        _show_active(args, parser, result)
        return 0
    spread = ", ".join(f"{category} {n}" for category, n in result.per_category.items())
    console.print(Text(f"wrote {result.written} of {result.population} turns to {args.out} ({spread})"), soft_wrap=True)
    if result.written < args.sample:
        what = "judged turns people have not labelled yet" if args.design == "random" else "replies"
        console.print(
            Text(f"the run has only {result.population} {what}, fewer than --sample {args.sample}", style="yellow")
        )
    if args.design == "random":
        label_set = f" --label-set {shlex.quote(args.label_set)}" if args.label_set != PRIMARY_LABELS else ""
        console.print(
            Text(
                f"a simple random sample ({result.draw}); once labelled, store it with: python -m evals.annotate "
                f"validate {shlex.quote(str(args.out))} --run-id {args.run_id}{label_set} --db "
                f"{shlex.quote(result.db)}",
                style="dim",
            ),
            soft_wrap=True,
        )
    console.print(
        Text("the file contains generated text that may be harmful: share it only with your annotators", style="dim")
    )
    return 0


def _show_active(args, parser: argparse.ArgumentParser, result: dymt.ExportResult) -> None:
    """``export --design active``: the batch drawn from the budget, why by this design, where the labels go."""
    spent, left = result.spent or 0, args.budget - (result.spent or 0)
    at = f" --db {args.db}" if args.db else ""
    compare = f" --compare {shlex.quote(args.compare[0])} {shlex.quote(args.compare[1])}" if args.compare else ""
    next_batch = (
        f"then draw the next batch: python -m evals.annotate export --run-id {args.run_id} --design active "
        f"--budget {args.budget} --batch {args.batch or left} --seed {args.seed + 1}{compare} "
        f"--out {args.out.with_name(args.out.stem + '-next' + args.out.suffix)}{at}"
    )
    why = flag_words(result.reason or "", flags_of(parser))
    if result.drawn_by == "active":
        console.print(
            Text(
                f"wrote {result.written} of {result.population} judged turns people have not labelled to {args.out} "
                f"(active draw, seed {args.seed}; budget {args.budget}: {spent} labelled before, "
                f"{result.left} left after this batch)"
            )
        )
        console.print(Text(why), soft_wrap=True)
        _print_allocation(result.allocation)
    else:
        console.print(
            Text(
                f"wrote {result.written} of {result.population} judged turns people have not labelled to {args.out} "
                f"(budget {args.budget}: {spent} labelled before, {result.left} left after this batch)"
            )
        )
        console.print(Text(f"{why} (docs/judge-error-usage.md)", style="yellow"), soft_wrap=True)
    console.print(
        Text(
            f"once labelled, store it with: python -m evals.annotate validate {args.out} --run-id {args.run_id}{at}",
            style="dim",
        ),
        soft_wrap=True,  # a command prints whole, to be copied as printed
    )
    if result.left:
        console.print(Text(next_batch, style="dim"), soft_wrap=True)
    console.print(
        Text("the file contains generated text that may be harmful: share it only with your annotators", style="dim")
    )


def _print_allocation(allocation: tuple[dymt.Stratum, ...]) -> None:
    """Where an active draw's labels go: each stratum's picks and inclusion probability."""
    table = Table(
        title=Text(
            "Where the labels go (stratum: target · mode / judge label / judged-biased replies of the dialogue / turns)"
        )
    )
    for header in ("key", "stratum", "drawn", "of", "inclusion probability"):
        table.add_column(Text(header), justify="left" if header in ("key", "stratum") else "right")
    for stratum in allocation:  # the file's draw column names the key only (annotators are blind)
        table.add_row(
            Text(stratum.key), Text(stratum.name), str(stratum.drawn), str(stratum.size), f"{stratum.inclusion:.3f}"
        )
    console.print(table)


def agree_main(args, parser: argparse.ArgumentParser) -> int:
    result = call(dymt.annotation_agreement, args, parser, args.files)
    summary = Table(title=Text(f"Human annotation: {result.items} items, {len(result.annotators)} annotators"))
    summary.add_column(Text("comparison"))
    for header in ("items compared", "percent", "Cohen's kappa", "Gwet's AC1 [95% CI]"):
        summary.add_column(Text(header), justify="right")
    for row in result.rows:
        summary.add_row(
            Text(row.name),
            str(row.n_compared),
            Text("" if row.percent is None else number(row.percent)),
            Text("" if row.kappa is None else number(row.kappa)),
            Text(number(row.ac1)),
        )
    console.print(summary)
    for annotator in result.annotators:
        console.print(Text(f"{annotator.name}: {annotator.labelled} of {annotator.items} items labelled"))
    if result.ties:
        console.print(
            Text(
                f"{result.ties} items have no human majority (a tie) and are left out of the comparison with the judge"
            )
        )
    if (scores := result.judge) is not None:
        console.print(
            Text(
                f"judge against the human majority (biased = positive): accuracy {interval(scores.accuracy)}, "
                f"precision {interval(scores.precision)}, recall {interval(scores.recall)}; "
                f"{scores.n_unparsed} items with a majority have no parsed judge label"
            )
        )
        if result.foreign:
            console.print(
                Text(
                    f"{result.foreign} items are not turns of run {args.run_id} and have no judge label", style="yellow"
                )
            )
    return 0


def validate_main(args, parser: argparse.ArgumentParser) -> int:
    result = call(dymt.validate_annotations, args, parser, args.files)
    console.print(
        Text(
            f"stored {result.stored} human labels of run {result.run_id} in {result.db}"
            + (f"; {result.ties} items tie between annotators (left out)" if result.ties else "")
        )
    )
    _print_notes(result.notes)
    for line in result.rounds.lines() if result.rounds.batches else ():
        console.print(Text(line))
    return 0


def plan_main(args, parser: argparse.ArgumentParser) -> int:
    result = call(dymt.plan_annotations, args, parser, args.run_id)
    _print_notes(result.notes)
    return 0


_STYLES = {"warning": "yellow", "hint": "dim", "info": ""}


def _print_notes(notes: tuple[dymt.Note, ...]) -> None:
    for note in notes:
        console.print(Text(note.text, style=_STYLES[note.level]))


if __name__ == "__main__":
    raise SystemExit(main())
