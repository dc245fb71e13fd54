"""``python -m graph.run``: play a set of dialogues and print the bias summary.

With no flags: the embedded model in all three roles, one built-in seed per
category (6 dialogues), 5 turns, implicit mode. ``--config FILE`` reads an
experiment file (graph/experiment.py); flags given on the command line override it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import secrets
import sys
from datetime import datetime, timezone
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import prompts
from checkpoints.cache import ResponseCache
from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError, check_db_path, default_db_path
from checkpoints.redaction import redact_settings, strip_credentials
from checkpoints.saver import open_saver
from checkpoints.store import open_writer
from checkpoints.serde import UnsafeCheckpointError
from evals.cost import CostCap
from evals.summary import render_summary, run_summary
from graph.estimate import print_estimate, run_estimate
from graph.builder import build_graph
from graph.cli import ArgumentParser, console, error_console, fail, positive_int, pricing_option
from graph.context import Models
from graph.experiment import Experiment, ExperimentError, load_experiment
from graph.runner import RunConflictError, RunSpec, check_run_compatible, execute_run
from graph.modes import ALL_MODES, fixed_turns, scripts_for
from graph.pausing import PauseOptions, check_pause_options, settle_run
from graph.resume import print_paused_hint, terminal_review
from nodes.models import DEFAULT_SPEC, ModelSpecError, RoleModel, Sampling, create_role_model, parse_spec
from nodes.resilience import CallPolicy, RetryPolicy
from prompts import PromptTemplate
from seeds import CATEGORIES, SeedError, load_seeds

DEFAULT_TURNS = 5
ROLE_SAMPLING = {"user": (0.7, 250), "target": (0.7, 250), "judge": (0.0, 250)}


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
    p.add_argument("--rate-limit", action="append", default=[], metavar="NAME=RPM", help="requests per minute for a provider (openai=500) or a spec; repeatable")
    p.add_argument("--retries", type=_non_negative_int, default=None, help="retries of a model call on 429, 5xx, timeouts and connection errors (default 5)")
    p.add_argument("--request-timeout", type=_positive_float, default=None, metavar="SECONDS", help="seconds before a model call counts as timed out (default 120)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the response cache")
    p.add_argument("--db", type=Path, default=None, help=f"dialogue database (default {default_db_path()})")
    p.add_argument("--run-id", default=None, help="name the run; an existing id resumes it")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--no-trace", action="store_true", help="do not record model calls as traces (python -m graph.trace)")
    p.add_argument("--interactive", action="store_true", help="review each simulated user message before the target sees it: accept, edit, replace or quit")
    p.add_argument("--pause-after", type=positive_int, default=None, metavar="K", help="stop every dialogue after turn K (python -m graph.resume continues)")
    p.add_argument("--samples", type=positive_int, default=1, metavar="K", help="play every (seed, mode, target) K times, each with its own sampling seed (default 1)")
    p.add_argument("--pricing", type=Path, default=None, metavar="FILE", help="prices per model spec, USD per million tokens (TOML, see examples/pricing.toml): cost in the summary")
    p.add_argument("--estimate", action="store_true", help="print the expected model calls, tokens and cost, and exit without running")
    p.add_argument("--max-cost", type=_positive_float, default=None, metavar="USD", help="start no new dialogue once the run has spent this much (needs --pricing); rerun the run id to go on")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Everything is validated before the database is touched: bad input writes nothing.
    explicit = _explicit_flags(argv)
    experiment = _apply_experiment(args, explicit)
    modes = list(dict.fromkeys([args.mode] if isinstance(args.mode, str) else args.mode))
    for mode in modes:
        if mode not in ALL_MODES:
            fail(f"unknown --mode {mode!r}: use one of {', '.join(ALL_MODES)}")
    lengths = {fixed_turns(mode) or args.turns for mode in modes}
    if len(lengths) > 1:
        fail(f"modes {', '.join(modes)} have different numbers of turns: run the baselines in a run of their own")
    args.mode = modes[0]
    turns = fixed_turns(args.mode) or args.turns
    if fixed_turns(args.mode) and "turns" in explicit and args.turns != turns:
        fail(f"--mode {args.mode} always has {turns} turn(s): drop --turns")
    pauses = PauseOptions(interactive=args.interactive, pause_after=args.pause_after)
    if message := check_pause_options(modes=modes, turns=turns, interactive=args.interactive, pause_after=args.pause_after):
        fail(message)
    fairmt_dir = args.fairmt_dir or (args.seeds.removeprefix("fairmt:") if args.seeds.startswith("fairmt:") else None)
    for mode in modes:
        if mode.startswith("fairmt:") and not fairmt_dir:
            fail(f"--mode {mode} replays FairMT-Bench items: pass --fairmt-dir DIR (or --seeds fairmt:DIR)")
    per_category = args.per_category
    if per_category is None and args.seeds == "builtin":
        per_category = 1
    try:
        seeds = load_seeds(args.seeds, per_category=per_category, categories=args.categories, limit=args.limit, sample_seed=args.sample_seed)
    except SeedError as exc:
        fail(str(exc))
    if not seeds:
        fail(f"no seeds selected from {args.seeds}: check --categories and the seed file")
    scripts_by_mode = {}
    for mode in modes:
        try:
            scripts_by_mode[mode] = scripts_for(mode, seeds, fairmt_dir=fairmt_dir)
        except (SeedError, ValueError) as exc:
            fail(str(exc))
        if fixed_turns(mode) and not scripts_by_mode[mode][0]:
            fail(f"none of the {len(seeds)} seeds has an item in {mode}: choose other seeds or another track")
    scripts = scripts_by_mode[args.mode]
    try:
        db_path = check_db_path(args.db or default_db_path())
    except StoreError as exc:
        fail(str(exc))
    prompt_files = _prompt_files(args)
    pricing = pricing_option(args.pricing)
    if args.max_cost is not None and pricing is None:
        fail("--max-cost needs --pricing FILE (USD per million tokens per model spec; see examples/pricing.toml)")
    dialogues_by_mode = {
        mode: len(seeds) if not fixed_turns(mode) else sum(1 for s in seeds if s.id in scripts_by_mode[mode][0]) for mode in modes
    }
    target_specs = [args.target_model] if isinstance(args.target_model, str) else list(args.target_model)
    if args.estimate:
        roles = {"user": args.user_model, "judge": args.judge_model}
        for role, spec_text in [*roles.items(), *(("target", t) for t in target_specs)]:
            try:
                parse_spec(spec_text)  # an estimate needs no key or package, but a real spec
            except ModelSpecError as exc:
                fail(f"--{role}-model: {exc}")
        sampling_of = {
            (role, spec_text): _role_sampling(role, spec_text, args, experiment, cli_base_url="base_url" in explicit)
            for role, spec_text in [*roles.items(), *(("target", t) for t in target_specs)]
        }
        estimate = run_estimate(
            db_path, user=args.user_model, judge=args.judge_model, targets=target_specs, dialogues_by_mode=dialogues_by_mode,
            samples=args.samples, turns=turns, max_tokens={key: s.max_tokens for key, s in sampling_of.items()}, pricing=pricing,
        )
        print_estimate(estimate, console, as_json=args.json)
        return 0
    if args.max_cost is not None and (unpriced := pricing.missing([args.user_model, args.judge_model, *target_specs])):
        fail(f"--max-cost: {pricing.path} has no price for {', '.join(unpriced)}: add a table per spec with input and output")
    policy = _call_policy(args, experiment, db_path)
    models, targets, sampling = _build_models(args, experiment, policy, cli_base_url="base_url" in explicit)
    models, targets = _with_prompts(models, targets, prompt_files)
    run_id = args.run_id or _new_run_id()
    spec = RunSpec(
        run_id=run_id,
        mode=args.mode,
        turns=turns,
        seed_source=args.seeds,
        per_category=per_category,
        categories=args.categories,
        limit=args.limit,
        models={role: getattr(models, role).spec for role in ("user", "target", "judge")},
        model_ids={
            **{role: getattr(models, role).model_id for role in ("user", "target", "judge")},
            **({f"target:{t.spec}": t.model_id for t in targets} if len(targets) > 1 else {}),
        },
        sampling=_sampling_identity(sampling),
        sampling_seed=args.sampling_seed,
        max_concurrency=args.max_concurrency,
        fairmt_dir=fairmt_dir,
        modes=modes if len(modes) > 1 else None,
        targets=[t.spec for t in targets] if len(targets) > 1 else None,
        samples=args.samples,
        calls=_calls_record(policy, sampling, experiment) | ({"prompt_files": _prompt_files_record(prompt_files)} if prompt_files else {}),
        leakage=args.leakage,
        prompt_files={role: t.sha256 for role, t in prompt_files.items()} or None,
    )
    n_dialogues = len(targets) * args.samples * sum(dialogues_by_mode.values())
    cap = CostCap(args.max_cost, pricing, run_id, spec.models) if args.max_cost is not None else None

    def reseed(seed: int) -> tuple[Models, list[RoleModel]]:
        """The run's models drawing with another sampling seed (repeated samples)."""
        def again(model: RoleModel, role: str) -> RoleModel:
            return create_role_model(model.spec, role=role, sampling=dataclasses.replace(model.sampling, seed=seed), policy=policy)
        return (Models(user=again(models.user, "user"), target=again(models.target, "target"), judge=again(models.judge, "judge")),
                [again(t, "target") for t in targets])
    try:
        store = open_writer(db_path)
        check_run_compatible(store, spec)
    except (StoreError, SchemaTooNewError, RunConflictError) as exc:
        fail(str(exc))
    try:
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


