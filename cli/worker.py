"""``python -m graph.worker``: play dialogues enqueued with ``graph.run --enqueue``, on any machine, until stopped."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from checkpoints.location import PostgresURL
from checkpoints.outages import OutageError
from checkpoints.paths import StoreError
from checkpoints.store_outage import DEFAULT_BUDGET_S
from checkpoints.text import valid_utf8
from cli.common import ArgumentParser, error_console, fail, number_type, positive_int
from cli.exit_codes import EXIT_OUTAGE
from cli.flag_words import flag_words
from cli.store_option import add_db_option, add_no_backup_option, chosen_db, store_errors
from evals.cost import budget_allows
from graph.config.errors import ConfigError
from graph.config.flags import parse_rate_limits
from graph.workers.job_worker import DEFAULT_GRACE_S, WorkerControl, WorkerSettings, log_tasks, run_worker
from viewer.render import safe


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="graph.worker", description=__doc__.splitlines()[0])
    add_db_option(p, help="the run's PostgreSQL database, postgresql://USER@HOST/DB (default $DYMT_ESB_DB)")
    add_no_backup_option(p)
    p.add_argument(
        "--concurrency", type=positive_int, default=1, help="dialogues played at once by this worker (default 1)"
    )
    p.add_argument(
        "--base-url", default=None, help="base URL for the runs' openai: specs on this machine (beats the stored one)"
    )
    p.add_argument("--no-cache", action="store_true", help="do not read or write the response cache")
    p.add_argument(
        "--rate-limit",
        action="append",
        default=None,
        metavar="NAME=RPM",
        help="this worker's own requests per minute for a provider (openai=500) or a spec, instead of its share "
        "of the run's --rate-limit (which is split evenly between the live workers); repeatable",
    )
    p.add_argument(
        "--stalled-after",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="a worker silent this long is taken for dead and its dialogues are played again from their last "
        "checkpoint (default 30)",
    )
    p.add_argument("--drain", action="store_true", help="stop once no job is waiting instead of waiting for more")
    p.add_argument(
        "--grace",
        type=_non_negative_seconds,
        default=DEFAULT_GRACE_S,
        metavar="SECONDS",
        help="asked to stop (SIGTERM, Ctrl-C), finish the dialogues in play for at most this long; the rest go back "
        "to the queue at their last checkpoint, for another worker (default "
        f"{DEFAULT_GRACE_S:g}: inside a Kubernetes pod's 30 s); a second signal stops at once",
    )
    p.add_argument(
        "--store-outage-budget",
        type=_seconds,
        default=DEFAULT_BUDGET_S,
        metavar="SECONDS",
        help="while PostgreSQL is unreachable (a restart, a crash) dialogues wait for it and play on; past this "
        f"long the worker exits with status {EXIT_OUTAGE}, leaving its dialogues to the next worker (default "
        f"{DEFAULT_BUDGET_S:g})",
    )
    return p


@store_errors("graph.worker")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    location = chosen_db(args.db)
    if not isinstance(location, PostgresURL):
        fail("graph.worker needs a PostgreSQL database: --db postgresql://USER@HOST/DB or DYMT_ESB_DB")
    settings = WorkerSettings(
        concurrency=args.concurrency,
        heartbeat_s=max(0.5, args.stalled_after / 3),
        stalled_after_s=args.stalled_after,
        cache=not args.no_cache,
        base_url=args.base_url,
        rate_limits=_rate_limits(args.rate_limit),
        wait=not args.drain,
        budget=budget_allows,
        store_outage_budget_s=args.store_outage_budget,
        grace_s=args.grace,
    )
    logging.basicConfig(level=logging.WARNING, handlers=[log_handler()])
    # While the server is away the pools' background reconnections fail again and again: the outage's own two lines
    # (gone, back) say it once (checkpoints/store_outage.py).
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    control = WorkerControl()
    try:
        stopped_by = asyncio.run(_serve(location, settings, control))
    except StoreError as exc:
        fail(str(exc))
    except OutageError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)  # one line: the jobs wait for the next worker
        return EXIT_OUTAGE
    if stopped_by is not None:
        return 128 + stopped_by
    if control.handed_back:
        error_console.print(
            f"[yellow]Stopped:[/] {control.handed_back} dialogue(s) went back to the queue at their last checkpoint "
            "(the next worker plays them on)."
        )
    return 0


async def _serve(location: PostgresURL, settings: WorkerSettings, control: WorkerControl) -> int | None:
    """The worker, with SIGINT and SIGTERM handled in two steps: the first drains it (within --grace), the second
    stops the dialogues in play now (each back to the queue at its last checkpoint, its play row closed); the
    signal that stopped it at once, if one did."""
    loop = asyncio.get_running_loop()
    stopped_by: list[int] = []

    def on_signal(signum: int) -> None:
        if control.stopping == 0:
            error_console.print(
                f"[yellow]Stopping:[/] finishing the dialogues in play, for at most {settings.grace_s:g} s (--grace); "
                "what is still playing then goes back to the queue at its last checkpoint. Signal again to stop now."
            )
            control.drain()
        elif control.stopping == 1:
            stopped_by.append(signum)
            error_console.print(
                "[yellow]Stopped now:[/] the dialogues in play go back to the queue at their last checkpoint, for the "
                "next worker."
            )
            control.stop_now()
            # Handing back needs the store: if it does not answer, leave anyway (a dead worker's jobs are put back too).
            loop.call_later(_STOP_NOW_S, os._exit, 128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    loop.add_signal_handler(signal.SIGUSR1, log_tasks)  # what each slot waits on, for a worker that seems stuck
    await run_worker(location, settings, control)
    return stopped_by[0] if stopped_by else None


_STOP_NOW_S = 10.0


def _rate_limits(items: list[str] | None) -> dict[str, float] | None:
    try:
        return None if items is None else parse_rate_limits(items)
    except ConfigError as exc:
        fail(flag_words(str(exc), {"rate_limit": "--rate-limit"}))


_non_negative_seconds = number_type(float, lambda v: v >= 0, "{value} must be 0 or more", name="seconds")
_seconds = number_type(float, lambda v: v >= 1, "{value} must be at least 1", name="seconds")


class _InertFormatter(logging.Formatter):
    """A log line whose controls show as symbols (a lone surrogate as U+FFFD): a failed dialogue's error may quote a
    model's reply, escape sequences and all."""

    def format(self, record: logging.LogRecord) -> str:
        return safe(valid_utf8(super().format(record)))


def log_handler() -> logging.Handler:
    """The worker's log on stderr: time, logger, level and message, shown inert."""
    handler = logging.StreamHandler()
    handler.setFormatter(_InertFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    return handler


if __name__ == "__main__":
    raise SystemExit(main())
