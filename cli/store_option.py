"""The ``--db`` every command shares: a SQLite file or a ``postgresql://`` URL, parsed once and opened one way.

A URL is checked when the flag is parsed (a password in it is refused, the URL never echoed); without
``--db``, ``$DYMT_ESB_DB`` (a path or a URL) names the store, else the default SQLite file
(:func:`checkpoints.location.locate_db`). A command with subcommands accepts it before or after the subcommand.
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

from checkpoints.checkpointer import open_checkpointer  # noqa: F401 - the commands' way to LangGraph's saver
from checkpoints.location import DbLocation, PostgresURL, locate_db, parse_db
from checkpoints.migrations import SchemaTooNewError
from checkpoints.outages import OutageError, store_fault
from checkpoints.paths import ENV_DB, StoreError, damage_of, default_db_path
from checkpoints.readers import Reader, open_reader
from checkpoints.store import Writer, open_writer
from checkpoints.upgrades import ENV_NO_BACKUP
from cli.common import error_console, fail
from cli.exit_codes import EXIT_OUTAGE


def db_location(text: str) -> DbLocation:
    """argparse type for ``--db``: a checked PostgreSQL URL or a SQLite path (errors never repeat the value)."""
    try:
        return parse_db(text)
    except StoreError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--db ")) from None


def add_db_option(
    parser: argparse.ArgumentParser,
    *subcommands: argparse.ArgumentParser,
    help: str | None = None,  # noqa: A002 - argparse's name
) -> None:
    """Add ``--db FILE|URL`` to ``parser`` and to each of its ``subcommands``: it goes before or after the
    subcommand."""
    text = (
        help or f"dialogue database: a SQLite file or a postgresql:// URL (default ${ENV_DB}, else {default_db_path()})"
    )
    parser.add_argument("--db", type=db_location, default=None, metavar="FILE|URL", help=text)
    for sub in subcommands:  # SUPPRESS: a subcommand without --db leaves the one given before it
        sub.add_argument("--db", type=db_location, default=argparse.SUPPRESS, metavar="FILE|URL", help=text)


class _NoBackup(argparse.Action):
    """``--no-backup``: ``$DYMT_ESB_NO_BACKUP=1`` for this command and the processes it starts
    (checkpoints/upgrades.py); :func:`store_errors` puts the variable back as it was when the command returns."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)  # type: ignore[arg-type]

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        os.environ[ENV_NO_BACKUP] = "1"
        setattr(namespace, self.dest, True)


def add_no_backup_option(*parsers: argparse.ArgumentParser) -> None:
    """``--no-backup`` on each of ``parsers`` (commands that write to a store, so may upgrade an older SQLite file)."""
    for parser in parsers:
        parser.add_argument(
            "--no-backup",
            action=_NoBackup,
            help=f"upgrade a store made by an older DyMT-ESB in place, without keeping a copy of it first (as "
            f"{ENV_NO_BACKUP}=1; the upgrade is still announced)",
        )


def chosen_db(flag: DbLocation | None) -> DbLocation:
    """The store ``--db`` names, else ``$DYMT_ESB_DB``, else the default file; a bad value fails in one line."""
    try:
        return locate_db(flag)
    except StoreError as exc:
        fail(str(exc))


def read_store(flag: DbLocation | None) -> Reader:
    """The store a run wrote, opened read-only, or one line saying what to pass instead."""
    try:
        return open_reader(chosen_db(flag))
    except StoreError as exc:
        fail(str(exc))


def write_store(flag: DbLocation | None) -> Writer:
    """The store a run wrote, opened for writing (it must exist), or one line saying what to pass instead."""
    try:
        return open_writer(chosen_db(flag), create=False)
    except (StoreError, SchemaTooNewError) as exc:
        fail(str(exc))


def store_errors(prog: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Decorate a command's ``main``: a damaged store (found when opened or by a later read) is one line naming the
    file and how to recover it, exit 2; a read-only or full store one line saying what to do and the command to run
    again, exit 75 (the run's outage line). Never a traceback."""

    def decorate(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def guarded(argv: list[str] | None = None) -> int:
            no_backup = os.environ.get(ENV_NO_BACKUP)  # --no-backup sets it for this command only
            try:
                return main(argv)
            except (sqlite3.DatabaseError, StoreError, OutageError) as exc:
                path = _store_path(argv)
                if (damage := damage_of(exc, path or "the dialogue database")) is not None:
                    fail(str(damage))
                fault = store_fault(exc, path) if not isinstance(exc, StoreError) else None
                if fault is None:
                    raise
                again = shlex.join(["python", "-m", prog, *(sys.argv[1:] if argv is None else argv)])
                error_console.print(
                    f"error: {fault}: {fault.advice()}, then run again: {again} (nothing is lost)",
                    style="red",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )
                return EXIT_OUTAGE
            except Exception as exc:
                if getattr(exc, "sqlstate", None) not in _LAYOUT_STATES:
                    raise
                where = _store_location(argv)  # a PostgreSQL store whose table or column is gone: runs check says more
                fail(
                    f"the PostgreSQL store at {where} lacks part of its schema ({str(exc).strip().splitlines()[0]}): "
                    f"python -m graph.runs check --db {where} names what is missing and how to put it back"
                )
            finally:
                if no_backup is None:
                    os.environ.pop(ENV_NO_BACKUP, None)
                else:
                    os.environ[ENV_NO_BACKUP] = no_backup

        return guarded

    return decorate


_LAYOUT_STATES = ("42P01", "42703")  # PostgreSQL's undefined_table, undefined_column


def _store_path(argv: list[str] | None) -> Path | None:
    """The SQLite file a command's ``--db`` (else ``$DYMT_ESB_DB``, else the default) names; None for PostgreSQL."""
    where = _store_location(argv)
    return None if where is None or isinstance(where, PostgresURL) else Path(where)


def _store_location(argv: list[str] | None) -> DbLocation | None:
    """The store a command's ``--db`` (else ``$DYMT_ESB_DB``, else the default) names; None if it names none."""
    args = list(sys.argv[1:] if argv is None else argv)
    given = next(
        (v for i, a in enumerate(args) for v in ([args[i + 1]] if a == "--db" and i + 1 < len(args) else [])), None
    )
    given = given or next((a.split("=", 1)[1] for a in args if a.startswith("--db=")), None)
    try:
        return locate_db(parse_db(given) if given else None)
    except StoreError:
        return None