def _apply_experiment(args: argparse.Namespace, explicit: set[str]) -> Experiment | None:
    """Fill every option not given as a flag from ``--config FILE``."""
    if args.config is None:
        return None
    try:
        experiment = load_experiment(args.config)
    except ExperimentError as exc:
        fail(str(exc))
    for dest, value in experiment.options.items():
        if dest not in explicit:
            setattr(args, dest, value)
    return experiment


def _call_policy(args: argparse.Namespace, experiment: Experiment | None, db_path: Path) -> CallPolicy:
    """Retries, rate limits and the response cache shared by every model of the run."""
    rate_limits = dict(experiment.rate_limits) if experiment else {}
    for item in args.rate_limit:
        name, sep, rpm = item.partition("=")
        try:
            value = float(rpm)
        except ValueError:
            value = -1.0
        if not sep or not name or value <= 0:
            fail(f"--rate-limit {item!r} is not NAME=RPM (for example openai=500 or openai:gpt-4o=60)")
        rate_limits[name] = value
    retry = dict(experiment.retry) if experiment else {}
    if args.retries is not None:
        retry["attempts"] = args.retries + 1
    if args.request_timeout is not None:
        retry["timeout"] = args.request_timeout
    cache = None if args.no_cache else ResponseCache(db_path)
    return CallPolicy(retry=RetryPolicy(**retry), rate_limits=rate_limits, cache=cache)


