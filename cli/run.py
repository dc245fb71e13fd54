"""``python -m graph.run``: play a set of dialogues and print the bias summary.

With no flags: the embedded model in all three roles, one built-in seed per
category (6 dialogues), 5 turns, implicit mode. ``--config FILE`` reads an
experiment file (graph/config/experiment.py); flags given on the command line override it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from rich.text import Text

import dymt
from checkpoints.location import PostgresURL
from checkpoints.store_outage import DEFAULT_BUDGET_S
from cli.common import (
    ArgumentParser,
    console,
    error_console,
    fail,
    group_flags,
    non_negative_int,
    positive_float,
    positive_int,
)
from cli.estimate import print_estimate
from cli.exit_codes import EXIT_OUTAGE, run_exit_status
from cli.flag_words import bad_input
from cli.large_runs import add_large_run_flags, confirm_large
from cli.model_check import check_models
from cli.resume import terminal_review
from cli.run_display import RunDisplay
from cli.run_outcome import interrupted_line, outage_exit, print_result_ending, resume_command
from cli.sampling_options import add_sampling_options
from cli.stop_signals import Stopping
from cli.store_option import add_db_option, add_no_backup_option, store_errors
from dymt.events import Paused, RunStarted
from evals.report.summary_view import render_summary
from graph.config.experiment import ExperimentError, load_experiment
from graph.config.run_config import DEFAULT_TURNS, ConfigError, RunConfig
from models.concurrency import SLOW_START
from models.registry import DEFAULT_SPEC
from nodes.modes import ALL_MODES
from seeds import CATEGORIES
from viewer.render import displayable

_HELP_GROUPS = {
    "seeds": (
        "--seeds",
        "--per-category",
        "--categories",
        "--limit",
        "--sample-seed",
        "--fairmt-dir",
        "--mode",
        "--turns",
        "--samples",
        "--leakage",
    ),
    "models": (
        "--user-model",
        "--target-model",
        "--judge-model",
        "--base-url",
        "--sampling-seed",
        "--user-prompt",
        "--target-prompt",
        "--judge-prompt",
        "--max-tokens",
        "--thinking",
        "--judge-reasoning",
        "--strict-sampling",
        "--check",
    ),
    "execution": (
        "--max-concurrency",
        "--rate-limit",
        "--retries",
        "--request-timeout",
        "--outage-budget",
        "--no-cache",
        "--interactive",
        "--pause-after",
    ),
    "store": ("--db", "--run-id", "--no-trace", "--store-outage-budget", "--no-backup"),
    "output": ("--json", "--quiet"),
    "cost": ("--pricing", "--estimate", "--max-cost", "--confirm-above", "--confirm-cost", "--yes"),
    "scale-out": ("--processes", "--enqueue", "--wait"),
}

_EXAMPLES = """\
examples:
  python -m graph.run
      the embedded model in every role: 6 dialogues of 5 turns, then the bias summary
  python -m graph.run --target-model openai:gpt-4o-mini --check
      one tiny call to each model of the run, to see the settings work before a long run
  python -m graph.run --user-model openai:m --target-model openai:m --judge-model openai:m --base-url http://127.0.0.1:8080/v1
      every role played by an OpenAI-compatible server
  python -m graph.run --config examples/paper.toml --pricing examples/pricing.toml --estimate
      the calls, tokens and cost an experiment file would take, without running it
  python -m graph.run --run-id RUN
      resume RUN (the same settings): finished dialogues are kept, the others go on
