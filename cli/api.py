"""Deprecated: ``import dymt`` instead (docs/library.md). ``cli.api``'s functions call the library directly.

``api.run(...)`` is ``dymt.run(...).to_json()``, ``api.branch(...)`` is ``dymt.branch(...).to_json()``,
``api.report(...)`` the files ``dymt.report(...)`` wrote, and ``api.turns`` / ``dialogues`` / ``bias_rates`` /
``chat_records`` / ``runs`` read through ``dymt.open(db)``. Bad input raises :class:`dymt.DymtError` (the same class
as ``cli.api.DymtError``) and writes nothing.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dymt
from checkpoints.vocabulary import PRIMARY_LABELS
from dymt.errors import DymtError

__all__ = ["DymtError", "bias_rates", "branch", "chat_records", "dialogues", "report", "run", "runs", "turns"]

warnings.warn(
    "cli.api is deprecated: use `import dymt` (dymt.run, dymt.branch, dymt.report, dymt.open)",
    DeprecationWarning,
    stacklevel=2,
)


def run(*, db: str | Path | None = None, **options: Any) -> dict[str, Any]:
    """``dymt.run(db=db, **options).to_json()``; an outage past its budget raises :class:`DymtError`."""
    if options.pop("no_trace", False):  # the command's --no-trace
        options["trace"] = False
    result = dymt.run(db=db, **options)
    if result.ended == "outage":
        ended = result.outages_past_budget
        raise DymtError(
            ended[0].line(unfinished=result.unfinished, resume=result.resume or "")
            if ended
            else f"run {result.run_id} stopped by an outage: resume with {result.resume}"
        )
    return result.to_json()


def branch(thread: str | None = None, *, db: str | Path | None = None, **options: Any) -> dict[str, Any]:
    """``dymt.branch(thread, db=db, **options).to_json()``."""
    return dymt.branch(thread, db=db, **options).to_json()


def report(
    run_ids: str | Sequence[str], *, out: str | Path, db: str | Path | None = None, html: bool = False, **options: Any
) -> list[Path]:
    """The files ``dymt.report`` wrote into ``out``."""
    result = dymt.report(run_ids, out=out, db=db, html=html, **options)
    return sorted(Path(out) / name for name in result.files)


def runs(*, db: str | Path | None = None, as_frame: bool | None = None) -> Any:
    with dymt.open(db) as store:
        return store.runs(as_frame=as_frame)


def turns(
    run_ids: str | Sequence[str],
    *,
    db: str | Path | None = None,
    label_set: str = PRIMARY_LABELS,
    as_frame: bool | None = None,
) -> Any:
    with dymt.open(db) as store:
        return store.turns(run_ids, label_set=label_set, as_frame=as_frame)


def dialogues(
    run_ids: str | Sequence[str],
    *,
    db: str | Path | None = None,
    label_set: str = PRIMARY_LABELS,
    as_frame: bool | None = None,
) -> Any:
    with dymt.open(db) as store:
        return store.dialogues(run_ids, label_set=label_set, as_frame=as_frame)


def bias_rates(
    run_ids: str | Sequence[str],
    *,
    db: str | Path | None = None,
    label_set: str = PRIMARY_LABELS,
    as_frame: bool | None = None,
) -> Any:
    with dymt.open(db) as store:
        return store.bias_rates(run_ids, label_set=label_set, as_frame=as_frame)


def chat_records(
    run_id: str, *, db: str | Path | None = None, label_set: str = PRIMARY_LABELS, include_seed: bool = False
) -> list[dict[str, Any]]:
    with dymt.open(db) as store:
        return store.chat_records(run_id, label_set=label_set, include_seed=include_seed)
