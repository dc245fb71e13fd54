"""``python -m graph.branch``: fork a stored dialogue before turn K, change one thing, and play it on.

    python -m graph.branch THREAD --turn K CHANGE [--turns N] [--name SET]
    python -m graph.branch --run-id R --turn K CHANGE [--name SET]     (every dialogue of run R;
                                                                       with --swap, those whose seed mentions a term)

CHANGE is one of --user-message TEXT, --swap OLD=NEW (repeatable), --target-model SPEC,
--judge-model SPEC, --mode MODE, --seed-statement TEXT, or --rerun (same settings, a new
sampling seed). Turns 1..K-1 are copied from the parent, never regenerated; the parent is not
touched. Prints each new branch id (a thread id) on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shlex
import secrets
import sys

from rich.text import Text


from checkpoints.ids import branch_thread_id, new_run_id
from checkpoints.store import Writer
from checkpoints.vocabulary import iter_label_strings
from checkpoints.serde import UnsafeCheckpointError
from nodes.builder import build_graph
from cli.common import ArgumentParser, error_console, fail, positive_int
from cli.store_option import add_db_option, open_checkpointer, write_store
from graph.running.forking import (
    BranchRun,
    Change,
    ForkError,
    build_settings,
    change_record,
    plan_branch,
    play_branches,
    read_lineage,
)
from graph.running.swaps import check_swaps, mentions, parse_swap
from nodes.modes import DYNAMIC_MODES


def _swap_arg(text: str) -> tuple[str, str]:
    try:
        return parse_swap(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.branch", description=__doc__.splitlines()[0])
    p.add_argument("thread", nargs="?", metavar="THREAD", help="the dialogue to branch (a thread id; a branch id works too)")
    p.add_argument("--run-id", default=None, help="branch every dialogue of this run instead (with --swap: those whose seed mentions OLD)")
    p.add_argument("--turn", type=positive_int, required=True, metavar="K", help="fork just before turn K's user message")
    change = p.add_mutually_exclusive_group(required=True)
    change.add_argument("--user-message", metavar="TEXT", help="send TEXT as turn K's user message")
    change.add_argument("--swap", action="append", type=_swap_arg, metavar="OLD=NEW",
                        help="swap a group term (whole words, case kept) in the seed and turn K's message; repeatable")
    change.add_argument("--target-model", metavar="SPEC", help="play turns K.. against another target model")
    change.add_argument("--judge-model", metavar="SPEC", help="label turns K.. with another judge model")
    change.add_argument("--mode", help=f"continue in another user mode ({' or '.join(DYNAMIC_MODES)})")
    change.add_argument("--seed-statement", metavar="TEXT", help="continue with another hidden seed statement")
    change.add_argument("--rerun", action="store_true", help="change nothing: re-sample turns K.. with a new sampling seed")
    p.add_argument("--turns", type=positive_int, default=None, metavar="N", help="turns in the branch (default the parent's)")
    p.add_argument("--name", default=None, metavar="SET", help="group the new branches as counterfactual set SET (python -m graph.compare --set SET)")
    p.add_argument("--sampling-seed", type=int, default=None, help="sampling seed of the branch (default the parent run's; --rerun draws a new one)")
    p.add_argument("--base-url", default=None, help="base URL for openai: specs (if the parent run used one)")
    add_db_option(p)
    p.add_argument("--json", action="store_true", help="print what was made as JSON on stdout")
    return p


def _change(args: argparse.Namespace) -> Change:
    if args.user_message is not None:
        return Change("user_message", user_message=args.user_message)
    if args.swap:
        return Change("swap", swaps=tuple(args.swap))
    if args.target_model is not None:
        return Change("target_model", model=args.target_model)
    if args.judge_model is not None:
        return Change("judge_model", model=args.judge_model)
    if args.mode is not None:
        return Change("mode", mode=args.mode)
    if args.seed_statement is not None:
        return Change("seed_statement", seed_statement=args.seed_statement)
    return Change("rerun")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Everything is checked before the first write: bad input leaves the database as it was.
    if (args.thread is None) == (args.run_id is None):
        fail("give the THREAD to branch, or --run-id R to branch every dialogue of a run (not both)")
    try:
        check_swaps(args.swap or ())
    except ValueError as exc:
        fail(str(exc))
    change = _change(args)
    if change.kind == "mode" and args.mode not in DYNAMIC_MODES:
        fail(f"unknown --mode {args.mode!r}: a branch continues with a simulated user, {' or '.join(DYNAMIC_MODES)}")
    if args.name is not None and not re.fullmatch(r"[\w.:@=+-]+", args.name):
        fail(f"--name {args.name!r}: use letters, digits and . : @ = + - _ (no spaces)")
    store = write_store(args.db)
    db_path = store.path
    if args.name and store.get_set(args.name):
        fail(f"counterfactual set {args.name!r} already exists in {db_path}: choose another --name")
    parents = _parents(store, args, change)
    models = {d.get("target") for d in parents}
    if len(models) > 1:
        fail(f"run {args.run_id} played several targets ({', '.join(sorted(map(str, models)))}): branch them one thread at a time")
    sampling_seed = args.sampling_seed
    if sampling_seed is None and change.kind == "rerun":
        sampling_seed = secrets.randbelow(2**31)
    try:
        settings = build_settings(
            store, parents[0], overrides={change.role: change.model} if change.role else None,
            sampling_seed=sampling_seed, base_url=args.base_url,
        )
    except ForkError as exc:
        fail(str(exc))
    set_name = args.name or (_default_set_name(store, args, change) if args.run_id else None)
    try:
        made, skipped = asyncio.run(_branch(store, parents, change, args, settings, set_name))
    except ForkError as exc:
        fail(str(exc))
    except UnsafeCheckpointError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        where = shlex.quote(str(store.path))
        error_console.print(Text(f"Interrupted. A branch that started is saved: python -m graph.replay --list --db {where} lists it, "
                                 f"python -m graph.resume BRANCH --db {where} continues it", style="yellow"))
        return 130
    _report(store, made, skipped, as_json=args.json)
    return 0


def _parents(store: Writer, args: argparse.Namespace, change: Change) -> list[dict]:
    """The dialogues to branch: one thread, or a run's dialogues (those mentioning a swapped term)."""
    if args.thread is not None:
        row = store.get_dialogue(args.thread)
        if row is None:
            fail(f"no dialogue {args.thread!r} in {store.path}: check the thread id (python -m graph.replay --list --db {shlex.quote(str(store.path))})")
        return [row]
    if store.get_run(args.run_id) is None:
        fail(f"no run {args.run_id!r} in {store.path}: check the run id")
    rows = store.dialogues(args.run_id)
    if change.kind == "swap":
        rows = [r for r in rows if mentions(r["statement"] or "", (old for old, _ in change.swaps))]
        if not rows:
            terms = ", ".join(old for old, _ in change.swaps)
            fail(f"no dialogue of run {args.run_id} has a seed that mentions {terms}: check the --swap terms")
    if not rows:
        fail(f"run {args.run_id} has no dialogues")
    return rows


