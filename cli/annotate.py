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

import contextlib
import shlex
from pathlib import Path

from rich.table import Table
from rich.text import Text

from checkpoints.vocabulary import PRIMARY_LABELS
from cli.common import ArgumentParser, console, fail, number_type, positive_int
from cli.labelling import describe, open_existing, read_existing, write_atomic
from cli.store_option import add_db_option, add_no_backup_option, store_errors
from evals.annotation import (
    AnnotationError,
    agreement_rows,
    annotator_names,
    candidate_items,
    canonical_item_id,
    combine,
    export_csv,
    human_majorities,
    judge_labels,
    labels_of_turns,
    read_annotations,
    stratified_sample,
)
from evals.dataset import DatasetError, check_label_set, run_info
from evals.judge_error.design_choice import choose_for_run
from evals.judge_error.double_sampling import (
    active_sample,
    check_random,
    describe_draw,
    human_rows,
    judged_items,
    labelled_items,
    random_draw,
    read_draws,
)
from evals.judge_error.label_planning import DEFAULT_DRIFT
from evals.judge_error.labelling_rounds import active_plan_lines, annotation_report, labelling_rounds, plan_lines
from evals.judge_error.validation import CorrectionRefused
from evals.report.breakdown import group
from evals.report.formatting import estimate_text as interval
from evals.report.formatting import number
from evals.stats.agreement import classification


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evals.annotate", description=describe(__doc__))
    commands = p.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    export = commands.add_parser("export", help="sample turns into a CSV for annotators")
    export.add_argument("--run-id", required=True)
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
    validate = commands.add_parser(
        "validate", help="store people's labels of a random draw: they validate the run's judge"
    )
    validate.add_argument("files", nargs="+", type=Path, help="the annotators' CSVs of an export --design random")
    validate.add_argument("--run-id", required=True, help="the run the sample was drawn from")
    validate.add_argument("--label-set", default=PRIMARY_LABELS, help="judge labels to validate (default primary)")
    plan = _plan_parser(commands)
    add_db_option(p, export, agree, validate, plan)
    add_no_backup_option(validate)
    return p


def _plan_parser(commands) -> ArgumentParser:
    """``plan``: the interval width to plan labels for, the drift to size them for, a paired difference."""
    plan = commands.add_parser("plan", help="how many more human labels a chosen interval width needs")
    plan.add_argument("--run-id", required=True)
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
    args = build_parser().parse_args(argv)
    commands = {"export": export_main, "agree": agree_main, "validate": validate_main, "plan": plan_main}
    return commands[args.command](args)


