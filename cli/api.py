"""A Python API for notebooks: run a grid, load a run as records or DataFrames, branch, report.

Each call goes through the same code as its command: :func:`run`, :func:`branch`
and :func:`report` call the ``main()`` of ``graph.run``, ``graph.branch`` and
``evals.report`` with the options turned into flags (``target_model=["a", "b"]``
is ``--target-model a b``), capture what the command would print, and return its
JSON result; :func:`turns` and :func:`dialogues` are the rows of the report's
``turns.csv`` and ``dialogues.csv``; :func:`chat_records` are the lines of
``python -m graph.runs export --format chat``; :func:`bias_rates` are the raw and the judge-corrected
rates of every target × mode side by side (docs/judge-error.md). Bad input raises :class:`DymtError`
with the command's one-line message, and, as with the command, writes nothing.
``db`` is a SQLite file or a ``postgresql://`` URL (no password in it), as ``--db``; by default ``$DYMT_ESB_DB``.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from checkpoints.chat_export import iter_chat_records
from checkpoints.location import PostgresURL, default_db, parse_db
from checkpoints.paths import StoreError
from checkpoints.readers import Reader, open_reader
from checkpoints.vocabulary import PRIMARY_LABELS
from cli.exit_codes import EXIT_SOME_FAILED
from evals.dataset import DatasetError, load_dataset
from evals.judge_error.corrected import choose_validation
from evals.report.corrected_tables import RATE_COLUMNS, rate_records
from evals.report.exports import DIALOGUE_COLUMNS, TURN_COLUMNS, dialogue_records, turn_records


class DymtError(ValueError):
    """What the command would have said in its one-line error (exit status 2)."""


# --------------------------------------------------------------------------- commands


def run(*, db: str | Path | None = None, **options: Any) -> dict[str, Any]:
    """Play dialogues as ``python -m graph.run`` does and return its ``--json`` summary (``summary["run_id"]``).

    ``api.run(mode=["implicit", "assessment"], target_model=["local:gemma3-270m", "openai:gpt-4o-mini"],
    turns=5, categories=["gender"], run_id="grid1")`` is a 2-mode × 2-target grid.
    """
    from cli import run as command
    # Some dialogues failed (exit 1): the summary says which and how to resume; an outage (75) raises.
    out = _call(command.main, _argv(command.build_parser(), {**options, "db": db, "json": True}), ok=(0, None, EXIT_SOME_FAILED))
    return json.loads(out)


def branch(thread: str | None = None, *, db: str | Path | None = None, **options: Any) -> dict[str, Any]:
    """Fork and play on as ``python -m graph.branch`` does; returns its ``--json`` record (``["branches"]``).

    ``api.branch("RUN:SEED:MODE", turn=3, swap=["women=men"])``, or ``run_id="R"`` for a counterfactual set.
    """
    from cli import branch as command
    argv = ([thread] if thread is not None else []) + _argv(command.build_parser(), {**options, "db": db, "json": True})
    return json.loads(_call(command.main, argv))


def report(run_ids: str | Sequence[str], *, out: str | Path, db: str | Path | None = None, html: bool = False, **options: Any) -> list[Path]:
    """Write the report of ``python -m evals.report`` into ``out``; returns the files it holds."""
    from cli import report as command
    ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
    _call(command.main, _argv(command.build_parser(), {**options, "run_id": ids, "out": out, "db": db, "html": html}))
    return sorted(p for p in Path(out).iterdir() if p.is_file())


# --------------------------------------------------------------------------- reading


def runs(*, db: str | Path | None = None, as_frame: bool | None = None) -> Any:
    """The runs in the database (id, created, ended, status)."""
    store = _open(db)
    try:
        return _frame(store.runs(), ("id", "created_at", "ended_at", "status"), as_frame)
    finally:
        store.close()


def turns(run_ids: str | Sequence[str], *, db: str | Path | None = None, label_set: str = PRIMARY_LABELS, as_frame: bool | None = None) -> Any:
    """One row per stored turn, as in the report's ``turns.csv``: a DataFrame when pandas is installed."""
    return _frame(turn_records(_dataset(run_ids, db, label_set)), TURN_COLUMNS, as_frame)


def dialogues(run_ids: str | Sequence[str], *, db: str | Path | None = None, label_set: str = PRIMARY_LABELS, as_frame: bool | None = None) -> Any:
    """One row per dialogue, as in the report's ``dialogues.csv``: a DataFrame when pandas is installed."""
    return _frame(dialogue_records(_dataset(run_ids, db, label_set)), DIALOGUE_COLUMNS, as_frame)


