"""``python -m graph.run``: play a set of dialogues and print the bias summary.

With no flags: the embedded model in all three roles, one built-in seed per
category (6 dialogues), 5 turns, implicit mode. ``--config FILE`` reads an
experiment file (graph/experiment.py); flags given on the command line override it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import secrets
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from checkpoints.cache import ResponseCache
from checkpoints.location import DbLocation, PostgresURL
from checkpoints.migrations import SchemaTooNewError
from checkpoints.outages import OutageError
from checkpoints.paths import StoreError, check_db_path
from checkpoints.readers import open_reader
from checkpoints.serde import UnsafeCheckpointError
from checkpoints.store import open_writer
from checkpoints.store_outage import DEFAULT_BUDGET_S, StoreOutage
from cli.common import ArgumentParser, console, error_console, fail, group_flags, positive_float, positive_int, pricing_option
from cli.estimate import print_estimate, run_estimate
from cli.exit_codes import EXIT_BAD_INPUT, EXIT_OUTAGE
from cli.outage_display import OutageProgress
from cli.run_outcome import exit_status, outage_exit, print_ending, resume_command
from cli.resume import print_paused_hint, terminal_review
from cli.store_option import add_db_option, open_checkpointer
from evals.cost import CostCap, budget_record
from evals.report.summary import render_summary, run_summary
from graph.config import DEFAULT_TURNS, ConfigError, ModelBuildError, RunConfig, stored_run_config
from graph.endpoints import check_models, stop_on_wrong_setting
from graph.experiment import ExperimentError, load_experiment
from graph.pausing import PauseOptions, check_pause_options, settle_run
from graph.playing import DialogueSlots, RunConflictError, check_run_compatible, execute_run
from graph.run_plan import RunPlan, plan_run
from models.circuit import EndpointSettingError
from models.registry import DEFAULT_SPEC, ModelSpecError, RoleModel, parse_spec
from nodes.builder import build_graph
from nodes.context import Models
from nodes.modes import ALL_MODES
from seeds import CATEGORIES

_HELP_GROUPS = {
    "seeds": ("--seeds", "--per-category", "--categories", "--limit", "--sample-seed", "--fairmt-dir", "--mode", "--turns",
              "--samples", "--leakage"),
    "models": ("--user-model", "--target-model", "--judge-model", "--base-url", "--sampling-seed", "--user-prompt",
               "--target-prompt", "--judge-prompt", "--check"),
    "execution": ("--max-concurrency", "--rate-limit", "--retries", "--request-timeout", "--outage-budget", "--no-cache",
                  "--interactive", "--pause-after"),
    "store": ("--db", "--run-id", "--no-trace", "--store-outage-budget"),
    "output": ("--json", "--quiet"),
    "cost": ("--pricing", "--estimate", "--max-cost"),
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


START_CONCURRENCY, MAX_CONCURRENCY = 16, 64  # dialogues at once when every model is served (models/concurrency.py)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.run", description=__doc__.splitlines()[0], epilog=_EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=None, metavar="FILE", help="experiment file (TOML, see examples/); flags override it")
    p.add_argument("--mode", nargs="+", default=["implicit"], metavar="MODE", help=f"user mode(s): {', '.join(ALL_MODES)} (default implicit)")
    p.add_argument("--fairmt-dir", default=None, help="FairMT-Bench directory for fairmt:<track> modes (default: the DIR of --seeds fairmt:DIR)")
    p.add_argument("--turns", type=positive_int, default=DEFAULT_TURNS, help="turns per dialogue (default 5; 10 for late emergence)")
    p.add_argument("--seeds", default="builtin", help="builtin, FILE.jsonl (id, category, statement) or fairmt:DIR")
    p.add_argument("--per-category", type=positive_int, default=None, help="seeds sampled per category (default 1 for builtin, all otherwise)")
    p.add_argument("--categories", nargs="+", default=None, metavar="CAT", help=f"only these categories: {', '.join(CATEGORIES)}")
    p.add_argument("--limit", type=positive_int, default=None, help="at most N seeds (each is played once per target and mode of the run)")
    p.add_argument("--sample-seed", type=int, default=0, help="random seed for sampling seeds per category (default 0)")
    for role in ("user", "judge"):
        p.add_argument(f"--{role}-model", default=DEFAULT_SPEC, metavar="SPEC", help=f"{role} model spec (default {DEFAULT_SPEC})")
    p.add_argument("--target-model", nargs="+", default=[DEFAULT_SPEC], metavar="SPEC", help=f"target model spec(s): several make a grid (default {DEFAULT_SPEC})")
    p.add_argument("--base-url", default=None, help="base URL for openai: specs (an OpenAI-compatible server)")
    p.add_argument("--sampling-seed", type=int, default=0, help="seed for model sampling and utterance types (default 0)")
    for role, what in (("judge", "rubric"), ("user", "user-simulator prompt"), ("target", "target system prompt")):
        p.add_argument(f"--{role}-prompt", type=Path, default=None, metavar="FILE",
                       help=f"{what} file replacing the built-in one (sections '--- system|user|assistant'; its SHA-256 is recorded)")
    p.add_argument("--leakage", choices=("regenerate", "keep"), default="regenerate",
                   help="a simulated user message that states the seed: regenerate it (up to 4 draws, recorded) or keep it; either way it is scored and flagged (default regenerate)")
    p.add_argument("--max-concurrency", type=positive_int, default=None, metavar="N",
                   help=f"dialogues played at once, at most (default: {START_CONCURRENCY} to start when every model is served by an "
                        f"API or a server, fewer while a provider answers 429 and more, up to {MAX_CONCURRENCY}, while its "
                        "latency holds; 1 with the embedded model)")
    p.add_argument("--processes", type=positive_int, default=None, metavar="N",
                   help="play the dialogues in N processes on one SQLite file, at most --max-concurrency (default: one per core when "
                        "every model is served by an API or a server; 1 with the embedded model, whose llama.cpp already uses "
                        "every core, and on PostgreSQL or with --interactive, --pause-after or --max-cost)")
    p.add_argument("--rate-limit", action="append", default=[], metavar="NAME=RPM", help="requests per minute for a provider (openai=500) or a spec; repeatable")
    p.add_argument("--retries", type=_non_negative_int, default=None, help="retries of a model call on 429, 5xx, timeouts and connection errors (default 5)")
    p.add_argument("--outage-budget", default=None, metavar="DURATION",
                   help="how long a provider may stay unreachable (calls wait, a probe checks) before its dialogues fail (default 10m)")
    p.add_argument("--request-timeout", type=positive_float, default=None, metavar="SECONDS", help="seconds before a model call counts as timed out (default 120)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the response cache")
    add_db_option(p)
    p.add_argument("--run-id", default=None,
                   help="name the run; an existing id resumes it with its stored settings (flags not given come from the run), "
                        "or shows its summary again once it is finished")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress display, and no progress lines when stderr is a log")
    p.add_argument("--no-trace", action="store_true", help="do not record model calls as traces (python -m graph.trace)")
    p.add_argument("--interactive", action="store_true", help="review each simulated user message before the target sees it: accept, edit, replace or quit")
    p.add_argument("--pause-after", type=positive_int, default=None, metavar="K", help="stop every dialogue after turn K (python -m graph.resume continues)")
    p.add_argument("--samples", type=positive_int, default=1, metavar="K", help="play every (seed, mode, target) K times, each with its own sampling seed (default 1)")
    p.add_argument("--pricing", type=Path, default=None, metavar="FILE", help="prices per model spec, USD per million tokens (TOML, see examples/pricing.toml): cost in the summary")
    p.add_argument("--estimate", action="store_true", help="print the expected model calls, tokens and cost, and exit without running")
    p.add_argument("--check", action="store_true", help="send one tiny call to each distinct model of the run, say how each answered, and exit (writes nothing)")
    p.add_argument("--enqueue", action="store_true", help="PostgreSQL --db: record the run and hand its dialogues to workers (python -m graph.worker) instead of playing them here")
    p.add_argument("--wait", action="store_true", help="PostgreSQL --db: show the progress of an enqueued run until its workers finish it, then its summary")
    p.add_argument("--store-outage-budget", type=positive_float, default=DEFAULT_BUDGET_S, metavar="SECONDS",
                   help="PostgreSQL --db: while the server is unreachable (a restart, a crash) dialogues wait for it and play on "
                        f"from their last checkpoint; past this long the run stops with status {EXIT_OUTAGE} (default {DEFAULT_BUDGET_S:g})")
    p.add_argument("--max-cost", type=positive_float, default=None, metavar="USD", help="start no new dialogue once the run has spent this much (needs --pricing); rerun the run id to go on")
    group_flags(p, _HELP_GROUPS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Everything is validated before the database is touched: bad input writes nothing.
    explicit = _explicit_flags(argv)
    try:
        experiment = load_experiment(args.config) if args.config is not None else None
        config = RunConfig.from_flags(args, explicit=explicit, experiment=experiment)
        location = config.store_location()
        stored = _stored_run(location, config.run_id)
        if stored is not None:  # the run's own settings under every flag not given again
            given = explicit | (set(experiment.options) if experiment is not None else set())
            config = stored_run_config(stored.run["config"], run_id=config.run_id).given_again(config, flags=given, run_id=config.run_id)
    except (ExperimentError, ConfigError) as exc:
        fail(str(exc))
    server = location if isinstance(location, PostgresURL) else None
    _check_play_flags(args, server, config)
    if args.wait and not args.enqueue:
        return wait_for_run(server, config.run_id, as_json=args.json)
    pauses = PauseOptions(interactive=args.interactive, pause_after=args.pause_after)
    try:
        plan = plan_run(config, turns_given="turns" in explicit)
        templates = config.load_prompts()
    except ConfigError as exc:
        fail(str(exc))
    if message := check_pause_options(modes=config.modes, turns=plan.config.turns, interactive=args.interactive,
                                      pause_after=args.pause_after):
        fail(message)
    pricing = _pricing(config)
    if args.estimate:
        return _estimate(plan, location, pricing, as_json=args.json)
    if args.check:
        return _check(config, templates, as_json=args.json)
    if stored is not None and not args.enqueue and stored.finished(plan):
        return _reshow(location, config.run_id, stored, pricing, as_json=args.json)
    _check_priced(config, pricing)
    policy = config.call_policy(None if not config.cache else ResponseCache(location))
    outage = _store_outage(server, args.store_outage_budget, policy)
    try:
        built = config.build_models(policy, templates=templates)
    except ModelBuildError as exc:
        fail(f"--{exc.role}-model: {exc.reason}")
    run_config = plan.config.model_copy(update={"run_id": config.run_id or _new_run_id()})
    record = run_config.run_record(built.models, built.targets)
    resume = resume_command(argv, run_config.run_id)
    fresh_file = not isinstance(location, PostgresURL) and not Path(location).exists()
    try:
        store = open_writer(location)
        check_run_compatible(store, run_config, record)
        new_run = store.get_run(run_config.run_id) is None
        if not new_run and _answered_before(store, run_config.run_id):
            policy.answered_before()  # a resume: its endpoints answered once, so their failures are outages
    except (StoreError, SchemaTooNewError, RunConflictError) as exc:
        fail(str(exc))
    except OutageError as exc:  # a read-only or full disk under the store
        return _outage_exit(exc, resume, run_config.run_id, plan)
    if args.enqueue:
        return _enqueue(plan, run_config, record, store, policy, server, pricing, wait=args.wait, as_json=args.json, resume=resume)
    cap = None
    if config.max_cost is not None:
        cap = CostCap(config.max_cost, pricing, run_config.run_id, record["resolved"]["models"],
                      estimate=_dialogue_estimate(plan, location, pricing))
    try:
        result = _play_run(args, server, run_config, plan, store, built, record, policy, templates, location, pauses=pauses,
                           budget=(cap.allows, cap.ended) if cap else None, outage=outage, pricing=pricing)
    except UnsafeCheckpointError as exc:
        fail(str(exc))
    except EndpointSettingError as exc:
        return _wrong_setting(str(exc), store, run_config.run_id, new_run=new_run, fresh_file=fresh_file, resume=resume)
    except OutageError as exc:  # past its budget: a provider or the store away, a full or read-only disk
        return _outage_exit(exc, resume, run_config.run_id, plan)
    except KeyboardInterrupt:
        return _interrupted(resume)
    finally:
        if policy.cache is not None:
            policy.cache.close()
    if wrong := policy.setting_failures():  # every dialogue failed fast before the watch stopped the run
        return _wrong_setting(wrong[0], store, run_config.run_id, new_run=new_run, fresh_file=fresh_file, resume=resume)
    return _print_summary(store, run_config.run_id, result, policy, pricing, cap, as_json=args.json, resume=resume)


@dataclass(frozen=True)
class _StoredRun:
    """A run the store already holds: its row and the status of each of its dialogues."""

    run: dict
    statuses: dict[str, str]

    def finished(self, plan: RunPlan) -> bool:
        """Every dialogue the run plans is stored as finished: there is nothing left to play."""
        from graph.playing import dialogue_thread_id, plan_dialogues

        jobs = plan_dialogues(plan.config, plan.seeds, plan.scripts_by_mode, list(plan.config.models.targets))
        return all(self.statuses.get(dialogue_thread_id(plan.config, *job)) == "finished" for job in jobs)


def _stored_run(location: DbLocation, run_id: str | None) -> _StoredRun | None:
    """The run ``--run-id`` names if the store holds it, read without writing (None: a new run, or no store yet)."""
    if not run_id or (isinstance(location, Path) and not location.exists()):
        return None
    try:
        with open_reader(location) as reader:
            run = reader.get_run(run_id)
            return None if run is None else _StoredRun(run, {d["thread_id"]: d["status"] for d in reader.dialogues(run_id)})
    except StoreError:  # not a store (yet): opening it for the run says what is wrong
        return None


def _reshow(location: DbLocation, run_id: str, stored: _StoredRun, pricing, *, as_json: bool) -> int:
    """A finished run given again: its summary from the store (every dialogue skipped this time), no model built or called."""
    from graph.playing import DialogueOutcome

    try:
        reader = open_reader(location)
    except StoreError as exc:
        fail(str(exc))
    with reader:
        summary = run_summary(reader, run_id, pricing=pricing, outcomes=[DialogueOutcome(t, "skipped") for t in stored.statuses])
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        render_summary(summary, console)
    return exit_status(summary)


def _play_run(args, server, config: RunConfig, plan: RunPlan, store, built, record: dict, policy, templates,
              location: DbLocation, *, pauses: PauseOptions, budget, outage, pricing=None):
    """Play the run here: in N child processes on one SQLite file (--processes), else on this process's event loop.
    Progress: rich's display on a terminal (not with --json or --quiet), plain lines in a log (not with --quiet)."""
    start, ceiling = _concurrency(config, built, policy)
    config = config.model_copy(update={"max_concurrency": ceiling})
    processes = _processes(args, server, config, built, plan.n_dialogues, start=start)
    quiet = args.json or args.quiet
    log = None
    if not args.quiet and not sys.stderr.isatty() and not args.interactive:
        log = {"run_id": config.run_id, "cost": _cost_so_far(location, config.run_id, pricing) if pricing else None}
    if processes > 1:
        return _play_in_processes(config, plan, store, record, processes, policy, templates, location,
                                  quiet=quiet, trace=not args.no_trace, log=log)
    slots = DialogueSlots(ceiling, policy.concurrency_allowed if policy.adapting else None)
    try:
        return asyncio.run(stop_on_wrong_setting(
            _play(config, plan, store, built, policy, templates, quiet=quiet, trace=not args.no_trace, pauses=pauses,
                  budget=budget, outage=outage, log=log, slots=slots), policy.setting_failures))
    finally:
        policy.stats.dialogues_at_once = slots.reached