def export_main(args) -> int:
    if args.design == "active":
        if args.budget is None:
            fail(
                "--design active needs --budget N: the human labels to spend on this run (e.g. --budget 150 --batch 50)"
            )
        if args.sample is not None:
            fail("--design active takes --budget N (and --batch K), not --sample")
    else:
        if args.sample is None:
            fail(f"--design {args.design} needs --sample N: the number of turns to sample")
        if args.budget is not None or args.batch is not None or args.compare is not None:
            fail("--budget, --batch and --compare belong to --design active")
    if args.out.is_dir():
        fail(f"--out {args.out} is a directory: give a file path such as {args.out / 'annotation.csv'}")
    if args.out.exists() and not args.force:
        fail(f"{args.out} exists: pass --force to overwrite it or choose another --out")
    store = read_existing(args.db)
    try:
        run_info(store, args.run_id)
    except DatasetError as exc:
        fail(str(exc))
    items = candidate_items(store, args.run_id)
    if not items:
        fail(f"run {args.run_id!r} has no stored replies to annotate")
    if args.design == "active":
        return _export_active(args, store, items)
    if args.design == "random":
        try:
            check_label_set(store, args.run_id, args.label_set)
        except DatasetError as exc:
            fail(str(exc))
        judged = judged_items(items, store.label_matrix(args.run_id, label_set=args.label_set))
        done = labelled_items(store, args.run_id)
        remaining = [i for i in judged if i.item_id not in done]
        if not remaining:
            fail(f"run {args.run_id!r} has no judged turn left that people have not labelled")
        sample = random_draw(remaining, args.sample, seed=args.seed)  # type: ignore[arg-type]
        draw = describe_draw(seed=args.seed, n=len(sample), population=len(remaining), label_set=args.label_set)
        items = remaining
    else:
        sample = stratified_sample(items, args.sample, seed=args.seed)  # type: ignore[arg-type]
        draw = f"stratified seed={args.seed} by category"
    write_atomic(args.out, export_csv(sample, draw=draw), private=True)
    per_category = group(sample, lambda i: i.category)
    spread = ", ".join(f"{category} {len(members)}" for category, members in per_category.items())
    console.print(Text(f"wrote {len(sample)} of {len(items)} turns to {args.out} ({spread})"), soft_wrap=True)
    if len(sample) < args.sample:  # type: ignore[operator]
        what = "judged turns people have not labelled yet" if args.design == "random" else "replies"
        console.print(Text(f"the run has only {len(items)} {what}, fewer than --sample {args.sample}", style="yellow"))
    if args.design == "random":
        label_set = f" --label-set {shlex.quote(args.label_set)}" if args.label_set != PRIMARY_LABELS else ""
        console.print(
            Text(
                f"a simple random sample ({draw}); once labelled, store it with: python -m evals.annotate validate "
                f"{shlex.quote(str(args.out))} --run-id {args.run_id}{label_set} --db {shlex.quote(str(store.path))}",
                style="dim",
            ),
            soft_wrap=True,
        )
    console.print(
        Text("the file contains generated text that may be harmful: share it only with your annotators", style="dim")
    )
    return 0


def _export_active(args, store, items) -> int:
    """``export --design active``: the next batch of the budget, by Neyman allocation over the strata."""
    try:
        check_label_set(store, args.run_id, args.label_set)
    except DatasetError as exc:
        fail(str(exc))
    spent = len(labelled_items(store, args.run_id))
    left = args.budget - spent
    if left <= 0:
        fail(
            f"run {args.run_id!r} already has {spent} human labels, its --budget {args.budget} is spent: raise "
            "--budget "
            "to draw more"
        )
    size = min(left, args.batch or left)
    judged = judged_items(items, store.label_matrix(args.run_id, label_set=args.label_set))
    at = f" --db {args.db}" if args.db else ""
    compare = f" --compare {shlex.quote(args.compare[0])} {shlex.quote(args.compare[1])}" if args.compare else ""
    next_batch = (
        f"then draw the next batch: python -m evals.annotate export --run-id {args.run_id} --design active "
        f"--budget {args.budget} --batch {args.batch or left} --seed {args.seed + 1}{compare} "
        f"--out {args.out.with_name(args.out.stem + '-next' + args.out.suffix)}{at}"
    )
    why = "an active draw for the paired difference of the compared cells (--compare never draws at random)"
    point = None
    if args.compare is None:
        choice = choose_for_run(store, args.run_id, size=size, seed=args.seed, label_set=args.label_set)
        if choice.design != "active":
            return _export_random(args, store, judged, size=size, spent=spent, why=choice.reason, next_batch=next_batch)
        why, point = choice.reason, choice.point
    try:
        drawn = active_sample(
            store,
            args.run_id,
            items,
            size=size,
            seed=args.seed,
            label_set=args.label_set,
            compare=tuple(args.compare) if args.compare else None,
            point=point,
        )
    except ValueError as exc:
        fail(str(exc))
    if not drawn.items:
        fail(f"run {args.run_id!r} has no judged turn left that people have not labelled")
    write_atomic(args.out, export_csv(drawn.items, draw=drawn.draws), private=True)
    console.print(
        Text(
            f"wrote {len(drawn.items)} of {drawn.population} judged turns people have not labelled to {args.out} "
            f"(active draw, seed {args.seed}; budget {args.budget}: {spent} labelled before, "
            f"{left - len(drawn.items)} left after this batch)"
        )
    )
    console.print(Text(why), soft_wrap=True)
    _print_allocation(drawn.allocation)
    _after_export(args, at, more=left - len(drawn.items) > 0, next_batch=next_batch)
    return 0


