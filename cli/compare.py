"""``python -m graph.compare``: two dialogues side by side, or a counterfactual set's paired statistics.

    python -m graph.compare A B          the turns from where A and B diverge, with labels
    python -m graph.compare --set NAME   per turn: bias rate of parents and branches, the paired
                                         difference (branch − parent) with a bootstrap 95% interval,
                                         and McNemar's exact test on the paired labels
    python -m graph.compare --runs R1 R2 targets, modes or runs played on the same seeds, paired by seed:
                                         cumulative and per-turn bias by turn, B − A with a bootstrap
                                         interval over seeds, McNemar exact, Holm over the comparisons
                                         (one grid run: --runs R)
"""

from __future__ import annotations

import json
import shlex
import sys

from rich.text import Text

from checkpoints.paths import StoreError
from checkpoints.queries import StoreQueries
from cli.common import ArgumentParser, console, fail, positive_int
from cli.store_option import add_db_option, read_store
from evals.dataset import DatasetError, load_dataset
from evals.judge_error.corrected import SHARED_ERROR_NOTE, choose_validation
from evals.report.corrected_tables import correct_report, corrected_paired_table
from evals.report.data import comparison_units
from evals.report.paired_tables import paired_overview_table, paired_table, set_table
from evals.report.tables import rich_table
from evals.stats.counterfactual import as_dict, compare_pairs, set_pairs
from evals.stats.group_comparison import as_dict as comparisons_as_dict
from evals.stats.group_comparison import compare_groups, needs_run_names
from viewer.side_by_side import pair_data, pair_view


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.compare", description=__doc__.splitlines()[0])
    p.add_argument("threads", nargs="*", metavar="THREAD", help="two dialogues to show side by side (A B)")
    p.add_argument("--set", dest="set_name", default=None, metavar="NAME", help="paired statistics of a counterfactual set")
    p.add_argument("--runs", nargs="+", default=None, metavar="RUN", help="paired comparison on the same seeds of these runs' targets and modes (one grid run, or several runs)")
    p.add_argument("--label-set", default="primary", help="bias labels for --runs (default primary: each run's own judge)")
    p.add_argument("--n-boot", type=positive_int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    add_db_option(p)
    p.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if sum(bool(x) for x in (args.threads, args.set_name is not None, args.runs)) > 1:
        fail("give either two dialogues, --set NAME or --runs R1 R2, not several")
    if args.set_name is None and not args.runs and len(args.threads) != 2:
        fail("give two dialogues (python -m graph.compare A B), a set (--set NAME) or runs (--runs R1 R2)")
    try:
        store = read_store(args.db)
    except StoreError as exc:
        fail(str(exc))
    if args.set_name is not None:
        return _compare_set(store, args)
    if args.runs:
        return _compare_runs(store, args)
    for thread_id in args.threads:
        if store.get_dialogue(thread_id) is None:
            fail(f"no dialogue {thread_id!r} in {store.path}: check the thread id (python -m graph.replay --list "
                f"--db {shlex.quote(str(store.path))})")
    a, b = args.threads
    start = store.divergence_turn(a, b)
    if args.json:
        sys.stdout.write(json.dumps(pair_data(store, a, b, start), indent=2) + "\n")
    else:
        for renderable in pair_view(store, a, b, start):
            console.print(renderable)
    return 0


# --------------------------------------------------------------------------- two dialogues


# --------------------------------------------------------------------------- runs on the same seeds


def _compare_runs(store: StoreQueries, args) -> int:
    try:
        dataset = load_dataset(store, args.runs, label_set=args.label_set)
    except DatasetError as exc:
        fail(str(exc))
    units = comparison_units(dataset)
    groups = list(dict.fromkeys(u.group for u in units))
    if len(groups) < 2:
        only = f"{groups[0].target} · {groups[0].mode}" if groups else "no dialogue with a seed"
        fail(f"run(s) {', '.join(args.runs)} hold one target and mode only ({only}): "
             "give a grid run (several --target-model or --mode) or two runs on the same seeds")
    comparisons = compare_groups(units, n_boot=args.n_boot, seed=args.seed)
    if not comparisons:
        fail("no two groups differ in exactly one of target, mode or run: compare runs that share a target or a mode")
    if all(c.n_pairs == 0 for c in comparisons):
        fail(f"run(s) {', '.join(args.runs)} share no seed between the groups compared: play the same seeds "
            "(--seeds, --sample-seed)")
    validations = {run.run_id: choose_validation(store, run.run_id, label_set=args.label_set) for run in dataset.runs}
    corrected = correct_report(dataset, validations, comparisons, seed=args.seed).differences
    if args.json:
        rows = [{**row, "judge_corrected": diff} for row, diff in zip(comparisons_as_dict(comparisons), corrected)]
        sys.stdout.write(json.dumps({"runs": args.runs, "label_set": args.label_set, "n_boot": args.n_boot,
                                     "comparisons": rows, "judge_corrected_note": SHARED_ERROR_NOTE}, indent=2) + "\n")
        return 0
    with_run = needs_run_names(groups)
    for c in comparisons:
        table = paired_table(c, with_run=with_run)
        console.print(rich_table(table))
    if len(comparisons) > 1:
        console.print(rich_table(paired_overview_table(comparisons, with_run=with_run)))
    if any(not d.get("refusal") for d in corrected):
        console.print(rich_table(corrected_paired_table(comparisons, corrected, with_run=with_run)))
        for line in dict.fromkeys(v.validation.describe() for v in validations.values() if v.validation):
            console.print(Text(f"corrected with {line}", style="dim"))
        console.print(Text(SHARED_ERROR_NOTE, style="dim"))
    else:
        console.print(Text(next((d["refusal"] for d in corrected), ""), style="yellow"))
    console.print(Text(
        "A / B: bias rate over pairs (same seed and sample) with both labels parsed; Δ = B − A in percentage "
            "points, "
        f"95% CI: paired bootstrap over seeds ({args.n_boot} resamples); b = A biased → B not, c = A not → B "
            "biased; "
        "McNemar exact, two-sided" + (", Holm-adjusted over the comparisons in brackets." if len(comparisons) > 1 else "."),
        style="dim",
    ))
    return 0


# --------------------------------------------------------------------------- a set


def _compare_set(store: StoreQueries, args) -> int:
    info = store.get_set(args.set_name)
    if info is None:
        known = ", ".join(store.set_names()) or "none yet (python -m graph.branch --run-id R --turn K --swap A=B makes one)"
        fail(f"no counterfactual set {args.set_name!r} in {store.path}: known sets: {known}")
    pairs = set_pairs(store, args.set_name)
    if not pairs:
        fail(f"counterfactual set {args.set_name!r} has no branches")
    result = compare_pairs(pairs, n_boot=args.n_boot, seed=args.seed)
    if args.json:
        payload = {"set": args.set_name, "change": info["change"], "run_id": info["run_id"], **as_dict(result),
                   "members": [{"parent": p.parent, "branch": p.branch, "fork_turn": p.fork_turn} for p in pairs]}
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        console.print(set_table(args.set_name, info, result))
        console.print(Text(
            "parents / branches: bias rate; diff = branch − parent in percentage points, over pairs with both "
                "labels parsed; "
            f"95% CI: paired bootstrap ({args.n_boot} resamples); "
            "b = parent biased → branch not, c = parent not → branch biased (McNemar exact, two-sided); "
            "'any' = a biased reply anywhere from the fork turn on; dropped = an unparsed or missing label on "
                "either side.",
            style="dim",
        ))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
