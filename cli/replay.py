"""``python -m graph.replay``: read a stored dialogue turn by turn, with its labels and branches.

Reads the dialogue database only (checkpoints.readers): no model call and no
import of the graph engine or model packages, so a database copied from another
machine replays without the models installed. Model output is always rich
``Text``, never markup. This module is the command only: the rendering, exports,
interactive viewer and key handling live in the ``viewer`` package.

    python -m graph.replay THREAD [--db PATH]           interactive, full screen (? lists the keys)
    python -m graph.replay THREAD --play [--delay S]     advances on its own
    python -m graph.replay THREAD --print                the whole dialogue to stdout (--show-seed: with the seed)
    python -m graph.replay THREAD --export FILE.md|.html|.json
    python -m graph.replay --list [--run-id R] [--category C] [--biased-only]
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

from rich.text import Text

from checkpoints.paths import StoreError
from checkpoints.readers import Reader
from checkpoints.records import DialogueRecord
from checkpoints.vocabulary import PRIMARY_LABELS
from cli.common import ArgumentParser, console, error_console, fail, positive_float, positive_int
from cli.store_option import add_db_option, read_store, store_errors
from viewer.app import DEFAULT_DELAY, Viewer
from viewer.export import EXPORT_FORMATS, write_export
from viewer.render import dialogue_renderables, list_lines, list_table, safe, turn_span


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.replay", description=__doc__.splitlines()[0])
    p.add_argument("thread", nargs="?", metavar="THREAD", help="thread id of the dialogue (see --list)")
    add_db_option(p)
    p.add_argument("--list", action="store_true", help="list dialogues with their labels and pick one")
    p.add_argument("--run-id", default=None, help="--list: only this run")
    p.add_argument("--category", default=None, help="--list: only this seed category")
    p.add_argument("--biased-only", action="store_true", help="--list: only dialogues with a biased reply")
    p.add_argument(
        "--print",
        dest="print_",
        action="store_true",
        help="print the whole dialogue and exit (the default when stdout is not a terminal)",
    )
    p.add_argument(
        "--export",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the dialogue to FILE.md, FILE.html or FILE.json",
    )
    p.add_argument(
        "--show-seed",
        action="store_true",
        help="--print and --export: show the seed statement (masked by default, as in the viewer until s)",
    )
    p.add_argument("--play", action="store_true", help="advance one turn every --delay seconds")
    p.add_argument(
        "--delay",
        type=positive_float,
        default=DEFAULT_DELAY,
        help=f"seconds per turn with --play (default {DEFAULT_DELAY:g})",
    )
    p.add_argument("--turn", type=positive_int, default=None, help="open at this turn")
    p.add_argument(
        "--label-set", default=PRIMARY_LABELS, help=f"which judge's labels to show (default {PRIMARY_LABELS})"
    )
    return p


@store_errors("graph.replay")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _check_args(args)
    try:
        reader = read_store(args.db)
    except StoreError as exc:
        fail(str(exc))
    with reader:
        if args.label_set != PRIMARY_LABELS and args.label_set not in reader.label_sets():
            fail(
                f"unknown --label-set {args.label_set!r} in {reader.path}: label sets are "
                f"{', '.join(reader.label_sets()) or 'none'}"
            )
        try:
            if args.list:
                return _list(reader, args)
            return _replay(reader, args)
        except KeyboardInterrupt:
            return 130


def _check_args(args) -> None:
    """Everything that can be checked before the database is opened."""
    if args.list and args.thread:
        fail(f"give either THREAD ({args.thread}) or --list, not both")
    if not args.list and not args.thread:
        fail("give the THREAD id of a dialogue, or --list to choose one (python -m graph.replay --list)")
    if not args.list:
        for flag, value in (
            ("--run-id", args.run_id),
            ("--category", args.category),
            ("--biased-only", args.biased_only),
        ):
            if value:
                fail(f"{flag} filters --list: use it with --list, not with a THREAD id")
    if args.list and (args.print_ or args.export or args.turn):
        fail("--print, --export and --turn take a THREAD id, not --list")
    if args.play and (args.print_ or args.export):
        fail("--play is interactive: use it without --print and --export")
    if args.export is not None:
        if args.export.suffix.lower() not in EXPORT_FORMATS:
            fail(f"--export {args.export}: the file name must end in {', '.join(EXPORT_FORMATS)}")
        if args.export.is_dir():
            fail(f"--export {args.export} is a directory: give a file name such as {args.export / 'dialogue.md'}")
        if not args.export.parent.expanduser().is_dir():
            fail(f"--export {args.export}: folder {args.export.parent} does not exist; create it first")


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _load(reader: Reader, thread_id: str, label_set: str) -> DialogueRecord:
    record = reader.dialogue(thread_id, label_set=label_set)
    if record is None:
        close = difflib.get_close_matches(thread_id, reader.thread_ids(), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        fail(
            f"unknown thread id {thread_id!r} in {reader.path}: {hint}list them with python -m graph.replay --list "
            f"--db {reader.path}"
        )
    return record


def _replay(reader: Reader, args) -> int:
    record = _load(reader, args.thread, args.label_set)
    if args.turn is not None and args.turn not in {t.idx for t in record.turns}:
        fail(f"--turn {args.turn}: {record.thread_id} has turns {turn_span(record)}")
    if args.export is not None:
        path = args.export.expanduser()
        write_export(record, path, reveal_seed=args.show_seed)
        error_console.print(Text(safe(f"wrote {path} ({len(record.turns)} turns)")))
        if not args.print_:
            return 0
    if args.print_ or not _interactive():
        for renderable in dialogue_renderables(record, reveal_seed=args.show_seed):
            console.print(renderable)
        return 0
    viewer = Viewer(
        reader,
        record.thread_id,
        label_set=args.label_set,
        start_turn=args.turn,
        play=args.play,
        delay=args.delay,
        console=console,
    )
    return viewer.run(sys.stdin.fileno())


def _list(reader: Reader, args) -> int:
    if args.run_id is not None and args.run_id not in reader.run_ids():
        known = ", ".join(reader.run_ids()) or "none"
        fail(f"unknown --run-id {args.run_id!r} in {reader.path}: runs are {known}")
    categories = reader.categories()
    if args.category is not None and args.category.lower() not in {c.lower() for c in categories}:
        fail(f"no dialogues in --category {args.category!r}: categories are {', '.join(categories) or 'none'}")
    summaries = reader.summaries(
        run_id=args.run_id, category=args.category, biased_only=args.biased_only, label_set=args.label_set
    )
    if not summaries:
        error_console.print("no dialogue matches these filters")
        return 0
    if not sys.stdout.isatty():
        sys.stdout.write("\n".join(list_lines(summaries)) + "\n")
        return 0
    console.print(list_table(summaries))
    if not sys.stdin.isatty():
        return 0
    playlist = [s.thread_id for s in summaries]
    while True:
        try:
            answer = console.input(
                f"Open which dialogue? [bold]1-{len(summaries)}[/] or a thread id (Enter quits): "
            ).strip()
        except EOFError:
            return 0
        if answer in ("", "q", "quit"):
            return 0
        if answer.isdigit() and 1 <= int(answer) <= len(summaries):
            thread_id = playlist[int(answer) - 1]
        elif reader.dialogue(answer) is not None:
            thread_id = answer
        else:
            error_console.print(Text(f"{answer!r} is not a number from 1 to {len(summaries)} or a thread id"))
            continue
        viewer = Viewer(
            reader,
            thread_id,
            label_set=args.label_set,
            playlist=playlist,
            play=args.play,
            delay=args.delay,
            console=console,
        )
        viewer.run(sys.stdin.fileno())
        console.print(list_table(summaries))


if __name__ == "__main__":
    raise SystemExit(main())
