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

import argparse

from rich.text import Text

import dymt
from cli.common import ArgumentParser, console, positive_int
from cli.rendering import run
from cli.store_option import add_db_option, store_errors
from evals.judge_error.run_blocks import SHARED_ERROR_NOTE
from evals.report.corrected_tables import corrected_paired_table
from evals.report.paired_tables import paired_overview_table, paired_table, set_table
from evals.report.tables import rich_table
from evals.report.transition_tables import difference_table
from evals.stats.group_comparison import needs_run_names
from viewer.side_by_side import pair_view


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.compare", description=__doc__.splitlines()[0])
    p.add_argument("threads", nargs="*", metavar="THREAD", help="two dialogues to show side by side (A B)")
    p.add_argument(
        "--set", dest="set_name", default=None, metavar="NAME", help="paired statistics of a counterfactual set"
    )
    p.add_argument(
        "--runs",
        nargs="+",
        default=None,
        metavar="RUN",
        help="paired comparison on the same seeds of these runs' targets and modes (one grid run, or several runs)",
    )
    p.add_argument(
        "--label-set", default="primary", help="bias labels for --runs (default primary: each run's own judge)"
    )
    p.add_argument("--n-boot", type=positive_int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    add_db_option(p)
    p.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    return p


@store_errors("graph.compare")
def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), argv, dymt.compare, "threads", show=_show)


def _show(result: dymt.CompareResult, args: argparse.Namespace) -> None:
    if result.kind == "set":
        _show_set(result, n_boot=args.n_boot)
    elif result.kind == "runs":
        _show_runs(result, n_boot=args.n_boot)
    else:
        a, b = args.threads  # a pair: dymt.compare took exactly two
        with dymt.open(args.db) as store:
            for renderable in pair_view(store.reader, a, b, result.detail["start"]):
                console.print(renderable)


def _show_runs(result: dymt.CompareResult, *, n_boot: int) -> None:
    comparisons, corrected, validations = (result.detail[k] for k in ("comparisons", "corrected", "validations"))
    with_run = needs_run_names(result.detail["groups"])
    for c in comparisons:
        console.print(rich_table(paired_table(c, with_run=with_run)))
    if len(comparisons) > 1:
        console.print(rich_table(paired_overview_table(comparisons, with_run=with_run)))
    if any(not d.get("refusal") for d in corrected):
        console.print(rich_table(corrected_paired_table(comparisons, corrected, with_run=with_run)))
        for line in dict.fromkeys(v.validation.describe() for v in validations.values() if v.validation):
            console.print(Text(f"corrected with {line}", style="dim"))
        console.print(Text(SHARED_ERROR_NOTE, style="dim"))
    else:
        console.print(Text(next((d["refusal"] for d in corrected), ""), style="yellow"))
    console.print(
        Text(
            "A / B: bias rate over pairs (same seed and sample) with both labels parsed; Δ = B − A in percentage "
            "points, "
            f"95% CI: paired bootstrap over seeds ({n_boot} resamples); b = A biased → B not, c = A not → B biased; "
            "McNemar exact, two-sided"
            + (", Holm-adjusted over the comparisons in brackets." if len(comparisons) > 1 else "."),
            style="dim",
        )
    )


def _show_set(result: dymt.CompareResult, *, n_boot: int) -> None:
    console.print(set_table(result.data["set"], result.detail["info"], result.detail["result"]))
    moves = result.data["transitions"]
    fixed = moves["judge_corrected"]
    shown = fixed if fixed.get("refusal") is None else moves["difference"]
    kind = "corrected for the judge's error" if shown is fixed else "raw judge labels"
    console.print(rich_table(difference_table(f"Bias dynamics, branches − parents ({kind})", shown)))
    if fixed.get("refusal"):
        console.print(Text(fixed["refusal"], style="yellow"))
    console.print(
        Text(
            f"parents / branches: bias rate; diff = branch − parent in percentage points, over pairs with both labels "
            "parsed; "
            f"95% CI: paired bootstrap ({n_boot} resamples); "
            "b = parent biased → branch not, c = parent not → branch biased (McNemar exact, two-sided); "
            "'any' = a biased reply anywhere from the fork turn on; dropped = an unparsed or missing label on either "
            "side.",
            style="dim",
        )
    )


if __name__ == "__main__":
    raise SystemExit(main())
