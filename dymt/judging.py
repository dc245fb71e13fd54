"""Judging: label a run's turns again with another judge (``dymt.rejudge``), or score a judge on standalone
(statement, reply) pairs against reference labels (``dymt.validate_judge``, the library's ``python -m evals.judge``).

Progress is a :class:`Labelled` event per reply labelled; results are :class:`dymt.results.RejudgeResult` and
:class:`dymt.results.JudgeResult`, whose JSON is the commands' ``--json``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import prompts
from checkpoints.cache import ResponseCache, caching_for
from checkpoints.location import PostgresURL
from checkpoints.migrations import SchemaTooNewError
from checkpoints.paths import StoreError, check_db_path
from checkpoints.readers import open_reader
from checkpoints.store import Writer, open_writer
from checkpoints.vocabulary import BIASED, NOT_BIASED, PRIMARY_LABELS
from dymt.arguments import string
from dymt.errors import DymtError
from dymt.events import EventSink, Labelled, ignore
from dymt.files import write_atomic
from dymt.results import JudgeDrift, JudgeResult, RejudgeResult
from dymt.running import run_coroutine
from dymt.stores import Db, location, writer
from evals.dataset import DatasetError, check_label_set
from evals.scorers.judge_pairs import (
    PairFileError,
    against_references,
    items_validation,
    judge_pairs,
    read_pairs,
    record_pairs_validation,
    validation_items,
    verdict_lines,
)
from evals.scorers.label_sets import LabellerError, build_labeller, prepare_labeller, register_set, stored_endpoint
from evals.scorers.rejudge_jobs import pending_turns, run_judge_template
from evals.scorers.rejudge_jobs import rejudge as label_again
from evals.stats.agreement import label_set_agreement
from nodes.verdicts import reading_counts


class _Steps:
    """Counts the labelling loop's steps into :class:`Labelled` events (the first one says the total)."""

    def __init__(self, total: int, on_event: EventSink) -> None:
        self.done, self.total, self.on_event = 0, total, on_event
        on_event(Labelled(0, total))

    def __call__(self) -> None:
        self.done += 1
        self.on_event(Labelled(self.done, self.total))


def judge_prompt_template(path: str | os.PathLike[str] | None) -> prompts.PromptTemplate | None:
    """The rubric file replacing the judge prompt (``--judge-prompt FILE``), checked; None for none."""
    if path is None:
        return None
    try:
        return prompts.load_file(Path(path), role="judge")
    except prompts.PromptError as exc:
        raise DymtError(f"judge_prompt={str(path)!r}: {exc}") from None


def rejudge(
    run_id: str,
    *,
    judge_model: str,
    name: str | None = None,
    base_url: str | None = None,
    max_concurrency: int = 4,
    redo: bool = False,
    n_boot: int = 1000,
    seed: int = 0,
    judge_prompt: str | os.PathLike[str] | None = None,
    cache: bool = False,
    db: Db = None,
    on_event: EventSink = ignore,
) -> RejudgeResult:
    """Label every stored turn of ``run_id`` again with ``judge_model`` as label set ``name`` (default: the spec).

    The dialogues are not regenerated: the new judge sees what the run's judge saw. Calling it again continues where
    it stopped (``redo=True`` labels every turn again). The result has the agreement with the run's own labels.
    """
    run_id = string(run_id, "run_id")
    store = writer(db)
    try:
        template = judge_prompt_template(judge_prompt)
        if template is None:
            template = run_judge_template(store, run_id)
        responses = ResponseCache(store.path) if cache else None
        try:
            return _rejudge(
                store,
                run_id,
                judge_model=judge_model,
                name=name,
                base_url=base_url,
                template=template,
                cache=responses,
                max_concurrency=max_concurrency,
                redo=redo,
                n_boot=n_boot,
                seed=seed,
                on_event=on_event,
            )
        finally:
            if responses is not None:
                responses.close()
    finally:
        store.close()


def _rejudge(
    store: Writer,
    run_id: str,
    *,
    judge_model: str,
    name: str | None,
    base_url: str | None,
    template: Any,
    cache: ResponseCache | None,
    max_concurrency: int,
    redo: bool,
    n_boot: int,
    seed: int,
    on_event: EventSink,
) -> RejudgeResult:
    try:
        lab = prepare_labeller(
            store,
            run_id,
            kind="bias",
            prompt="judge_bias",
            spec=judge_model,
            name=name,
            flag="--judge-model",
            base_url=base_url,
            template=template,
            cache=cache,
        )
    except LabellerError as exc:
        raise DymtError(str(exc)) from None
    run_id, name = lab.run.run_id, lab.name
    jobs, skipped = pending_turns(store, run_id, name, redo=redo)
    if lab.existing is None and not jobs:
        raise DymtError(f"run {run_id!r} has no stored replies to label")

    async def go():
        if lab.existing is None:
            # The judge calibrates each case against its own context (nodes.judge.call_judge): no set-wide prior.
            register_set(
                store,
                run_id,
                "bias",
                name,
                model=lab.model,
                prompt=lab.template,
                prompt_hash=lab.digest,
                content_free_p_yes=None,
            )
        return await label_again(
            store, jobs, lab.model, label_set=name, concurrency=max_concurrency, on_step=_Steps(len(jobs), on_event)
        )

    with caching_for(run_id):  # the replies it caches are the run's (deleted with it)
        tally = run_coroutine(go())
    try:
        check_label_set(store, run_id, name)
    except DatasetError as exc:
        raise DymtError(str(exc)) from None
    agreement = label_set_agreement(store, [run_id], PRIMARY_LABELS, name, n_boot=n_boot, seed=seed)
    return RejudgeResult(
        run_id=run_id,
        label_set=name,
        labelled=tally.done,
        unparsed=tally.unparsed,
        skipped=skipped,
        failed=tally.failed,
        first_error=tally.first_error,
        agreement=dataclasses.asdict(agreement),
        detail=agreement,
    )


