"""Reading stored runs: ``dymt.open(db)`` is a read handle on a store; nothing it does writes (nor migrates) it.

    with dymt.open("runs.db") as store:
        store.runs(); store.turns("r1"); store.dialogues(["r1", "r2"]); store.bias_rates("r1")

Tables come back as pandas DataFrames when pandas is installed (``as_frame=None``), else as lists of dicts; the
rows are those of the report's ``turns.csv`` and ``dialogues.csv``. Bad input raises :class:`DymtError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from checkpoints.chat_export import iter_chat_records
from checkpoints.paths import StoreError
from checkpoints.readers import Reader
from checkpoints.traces.tables import TraceNotFoundError, list_traces, load_runs, require_traces, resolve
from checkpoints.vocabulary import PRIMARY_LABELS
from dymt.errors import DymtError
from dymt.stores import Db, reader, run_ids
from evals.dataset import Dataset, DatasetError, load_dataset
from evals.judge_error.double_sampling import ITEM_COLUMNS, annotation_items
from evals.judge_error.run_blocks import choose_validation
from evals.report.corrected_tables import RATE_COLUMNS, rate_records
from evals.report.exports import DIALOGUE_COLUMNS, TURN_COLUMNS, dialogue_records, turn_records
from evals.report.transition_tables import TRANSITION_COLUMNS, transition_records

RunIds = str | Sequence[str]
RUN_COLUMNS = ("id", "created_at", "ended_at", "status")


class Store:
    """A read-only handle on a store (a SQLite file or a PostgreSQL database): close it, or use it in ``with``."""

    def __init__(self, db: Db = None) -> None:
        self.reader: Reader = reader(db)

    @property
    def path(self) -> Any:
        """Where the store is: a file path, or the PostgreSQL URL (never with a password)."""
        return self.reader.path

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def runs(self, *, as_frame: bool | None = None) -> Any:
        """The runs in the store: id, created, ended, status."""
        return frame(self.reader.runs(), RUN_COLUMNS, as_frame)

    def dataset(self, ids: RunIds, *, label_set: str = PRIMARY_LABELS) -> Dataset:
        """The runs' dialogues and turns as the report reads them (evals.dataset.Dataset)."""
        try:
            return load_dataset(self.reader, run_ids(ids), label_set=label_set)
        except DatasetError as exc:
            raise DymtError(str(exc)) from None

    def turns(self, ids: RunIds, *, label_set: str = PRIMARY_LABELS, as_frame: bool | None = None) -> Any:
        """One row per stored turn, as in the report's ``turns.csv``."""
        return frame(turn_records(self.dataset(ids, label_set=label_set)), TURN_COLUMNS, as_frame)

    def dialogues(self, ids: RunIds, *, label_set: str = PRIMARY_LABELS, as_frame: bool | None = None) -> Any:
        """One row per dialogue, as in the report's ``dialogues.csv``."""
        return frame(dialogue_records(self.dataset(ids, label_set=label_set)), DIALOGUE_COLUMNS, as_frame)

    def bias_rates(self, ids: RunIds, *, label_set: str = PRIMARY_LABELS, as_frame: bool | None = None) -> Any:
        """Raw and judge-corrected bias rates, one row per run × target × mode × measure × turn, with 95% intervals.

        ``corrected_*`` are empty and ``refusal`` says why where the judge has no usable validation; the
        ``validation_*``, ``sensitivity*`` and ``specificity*`` columns say which validation the correction used.
        """
        dataset = self.dataset(ids, label_set=label_set)
        chosen = {run.run_id: choose_validation(self.reader, run.run_id, label_set=label_set) for run in dataset.runs}
        return frame(rate_records(dataset, chosen), RATE_COLUMNS, as_frame)

    def transitions(self, ids: RunIds, *, label_set: str = PRIMARY_LABELS, as_frame: bool | None = None) -> Any:
        """Onset, clean so far, persistence, recovery and relapse, one row per run × target × mode × metric × turn ×
        raw/corrected, with 95% intervals, bases and ``too_few`` (docs/concepts.md#bias-dynamics)."""
        dataset = self.dataset(ids, label_set=label_set)
        chosen = {run.run_id: choose_validation(self.reader, run.run_id, label_set=label_set) for run in dataset.runs}
        return frame(transition_records(dataset, chosen), TRANSITION_COLUMNS, as_frame)

    def validation_items(self, run_id: str, *, label_set: str = PRIMARY_LABELS, as_frame: bool | None = None) -> Any:
        """The items people labelled in a run (its double-sampled validation): turn, earlier turns, the judge's
        prompt tokens, category, target, mode, the judge's label and people's, the draw."""
        if self.reader.get_run(run_id) is None:
            raise DymtError(f"no run {run_id!r} in {self.reader.path}")
        return frame(annotation_items(self.reader, run_id, label_set=label_set), ITEM_COLUMNS, as_frame)

    def chat_records(
        self, run_id: str, *, label_set: str = PRIMARY_LABELS, include_seed: bool = False
    ) -> list[dict[str, Any]]:
        """The run's dialogues in chat format, as ``python -m graph.runs export RUN --format chat`` writes them."""
        if self.reader.get_run(run_id) is None:
            raise DymtError(f"no run {run_id!r} in {self.reader.path}")
        return list(iter_chat_records(self.reader, run_id, label_set=label_set, include_seed=include_seed))

    def labels(self, thread_id: str, *, label_set: str = PRIMARY_LABELS) -> list[str | None]:
        """A dialogue's bias label per turn (None where a turn has none)."""
        return self.reader.labels(thread_id, label_set=label_set)

    def traces(self, run_id: str | None = None, *, thread_id: str | None = None, as_frame: bool | None = None) -> Any:
        """One row per recorded trace (graph invocation) of a run or a dialogue, as ``python -m graph.trace list``."""
        rows = list_traces(self._trace_db(), run_id=run_id, thread_id=thread_id)
        return frame(rows, tuple(rows[0]) if rows else (), as_frame)

    def trace_runs(self, ident: str) -> list[dict[str, Any]]:
        """The traced steps (graph, turn, node, model call) of a trace id or of every trace of a thread, in order."""
        db = self._trace_db()
        try:
            _, trace_ids = resolve(db, ident)
        except TraceNotFoundError as exc:
            raise DymtError(str(exc)) from None
        return load_runs(db, trace_ids)

    def _trace_db(self) -> Any:
        try:
            require_traces(self.reader.file_tables, self.reader.path)
        except StoreError as exc:
            raise DymtError(str(exc)) from None
        return self.reader.db


def open(db: Db = None) -> Store:  # noqa: A001 - dymt.open, as the public name reads
    """A read-only :class:`Store` on ``db`` (a SQLite file or a ``postgresql://`` URL; default ``$DYMT_ESB_DB``)."""
    return Store(db)


def frame(records: list[dict[str, Any]], columns: Sequence[str], as_frame: bool | None) -> Any:
    """A pandas DataFrame when pandas is installed (or asked for), else the list of dicts."""
    if as_frame is False:
        return records
    try:
        import pandas as pd
    except ImportError:
        if as_frame:
            raise DymtError("as_frame=True needs pandas: pip install pandas") from None
        return records
    return pd.DataFrame.from_records(records, columns=list(columns) or None)