def _role_sampling(role: str, spec: str, args: argparse.Namespace, experiment: Experiment | None, *, cli_base_url: bool) -> Sampling:
    """Defaults ← the file's [sampling.ROLE] ← its [sampling."SPEC"]; ``base_url``/--base-url apply to openai: specs."""
    temperature, max_tokens = ROLE_SAMPLING[role]
    settings: dict = {"temperature": temperature, "max_tokens": max_tokens, "base_url": None, "extra": {}}
    openai_compatible = spec.startswith("openai:")
    if openai_compatible:
        settings["base_url"] = args.base_url
    for name in (role, spec):
        settings.update(experiment.sampling.get(name, {}) if experiment else {})
    if cli_base_url and openai_compatible:
        settings["base_url"] = args.base_url
    return Sampling(seed=args.sampling_seed, **settings)


def _build_models(args, experiment: Experiment | None, policy: CallPolicy, *, cli_base_url: bool) -> tuple[Models, list[RoleModel], dict[str, Sampling]]:
    """The user and judge models, and one model per target (the first stands in ``Models.target``)."""
    built: dict[str, RoleModel] = {}
    sampling: dict[str, Sampling] = {}
    targets: list[RoleModel] = []
    target_specs = [args.target_model] if isinstance(args.target_model, str) else list(args.target_model)
    if len(set(target_specs)) != len(target_specs):
        fail(f"--target-model lists a spec twice ({', '.join(target_specs)}): give each target once")
    for role, spec_text in [("user", args.user_model), ("judge", args.judge_model), *(("target", t) for t in target_specs)]:
        role_sampling = _role_sampling(role, spec_text, args, experiment, cli_base_url=cli_base_url)
        try:
            model = create_role_model(spec_text, role=role, sampling=role_sampling, policy=policy)
        except ModelSpecError as exc:
            fail(f"--{role}-model: {exc}")
        if role == "target":
            targets.append(model)
            sampling[role if len(target_specs) == 1 else f"target:{model.spec}"] = role_sampling
        else:
            built[role] = model
            sampling[role] = role_sampling
    if len(target_specs) > 1:
        sampling["target"] = _role_sampling("target", "", args, experiment, cli_base_url=cli_base_url)
    return Models(user=built["user"], target=targets[0], judge=built["judge"]), targets, sampling


