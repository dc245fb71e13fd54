"""What every ``python -m graph.<command>`` shares: consoles, one-line errors, exit status 2."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

from cli.exit_codes import EXIT_BAD_INPUT
from viewer.render import InertConsole

Number = TypeVar("Number", int, float)

# Everything a command prints shows control characters as symbols: no text it quotes can drive the terminal.
console = InertConsole()
error_console = InertConsole(stderr=True)


def fail(message: str) -> NoReturn:
    """Print one line saying what to fix and exit with status 2."""
    from viewer.render import safe  # what the message quotes (a file name, a reply) shown inert

    print(f"error: {safe(' '.join(str(message).split()))}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_INPUT)


def pricing_option(path: str | None):
    """The ``--pricing FILE`` a command was given, read and checked (None without one); a bad file fails."""
    if path is None:
        return None
    from evals.cost import PricingError, load_pricing

    try:
        return load_pricing(path)
    except PricingError as exc:
        fail(str(exc))


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage dump) and exit 2."""

    def error(self, message: str) -> NoReturn:
        fail(f"{_without_passwords(message)} (see python -m {self.prog} --help)")


def group_flags(parser: argparse.ArgumentParser, groups: dict[str, tuple[str, ...]]) -> None:
    """Show ``parser``'s flags in ``--help`` under titled groups (title -> option strings), in that order; a flag no
    group names stays under "options". Parsing is unchanged: argument groups only arrange the help."""
    by_flag = {flag: action for action in parser._actions for flag in action.option_strings}
    general = parser._optionals
    for title, flags in groups.items():
        group = parser.add_argument_group(title)
        for flag in flags:
            action = by_flag[flag]
            if action in general._group_actions:
                general._group_actions.remove(action)
            group._group_actions.append(action)


_URL_PASSWORD = re.compile(r"(postgres(?:ql)?://[^\s:/@]*):[^\s@]*@", re.IGNORECASE)


def _without_passwords(message: str) -> str:
    """argparse quotes unrecognised arguments: a ``postgresql://user:PASSWORD@...`` among them loses its password."""
    return _URL_PASSWORD.sub(r"\1:***@", message)


def number_type(
    convert: Callable[[str], Number], holds: Callable[[Number], bool], says: str, *, name: str
) -> Callable[[str], Number]:
    """An argparse type: ``convert(text)`` (an int is "a whole number", a float "a number") for which ``holds``;
    ``says`` (with ``{value}``) is the error of a value that does not."""
    noun = "a whole number" if convert is int else "a number"

    def parse(text: str) -> Number:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if not holds(value):
            raise argparse.ArgumentTypeError(says.format(value=value))
        return value

    parse.__name__ = parse.__qualname__ = name
    return parse


positive_float = number_type(float, lambda v: v > 0, "{value:g} must be more than 0", name="positive_float")
positive_int = number_type(int, lambda v: v >= 1, "{value} must be at least 1", name="positive_int")
non_negative_int = number_type(int, lambda v: v >= 0, "{value} must be 0 or more", name="non_negative_int")
