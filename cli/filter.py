"""``python -m evals.filter``: simulate a post-hoc safety filter over stored dialogues.

A guard model (ShieldGemma-style: a policy prompt, P(violation) from the Yes/No
log-probabilities where the model gives them, otherwise its Yes/No answer) scores
every user message and every target reply. A turn is blocked when either score
reaches the threshold, and every later turn of that dialogue counts as blocked.
Scores are stored, so trying another threshold costs no model call.
"""

from __future__ import annotations

import json
import shlex
import sys

from rich.text import Text

from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError
from checkpoints.run_record import role_specs
from cli.common import ArgumentParser, console, fail
from cli.labelling import exit_status
from cli.store_option import add_db_option, add_no_backup_option, read_store, store_errors, write_store
from evals.report.scoring_tables import filter_table
from evals.scorers.guard import POLICIES, guard_model
from evals.scorers.label_sets import LabellerError, SetConflictError, stored_endpoint
from evals.scorers.safety_filter import simulate_filter


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="evals.filter", description=__doc__.splitlines()[0])
    p.add_argument("--run-id", required=True, action="append", help="run to filter (repeatable)")
    p.add_argument(
        "--guard-model",
        default=None,
        metavar="SPEC",
        help="guard model spec, e.g. local:gemma3-270m (default: the first run's judge model)",
    )
    p.add_argument(
        "--base-url",
        default=None,
        help="base URL for openai: specs (default: where the run called --guard-model, if it played it)",
    )
    p.add_argument("--policy", default="hate", choices=POLICIES)
    p.add_argument(
        "--name",
        default=None,
        help="name of the guard's score set (default: the guard spec); a set keeps one guard model and prompt",
    )
    p.add_argument("--threshold", type=float, default=0.5, help="block at P(violation) >= this (default 0.5)")
    add_db_option(p)
    add_no_backup_option(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    return p


@store_errors("evals.filter")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0.0 <= args.threshold <= 1.0:
        fail(f"--threshold {args.threshold} is not a probability: use a value in [0, 1]")
    if args.name is not None and not args.name.strip():
        fail("--name must not be empty")
    with read_store(args.db) as reader:  # read-only until the guard is built: a bad model writes nothing
        for run_id in args.run_id:
            if reader.get_run(run_id) is None:
                fail(
                    f"no run {run_id!r} in {reader.path}: list runs with python -m graph.runs list --db "
                    f"{shlex.quote(str(reader.path))}"
                )
        spec = args.guard_model or role_specs(reader.get_run(args.run_id[0])["config"]).get("judge")  # type: ignore[index]
        if not spec:
            fail(f"run {args.run_id[0]!r} records no judge model: pass --guard-model SPEC")
        base_url = args.base_url or next(filter(None, (stored_endpoint(reader, spec, r) for r in args.run_id)), None)
    try:
        model = guard_model(spec, base_url=base_url)
    except LabellerError as exc:
        fail(str(exc))
    try:
        store = write_store(args.db)
    except (StoreError, SchemaTooNewError) as exc:
        fail(str(exc))
    try:
        report, turns, tally = simulate_filter(
            store, args.run_id, model, policy=args.policy, threshold=args.threshold, name=args.name
        )
    except SetConflictError as exc:
        fail(str(exc))
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return exit_status(tally, what="guard calls")
    console.print(filter_table(report, turns=turns))
    console.print(
        Text(
            f"{report['model_calls']} new guard calls; scores are stored, so another --threshold costs none.",
            style="dim",
        )
    )
    return exit_status(tally, what="guard calls")


if __name__ == "__main__":
    raise SystemExit(main())
