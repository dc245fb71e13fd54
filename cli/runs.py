"""``python -m graph.runs``: list the runs in a database, follow one's status, export or delete one, or clear the
response cache."""

from __future__ import annotations

import shlex
import sqlite3
import sys
from pathlib import Path

from rich.table import Table
from rich.text import Text

from checkpoints.chat_export import iter_chat_records, to_jsonl
from checkpoints.deletion import clear_cache, delete_run
from checkpoints.location import PostgresURL
from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreDamaged, StoreError, verify_intact
from checkpoints.vocabulary import PRIMARY_LABELS
from cli.common import ArgumentParser, console, error_console, fail, positive_float, pricing_option
from cli.labelling import write_atomic
from cli.store_option import add_db_option, add_no_backup_option, chosen_db, read_store, store_errors, write_store
from viewer.render import displayable

EXPORT_FORMATS = ("chat",)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.runs", description=" ".join(__doc__.split("\n\n")[0].split()))
    sub = p.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="runs with their status and dialogue counts")
    delete = sub.add_parser(
        "delete",
        help="delete a run and every row it owns (dialogues and their branches, turns, labels, checkpoints, traces, "
        "its cached replies, label and branch sets, its jobs) in one transaction, then vacuum (on PostgreSQL VACUUM "
        "FULL, which locks each table while it runs); a run that is playing is refused unless --force",
    )
    delete.add_argument("run_id", nargs="?", default=None, help="the run (not with --orphans)")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.add_argument(
        "--force",
        action="store_true",
        help="stop whatever plays the run first: a graph.run on this machine gets SIGTERM (it stops as on Ctrl-C), "
        "workers abort its dialogues",
    )
    delete.add_argument(
        "--orphans",
        action="store_true",
        help="delete instead the rows no run owns (left by a run deleted while it played, with an older version); "
        "python -m graph.runs check lists them",
    )
    check = _check_parser(sub)
    clear = sub.add_parser("clear-cache", help="empty the response cache (it holds model replies too)")
    export = sub.add_parser(
        "export", help="write a run's dialogues as JSON lines (--out), or copy the run into a new SQLite file (--to)"
    )
    export.add_argument("run_id")
    export.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        default="chat",
        help="chat: OpenAI-style messages plus per-turn labels and metadata",
    )
    where = export.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, metavar="FILE.jsonl", help="file to write (owner-only)")
    where.add_argument(
        "--to",
        type=Path,
        metavar="FILE.db",
        help="new SQLite file to copy the run into, checkpoints and traces "
        "included, for offline replay and reports (owner-only)",
    )
    export.add_argument(
        "--show-seed",
        "--include-seed",
        dest="include_seed",
        action="store_true",
        help="write the seed statement (masked by default)",
    )
    export.add_argument("--label-set", default=PRIMARY_LABELS, help="bias labels to include (default primary)")
    status = sub.add_parser(
        "status",
        help="a run's progress, ETA, failures, cost and bias rates so far; read-only, so a run "
        "in progress is not disturbed",
    )
    status.add_argument("run_id")
    status.add_argument(
        "--watch",
        type=positive_float,
        nargs="?",
        const=10.0,
        default=None,
        metavar="SECONDS",
        help="refresh every SECONDS (default 10) until the run stops playing (Ctrl-C leaves)",
    )
    status.add_argument(
        "--pricing", default=None, metavar="FILE", help="prices per model spec (examples/pricing.toml): the cost so far"
    )
    status.add_argument("--json", action="store_true", help="print the status as JSON on stdout")
    add_db_option(p, listing, delete, check, clear, export, status)
    add_no_backup_option(delete, clear)
    return p


def _check_parser(sub) -> ArgumentParser:
    """``check`` and its ``--repair``."""
    check = sub.add_parser(
        "check",
        help="check a SQLite file is intact, or a PostgreSQL store's tables, columns and indexes against its schema "
        "(invalid indexes; with the server's amcheck installed, B-tree indexes and tables): exit 2 with one line per "
        "finding and its fix; then list the rows no run owns and the runs whose player is gone (read-only; exit 1 "
        "if there are orphans)",
    )
    check.add_argument(
        "--repair",
        action="store_true",
        help="PostgreSQL: put back the tables, columns and indexes its schema lacks (empty) and rebuild its invalid "
        "indexes, then check again",
    )
    return check


@store_errors("graph.runs")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "status":
        return _status(args)
    if args.command == "export":
        return _copy(args) if args.to is not None else _export(args)
    if args.command == "list":
        return _list(args)
    if args.command == "check":
        return _check(args)
    if args.command == "delete" and (args.orphans == (args.run_id is not None)):
        fail("graph.runs delete takes a run id, or --orphans (the rows no run owns): one of the two")
    try:
        store = write_store(args.db)
    except (StoreError, SchemaTooNewError) as exc:
        fail(str(exc))
    if args.command == "clear-cache":
        console.print(f"removed {clear_cache(store)} cached replies")
        return 0
    if args.orphans:
        return _delete_orphans(store, yes=args.yes)
    return _delete(store, args)