def _default_set_name(store: Writer, args: argparse.Namespace, change: Change) -> str:
    what = "+".join(f"{old}={new}" for old, new in change.swaps) if change.swaps else change.kind
    name = re.sub(r"[^\w.:@=+-]", "_", f"{args.run_id}-t{args.turn}-{what}")
    while store.get_set(name):
        name = f"{name.rsplit('~', 1)[0]}~{secrets.token_hex(2)}"
    return name


async def _branch(store: Writer, parents: list[dict], change: Change, args: argparse.Namespace, settings, set_name: str | None):
    record = change_record(change, settings, set_name=set_name)
    taken: set[str] = set()
    async with open_checkpointer(store.path) as saver:
        graph = build_graph(saver)
        plans, skipped = [], []
        for parent in parents:
            try:
                fork = (await read_lineage(graph, parent["thread_id"])).fork_point(args.turn)
                branch_id = branch_thread_id(parent["thread_id"], args.turn)
                while branch_id in taken or store.get_dialogue(branch_id):
                    branch_id = branch_thread_id(parent["thread_id"], args.turn)
                taken.add(branch_id)
                plans.append(plan_branch(fork, parent, change, turns=args.turns, branch_id=branch_id, record=record))
            except ForkError as exc:
                if args.thread is not None:
                    raise
                skipped.append((parent["thread_id"], str(exc)))
        if not plans:
            raise ForkError(f"no dialogue of run {args.run_id} can be branched so: {skipped[0][1]}")

        def on_progress(event: str, thread_id: str, done: int) -> None:
            if event in ("finished", "failed") and not args.json:
                labels = " ".join(iter_label_strings(store.labels(thread_id)))
                error_console.print(Text.assemble((f"{event:>8} ", "green" if event == "finished" else "red"), thread_id, "  ", labels))

        made = await play_branches(plans, graph=graph, store=store, settings=settings, run_id=new_run_id("branch"),
                                   set_name=set_name, notify=on_progress)
    return made, skipped


def _report(store: Writer, made: BranchRun, skipped: list[tuple[str, str]], *, as_json: bool) -> None:
    rows = []
    for plan, outcome in zip(made.plans, made.outcomes):
        rows.append({
            "thread_id": plan.branch_id,
            "parent_thread_id": plan.fork.thread_id,
            "fork_turn": plan.fork.turn,
            "fork_checkpoint_id": plan.fork.checkpoint_id,
            "status": outcome.status,
            "error": outcome.error,
            "labels": store.labels(plan.branch_id),
            "change": plan.change,
        })
    if as_json:
        payload = {"run_id": made.run_id, "set": made.set_name, "branches": rows,
                   "skipped": [{"thread_id": t, "reason": r} for t, r in skipped]}
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return
    for row in rows:
        sys.stdout.write(row["thread_id"] + "\n")
    for thread_id, reason in skipped:
        error_console.print(Text(f"skipped {thread_id}: {reason}", style="yellow"))
    failed = [r for r in rows if r["status"] != "finished"]
    for r in failed:
        error_console.print(Text(f"branch {r['thread_id']} {r['status']}: {r['error'] or ''} (continue it with python -m graph.resume {r['thread_id']} --db {shlex.quote(str(store.path))})", style="red"))
    error_console.print(Text(f"run {made.run_id}: {len(rows)} branch{'es' if len(rows) != 1 else ''} at turn {rows[0]['fork_turn']}", style="dim"))
    if made.set_name:
        error_console.print(Text(f"set {made.set_name}: compare with python -m graph.compare --set {made.set_name} --db {shlex.quote(str(store.path))}"))


if __name__ == "__main__":
    raise SystemExit(main())
