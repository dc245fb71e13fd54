"""``python -m benchmarks [overhead] [concurrency] [adaptive] [local] [memory] [paired] [scale] [scaleout] [page]
[judge_error]``: run the benchmarks and print their ratios.

``judge_error --coverage [--quick]`` also runs the correction's simulation suite (its coverage table);
``judge_error --labelling [--quick]`` compares the active labelling design with random double sampling instead.

``--json FILE`` also writes the numbers. ``adaptive --stub-limit N`` sets the requests its stub takes at once (0: no
limit). ``scale --paper [--paper-db PATH]`` plays the paper grid's shape against a stub instead (long; a --paper-db
path resumes when run again). ``scaleout [--db URL]`` needs a
PostgreSQL server (else $DYMT_ESB_DB or $DYMT_ESB_TEST_PG; without one it says how and skips). Not timed tests: nothing
fails on a slow machine, but the machine's load is printed because other processes skew wall-clock ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common
from checkpoints.paths import StoreError

SUITES = {
    "overhead": ("1. Harness overhead per turn (instant fake model)", "benchmarks.overhead"),
    "concurrency": ("2. Concurrency against a stub OpenAI-compatible server", "benchmarks.concurrency"),
    "adaptive": (
        "2b. Adaptive concurrency: the default ÷ fixed settings against a stub that answers 429 past its limit",
        "benchmarks.adaptive",
    ),
    "local": ("3. Embedded model: graph ÷ raw llama-cpp-python", "benchmarks.local_model"),
    "memory": (
        "3b. Embedded main job: peak RSS and wall time of python -m graph.run --mode implicit (≤ 1 GB), ÷ samplers "
        "left to the garbage collector",
        "benchmarks.local_memory",
    ),
    "paired": ("4. Paired comparisons of the paper's grid: vectorised ÷ pure Python", "benchmarks.paired"),
    "scale": (
        "5. Paper scale: store KB/turn at 5/10/20 turns, harness CPU ÷ (bare client + LangGraph floor)",
        "benchmarks.scale",
    ),
    "scaleout": ("6. Scale-out: 1 vs 2 workers on one PostgreSQL store", "benchmarks.scaleout"),
    "page": (
        "7. report.html at paper size: file MB and time to the summary in headless Chromium",
        "benchmarks.report_page",
    ),
    "judge_error": (
        "8. Judge-error correction: the paper grid (2,880 dialogues × 10 turns) ÷ 30 s of CPU; --coverage: the "
        "simulation suite",
        "benchmarks.judge_error",
    ),
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks", description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("suites", nargs="*", metavar="SUITE", help=f"which to run: {', '.join(SUITES)} (default: all)")
    p.add_argument("--json", type=Path, default=None, help="also write the results to this file")
    p.add_argument(
        "--paper",
        action="store_true",
        help="scale: the paper grid's shape (2,880 dialogues × 10 turns, 100 ms, concurrency 64) instead",
    )
    p.add_argument("--paper-db", type=Path, default=None, help="scale --paper: keep the store here (rerun to resume)")
    p.add_argument(
        "--paper-dialogues",
        type=int,
        default=None,
        metavar="N",
        help="scale --paper: play N dialogues instead of 2,880 (a shorter trial of the same shape)",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=None,
        metavar="N",
        help="scale --paper: play in N processes (default: one per core, as graph.run --processes does for "
        "served models)",
    )
    p.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="scaleout: the PostgreSQL server to play on, postgresql://USER@HOST/DB (default $DYMT_ESB_DB, else "
        "$DYMT_ESB_TEST_PG)",
    )
    p.add_argument(
        "--stub-limit",
        type=int,
        default=None,
        metavar="N",
        help="adaptive: the stub answers 429 beyond N requests in flight (default 6; 0: it takes every request)",
    )
    p.add_argument(
        "--coverage", action="store_true", help="judge_error: also run the simulation suite (coverage table, ≤ 15 min)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="judge_error --coverage: a fifth of the sets of the smallest size only; --labelling: every judge at "
        "120 × 5 only",
    )
    p.add_argument(
        "--drift",
        action="store_true",
        help="judge_error --coverage: every cell of the drift suite (judges whose error changes with the turn), not "
        "only its default part (about 45 min more on 2 cores)",
    )
    p.add_argument(
        "--widths",
        action="store_true",
        help="judge_error --coverage: also correct each data set with its validation as four counts (a judge whose "
        "error is the same at every turn) and print the width ratio (about twice as long)",
    )
    p.add_argument(
        "--labelling",
        action="store_true",
        help="judge_error: only the active labelling design ÷ random double sampling, at equal budgets (about 40 min "
        "on 2 cores; --quick about 4)",
    )
    return p


def _check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with a usage error for a flag given to a benchmark it does not belong to, or an impossible value."""
    unknown = [s for s in args.suites if s not in SUITES]
    if unknown:
        p.error(f"unknown benchmark {unknown[0]!r}: use {', '.join(SUITES)}")
    if args.processes is not None and args.processes < 1:
        p.error(f"--processes must be at least 1, not {args.processes}")
    if args.processes is not None and not (args.paper or args.paper_db or args.paper_dialogues):
        p.error("--processes belongs to scale --paper: run python -m benchmarks scale --paper --processes N")
    if (args.paper or args.paper_db or args.paper_dialogues) and args.suites != ["scale"]:
        p.error(
            "--paper, --paper-db and --paper-dialogues belong to the scale benchmark: run python -m benchmarks "
            "scale --paper"
        )
    if args.stub_limit is not None and args.suites != ["adaptive"]:
        p.error("--stub-limit belongs to the adaptive benchmark: run python -m benchmarks adaptive --stub-limit N")
    if args.stub_limit is not None and args.stub_limit < 0:
        p.error(f"--stub-limit must be 0 (no limit) or more, not {args.stub_limit}")
    if args.db is not None and args.suites and "scaleout" not in args.suites:
        p.error("--db belongs to the scaleout benchmark: run python -m benchmarks scaleout --db URL")
    if (args.coverage or args.quick) and args.suites != ["judge_error"]:
        p.error(
            "--coverage and --quick belong to the judge_error benchmark: run python -m benchmarks judge_error "
            "--coverage"
        )
    if args.labelling and args.suites != ["judge_error"]:
        p.error("--labelling belongs to the judge_error benchmark: run python -m benchmarks judge_error --labelling")
    if args.labelling and args.coverage:
        p.error(
            "--labelling runs on its own: run python -m benchmarks judge_error --labelling (or --coverage without it)"
        )
    if (args.drift or args.widths) and not args.coverage:
        p.error(
            "--drift and --widths belong to the coverage suite: run python -m benchmarks judge_error --coverage --drift"
        )
    if args.quick and not (args.coverage or args.labelling):
        p.error(
            "--quick shortens the coverage suite or the labelling comparison: run python -m benchmarks judge_error "
            "--coverage --quick (or --labelling --quick)"
        )
    if args.db is not None:
        from benchmarks.scaleout import server_url

        try:
            server_url(args.db)
        except StoreError as exc:
            p.error(str(exc))
    if args.paper_dialogues is not None and args.paper_dialogues < 1:
        p.error(f"--paper-dialogues must be at least 1, not {args.paper_dialogues}")