def _delete(store, args) -> int:
    """Delete one run: refused while it plays, unless --force stops its players first."""
    from checkpoints.deletion import RunPlaying
    from checkpoints.players import activity
    from graph.running.stopping import CannotStop, stop_players

    where = shlex.quote(str(store.path))
    if store.get_run(args.run_id) is None:
        fail(f"no run {args.run_id!r} in {store.path}: see python -m graph.runs list --db {where}")
    who = activity(store.db, args.run_id)
    if who.playing and not args.force:
        fail(
            f"run {args.run_id} is playing ({who.who()}): stop it first, or delete it with --force, which stops it "
            f"(python -m graph.runs delete {shlex.quote(args.run_id)} --force --db {where})"
        )
    threads = store.threads_of_run(args.run_id)
    stopping = f", stopping {who.who()} first" if who.playing else ""
    question = f"Delete run {args.run_id} and {len(threads)} dialogues (branches included){stopping}?"
    if not _confirmed(question, args.yes):
        console.print("nothing deleted")
        return 1
    if who.playing or who.queued:
        try:
            stopped = stop_players(chosen_db(args.db), args.run_id)
        except CannotStop as exc:
            fail(f"{exc}; nothing deleted")
        console.print(Text(f"stopped {stopped.words()}"), soft_wrap=True)
    full = _announce_vacuum(store.path)
    try:
        counts = delete_run(store, args.run_id, full=full)
    except RunPlaying as exc:  # a player started meanwhile
        fail(f"{exc}: nothing deleted; stop it, or delete again with --force")
    console.print(
        Text(f"deleted run {args.run_id}: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v)), soft_wrap=True
    )
    return 0


def _delete_orphans(store, *, yes: bool) -> int:
    """Delete the rows no run owns, after saying what they are."""
    from checkpoints.deletion import delete_orphans, find_orphans

    found = find_orphans(store.db)
    if not found.total:
        console.print(f"no orphaned rows in {store.path}")
        return 0
    if not _confirmed(f"Delete {found.total} rows no run owns ({found.words()})?", yes):
        console.print("nothing deleted")
        return 1
    deleted = delete_orphans(store, full=_announce_vacuum(store.path))
    console.print(Text(f"deleted rows no run owns: {deleted.words()}"), soft_wrap=True)
    return 0


def _check(args) -> int:
    """Rows no run owns and runs whose player is gone, read-only; 1 if there are orphans."""
    from checkpoints.deletion import find_orphans, unowned_cache_entries

    location = chosen_db(args.db)
    if isinstance(location, PostgresURL):
        if (status := _check_postgres(location, repair=args.repair)) is not None:
            return status
    elif args.repair:
        fail("--repair is for a PostgreSQL store: a damaged SQLite file is recovered with sqlite3 FILE '.recover'")
    try:
        reader = read_store(location)
    except StoreError as exc:
        fail(str(exc))
    with reader:
        if isinstance(reader.conn, sqlite3.Connection) and not isinstance(reader.path, PostgresURL):
            try:
                verify_intact(reader.conn, Path(reader.path))
            except StoreDamaged as exc:
                fail(str(exc))
        where = shlex.quote(str(reader.path))
        found = find_orphans(reader.db)
        unowned = unowned_cache_entries(reader.db)
        gone = [run["id"] for run in reader.runs() if _state(reader, run["id"]) == "interrupted"]
    if found.total:
        console.print(
            Text(
                f"{found.total} rows no run owns ({found.words()}): delete them with python -m graph.runs delete "
                f"--orphans --db {where}",
                style="yellow",
            ),
            soft_wrap=True,
        )
    else:
        console.print(f"no orphaned rows in {reader.path}")
    if unowned:
        console.print(
            Text(
                f"{unowned} cached replies were stored without their run (before runs were recorded with them): "
                f"python -m graph.runs clear-cache --db {where} removes every cached reply",
                style="dim",
            ),
            soft_wrap=True,
        )
    for run_id in gone:
        console.print(
            Text(
                f"run {run_id} is interrupted (nothing plays it): resume it with python -m graph.run --run-id "
                f"{run_id} --db {where}, or delete it",
                style="dim",
            ),
            soft_wrap=True,
        )
    return 1 if found.total else 0


def _check_postgres(url: PostgresURL, *, repair: bool) -> int | None:
    """The store's layout, indexes and (with amcheck) pages: one line per finding and its fix, exit 2; None if sound."""
    from checkpoints.postgres.integrity import check_store, repair_layout

    if repair:
        try:
            done = repair_layout(url)
        except SchemaTooNewError as exc:
            fail(str(exc))
        for line in done:
            console.print(Text(line), soft_wrap=True)
    report = check_store(url)
    for note in report.notes:
        console.print(Text(note, style="dim"), soft_wrap=True)
    for finding in report.findings:
        error_console.print(Text(f"error: {finding.line()}", style="red"), soft_wrap=True)
    return 2 if report.findings else None


def _confirmed(question: str, yes: bool) -> bool:
    """--yes, or the person at the terminal says yes; off a terminal without --yes: one line and exit 2."""
    if yes:
        return True
    if not sys.stdin.isatty():
        fail(f"{question} Not on a terminal to ask: pass --yes")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _status(args) -> int:
    """The run's status through the read-only reader; ``--watch`` redraws it until the run stops playing."""
    import json
    import time

    from rich.live import Live

    from evals.report.status import render_status, run_status

    pricing = pricing_option(args.pricing)
    location = chosen_db(args.db)

    def read() -> dict:
        try:
            reader = read_store(location)
        except StoreError as exc:
            fail(str(exc))
        with reader:
            planned = _queued(location, args.run_id, reader)
            found = run_status(reader, args.run_id, pricing=pricing, planned=planned)
            if found is None:
                fail(f"no run {args.run_id!r} in {reader.path}: see python -m graph.runs list")
            return found

    status = read()
    if args.json:
        print(json.dumps(status, indent=2, default=str))
        return 0
    if args.watch is None:
        console.print(render_status(displayable(status)), soft_wrap=True)  # a printed command is never wrapped
        return 0
    try:
        with Live(render_status(displayable(status)), console=console, auto_refresh=False) as live:
            while status["state"] in ("playing", "queued"):
                time.sleep(args.watch)
                status = read()
                live.update(render_status(displayable(status)), refresh=True)
    except KeyboardInterrupt:
        return 0
    return 0


def _queued(location: object, run_id: str, reader) -> int | None:
    """An enqueued run (PostgreSQL) from before plans were recorded: its jobs are its plan."""
    if not isinstance(location, PostgresURL) or (reader.get_run(run_id) or {}).get("config", {}).get(
        "planned_dialogues"
    ):
        return None
    from graph.workers.dialogue_jobs import job_counts

    return sum(job_counts(location, run_id).values()) or None


def _announce_vacuum(location: object) -> bool:
    """On PostgreSQL, say that the emptied tables are rewritten (VACUUM FULL) and what that means; True."""
    if isinstance(location, PostgresURL):
        console.print(
            Text(
                "VACUUM FULL of the tables the deletion leaves: each is locked while it is rewritten, so workers "
                "of other runs wait until it ends",
                style="dim",
            )
        )
    return True


def _list(args) -> int:
    """Runs with their status and dialogue counts, read through the read-only reader."""
    try:
        reader = read_store(args.db)
    except StoreError as exc:
        fail(str(exc))
    with reader:
        counts = reader.dialogue_counts()
        table = Table(title=Text(str(reader.path)))
        for column in ("run", "created", "state", "dialogues"):
            table.add_column(column)
        for run in reader.runs():
            table.add_row(
                Text(run["id"]), run["created_at"][:19], Text(_state(reader, run["id"])), str(counts.get(run["id"], 0))
            )
    console.print(table)
    return 0


def _state(reader, run_id: str) -> str:
    """What the run is doing now (checkpoints/players.py): playing (and who plays it), interrupted, failed..."""
    from collections import Counter

    from checkpoints.players import activity, state_of

    run = reader.get_run(run_id) or {}
    statuses = Counter(d["status"] for d in reader.dialogues(run_id))
    who = activity(reader.db, run_id)
    planned = int((run.get("config") or {}).get("planned_dialogues") or sum(statuses.values()))
    state = state_of(run.get("status"), who, statuses, planned)
    return f"playing: {who.who(short=True)}" if state == "playing" else state


def _copy(args) -> int:
    """The run, whole, into a new SQLite file (built beside it and renamed into place)."""
    from checkpoints.offline_copy import copy_run

    try:
        counts = copy_run(chosen_db(args.db), args.run_id, args.to)
    except (StoreError, SchemaTooNewError) as exc:
        fail(str(exc))
    console.print(
        Text(f"copied run {args.run_id} to {args.to}: " + ", ".join(f"{k} {v}" for k, v in counts.items())),
        soft_wrap=True,
    )
    return 0


def _export(args) -> int:
    """Read through the read-only reader; the file is written whole or not at all."""
    if args.out.is_dir():
        fail(f"--out {args.out} is a folder: give a file such as {args.out / (args.run_id + '.jsonl')}")
    try:
        reader = read_store(args.db)
    except StoreError as exc:
        fail(str(exc))
    with reader:
        if reader.get_run(args.run_id) is None:
            fail(
                f"no run {args.run_id!r} in {reader.path}: see python -m graph.runs list --db "
                f"{shlex.quote(str(reader.path))}"
            )
        if args.label_set != PRIMARY_LABELS and args.label_set not in reader.label_sets():
            fail(
                f"no label set {args.label_set!r} in {reader.path} (it has {', '.join(reader.label_sets()) or 'none'})"
            )
        records = list(iter_chat_records(reader, args.run_id, label_set=args.label_set, include_seed=args.include_seed))
    write_atomic(args.out, to_jsonl(records), private=True)
    seed = "seed included" if args.include_seed else "seed masked"
    console.print(Text(f"wrote {len(records)} dialogues to {args.out} ({args.format} format, {seed})"), soft_wrap=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
