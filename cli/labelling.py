"""What the ``python -m evals.<command>`` CLIs share: opening a store, building a labeller model,
registering a label set, the one scoring loop (run_scorer: work, record, tally) with bounded
concurrency, formatting and safe writes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import operator
import os
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from checkpoints import scores
from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError, check_db_path, default_db_path
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from pydantic import ValidationError
from rich.text import Text

from checkpoints.readers import Reader, open_reader
from checkpoints.store import PRIMARY_LABELS, Writer, now, open_writer
from evals.dataset import DatasetError, LabelSetInfo, RunInfo, label_sets, run_info
from evals.judging import prompt_hash, prompt_name
from cli.common import ArgumentParser, error_console, fail, positive_int
from graph.config import ModelBuildError, ModelChoice, RoleSampling, RunConfig, one_line
from models.registry import ROLE_SAMPLING, RoleModel
from nodes.scoring import Item, Scored, Scorer
from prompts import PromptTemplate

T = TypeVar("T")
R = TypeVar("R")

# The live judge's settings (graph.run): greedy, room for a rationale and a label.
LABELLER_TEMPERATURE = ROLE_SAMPLING["judge"].temperature
LABELLER_MAX_TOKENS = ROLE_SAMPLING["judge"].max_tokens


class SetConflictError(ValueError):
    """A label set name already used on the run by another model or prompt."""


def describe(doc: str | None) -> str:
    """A CLI's description: its module docstring's first line without the ``python -m ...``: prefix."""
    first = (doc or "").strip().splitlines()[0] if doc and doc.strip() else ""
    return first.split("``: ", 1)[-1]


def db_help() -> str:
    return f"dialogue database (default {default_db_path()})"


def labeller_parser(
    prog: str, doc: str | None, *, items: str, model_flag: str, model_help: str, name_help: str, calls: str, redo_help: str,
    model_required: bool = False,
) -> ArgumentParser:
    """The flags every labelling command shares (run, model, name, base URL, concurrency, redo); callers add theirs."""
    p = ArgumentParser(prog=prog, description=describe(doc))
    p.add_argument("--run-id", required=True, help=f"the run whose {items}")
    p.add_argument(model_flag, required=model_required, default=None, metavar="SPEC", help=model_help)
    p.add_argument("--name", default=None, help=name_help)
    p.add_argument("--base-url", default=None, help="base URL for openai: specs (an OpenAI-compatible server)")
    p.add_argument("--max-concurrency", type=positive_int, default=4, help=f"{calls} calls at once (default 4)")
    p.add_argument("--redo", action="store_true", help=redo_help)
    return p


def open_existing(path: Path | None) -> Writer:
    """The store a run wrote, opened for writing (labelling commands), or one line saying what to pass instead."""
    try:
        return open_writer(check_db_path(path or default_db_path(), must_exist=True), create=False)
    except (StoreError, SchemaTooNewError) as exc:
        fail(str(exc))


def read_existing(path: Path | None) -> Reader:
    """The store a run wrote, opened read-only (reports and exports never write), or one line saying what to pass."""
    try:
        return open_reader(path or default_db_path())
    except StoreError as exc:
        fail(str(exc))


def build_labeller(spec: str, *, flag: str, base_url: str | None = None, seed: int = 0, max_tokens: int = LABELLER_MAX_TOKENS) -> RoleModel:
    """A model in the judge role (greedy; the embedded model answers one token with log-probabilities)."""
    try:
        config = RunConfig(
            models=ModelChoice(judge=spec), sampling_seed=seed,
            sampling={"judge": RoleSampling(temperature=LABELLER_TEMPERATURE, max_tokens=max_tokens, base_url=base_url)},
        )
        return config.model_for("judge")
    except ModelBuildError as exc:
        fail(f"{flag}: {exc.reason}")
    except ValidationError as exc:
        fail(one_line(exc, lambda loc: flag))


def existing_set(store: Writer, run_id: str, kind: str, name: str, *, model: RoleModel, prompt_hash: str) -> LabelSetInfo | None:
    """The set already stored under this name, if any; SetConflictError if another model or prompt made it."""
    for info in label_sets(store, run_id, kind):
        if info.name != name:
            continue
        if info.model != model.spec or info.prompt_hash != prompt_hash:
            raise SetConflictError(
                f"{kind} labels {name!r} on run {run_id!r} were made by {info.model} with prompt {info.prompt} "
                f"(sha256 {str(info.prompt_hash)[:12]}), not {model.spec} with sha256 {prompt_hash[:12]}: "
                "pass another --name"
            )
        return info
    return None


def register_set(
    store: Writer, run_id: str, kind: str, name: str, *, model: RoleModel, prompt: str, prompt_hash: str,
    content_free_p_yes: float | None,
) -> None:
    store.add_label_set(run_id, kind, name, model=model.spec, model_id=model.model_id, prompt=prompt,
                        prompt_hash=prompt_hash, content_free_p_yes=content_free_p_yes)


def check_set_name(name: str) -> None:
    if not name.strip():
        fail("--name must not be empty")
    if name == PRIMARY_LABELS:
        fail(f"--name {PRIMARY_LABELS!r} is the run's own judge labels: choose another name")


@dataclass(frozen=True)
class Labeller:
    """Everything a labelling pass (re-judging, refusal, coherence) needs before its first model call."""

    run: RunInfo
    name: str
    model: RoleModel
    template: str
    digest: str
    existing: LabelSetInfo | None


def prepare_labeller(
    store: Writer, run_id: str, *, kind: str, prompt: str, spec: str | None, name: str | None, flag: str,
    base_url: str | None, max_tokens: int = LABELLER_MAX_TOKENS, template: PromptTemplate | None = None,
) -> Labeller:
    """Resolve the run, the model (default: the run's judge), the set name and any set already stored.

    ``template`` (a --judge-prompt file) replaces the built-in prompt of ``prompt``.
    """
    try:
        run = run_info(store, run_id)
    except DatasetError as exc:
        fail(str(exc))
    spec = spec or run.models.get("judge")
    if not spec:
        fail(f"run {run.run_id!r} records no judge model: pass {flag} SPEC")
    name = name or spec
    check_set_name(name)
    model = build_labeller(spec, flag=flag, base_url=base_url, seed=run.sampling_seed or 0, max_tokens=max_tokens)
    if template is not None:
        model = dataclasses.replace(model, prompt=template)
    try:
        digest = template.sha256 if template is not None else prompt_hash(prompt, model.style)
        existing = existing_set(store, run.run_id, kind, name, model=model, prompt_hash=digest)
    except (SetConflictError, ValueError) as exc:
        fail(str(exc))
    return Labeller(run, name, model, template.name if template is not None else prompt_name(prompt, model.style), digest, existing)


def progress_bar() -> Progress:
    """The progress display of a labelling pass, on stderr."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=error_console)


def exit_status(tally: "Tally", *, what: str = "calls") -> int:
    """1 (with a hint to rerun) when some model calls failed, else 0."""
    if tally.failed:
        error_console.print(Text(f"{tally.failed} {what} failed (first: {tally.first_error}); run the same command again to retry them", style="yellow"))
        return 1
    return 0


@dataclass
class Tally:
    """What a labelling pass did."""

    done: int = 0
    unparsed: int = 0
    skipped: int = 0
    failed: int = 0
    first_error: str | None = None


async def bounded(
    jobs: Sequence[T],
    work: Callable[[T], Awaitable[R]],
    on_result: Callable[[T, R | BaseException], None],
    *,
    concurrency: int = 1,
) -> None:
    """Run ``work`` on every job, at most ``concurrency`` at once; results (or errors) go to ``on_result``.

    ``on_result`` runs on the event loop, one at a time: the only SQLite connection it may
    write through is the store's own (no async connection shares this loop).
    """
    limiter = asyncio.Semaphore(max(1, concurrency))

    async def one(job: T) -> None:
        async with limiter:
            try:
                result: R | BaseException = await work(job)
            except Exception as exc:  # noqa: BLE001 - a failed call is counted, the others go on
                result = exc
        on_result(job, result)

    await asyncio.gather(*(one(job) for job in jobs))


async def label_jobs(
    jobs: Sequence[T],
    work: Callable[[T], Awaitable[R]],
    record: Callable[[T, R], bool],
    *,
    concurrency: int = 1,
    on_step: Callable[[], None] = lambda: None,
) -> Tally:
    """The labelling commands' one loop: ``work`` on every job, ``record`` each result, a tally of both.

    ``record`` stores one result (on the event loop, one at a time) and says whether it was
    unparsed; a failed call is counted, its first error kept, and nothing is stored for it.
    """
    tally = Tally()

    def on_result(job: T, result: R | BaseException) -> None:
        on_step()
        if isinstance(result, BaseException):
            tally.failed += 1
            tally.first_error = tally.first_error or error_line(result)
            return
        unparsed = record(job, result)
        tally.done += 1
        tally.unparsed += bool(unparsed)

    await bounded(jobs, work, on_result, concurrency=concurrency)
    return tally


@dataclass(frozen=True)
class ScoreJob(Generic[Item]):
    """One item to score and where its verdict goes in the ``scores`` table (turn 0 for a whole dialogue)."""

    thread_id: str
    idx: int
    item: Item
    subject: str = scores.REPLY


async def run_scorer(
    scorer: Scorer[Item],
    jobs: Sequence[T],
    record: Callable[[T, Scored], None],
    *,
    item: Callable[[T], Item] = operator.attrgetter("item"),
    concurrency: int = 1,
    on_step: Callable[[], None] = lambda: None,
) -> Tally:
    """The labelling commands' one loop over a scorer: score every job's item, ``record`` each verdict, tally.

    Unscored verdicts are recorded (raw output kept) and counted as unparsed; failed calls store nothing.
    """

    async def work(job: T) -> Scored:
        return await scorer.ascore(item(job))

    def recorded(job: T, result: Scored) -> bool:
        record(job, result)
        return not result.verdict.scored

    return await label_jobs(jobs, work, recorded, concurrency=concurrency, on_step=on_step)


def store_verdicts(store: Writer, *, scorer: str, model: str) -> Callable[[Any, Scored], None]:
    """A ``record`` for run_scorer that upserts each verdict into the ``scores`` table under ``scorer``.

    Jobs say where: ``thread_id``, ``idx`` and ``subject`` (as ScoreJob does).
    """

    def record(job: Any, result: Scored) -> None:
        row = result.verdict.row(thread_id=job.thread_id, idx=job.idx, scorer=scorer, subject=job.subject, model=model,
                                 latency=round(result.latency, 4), created_at=now())
        store.record_scores([row])

    return record


def error_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"


# --------------------------------------------------------------------------- files


def write_atomic(path: Path, content: str | bytes, *, private: bool = False) -> None:
    """Write a file through a temporary sibling and a rename, so a reader never sees half of it.

    ``private`` makes it owner-only, as the database is: for files holding generated text.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")
    try:
        if isinstance(content, bytes):
            partial.write_bytes(content)
        else:
            partial.write_text(content, encoding="utf-8")
        if private:
            partial.chmod(0o600)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