def _concurrency(config: RunConfig, built, policy) -> tuple[int, int]:
    """(start, ceiling) of the dialogues played at once: --max-concurrency N (N, adapting only below it), else 16 up
    to 64 when every model is served, else 1 (the embedded model computes here: one at a time); served endpoints
    adapt (models/concurrency.py)."""
    from models.registry import computes_here

    models = [built.models.user, built.models.judge, *built.targets]
    served = not any(computes_here(m.spec, m.sampling) for m in models)
    if config.max_concurrency is not None:
        start = ceiling = config.max_concurrency
    else:
        start, ceiling = (START_CONCURRENCY, MAX_CONCURRENCY) if served else (1, 1)
    if served:
        policy.adapt_concurrency(start, ceiling)
    return start, ceiling


def _cost_so_far(location: DbLocation, run_id: str, pricing):
    """The run's cost so far, read from the store on a connection of its own (None if it cannot be read now)."""
    from checkpoints.readers import open_reader
    from evals.cost import run_usage

    def cost() -> float | None:
        try:
            with open_reader(location) as reader:
                return run_usage(reader, run_id).known_cost(pricing)
        except Exception:  # noqa: BLE001 - a busy or absent store: the line goes without it
            return None
    return cost


def _check(config: RunConfig, templates, *, as_json: bool) -> int:
    """--check: one tiny call per distinct model (no cache, one retry), a line each; 0 if every one answered, else 2."""
    import dataclasses

    policy = config.call_policy(None)
    policy.retry = dataclasses.replace(policy.retry, attempts=2)
    try:
        built = config.build_models(policy, templates=templates)
    except ModelBuildError as exc:
        fail(f"--{exc.role}-model: {exc.reason}")
    roles = [("user", built.models.user), ("judge", built.models.judge), *(("target", t) for t in built.targets)]
    checks = asyncio.run(check_models(roles))
    if as_json:
        sys.stdout.write(json.dumps([dataclasses.asdict(c) for c in checks], indent=2) + "\n")
    for c in checks:
        head = f"{'/'.join(c.roles)} {c.spec} ({c.endpoint}, {c.seconds:.1f} s)"
        line = Text(f"ok     {head}: {c.reply!r}" if c.ok else f"error  {head}: {c.error}", style="green" if c.ok else "red")
        (error_console if as_json or not c.ok else console).print(line, soft_wrap=True)
    return 0 if all(c.ok for c in checks) else EXIT_BAD_INPUT


