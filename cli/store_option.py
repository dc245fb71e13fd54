"""The ``--db`` every command shares: a SQLite file or a ``postgresql://`` URL, parsed once and opened one way.

A URL is checked when the flag is parsed (a password in it is refused, the URL never echoed); without
``--db``, ``$DYMT_ESB_DB`` (a path or a URL) names the store, else the default SQLite file
(:func:`checkpoints.location.locate_db`). A command with subcommands accepts it before or after the subcommand.
"""

from __future__ import annotations

import argparse

from checkpoints.checkpointer import open_checkpointer  # noqa: F401 - the commands' way to LangGraph's saver
from checkpoints.location import DbLocation, locate_db, parse_db
from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import ENV_DB, StoreError, default_db_path
from checkpoints.readers import Reader, open_reader
from checkpoints.store import Writer, open_writer
from cli.common import fail


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