def validate_judge(
    file: str | os.PathLike[str],
    *,
    judge_model: str,
    base_url: str | None = None,
    out: str | os.PathLike[str] | None = None,
    max_concurrency: int = 4,
    n_boot: int = 1000,
    seed: int = 0,
    judge_prompt: str | os.PathLike[str] | None = None,
    db: Db = None,
    record: bool = True,
    on_event: EventSink = ignore,
) -> JudgeResult:
    """Label the (statement, reply) pairs of a JSONL ``file`` with ``judge_model`` and score it against their
    reference labels; with ``record`` (and references) the score goes into the store, where run summaries with this
    judge and prompt cite it and correct their rates for its error. ``out`` receives one JSON line per verdict."""
    try:
        if not isinstance(file, (str, os.PathLike)):
            raise DymtError(f"file={file!r}: give the path of a JSONL file of (statement, reply) pairs")
        pairs = read_pairs(Path(file))
    except PairFileError as exc:
        raise DymtError(str(exc)) from None
    out = None if out is None else Path(out)
    if out is not None and out.is_dir():
        raise DymtError(f"out={str(out)!r} is a directory: give a file path such as {out / 'verdicts.jsonl'}")
    template = judge_prompt_template(judge_prompt)
    where = _record_location(db) if record and any(p.gold is not None for p in pairs) else None
    # The model is built (and the embedded one probed) before the store is opened: a model that cannot run leaves
    # nothing written.
    try:
        model = build_labeller(
            judge_model, flag="--judge-model", base_url=base_url or _stored_endpoint(db, judge_model), seed=seed
        )
    except LabellerError as exc:
        raise DymtError(str(exc)) from None
    if template is not None:
        model = dataclasses.replace(model, prompt=template)
    store = _open_writer(where)
    try:
        return _judge(
            pairs,
            model,
            Path(file),
            out=out,
            store=store,
            template=template,
            max_concurrency=max_concurrency,
            n_boot=n_boot,
            seed=seed,
            on_event=on_event,
        )
    finally:
        if store is not None:
            store.close()


def _judge(
    pairs: list,
    model: Any,
    file: Path,
    *,
    out: Path | None,
    store: Writer | None,
    template: Any,
    max_concurrency: int,
    n_boot: int,
    seed: int,
    on_event: EventSink,
) -> JudgeResult:
    verdicts, tally = run_coroutine(
        judge_pairs(pairs, model, concurrency=max_concurrency, on_step=_Steps(len(pairs), on_event))
    )
    if out is not None:
        write_atomic(out, verdict_lines(pairs, verdicts, model.spec), private=True)
    labels = [v["label"] if v else None for v in verdicts]
    biased, parsed = labels.count(BIASED), labels.count(BIASED) + labels.count(NOT_BIASED)
    scores = against_references(pairs, labels, n_boot=n_boot, seed=seed)
    recorded = None
    items = validation_items(pairs, verdicts)
    drift = None
    if scores is not None:
        turns = max([1, *(i["turn"] for i in items)])
        drift = items_validation("evals.judge", items).drift(turns)
    if scores is not None and store is not None and not tally.failed:
        digest = record_pairs_validation(store, model, file, scores, template=template, items=items)
        validation = items_validation(f"evals.judge:{model.spec}@{digest[:12]}", items)
        recorded = {
            "db": str(store.path),
            "prompt_sha256": digest,
            "validation": validation.describe(),
            "refusal": validation.refusal(),
        }
    return JudgeResult(
        judge_model=model.spec,
        pairs=len(pairs),
        biased=biased,
        parsed=parsed,
        unparsed=tally.unparsed,
        failed=tally.failed,
        first_error=tally.first_error,
        scores=None if scores is None else dataclasses.asdict(scores),
        recorded=recorded,
        out=None if out is None else str(out),
        grammar=reading_counts((v["read_as"], v["rationale"]) for v in verdicts if v is not None),
        detail=scores,
        drift=None if drift is None else JudgeDrift.from_dict(drift.as_dict()),
    )


def _record_location(db: Db) -> Any:
    where = location(db)
    try:
        return where if isinstance(where, PostgresURL) else check_db_path(where)
    except StoreError as exc:
        raise DymtError(str(exc)) from None


def _open_writer(where: Any) -> Writer | None:
    if where is None:
        return None
    try:
        return open_writer(where)
    except (StoreError, SchemaTooNewError) as exc:
        raise DymtError(str(exc)) from None


def _stored_endpoint(db: Db, spec: str) -> str | None:
    """Where the store's newest run that played ``spec`` called it (read-only; None without a store or such a run)."""
    try:
        where = location(db)
        if not isinstance(where, PostgresURL) and not where.exists():
            return None
        with open_reader(where) as reader:
            return stored_endpoint(reader, spec)
    except (StoreError, DymtError):
        return None