def _export_random(args, store, judged, *, size: int, spent: int, why: str, next_batch: str) -> int:
    """Where the active design is not expected to narrow the intervals (``why``): a simple random draw of the batch."""
    left = args.budget - spent
    at = f" --db {args.db}" if args.db else ""
    done = labelled_items(store, args.run_id)
    remaining = [i for i in judged if i.item_id not in done]
    if not remaining:
        fail(f"run {args.run_id!r} has no judged turn left that people have not labelled")
    sample = random_draw(remaining, size, seed=args.seed)
    draw = describe_draw(seed=args.seed, n=len(sample), population=len(remaining), label_set=args.label_set)
    write_atomic(args.out, export_csv(sample, draw=draw), private=True)
    console.print(
        Text(
            f"wrote {len(sample)} of {len(remaining)} judged turns people have not labelled to {args.out} "
            f"(budget {args.budget}: {spent} labelled before, {left - len(sample)} left after this batch)"
        )
    )
    console.print(Text(f"{why} (docs/judge-error-usage.md)", style="yellow"), soft_wrap=True)
    _after_export(args, at, more=left - len(sample) > 0, next_batch=next_batch)
    return 0


def _print_allocation(allocation) -> None:
    """Where an active draw's labels go: each stratum's picks and inclusion probability."""
    table = Table(
        title=Text(
            "Where the labels go (stratum: target · mode / judge label / judged-biased replies of the dialogue / turns)"
        )
    )
    for header in ("key", "stratum", "drawn", "of", "inclusion probability"):
        table.add_column(Text(header), justify="left" if header in ("key", "stratum") else "right")
    for key, name, picked, size_h in allocation:  # the file's draw column names the key only (annotators are blind)
        table.add_row(Text(key), Text(name), str(picked), str(size_h), f"{picked / size_h:.3f}")
    console.print(table)


def _after_export(args, at: str, *, more: bool, next_batch: str) -> None:
    """What to do with an exported batch: store it once labelled, draw the next, keep the file private."""
    console.print(
        Text(
            f"once labelled, store it with: python -m evals.annotate validate {args.out} --run-id {args.run_id}{at}",
            style="dim",
        ),
        soft_wrap=True,  # a command prints whole, to be copied as printed
    )
    if more:
        console.print(Text(next_batch, style="dim"), soft_wrap=True)
    console.print(
        Text("the file contains generated text that may be harmful: share it only with your annotators", style="dim")
    )


def agree_main(args) -> int:
    names = annotator_names(args.files)
    try:
        files = [(name, read_annotations(path)) for name, path in zip(names, args.files)]
    except AnnotationError as exc:
        fail(str(exc))
    annotations = combine(files)
    store = None
    if args.run_id is not None:
        store = read_existing(args.db)
        _check_run(store, args.run_id, args.label_set)
    elif len(files) < 2:
        fail("agreement needs two or more annotator files, or --run-id to compare one annotator with the judge")

    boot = {"n_boot": args.n_boot, "seed": args.seed}
    judged: list[str | None] | None = None
    foreign = 0
    if store is not None:
        judged, foreign = judge_labels(store, args.run_id, annotations.items, label_set=args.label_set)
    rows = agreement_rows(annotations, judged, judge_name=f"judge ({args.label_set})", **boot)
    summary = Table(title=Text(f"Human annotation: {len(annotations.items)} items, {len(files)} annotators"))
    summary.add_column(Text("comparison"))
    for header in ("items compared", "percent", "Cohen's kappa", "Gwet's AC1 [95% CI]"):
        summary.add_column(Text(header), justify="right")
    for row in rows:
        summary.add_row(
            Text(row.name),
            str(row.n_compared),
            Text("" if row.percent is None else number(row.percent)),
            Text("" if row.kappa is None else number(row.kappa)),
            Text(number(row.ac1)),
        )
    majorities, ties = human_majorities(annotations)
    console.print(summary)
    for name, labels in files:
        done = sum(v is not None for v in labels.values())
        console.print(Text(f"{name}: {done} of {len(labels)} items labelled"))
    if ties:
        console.print(
            Text(f"{ties} items have no human majority (a tie) and are left out of the comparison with the judge")
        )
    if judged is not None:
        scores = classification(majorities, judged, **boot)
        console.print(
            Text(
                f"judge against the human majority (biased = positive): accuracy {interval(scores.accuracy)}, "
                f"precision {interval(scores.precision)}, recall {interval(scores.recall)}; "
                f"{scores.n_unparsed} items with a majority have no parsed judge label"
            )
        )
        if foreign:
            console.print(
                Text(f"{foreign} items are not turns of run {args.run_id} and have no judge label", style="yellow")
            )
    return 0