def _stored_a_turn(location: DbLocation, run_id: str) -> bool:
    """In a player process: whether any process of the run stored a turn yet (its endpoints answered), read afresh."""
    try:
        with open_reader(location) as reader:
            return _answered_before(reader, run_id)
    except Exception:  # noqa: BLE001 - the store unreadable now: nothing says the endpoint answered
        return False


def _answered_before(store, run_id: str) -> bool:
    """Whether an earlier invocation of the run stored a turn (its endpoints answered then)."""
    rows = store.query("select 1 from turns t join dialogues d on d.thread_id = t.thread_id where d.run_id = ? limit 1", [run_id])
    return bool(rows)


def _wrong_setting(line: str, store, run_id: str, *, new_run: bool, fresh_file: bool, resume: str) -> int:
    """One line for an endpoint that never answered and refused as a wrong setting would; the run this command
    began is removed (and the file it created), so nothing is half-written; status 2."""
    if new_run:
        from checkpoints.deletion import delete_run

        delete_run(store, run_id, full=False)
        tail = "nothing was written"
    else:
        tail = f"the run is as it was; once corrected, resume with: {resume}"
    path = store.path
    store.close()
    if new_run and fresh_file and isinstance(path, Path):
        for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            leftover.unlink(missing_ok=True)
    error_console.print(Text(f"error: {line}; {tail}", style="red"), soft_wrap=True)
    return EXIT_BAD_INPUT


