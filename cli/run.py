"""``python -m graph.run``: play a set of dialogues and print the bias summary.

With no flags: the embedded model in all three roles, one built-in seed per
category (6 dialogues), 5 turns, implicit mode. ``--config FILE`` reads an
experiment file (graph/experiment.py); flags given on the command line override it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from checkpoints.cache import ResponseCache
from checkpoints.location import PostgresURL, default_db, parse_db
from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError, check_db_path, default_db_path
from checkpoints.serde import UnsafeCheckpointError
from checkpoints.store import open_writer
from cli.common import ArgumentParser, console, error_console, fail, positive_int, pricing_option
from cli.estimate import print_estimate, run_estimate
from cli.resume import print_paused_hint, terminal_review
from cli.store_option import open_checkpointer
from evals.cost import CostCap
from evals.report.summary import render_summary, run_summary
from nodes.builder import build_graph
from graph.config import DEFAULT_TURNS, ConfigError, ModelBuildError, RunConfig
from nodes.context import Models
from graph.experiment import ExperimentError, load_experiment
from nodes.modes import ALL_MODES, fixed_turns, scripts_for
from graph.pausing import PauseOptions, check_pause_options, settle_run
from graph.playing import RunConflictError, RunSpec, check_run_compatible, execute_run
from models.registry import DEFAULT_SPEC, ModelSpecError, RoleModel, parse_spec
from seeds import CATEGORIES, SeedError, load_seeds



def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.run", description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=None, metavar="FILE", help="experiment file (TOML, see examples/); flags override it")
    p.add_argument("--mode", nargs="+", default=["implicit"], metavar="MODE", help=f"user mode(s): {', '.join(ALL_MODES)} (default implicit)")
    p.add_argument("--fairmt-dir", default=None, help="FairMT-Bench directory for fairmt:<track> modes (default: the DIR of --seeds fairmt:DIR)")
    p.add_argument("--turns", type=positive_int, default=DEFAULT_TURNS, help="turns per dialogue (default 5; 10 for late emergence)")
    p.add_argument("--seeds", default="builtin", help="builtin, FILE.jsonl (id, category, statement) or fairmt:DIR")
    p.add_argument("--per-category", type=positive_int, default=None, help="seeds sampled per category (default 1 for builtin, all otherwise)")
    p.add_argument("--categories", nargs="+", default=None, metavar="CAT", help=f"only these categories: {', '.join(CATEGORIES)}")
    p.add_argument("--limit", type=positive_int, default=None, help="at most N dialogues")
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
    p.add_argument("--max-concurrency", type=positive_int, default=1, help="dialogues played at once (default 1)")
    p.add_argument("--processes", type=positive_int, default=None, metavar="N",
                   help="play the dialogues in N processes on one SQLite file (default: one per core for remote models, "
                        "at most --max-concurrency; 1 for the embedded model, whose llama.cpp already uses every core)")
    p.add_argument("--rate-limit", action="append", default=[], metavar="NAME=RPM", help="requests per minute for a provider (openai=500) or a spec; repeatable")
    p.add_argument("--retries", type=_non_negative_int, default=None, help="retries of a model call on 429, 5xx, timeouts and connection errors (default 5)")
    p.add_argument("--request-timeout", type=_positive_float, default=None, metavar="SECONDS", help="seconds before a model call counts as timed out (default 120)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the response cache")
    p.add_argument("--db", default=None, help=f"dialogue database (default {default_db_path()})")
    p.add_argument("--run-id", default=None, help="name the run; an existing id resumes it")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--no-trace", action="store_true", help="do not record model calls as traces (python -m graph.trace)")
    p.add_argument("--interactive", action="store_true", help="review each simulated user message before the target sees it: accept, edit, replace or quit")
    p.add_argument("--pause-after", type=positive_int, default=None, metavar="K", help="stop every dialogue after turn K (python -m graph.resume continues)")
    p.add_argument("--samples", type=positive_int, default=1, metavar="K", help="play every (seed, mode, target) K times, each with its own sampling seed (default 1)")
    p.add_argument("--pricing", type=Path, default=None, metavar="FILE", help="prices per model spec, USD per million tokens (TOML, see examples/pricing.toml): cost in the summary")
    p.add_argument("--estimate", action="store_true", help="print the expected model calls, tokens and cost, and exit without running")
    p.add_argument("--enqueue", action="store_true", help="PostgreSQL --db: record the run and hand its dialogues to workers (python -m graph.worker) instead of playing them here")
    p.add_argument("--wait", action="store_true", help="PostgreSQL --db: show the progress of an enqueued run until its workers finish it, then its summary")
    p.add_argument("--max-cost", type=_positive_float, default=None, metavar="USD", help="start no new dialogue once the run has spent this much (needs --pricing); rerun the run id to go on")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Everything is validated before the database is touched: bad input writes nothing.
    explicit = _explicit_flags(argv)
    try:
        experiment = load_experiment(args.config) if args.config is not None else None
        config = RunConfig.from_flags(args, explicit=explicit, experiment=experiment)
    except (ExperimentError, ConfigError) as exc:
        fail(str(exc))
    server = _postgres_location(args.db, config.db)
    if (args.enqueue or args.wait) and server is None:
        fail(f"--{'enqueue' if args.enqueue else 'wait'} needs a PostgreSQL database: --db postgresql://USER@HOST/DB or DYMT_ESB_DB")
    if args.enqueue and (args.interactive or args.pause_after or args.max_cost is not None or args.estimate):
        fail("--enqueue plays on workers: drop --interactive, --pause-after, --max-cost and --estimate")
    if args.wait and not args.enqueue:
        if not config.run_id:
            fail("--wait needs --run-id R (the run enqueued with --enqueue)")
        from cli.queue_progress import wait_for_run

        return wait_for_run(server, config.run_id, as_json=args.json)
    modes = config.modes
    for mode in modes:
        if mode not in ALL_MODES:
            fail(f"unknown --mode {mode!r}: use one of {', '.join(ALL_MODES)}")
    lengths = {fixed_turns(mode) or config.turns for mode in modes}
    if len(lengths) > 1:
        fail(f"modes {', '.join(modes)} have different numbers of turns: run the baselines in a run of their own")
    turns = fixed_turns(config.mode) or config.turns
    if fixed_turns(config.mode) and "turns" in explicit and config.turns != turns:
        fail(f"--mode {config.mode} always has {turns} turn(s): drop --turns")
    pauses = PauseOptions(interactive=args.interactive, pause_after=args.pause_after)
    _single_process(args, server)  # a --processes that cannot be honoured fails before the database is touched
    if message := check_pause_options(modes=modes, turns=turns, interactive=args.interactive, pause_after=args.pause_after):
        fail(message)
    fairmt_dir = config.fairmt_source
    for mode in modes:
        if mode.startswith("fairmt:") and not fairmt_dir:
            fail(f"--mode {mode} replays FairMT-Bench items: pass --fairmt-dir DIR (or --seeds fairmt:DIR)")
    per_category = config.per_category
    if per_category is None and config.seeds == "builtin":
        per_category = 1
    try:
        seeds = load_seeds(config.seeds, per_category=per_category, categories=config.categories, limit=config.limit,
                           sample_seed=config.sample_seed)
    except SeedError as exc:
        fail(str(exc))
    if not seeds:
        fail(f"no seeds selected from {config.seeds}: check --categories and the seed file")
    scripts_by_mode = {}
    for mode in modes:
        try:
            scripts_by_mode[mode] = scripts_for(mode, seeds, fairmt_dir=fairmt_dir)
        except (SeedError, ValueError) as exc:
            fail(str(exc))
        if fixed_turns(mode) and not scripts_by_mode[mode][0]:
            fail(f"none of the {len(seeds)} seeds has an item in {mode}: choose other seeds or another track")
    scripts = scripts_by_mode[config.mode]
    try:
        db_path = server or check_db_path(config.db or default_db_path())
        templates = config.load_prompts()
    except (StoreError, ConfigError) as exc:
        fail(str(exc))
    pricing = pricing_option(config.pricing)
    if config.max_cost is not None and pricing is None:
        fail("--max-cost needs --pricing FILE (USD per million tokens per model spec; see examples/pricing.toml)")
    dialogues_by_mode = {
        mode: len(seeds) if not fixed_turns(mode) else sum(1 for s in seeds if s.id in scripts_by_mode[mode][0]) for mode in modes
    }
    chosen = config.models
    if args.estimate:
        roles = [("user", chosen.user), ("judge", chosen.judge), *(("target", t) for t in chosen.targets)]
        for role, spec_text in roles:
            try:
                parse_spec(spec_text)  # an estimate needs no key or package, but a real spec
            except ModelSpecError as exc:
                fail(f"--{role}-model: {exc}")
        estimate = run_estimate(
            db_path, user=chosen.user, judge=chosen.judge, targets=chosen.targets, dialogues_by_mode=dialogues_by_mode,
            samples=config.samples, turns=turns, pricing=pricing,
            max_tokens={(role, spec_text): config.sampling_for(role, spec_text).max_tokens for role, spec_text in roles},
        )
        print_estimate(estimate, console, as_json=args.json)
        return 0
    if config.max_cost is not None and (unpriced := pricing.missing([chosen.user, chosen.judge, *chosen.targets])):
        fail(f"--max-cost: {pricing.path} has no price for {', '.join(unpriced)}: add a table per spec with input and output")
    policy = config.call_policy(None if not config.cache else ResponseCache(db_path))
    try:
        built = config.build_models(policy, templates=templates)
    except ModelBuildError as exc:
        fail(f"--{exc.role}-model: {exc.reason}")
    models, targets = built.models, built.targets
    run_id = config.run_id or _new_run_id()
    spec = config.run_spec(built, policy, templates, run_id=run_id, turns=turns, per_category=per_category)
    n_dialogues = len(targets) * config.samples * sum(dialogues_by_mode.values())
    cap = CostCap(config.max_cost, pricing, run_id, spec.models) if config.max_cost is not None else None

    def reseed(seed: int) -> tuple[Models, list[RoleModel]]:
        """The run's models drawing with another sampling seed (repeated samples)."""
        again = config.build_models(policy, seed=seed, templates=templates)
        return again.models, again.targets
    try:
        store = open_writer(db_path)
        check_run_compatible(store, spec)
    except (StoreError, SchemaTooNewError, RunConflictError) as exc:
        fail(str(exc))
    if args.enqueue:
        from cli.queue_progress import wait_for_run
        from graph.dialogue_jobs import dialogue_jobs, enqueue_run

        targets_specs = [t.spec for t in targets]
        try:
            jobs = dialogue_jobs(spec, seeds, scripts_by_mode, targets_specs)
            queued = enqueue_run(server, store, spec, jobs, scripts_by_mode)
        except StoreError as exc:
            fail(str(exc))
        finally:
            if policy.cache is not None:
                policy.cache.close()
        error_console.print(f"run {run_id}: {queued.enqueued} dialogue(s) enqueued, {queued.already} already queued or finished; "
                            f"start workers with: python -m graph.worker --db {server}")
        if args.wait:
            return wait_for_run(server, run_id, as_json=args.json)
        return 0
    processes = _processes(args, server, config, chosen, n_dialogues, pauses)
    try:
        if processes > 1:
            result = _play_in_processes(spec, seeds, store, processes, quiet=args.json, scripts=scripts if len(modes) == 1 else None,
                                        trace=not args.no_trace, targets=[t.spec for t in targets], total=n_dialogues,
                                        policy=policy, setup=lambda: _child_models(config, templates, db_path))
        else:
            result = asyncio.run(_play(spec, seeds, store, models, quiet=args.json, scripts=scripts if len(modes) == 1 else None,
                                       trace=not args.no_trace, targets=targets, total=n_dialogues, pauses=pauses,
                                       reseed=reseed, budget=(cap.allows, cap.ended) if cap else None))
    except UnsafeCheckpointError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        error_console.print(
            f"[yellow]Interrupted.[/] Unfinished dialogues are saved. Resume with: "
            f"python -m graph.run --run-id {run_id} --db {db_path} (and the same settings)"
        )
        return 130
    finally:
        if policy.cache is not None:
            policy.cache.close()
    calls = {"cache": policy.stats.cache_summary(enabled=policy.cache is not None), "retries": policy.stats.retry_summary()}
    budget = None
    if cap is not None:
        budget = {"max_usd": cap.cap, "spent_usd": cap.spent(), "held": sum(1 for o in result.outcomes if o.status == "held")}
    summary = run_summary(store, run_id, outcomes=result.outcomes, calls=calls, pricing=pricing, budget=budget)
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        render_summary(summary, console)
    print_paused_hint(store, [o.thread_id for o in result.outcomes if o.status == "paused"], run_id=run_id)
    return 0


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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} must be more than 0")
    return value