def _run_suite(p: argparse.ArgumentParser, name: str, module: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One benchmark's results, run with the flags that belong to it."""
    paper = args.paper or args.paper_db is not None or args.paper_dialogues is not None
    if name == "scale":
        return module.run(
            paper=paper,
            paper_db=args.paper_db,
            paper_dialogues=args.paper_dialogues,
            processes=args.processes or len(os.sched_getaffinity(0)),
        )
    if name == "scaleout":
        try:
            return module.run(db=args.db)
        except StoreError as exc:
            p.error(str(exc))
    if name == "adaptive" and args.stub_limit is not None:
        return module.run(limit=args.stub_limit)
    if name == "judge_error":
        return module.run(
            coverage_suite=args.coverage,
            quick=args.quick,
            labelling_part=args.labelling,
            drift="all" if args.drift else "default",
            widths=args.widths,
        )
    return module.run()


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    _check(p, args)
    import importlib

    results = {}
    for name in args.suites or list(SUITES):
        title, module_name = SUITES[name]
        module = importlib.import_module(module_name)
        print(title, flush=True)
        note = common.load_note()
        started = time.perf_counter()
        result = _run_suite(p, name, module, args)
        result["load_before"] = note
        for line in module.report(result):
            print(line)
        print(f"  ({note}; took {time.perf_counter() - started:.0f} s)\n", flush=True)
        results[name] = result
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