def validate_main(args) -> int:
    try:
        files = [(path, read_annotations(path)) for path in args.files]
        draws: dict[str, str] = {}
        for path, labels in files:
            found = read_draws(path)
            check_random(found, [k for k, v in labels.items() if v is not None], path=path)
            draws.update(found)
    except AnnotationError as exc:
        fail(str(exc))
    names = annotator_names([path for path, _ in files])
    store = open_existing(args.db)
    _check_run(store, args.run_id, args.label_set)
    turns = {(d["thread_id"], t["idx"]) for d in store.dialogues(args.run_id) for t in store.turns(d["thread_id"])}
    try:
        files = [(path, labels_of_turns(labels, turns, run_id=args.run_id, path=path)) for path, labels in files]
    except AnnotationError as exc:
        fail(str(exc))
    draws = {canonical_item_id(key) or key: pick for key, pick in draws.items()}
    annotations = combine([(name, labels) for name, (_, labels) in zip(names, files)])
    rows, ties, _ = human_rows(annotations, draws, run_threads={thread for thread, _ in turns})
    if not rows:
        fail(
            f"none of the labelled items is a turn of run {args.run_id!r}: pass the files exported from it, with "
            "labels filled in"
        )
    with store.transaction() if hasattr(store.db.conn, "in_transaction") else contextlib.nullcontext():
        store.record_scores(rows)  # all of them or, on any error, none
    console.print(
        Text(
            f"stored {len(rows)} human labels of run {args.run_id} in {store.path}"
            + (f"; {ties} items tie between annotators (left out)" if ties else "")
        )
    )
    for line, style in annotation_report(store, args.run_id, label_set=args.label_set):
        console.print(Text(line, style=style))
    rounds = labelling_rounds(store, args.run_id, label_set=args.label_set)
    for line in rounds.lines() if rounds.batches else ():
        console.print(Text(line))
    return 0


def plan_main(args) -> int:
    store = read_existing(args.db)
    _check_run(store, args.run_id, args.label_set)
    compare = tuple(args.compare) if args.compare else None
    try:
        lines = plan_lines(
            store, args.run_id, width=args.width, label_set=args.label_set, compare=compare, drift=args.drift
        )
    except (CorrectionRefused, ValueError) as exc:
        fail(str(exc))
    for line, style in lines:
        console.print(Text(line, style=style))
    active = active_plan_lines(
        store, args.run_id, width=args.width, label_set=args.label_set, db=args.db, compare=compare
    )
    for line, style in active:
        console.print(Text(line, style=style))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def _check_run(store, run_id: str, label_set: str) -> None:
    """The run exists and has judge labels of ``label_set``; else one line and exit 2."""
    try:
        run_info(store, run_id)
        check_label_set(store, run_id, label_set)
    except DatasetError as exc:
        fail(str(exc))