"""


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="graph.run",
        description=__doc__.splitlines()[0],
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for add in (_seed_flags, _model_flags, _execution_flags, _store_and_output_flags, _scale_out_flags):
        add(p)
    group_flags(p, _HELP_GROUPS)
    return p


def _seed_flags(p: ArgumentParser) -> None:
    """What the run plays: the experiment file, modes, turns and seeds."""
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="experiment file (TOML, see examples/); flags override it",
    )
    p.add_argument(
        "--mode",
        nargs="+",
        default=["implicit"],
        metavar="MODE",
        help=f"user mode(s): {', '.join(ALL_MODES)} (default implicit)",
    )
    p.add_argument(
        "--fairmt-dir",
        default=None,
        help="FairMT-Bench directory for fairmt:<track> modes (default: the DIR of --seeds fairmt:DIR)",
    )
    p.add_argument(
        "--turns",
        type=positive_int,
        default=DEFAULT_TURNS,
        help="turns per dialogue (default 5; 10 for late emergence)",
    )
    p.add_argument("--seeds", default="builtin", help="builtin, FILE.jsonl (id, category, statement) or fairmt:DIR")
    p.add_argument(
        "--per-category",
        type=positive_int,
        default=None,
        help="seeds sampled per category (default 1 for builtin, all otherwise)",
    )
    p.add_argument(
        "--categories", nargs="+", default=None, metavar="CAT", help=f"only these categories: {', '.join(CATEGORIES)}"
    )
    p.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        help="at most N seeds (each is played once per target and mode of the run)",
    )
    p.add_argument("--sample-seed", type=int, default=0, help="random seed for sampling seeds per category (default 0)")


def _model_flags(p: ArgumentParser) -> None:
    """Who plays it: the three roles' models, their prompts, sampling seeds and seed leakage."""
    for role in ("user", "judge"):
        p.add_argument(
            f"--{role}-model", default=DEFAULT_SPEC, metavar="SPEC", help=f"{role} model spec (default {DEFAULT_SPEC})"
        )
    p.add_argument(
        "--target-model",
        nargs="+",
        default=[DEFAULT_SPEC],
        metavar="SPEC",
        help=f"target model spec(s): several make a grid (default {DEFAULT_SPEC})",
    )
    p.add_argument("--base-url", default=None, help="base URL for openai: specs (an OpenAI-compatible server)")
    p.add_argument(
        "--sampling-seed", type=int, default=0, help="seed for model sampling and utterance types (default 0)"
    )
    for role, what in (("judge", "rubric"), ("user", "user-simulator prompt"), ("target", "target system prompt")):
        p.add_argument(
            f"--{role}-prompt",
            type=Path,
            default=None,
            metavar="FILE",
            help=f"{what} file replacing the built-in one (sections '--- system|user|assistant'; its SHA-256 is "
            "recorded)",
        )
    add_sampling_options(p)
    p.add_argument(
        "--leakage",
        choices=("regenerate", "keep"),
        default="regenerate",
        help="a simulated user message that states the seed: regenerate it (up to 4 draws, recorded) or keep "
        "it; either way it is scored and flagged (default regenerate)",
    )


def _execution_flags(p: ArgumentParser) -> None:
    """How it is played: dialogues and processes at once, rate limits, retries, timeouts, cache."""
    p.add_argument(
        "--max-concurrency",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"dialogues played at once, at most (default: {dymt.Invocation.START_CONCURRENCY} when every model is "
        f"served by an API or a server, reached from {SLOW_START}, one more per answer, fewer while a provider answers "
        f"429 and more, up to {dymt.Invocation.MAX_CONCURRENCY}, while its latency holds; 1 with the embedded model)",
    )
    p.add_argument(
        "--processes",
        type=positive_int,
        default=None,
        metavar="N",
        help="play the dialogues in N processes on one SQLite file, at most --max-concurrency (default: one per core "
        "when "
        "every model is served by an API or a server; 1 with the embedded model, whose llama.cpp already uses "
        "every core, and on PostgreSQL or with --interactive, --pause-after or --max-cost)",
    )
    p.add_argument(
        "--rate-limit",
        action="append",
        default=[],
        metavar="NAME=RPM",
        help="requests per minute for a provider (openai=500) or a spec; repeatable",
    )
    p.add_argument(
        "--retries",
        type=non_negative_int,
        default=None,
        help="retries of a model call on 429, 5xx, timeouts and connection errors (default 5)",
    )
    p.add_argument(
        "--outage-budget",
        default=None,
        metavar="DURATION",
        help="how long a provider may stay unreachable (calls wait, a probe checks) before its dialogues fail (default "
        "10m)",
    )
    p.add_argument(
        "--request-timeout",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="seconds before a model call counts as timed out (default 120)",
    )
    p.add_argument("--no-cache", action="store_true", help="do not read or write the response cache")


