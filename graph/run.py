"""``python -m graph.run``: play a set of dialogues and print the bias summary.

With no flags: the embedded model in all three roles, one built-in seed per
category (6 dialogues), 5 turns, implicit mode.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from datetime import datetime, timezone
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError, check_db_path, default_db_path
from checkpoints.saver import open_saver
from checkpoints.store import open_store
from evals.summary import render_summary, run_summary
from graph.builder import build_graph
from graph.cli import ArgumentParser, console, error_console, fail, positive_int
from graph.context import Models
from graph.runner import RunConflictError, RunSpec, check_run_compatible, execute_run
from graph.modes import ALL_MODES, fixed_turns, scripts_for
from nodes.models import DEFAULT_SPEC, ModelSpecError, RoleModel, Sampling, create_role_model
from seeds import CATEGORIES, SeedError, load_seeds

DEFAULT_TURNS = 5
ROLE_SAMPLING = {"user": (0.7, 250), "target": (0.7, 250), "judge": (0.0, 250)}


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.run", description=__doc__.splitlines()[0])
    p.add_argument("--mode", default="implicit", help=f"user mode: {', '.join(ALL_MODES)} (default implicit)")
    p.add_argument("--fairmt-dir", default=None, help="FairMT-Bench directory for fairmt:<track> modes (default: the DIR of --seeds fairmt:DIR)")
    p.add_argument("--turns", type=positive_int, default=DEFAULT_TURNS, help="turns per dialogue (default 5; 10 for late emergence)")
    p.add_argument("--seeds", default="builtin", help="builtin, FILE.jsonl (id, category, statement) or fairmt:DIR")
    p.add_argument("--per-category", type=positive_int, default=None, help="seeds sampled per category (default 1 for builtin, all otherwise)")
    p.add_argument("--categories", nargs="+", default=None, metavar="CAT", help=f"only these categories: {', '.join(CATEGORIES)}")
    p.add_argument("--limit", type=positive_int, default=None, help="at most N dialogues")
    p.add_argument("--sample-seed", type=int, default=0, help="random seed for sampling seeds per category (default 0)")
    for role in ("user", "target", "judge"):
        p.add_argument(f"--{role}-model", default=DEFAULT_SPEC, metavar="SPEC", help=f"{role} model spec (default {DEFAULT_SPEC})")
    p.add_argument("--base-url", default=None, help="base URL for openai: specs (an OpenAI-compatible server)")
    p.add_argument("--sampling-seed", type=int, default=0, help="seed for model sampling and utterance types (default 0)")
    p.add_argument("--max-concurrency", type=positive_int, default=1, help="dialogues played at once (default 1)")
    p.add_argument("--db", type=Path, default=None, help=f"dialogue database (default {default_db_path()})")
    p.add_argument("--run-id", default=None, help="name the run; an existing id resumes it")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Everything is validated before the database is touched: bad input writes nothing.
    if args.mode not in ALL_MODES:
        fail(f"unknown --mode {args.mode!r}: use one of {', '.join(ALL_MODES)}")
    turns = fixed_turns(args.mode) or args.turns
    if fixed_turns(args.mode) and "--turns" in (argv if argv is not None else sys.argv[1:]) and args.turns != turns:
        fail(f"--mode {args.mode} always has {turns} turn(s): drop --turns")
    fairmt_dir = args.fairmt_dir or (args.seeds.removeprefix("fairmt:") if args.seeds.startswith("fairmt:") else None)
    if args.mode.startswith("fairmt:") and not fairmt_dir:
        fail(f"--mode {args.mode} replays FairMT-Bench items: pass --fairmt-dir DIR (or --seeds fairmt:DIR)")
    per_category = args.per_category
    if per_category is None and args.seeds == "builtin":
        per_category = 1
    try:
        seeds = load_seeds(args.seeds, per_category=per_category, categories=args.categories, limit=args.limit, sample_seed=args.sample_seed)
    except SeedError as exc:
        fail(str(exc))
    if not seeds:
        fail(f"no seeds selected from {args.seeds}: check --categories and the seed file")
    try:
        scripts = scripts_for(args.mode, seeds, fairmt_dir=fairmt_dir)
    except (SeedError, ValueError) as exc:
        fail(str(exc))
    if fixed_turns(args.mode) and not scripts[0]:
        fail(f"none of the {len(seeds)} seeds has an item in {args.mode}: choose other seeds or another track")
    models = _build_models(args)
    try:
        db_path = check_db_path(args.db or default_db_path())
    except StoreError as exc:
        fail(str(exc))
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
        model_ids={role: getattr(models, role).model_id for role in ("user", "target", "judge")},
        sampling={role: {"temperature": t, "max_tokens": n} for role, (t, n) in ROLE_SAMPLING.items()},
        sampling_seed=args.sampling_seed,
        max_concurrency=args.max_concurrency,
        fairmt_dir=fairmt_dir,
    )
    try:
        store = open_store(db_path)
        check_run_compatible(store, spec)
    except (StoreError, SchemaTooNewError, RunConflictError) as exc:
        fail(str(exc))
    try:
        result = asyncio.run(_play(spec, seeds, store, models, quiet=args.json, scripts=scripts))
    except KeyboardInterrupt:
        error_console.print(
            f"[yellow]Interrupted.[/] Unfinished dialogues are saved. Resume with: "
            f"python -m graph.run --run-id {run_id} --db {db_path} (and the same settings)"
        )
        return 130
    summary = run_summary(store, run_id, outcomes=result.outcomes)
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        render_summary(summary, console)
    return 0


def _build_models(args) -> Models:
    built: dict[str, RoleModel] = {}
    for role, (temperature, max_tokens) in ROLE_SAMPLING.items():
        sampling = Sampling(temperature=temperature, max_tokens=max_tokens, seed=args.sampling_seed, base_url=args.base_url)
        try:
            built[role] = create_role_model(getattr(args, f"{role}_model"), role=role, sampling=sampling)
        except ModelSpecError as exc:
            fail(f"--{role}-model: {exc}")
    return Models(**built)


async def _play(spec: RunSpec, seeds, store, models: Models, *, quiet: bool, scripts=None):
    async with open_saver(store.path) as saver:
        graph = build_graph(saver)
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
            dialogues = progress.add_task("dialogues", total=len(seeds))
            turns = progress.add_task("turns", total=len(seeds) * spec.turns)
            seen: dict[str, int] = {}

            def on_progress(event: str, thread_id: str, done: int) -> None:
                progress.advance(turns, done - seen.get(thread_id, 0))
                seen[thread_id] = done
                if event in ("finished", "failed", "skipped"):
                    progress.advance(dialogues)

            return await execute_run(
                spec, seeds, graph=graph, store=store, models=models, on_progress=on_progress, scripts=scripts
            )


def _new_run_id() -> str:
    return f"run-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


if __name__ == "__main__":
    raise SystemExit(main())