def _outage_exit(exc: OutageError, resume: str, run_id: str, plan: RunPlan) -> int:
    """One line: what stayed away past its budget (or a full or read-only disk), and the command that resumes; 75."""
    return outage_exit(exc, resume=resume, console=error_console, run_id=run_id, dialogues=plan.n_dialogues)


def _store_outage(server: PostgresURL | None, budget_s: float, policy) -> StoreOutage | None:
    """PostgreSQL: dialogues wait through a store outage of up to ``budget_s`` (checkpoints/store_outage.py)."""
    if server is None:
        return None
    outage = StoreOutage(server, budget_s=budget_s)
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)  # the pools' failed reconnections: the outage says it once
    # past the budget, what fails while the other dialogues stop is no news: the one line main prints says it
    outage.on_exceeded(lambda _: logging.disable(logging.CRITICAL))
    if policy.cache is not None:
        policy.cache.outage = outage
    return outage


def _pricing(config: RunConfig):
    """--pricing read and checked (None without it); --max-cost needs it."""
    pricing = pricing_option(config.pricing)
    if config.max_cost is not None and pricing is None:
        fail("--max-cost needs --pricing FILE (USD per million tokens per model spec; see examples/pricing.toml)")
    return pricing


def _check_priced(config: RunConfig, pricing) -> None:
    """--max-cost can only count what is priced: every model spec of the run needs a price."""
    chosen = config.models
    if config.max_cost is not None and (unpriced := pricing.missing([chosen.user, chosen.judge, *chosen.targets])):
        fail(f"--max-cost: {pricing.path} has no price for {', '.join(unpriced)}: add a table per spec with input and output")