async def _play(spec: RunSpec, seeds, store, models: Models, *, quiet: bool, scripts=None, trace: bool = True,
                targets: list[RoleModel] | None = None, total: int | None = None, pauses: PauseOptions | None = None,
                reseed=None, budget=None):
    async with open_checkpointer(store.path) as saver:
        graph = build_graph(saver)
        graph = pauses.configure(graph) if pauses else graph
        with _progress(quiet, total or len(seeds), spec.turns) as on_progress:
            result = await execute_run(
                spec, seeds, graph=graph, store=store, models=models, on_progress=on_progress, scripts=scripts, trace=trace,
                targets=targets, reseed=reseed, budget=budget,
            )
        if pauses:  # dialogues stopped at an interrupt are paused; --interactive reviews them here
            review = terminal_review if pauses.interactive else None
            result = await settle_run(graph, store, result, models=models, sampling_seed=spec.sampling_seed, review=review,
                                      leakage=spec.leakage)
        return result


def _processes(args, server, config, chosen, n_dialogues: int, pauses: PauseOptions) -> int:
    """How many processes play the run: ``--processes``, else the default (graph.processes.default_processes)."""
    from graph.processes import default_processes

    if args.processes is not None:
        return args.processes
    if _single_process(args, server):
        return 1
    return default_processes([chosen.user, chosen.judge, *chosen.targets], max_concurrency=config.max_concurrency,
                             dialogues=n_dialogues)