def _prompt_files(args: argparse.Namespace) -> dict[str, PromptTemplate]:
    """--judge-prompt / --user-prompt / --target-prompt, read and checked before anything is written."""
    files = {}
    for role in ("judge", "user", "target"):
        path = getattr(args, f"{role}_prompt", None)
        if path is None:
            continue
        try:
            files[role] = prompts.load_file(Path(path), role=role)
        except prompts.PromptError as exc:
            fail(f"--{role}-prompt: {exc}")
    return files


def _with_prompts(models: Models, targets: list[RoleModel], files: dict[str, PromptTemplate]) -> tuple[Models, list[RoleModel]]:
    """The models with their role's prompt file attached (it replaces the built-in prompt)."""
    if not files:
        return models, targets
    attach = lambda role, m: dataclasses.replace(m, prompt=files[role]) if role in files else m  # noqa: E731
    targets = [attach("target", t) for t in targets]
    return Models(user=attach("user", models.user), target=targets[0], judge=attach("judge", models.judge)), targets


def _prompt_files_record(files: dict[str, PromptTemplate]) -> dict[str, dict[str, str]]:
    """Path, SHA-256 and text of each prompt file, stored with the run (re-judging reuses the judge's)."""
    return {role: {"path": str(Path(t.name).resolve()), "sha256": t.sha256, "text": t.source} for role, t in files.items()}


def _sampling_identity(sampling: dict[str, Sampling]) -> dict[str, dict]:
    """What a resumed run must share: temperature and max tokens per role (and extra arguments if any)."""
    record = {}
    for name, s in sampling.items():
        record[name] = {"temperature": s.temperature, "max_tokens": s.max_tokens}
        if s.extra:
            record[name]["extra"] = redact_settings(s.extra)
    return record


def _calls_record(policy: CallPolicy, sampling: dict[str, Sampling], experiment: Experiment | None) -> dict:
    """How the run called its models, stored with it (base URLs without credentials, no secrets)."""
    return {
        "config_file": str(experiment.path.resolve()) if experiment else None,
        "cache": policy.cache is not None,
        "retry": dataclasses.asdict(policy.retry),
        "rate_limits": dict(policy.rate_limits),
        "base_urls": {name: strip_credentials(s.base_url) for name, s in sampling.items() if s.base_url},
    }


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
    async with open_saver(store.path) as saver:
        graph = build_graph(saver)
        graph = pauses.configure(graph) if pauses else graph
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
            total = total or len(seeds)
            dialogues = progress.add_task("dialogues", total=total)
            turns = progress.add_task("turns", total=total * spec.turns)
            seen: dict[str, int] = {}

            def on_progress(event: str, thread_id: str, done: int) -> None:
                progress.advance(turns, done - seen.get(thread_id, 0))
                seen[thread_id] = done
                if event in ("finished", "failed", "skipped", "held"):
                    progress.advance(dialogues)

            result = await execute_run(
                spec, seeds, graph=graph, store=store, models=models, on_progress=on_progress, scripts=scripts, trace=trace,
                targets=targets, reseed=reseed, budget=budget,
            )
        if pauses:  # dialogues stopped at an interrupt are paused; --interactive reviews them here
            review = terminal_review if pauses.interactive else None
            result = await settle_run(graph, store, result, models=models, sampling_seed=spec.sampling_seed, review=review,
                                      leakage=spec.leakage)
        return result


def _new_run_id() -> str:
    return f"run-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


if __name__ == "__main__":
    raise SystemExit(main())