def _interrupted(resume: str) -> int:
    """Ctrl+C: what is saved, and the command that resumes (the one given, with its run id)."""
    error_console.print(Text(f"Interrupted. Unfinished dialogues are saved. Resume with: {resume}", style="yellow"), soft_wrap=True)
    return 130


def _check_play_flags(args: argparse.Namespace, server: PostgresURL | None, config: RunConfig) -> None:
    """Flags only some ways of playing take: --enqueue and --wait need a PostgreSQL store and no flag that only works in
    this process (--wait alone a run id); --processes N needs one SQLite file, no pauses and no cost cap."""
    run_id = config.run_id
    if (args.enqueue or args.wait) and server is None:
        fail(f"--{'enqueue' if args.enqueue else 'wait'} needs a PostgreSQL database: --db postgresql://USER@HOST/DB or DYMT_ESB_DB")
    if args.enqueue and (args.interactive or args.pause_after or args.estimate):
        fail("--enqueue plays on workers: drop --interactive, --pause-after and --estimate")
    if args.wait and not args.enqueue and not run_id:
        fail("--wait needs --run-id R (the run enqueued with --enqueue)")
    _single_process(args, server, config)


def _estimate(plan: RunPlan, location: DbLocation, pricing, *, as_json: bool) -> int:
    """--estimate: the expected calls, tokens and cost, from the store's earlier runs where it has some."""
    chosen = plan.config.models
    roles = [("user", chosen.user), ("judge", chosen.judge), *(("target", t) for t in chosen.targets)]
    for role, spec_text in roles:
        try:
            parse_spec(spec_text)  # an estimate needs no key or package, but a real spec
        except ModelSpecError as exc:
            fail(f"--{role}-model: {exc}")
    if not isinstance(location, PostgresURL):
        try:
            check_db_path(location)  # the run itself leaves this to opening the store
        except StoreError as exc:
            fail(str(exc))
    print_estimate(_run_estimate(plan, location, pricing), console, as_json=as_json)
    return 0