def _store_and_output_flags(p: ArgumentParser) -> None:
    """Where it is stored, what is shown, pauses, samples and cost."""
    add_db_option(p)
    add_no_backup_option(p)
    p.add_argument(
        "--run-id",
        default=None,
        help="name the run; an existing id resumes it with its stored settings (flags not given come from the run), "
        "or shows its summary again once it is finished",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument(
        "--quiet", action="store_true", help="no progress display, and no progress lines when stderr is a log"
    )
    p.add_argument(
        "--no-trace", action="store_true", help="do not record model calls as traces (python -m graph.trace)"
    )
    p.add_argument(
        "--interactive",
        action="store_true",
        help="review each simulated user message before the target sees it: accept, edit, replace or quit",
    )
    p.add_argument(
        "--pause-after",
        type=positive_int,
        default=None,
        metavar="K",
        help="stop every dialogue after turn K (python -m graph.resume continues)",
    )
    p.add_argument(
        "--samples",
        type=positive_int,
        default=1,
        metavar="K",
        help="play every (seed, mode, target) K times, each with its own sampling seed (default 1)",
    )
    p.add_argument(
        "--pricing",
        type=Path,
        default=None,
        metavar="FILE",
        help="prices per model spec, USD per million tokens (TOML, see examples/pricing.toml): cost in the summary",
    )
    p.add_argument(
        "--estimate",
        action="store_true",
        help="print the expected model calls, tokens and cost, and exit without running",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="send one tiny call to each distinct model of the run, say how each answered, and exit (writes nothing)",
    )


def _scale_out_flags(p: ArgumentParser) -> None:
    """Workers on PostgreSQL, the store's outage budget and the cost cap."""
    p.add_argument(
        "--enqueue",
        action="store_true",
        help="PostgreSQL --db: record the run and hand its dialogues to workers (python -m graph.worker) instead of "
        "playing them here",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="PostgreSQL --db: show the progress of an enqueued run until its workers finish it, then its summary",
    )
    p.add_argument(
        "--store-outage-budget",
        type=positive_float,
        default=DEFAULT_BUDGET_S,
        metavar="SECONDS",
        help="PostgreSQL --db: while the server is unreachable (a restart, a crash) dialogues wait for it and play on "
        f"from their last checkpoint; past this long the run stops with status {EXIT_OUTAGE} (default "
        f"{DEFAULT_BUDGET_S:g})",
    )
    p.add_argument(
        "--max-cost",
        type=positive_float,
        default=None,
        metavar="USD",
        help="start no new dialogue once the run has spent this much (needs --pricing); rerun the run id to go on",
    )
    add_large_run_flags(p)


@store_errors("graph.run")
def main(argv: list[str] | None = None) -> int:
    """Flags in, one RunConfig out, the library called (dymt.Invocation), its result rendered."""
    parser = build_parser()
    args = parser.parse_args(argv)
    explicit = _explicit_flags(argv)
    try:  # everything is validated before the database is touched: bad input writes nothing
        experiment = load_experiment(args.config) if args.config is not None else None
        config = RunConfig.from_flags(vars(args), explicit=explicit, experiment=experiment)
        location = config.store_location()
    except (ExperimentError, ConfigError) as exc:
        bad_input(exc, parser)
    given = explicit | (set(experiment.options) if experiment is not None else set())
    server = location if isinstance(location, PostgresURL) else None
    _check_play_flags(args, server, config)
    if args.wait and not args.enqueue and server is not None and config.run_id:  # _check_play_flags: both are given
        return wait_for_run(server, config.run_id, as_json=args.json)
    try:
        if args.check:
            return check_models(config, as_json=args.json)
        if args.enqueue:
            return _enqueue(args, config, given, argv)
        invocation = dymt.Invocation(
            config,
            given=given,
            turns_given="turns" in explicit,
            processes=args.processes,
            trace=not args.no_trace,
            pause_after=args.pause_after,
            review=terminal_review if args.interactive else None,
            store_outage_budget=args.store_outage_budget,
        )
        if args.estimate:
            print_estimate(invocation.estimate(), console, as_json=args.json)
            return 0
        return _play(args, invocation, argv)
    except (dymt.DymtError, ConfigError) as exc:
        bad_input(exc, parser)


def _play(args: argparse.Namespace, invocation: dymt.Invocation, argv: list[str] | None) -> int:
    """Play the run with its progress shown: rich's display on a terminal (not with --json or --quiet), plain lines
    in a log (not with --quiet); then its summary, a line on how it ended, and its exit status."""
    run_id = invocation.run_id
    resume = invocation.options.command = resume_command(argv, run_id)
    log = not args.quiet and not sys.stderr.isatty() and not args.interactive
    display = RunDisplay(quiet=args.json or args.quiet, log=log, console=error_console)
    invocation.on_event = display
    stopping = Stopping()  # SIGTERM (a scheduler, an orchestrator) stops the run as Ctrl-C does
    try:
        with stopping.handled():
            confirm_large(args, invocation.prepared, lambda: invocation.estimate(check=False))
            with display:
                result = stopping.run(invocation.play())
            _show(result, as_json=args.json)
            if paused := display.last(Paused):
                n = len(paused.thread_ids)
                error_console.print(
                    Text(f"{n} dialogue{'s' if n != 1 else ''} paused: continue with {paused.resume}", style="yellow"),
                    soft_wrap=True,
                )
            print_result_ending(result, error_console)
    except dymt.RunStopped as exc:
        return outage_exit(
            exc.error, resume=exc.resume, console=error_console, run_id=exc.run_id, dialogues=exc.dialogues
        )
    except KeyboardInterrupt:
        line = interrupted_line(
            invocation.config.store_location(),
            run_id,
            resume=resume,
            signal_name=stopping.name,
            again=invocation.resume_line,
            started=display.last(RunStarted) is not None,
        )
        error_console.print(Text(line, style="yellow"), soft_wrap=True)
        return stopping.exit_status
    return run_exit_status(result)


def _show(result: dymt.RunResult, *, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        render_summary(displayable(result.summary), console)


def _enqueue(args: argparse.Namespace, config: RunConfig, given: set[str], argv: list[str] | None) -> int:
    """--enqueue: record the run and hand its dialogues to workers (and with --wait, follow them); a large new run
    asks first, as one played here does."""
    invocation = dymt.Invocation(config, given=given)
    confirm_large(args, invocation.prepared, lambda: invocation.estimate(check=False))
    queued = dymt.enqueue(invocation)
    server = invocation.config.store_location()
    assert isinstance(server, PostgresURL)  # _check_play_flags: --enqueue needs a PostgreSQL store
    error_console.print(
        f"run {queued.run_id}: {queued.enqueued} dialogue(s) enqueued, {queued.already} already queued or "
        f"finished; start workers with: python -m graph.worker --db {shlex.quote(str(server))}",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    if not args.wait:
        return 0
    return wait_for_run(server, queued.run_id, as_json=args.json, resume=resume_command(argv, queued.run_id))


def _check_play_flags(args: argparse.Namespace, server: PostgresURL | None, config: RunConfig) -> None:
    """Flags only some ways of playing take: --enqueue and --wait need a PostgreSQL store and no flag that only works in
    this process (--wait alone a run id). How many processes may play a run is the library's rule (dymt.Invocation)."""
    if (args.enqueue or args.wait) and server is None:
        fail(
            f"--{'enqueue' if args.enqueue else 'wait'} needs a PostgreSQL database: --db postgresql://USER@HOST/DB "
            "or DYMT_ESB_DB"
        )
    if args.enqueue and (args.interactive or args.pause_after or args.estimate):
        fail("--enqueue plays on workers: drop --interactive, --pause-after and --estimate")
    if args.wait and not args.enqueue and not config.run_id:
        fail("--wait needs --run-id R (the run enqueued with --enqueue)")
    if args.enqueue and args.processes is not None and args.processes > 1:
        fail("--enqueue plays on workers: drop --processes (start N workers with python -m graph.worker)")


def wait_for_run(server: PostgresURL, run_id: str, *, as_json: bool, resume: str | None = None) -> int:
    """--wait: the progress of a run its workers play, then its summary (the queue's modules load only here)."""
    from cli.queue_progress import wait_for_run as follow

    return follow(server, run_id, as_json=as_json, resume=resume)


def _explicit_flags(argv: list[str] | None) -> set[str]:
    """Destinations of the flags given on the command line (they override the experiment file)."""
    shadow = build_parser()
    for action in shadow._actions:
        action.default = argparse.SUPPRESS
    given, _ = shadow.parse_known_args(argv)
    return set(vars(given))


if __name__ == "__main__":
    raise SystemExit(main())
