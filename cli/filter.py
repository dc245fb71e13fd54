"""``python -m evals.filter``: simulate a post-hoc safety filter over stored dialogues.

A guard model (ShieldGemma-style: a policy prompt, P(violation) from the Yes/No
log-probabilities where the model gives them, otherwise its Yes/No answer) scores
every user message and every target reply. A turn is blocked when either score
reaches the threshold, and every later turn of that dialogue counts as blocked.
Scores are stored, so trying another threshold costs no model call.
"""

from __future__ import annotations

from rich.text import Text

import dymt
from cli.common import ArgumentParser, console
from cli.labelling import exit_status
from cli.rendering import run
from cli.store_option import add_db_option, add_no_backup_option, store_errors
from evals.report.scoring_tables import filter_table
from evals.scorers.guard import POLICIES


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
    return run(build_parser(), argv, dymt.simulate_filter, "run_id", show=_shown, status=_status)


def _status(result: dymt.FilterResult) -> int:
    return exit_status(result, what="guard calls")


def _shown(result: dymt.FilterResult, args: object) -> None:
    console.print(filter_table(result.report, turns=result.turns))
    console.print(
        Text(
            f"{result.model_calls} new guard calls; scores are stored, so another --threshold costs none.",
            style="dim",
        )
    )


if __name__ == "__main__":
    raise SystemExit(main())