def _run_estimate(plan: RunPlan, location: DbLocation, pricing) -> dict:
    """--estimate's numbers for the planned run (from the store's earlier runs where it has some)."""
    config, chosen = plan.config, plan.config.models
    roles = [("user", chosen.user), ("judge", chosen.judge), *(("target", t) for t in chosen.targets)]
    return run_estimate(
        location, user=chosen.user, judge=chosen.judge, targets=chosen.targets, dialogues_by_mode=plan.dialogues_by_mode,
        samples=config.samples, turns=config.turns, pricing=pricing,
        max_tokens={(role, spec_text): config.sampling_for(role, spec_text).max_tokens for role, spec_text in roles},
    )


def _dialogue_estimate(plan: RunPlan, location: DbLocation, pricing) -> float | None:
    """What one dialogue of the run is expected to cost (--estimate's total over its dialogues), for --max-cost."""
    estimate = _run_estimate(plan, location, pricing)
    return estimate["usd"] / estimate["dialogues"] if estimate.get("usd") is not None and estimate["dialogues"] else None


def _enqueue(plan: RunPlan, config: RunConfig, record: dict, store, policy, server: PostgresURL, pricing, *, wait: bool,
             as_json: bool, resume: str) -> int:
    """--enqueue: record the run and hand its dialogues to workers (and with --wait, follow them).

    A --max-cost travels with every job: workers start no new dialogue once the run's stored spend reaches it.
    """
    from graph.dialogue_jobs import dialogue_jobs, enqueue_run

    chosen = config.models
    budget = config.max_cost and budget_record(config.max_cost, pricing, [chosen.user, chosen.judge, *chosen.targets],
                                               estimate=_dialogue_estimate(plan, server, pricing))
    try:
        jobs = dialogue_jobs(config, plan.seeds, plan.scripts_by_mode, list(chosen.targets), budget=budget)
        queued = enqueue_run(server, store, record, jobs, plan.scripts_by_mode)
    except StoreError as exc:
        fail(str(exc))
    finally:
        if policy.cache is not None:
            policy.cache.close()
    error_console.print(f"run {config.run_id}: {queued.enqueued} dialogue(s) enqueued, {queued.already} already queued or finished; "
                        f"start workers with: python -m graph.worker --db {server}")
    return wait_for_run(server, config.run_id, as_json=as_json, resume=resume) if wait else 0