def _single_process(args, server) -> bool:
    """Runs that only one process can play: on PostgreSQL (workers do that there), paused or under a cost cap."""
    single = server is not None or args.interactive or args.pause_after or args.max_cost is not None
    if args.processes is not None and args.processes > 1 and single:
        fail("--processes plays on one SQLite file without pauses or a cost cap: drop --interactive, --pause-after and "
             "--max-cost, or use a PostgreSQL --db with python -m graph.worker")
    return bool(single)


def _child_models(config, templates, db_path):
    """In a child process: the run's models, built afresh (their own HTTP clients, cache connection, rate gates)."""
    from graph.processes import ChildModels

    policy = config.call_policy(None if not config.cache else ResponseCache(db_path))
    built = config.build_models(policy, templates=templates)

    def reseed(seed: int):
        again = config.build_models(policy, seed=seed, templates=templates)
        return again.models, again.targets
    return ChildModels(models=built.models, targets=built.targets, policy=policy, reseed=reseed)


def _play_in_processes(spec: RunSpec, seeds, store, processes: int, *, quiet: bool, scripts, trace: bool, targets: list[str],
                       total: int, policy, setup):
    from graph.processes import merge_call_stats, play_in_processes

    with _progress(quiet, total, spec.turns) as on_progress:
        return play_in_processes(spec, seeds, store=store, processes=processes, setup=setup, targets=targets,
                                 on_progress=on_progress, scripts=scripts, trace=trace,
                                 merge_stats=lambda counts: merge_call_stats(policy.stats, counts))


@contextmanager
def _progress(quiet: bool, total: int, turns_per_dialogue: int):
    """The run's progress display (dialogues and turns); yields the runner's progress callback."""
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=error_console,
        disable=quiet,
        transient=False,
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


def _postgres_location(flag: str | None, configured: Path | None) -> PostgresURL | None:
    """The PostgreSQL server a postgresql:// --db or DYMT_ESB_DB names (None for a SQLite file); a password in it is refused."""
    try:
        location = parse_db(flag) if flag is not None else (configured or default_db())
    except StoreError as exc:
        fail(str(exc))
    return location if isinstance(location, PostgresURL) else None


def _new_run_id() -> str:
    return f"run-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


if __name__ == "__main__":
    raise SystemExit(main())
