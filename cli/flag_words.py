"""The library's errors in the command's words: ``turns=`` (a keyword argument of ``dymt.run``) is ``--turns`` here.

Library messages name keyword arguments as ``name=``, followed by the value where they quote one (``turns='five'``);
each command maps them to its own flags, read from its parser, with the few names that differ added by hand.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from typing import NoReturn

from cli.common import fail

# keyword arguments whose flag is not named after them
RENAMED = {"review": "--interactive", "config": "--config", "cache": "--no-cache", "run_ids": "--runs"}
_KEYWORD = re.compile(r"(?<![\w.=/:-])([a-z][a-z0-9_]*)=(.?)(?=(.?.?))", re.S)


def flags_of(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each keyword argument's flag in this command: an option's destination to its long form."""
    flags = dict(RENAMED)
    for action in parser._actions:
        long = [o for o in action.option_strings if o.startswith("--")]
        if long and action.dest != "help":
            flags[action.dest] = long[0]
    return flags


def flag_words(message: str, flags: Mapping[str, str]) -> str:
    """``message`` with every ``name=`` the command has a flag for said as that flag (a value quoted after it is
    kept, after a space); other ``a=b`` text (a swap ``women=men``, a role ``judge=8``) is left as it is."""

    def said(match: re.Match[str]) -> str:
        flag = flags.get(match.group(1))
        if flag is None:
            return match.group(0)
        after, then = match.group(2), match.group(3)
        # a full stop that ends the message is punctuation; one followed by more is a value (``out=. is a directory``)
        punctuation = after in " ,;:)" or (after == "." and not then.strip())
        return flag + (after if not after or punctuation else " " + after)

    return _KEYWORD.sub(said, message)


def bad_input(error: Exception, parser: argparse.ArgumentParser) -> NoReturn:
    """A library error (dymt.DymtError) as the command's one line, in its flags; exit 2."""
    fail(flag_words(str(error), flags_of(parser)))