def wait_for_run(server: PostgresURL, run_id: str, *, as_json: bool, resume: str | None = None) -> int:
    """--wait: the progress of a run its workers play, then its summary (the queue's modules load only here)."""
    from cli.queue_progress import wait_for_run as follow

    return follow(server, run_id, as_json=as_json, resume=resume)


def _print_summary(store, run_id: str, result, policy, pricing, cap, *, as_json: bool, resume: str) -> int:
    """The run's summary, its exit status (0 all finished, 1 some not, 75 an outage past its budget) and how to resume."""
    calls = {"cache": policy.stats.cache_summary(enabled=policy.cache is not None), "retries": policy.stats.retry_summary(),
             "outages": policy.outage_summary(),
             "concurrency": {"dialogues_at_once": policy.stats.dialogues_at_once, "endpoints": policy.concurrency_summary()}}
    budget = cap.as_dict(held=sum(1 for o in result.outcomes if o.status == "held")) if cap is not None else None
    summary = run_summary(store, run_id, outcomes=result.outcomes, calls=calls, pricing=pricing, budget=budget)
    status = exit_status(summary, outages_past_budget=bool(policy.outages_past_budget()))
    if status != 0:
        summary["resume"] = resume + (f" --max-cost {2 * budget['max_usd']:g}" if budget and budget["held"] else "")
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        render_summary(summary, console)
    print_paused_hint(store, [o.thread_id for o in result.outcomes if o.status == "paused"], run_id=run_id)
    print_ending(summary, status, policy, error_console)
    return status


def _explicit_flags(argv: list[str] | None) -> set[str]:
    """Destinations of the flags given on the command line (they override the experiment file)."""
    shadow = build_parser()
    for action in shadow._actions:
        action.default = argparse.SUPPRESS
    given, _ = shadow.parse_known_args(argv)
    return set(vars(given))


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be 0 or more")
    return value


async def _play(config: RunConfig, plan: RunPlan, store, built, policy, templates, *, quiet: bool, trace: bool = True,
                pauses: PauseOptions | None = None, budget=None, outage=None, log=None, slots=None):
    def reseed(seed: int) -> tuple[Models, list[RoleModel]]:
        """The run's models drawing with another sampling seed (repeated samples)."""
        again = config.build_models(policy, seed=seed, templates=templates)
        return again.models, again.targets

    models = built.models
    async with open_checkpointer(store.path, outage=outage) as saver:
        graph = build_graph(saver)
        graph = pauses.configure(graph) if pauses else graph
        with _progress(quiet, plan.n_dialogues, config.turns, policy, log=log) as on_progress:
            scripts = plan.scripts_by_mode[config.mode] if len(config.modes) == 1 else None
            result = await execute_run(
                config, plan.seeds, graph=graph, store=store, models=models, on_progress=on_progress, scripts=scripts, trace=trace,
                targets=built.targets, reseed=reseed, budget=budget, outage=outage, slots=slots,
            )
        if pauses:  # dialogues stopped at an interrupt are paused; --interactive reviews them here
            review = terminal_review if pauses.interactive else None
            result = await settle_run(graph, store, result, models=models, sampling_seed=config.sampling_seed, review=review,
                                      leakage=config.leakage)
        return result