def bias_rates(run_ids: str | Sequence[str], *, db: str | Path | None = None, label_set: str = PRIMARY_LABELS,
               as_frame: bool | None = None) -> Any:
    """Raw and judge-corrected bias rates, one row per run × target × mode × measure × turn, with 95% intervals.

    ``corrected_*`` are empty and ``refusal`` says why where the judge has no usable validation; the
    ``validation_*``, ``sensitivity*`` and ``specificity*`` columns say which validation the correction used.
    """
    ids = [run_ids] if isinstance(run_ids, str) else list(run_ids)
    store = _open(db)
    try:
        dataset = load_dataset(store, ids, label_set=label_set)
        chosen = {run.run_id: choose_validation(store, run.run_id, label_set=label_set) for run in dataset.runs}
    except DatasetError as exc:
        raise DymtError(str(exc)) from None
    finally:
        store.close()
    return _frame(rate_records(dataset, chosen), RATE_COLUMNS, as_frame)


def chat_records(run_id: str, *, db: str | Path | None = None, label_set: str = PRIMARY_LABELS, include_seed: bool = False) -> list[dict[str, Any]]:
    """The run's dialogues in chat format, as ``python -m graph.runs export RUN --format chat`` writes them."""
    with _open(db) as reader:
        if reader.get_run(run_id) is None:
            raise DymtError(f"no run {run_id!r} in {reader.path}")
        return list(iter_chat_records(reader, run_id, label_set=label_set, include_seed=include_seed))


# --------------------------------------------------------------------------- plumbing


def _argv(parser: argparse.ArgumentParser, options: dict[str, Any]) -> list[str]:
    """Keyword options as the command's flags, checked against its parser."""
    actions = {a.dest: a for a in parser._actions if a.option_strings}
    argv: list[str] = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        action = actions.get(key)
        if action is None:
            known = ", ".join(sorted(k for k in actions if k != "help"))
            raise DymtError(f"unknown option {key!r} for {parser.prog}: use one of {known}")
        flag = max(action.option_strings, key=len)
        if value is True and action.nargs == 0:
            argv.append(flag)
            continue
        values = [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
        if isinstance(action, argparse._AppendAction):
            for v in values:
                argv += [flag, v]
        else:
            argv += [flag, *values]
    return argv


def _call(main: Callable[[list[str]], int], argv: list[str], ok: tuple[int | None, ...] = (0, None)) -> str:
    """Run a command's main() with its output captured; a non-zero status raises DymtError.

    It runs on a thread of its own: the commands start their own event loop, which
    cannot nest in the loop a notebook kernel is already running.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dymt-api") as pool:
        status, out, err = pool.submit(_captured, main, argv).result()
    if status not in ok:
        lines = err.strip().splitlines()
        raise DymtError(lines[-1].removeprefix("error: ") if lines else f"exit status {status}")
    return out


def _captured(main: Callable[[list[str]], int], argv: list[str]) -> tuple[Any, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                status = main(argv)
            except SystemExit as exc:
                status = exc.code  # type: ignore[assignment]
    finally:
        _forget_loop_bound_clients()
    return status, out.getvalue(), err.getvalue()


def _forget_loop_bound_clients() -> None:
    """Drop langchain-openai's shared async HTTP clients: theirs belong to the event loop that just closed.

    A second command in the same process would otherwise reuse a pooled connection of the
    closed loop and fail with "Event loop is closed" (the command-line tools run once per process).
    """
    utils = sys.modules.get("langchain_openai.chat_models._client_utils")
    clear = getattr(getattr(utils, "_cached_async_httpx_client", None), "cache_clear", None)
    if clear is not None:
        clear()


def _open(db: str | Path | None) -> Reader:
    """The read-only reader of a SQLite file or a ``postgresql://`` URL: reading from the API never writes (nor
    migrates) it."""
    try:
        if not db:
            return open_reader(default_db())
        return open_reader(db if isinstance(db, PostgresURL) else parse_db(db, source="db"))
    except StoreError as exc:
        raise DymtError(str(exc)) from None


def _dataset(run_ids: str | Sequence[str], db: str | Path | None, label_set: str):
    store = _open(db)
    try:
        return load_dataset(store, [run_ids] if isinstance(run_ids, str) else list(run_ids), label_set=label_set)
    except DatasetError as exc:
        raise DymtError(str(exc)) from None
    finally:
        store.close()


def _frame(records: list[dict[str, Any]], columns: Sequence[str], as_frame: bool | None) -> Any:
    """A pandas DataFrame when pandas is installed (or asked for), else the list of dicts."""
    if as_frame is False:
        return records
    try:
        import pandas as pd
    except ImportError:
        if as_frame:
            raise DymtError("as_frame=True needs pandas: pip install pandas") from None
        return records
    return pd.DataFrame.from_records(records, columns=list(columns))
