"""The guard on large runs of ``graph.run``: a new run expected past ``--confirm-above`` model calls or
``--confirm-cost`` dollars shows its estimate and asks on a terminal; off one it plays only with ``--yes`` or a
``--max-cost`` cap, else one line and exit 2 before anything is written."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from cli.common import ArgumentParser, error_console, fail, positive_float, positive_int
from cli.estimate import print_estimate

CONFIRM_CALLS = 5_000  # a new run past this many expected model calls asks first (--confirm-above)
CONFIRM_USD = 10.0  # ... or past this estimated cost (--confirm-cost)


def add_large_run_flags(p: ArgumentParser) -> None:
    p.add_argument(
        "--confirm-above",
        type=positive_int,
        default=CONFIRM_CALLS,
        metavar="CALLS",
        help="a new run expected to make more model calls than this (or to cost more than --confirm-cost) prints its "
        "estimate and asks on a terminal; off a terminal it plays only with --yes or --max-cost "
        f"(default {CONFIRM_CALLS:,})",
    )
    p.add_argument(
        "--confirm-cost",
        type=positive_float,
        default=CONFIRM_USD,
        metavar="USD",
        help=f"the estimated cost past which a new run asks first, as --confirm-above (default {CONFIRM_USD:g})",
    )
    p.add_argument("--yes", action="store_true", help="play a large run without asking (see --confirm-above)")


def confirm_large(args: argparse.Namespace, prepared: Any, estimate: Callable[[], dict[str, Any]]) -> None:
    """A new run past ``--confirm-above`` calls or ``--confirm-cost`` dollars: its estimate and a question on a
    terminal; off one, one line (exit 2, nothing written) unless ``--yes`` or a cost cap (``--max-cost``, or the
    experiment file's ``max_cost``) says how far to go. A run being resumed was started already: it is never asked
    about again. Played here or enqueued for workers, the same."""
    if args.yes or prepared.config.max_cost is not None or prepared.stored is not None:
        return
    data = estimate()  # the run's own figures, as --estimate prints them
    calls, usd = int(data["model_calls"]), data.get("usd")
    known = [r["usd"] for r in data.get("by_role") or [] if r.get("usd") is not None]
    if usd is None and known:  # some models unpriced: the cost of those priced is known, and at least that
        usd = sum(known)
    if calls <= args.confirm_above and (usd is None or usd <= args.confirm_cost):
        return
    about = "about" if data.get("usd") is not None else "at least"
    what = f"about {calls:,} model calls" + (f" costing {about} ${usd:,.2f}" if usd is not None else "")
    why = f"past --confirm-above {args.confirm_above:,}" if calls > args.confirm_above else ""
    why = why or f"past --confirm-cost {args.confirm_cost:g}"
    if sys.stdin.isatty() and sys.stderr.isatty() and not args.json:
        print_estimate(data, error_console)
        try:
            answer = input(f"This run makes {what} ({why}). Play it? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() in ("y", "yes"):
            return
        fail("nothing played: lower --per-category, --turns or the targets, or cap it with --max-cost USD")
    fail(
        f"this run makes {what} ({why}): nothing played; add --yes to play it, --max-cost USD (with --pricing) to "
        "cap it, or see where the calls go with --estimate"
    )