def _processes(args, server, config: RunConfig, built, n_dialogues: int, *, start: int) -> int:
    """How many processes play the run: ``--processes``, else one per core when every model is served elsewhere, one with
    the embedded model or when only one process can play it (graph/processes.py ``process_count``); never more than its
    dialogues or --max-concurrency. Outages past their budget and a full disk end it the same way either way (one line, exit 75)."""
    from graph.processes import process_count

    models = [built.models.user, built.models.judge, *built.targets]
    return process_count(args.processes, dialogues=n_dialogues, concurrency=start, models=models,
                         single=_single_process(args, server, config))


def _single_process(args, server, config: RunConfig) -> bool:
    """Runs that only one process can play: on PostgreSQL (workers do that there), paused or under a cost cap (a flag's
    or an experiment file's)."""
    single = server is not None or args.interactive or args.pause_after or config.max_cost is not None
    if args.processes is not None and args.processes > 1 and single:
        fail("--processes plays on one SQLite file without pauses or a cost cap: drop --interactive, --pause-after and "
             "--max-cost (or the experiment file's max_cost), or use a PostgreSQL --db with python -m graph.worker")
    return bool(single)


def _child_models(config: RunConfig, templates, location: DbLocation, *, answered_before: bool = False, adapt=None):
    """In a child process: the run's models, built afresh (their own HTTP clients, cache connection, rate gates)."""
    from graph.processes import ChildModels

    policy = config.call_policy(None if not config.cache else ResponseCache(location))
    if answered_before:
        policy.answered_before()
    policy.answered_elsewhere(lambda: _stored_a_turn(location, config.run_id))
    if adapt is not None:
        policy.adapt_concurrency(*adapt)  # the child takes its share (graph/processes.py)
    built = config.build_models(policy, templates=templates)

    def reseed(seed: int):
        again = config.build_models(policy, seed=seed, templates=templates)
        return again.models, again.targets
    return ChildModels(models=built.models, targets=built.targets, policy=policy, reseed=reseed)


def _play_in_processes(config: RunConfig, plan: RunPlan, store, record: dict, processes: int, policy, templates,
                       location: DbLocation, *, quiet: bool, trace: bool, log=None):
    """--processes N: the run's dialogues played in N child processes on one SQLite file, one progress display here."""
    from graph.processes import merge_call_stats, play_in_processes

    scripts = plan.scripts_by_mode[config.mode] if len(config.modes) == 1 else None
    with _progress(quiet, plan.n_dialogues, config.turns, policy, log=log) as on_progress:
        return play_in_processes(config, plan.seeds, record=record, store=store, processes=processes,
                                 setup=lambda: _child_models(config, templates, location, answered_before=policy.endpoints_answered_before,
                                                           adapt=policy.adapting), targets=list(config.models.targets),
                                 on_progress=on_progress, scripts=scripts, trace=trace,
                                 merge_stats=lambda counts: merge_call_stats(policy.stats, counts),
                                 mirror_outages=policy.mirror_outages)


@contextmanager
def _progress(quiet: bool, total: int, turns_per_dialogue: int, policy, *, log: dict | None = None):
    """The run's progress display (dialogues and turns, and any provider outage); yields the runner's progress callback.
    ``log`` (stderr not a terminal): plain lines instead (cli/progress_log.py), with its ``run_id`` and ``cost``."""
    if log is not None:
        from cli.progress_log import ProgressLog

        with ProgressLog(total=total, turns_per_dialogue=turns_per_dialogue, stream=sys.stderr, run_id=log["run_id"],
                         calls=lambda: sum(policy.stats.calls.values()), cost=log["cost"], outages=policy.outages,
                         mute=lambda: bool(policy.setting_failures())) as lines:
            yield lines.on_progress
        return
    progress = OutageProgress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=error_console,
        disable=quiet,
        transient=False,
        outages=policy.outages,
    )
    with progress:
        dialogues = progress.add_task("dialogues", total=total)
        turns = progress.add_task("turns", total=total * turns_per_dialogue)
        seen: dict[str, int] = {}

        def on_progress(event: str, thread_id: str, done: int) -> None:
            progress.advance(turns, done - seen.get(thread_id, 0))
            seen[thread_id] = done
            if event in ("finished", "failed", "skipped", "held"):
                progress.advance(dialogues)

        yield on_progress


def _new_run_id() -> str:
    return f"run-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


if __name__ == "__main__":
    raise SystemExit(main())
