"""Upload stored traces and judge feedback to LangSmith (or any server speaking its API) with the langsmith client.

Reads through the trace readers (``checkpoints.traces.tables``: the same records ``graph.trace
export`` writes), so what is uploaded is exactly what an export holds; every record
passes through the tracing redactor again, with the secrets of the uploading process's
environment, before it leaves the machine. Runs go in with ``Client.batch_ingest_runs``
(``POST /runs/batch``, split by the server's size limit), feedback with
``Client.create_feedback``, both keyed on the stored ids: pushing twice creates nothing
new (the server answers 409 for ids it has, which counts as already there).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from checkpoints.redaction import Redactor
from checkpoints.traces.tables import load_feedback, load_runs
from checkpoints.traces.tree import langsmith_feedback, langsmith_runs

DEFAULT_ENDPOINT = "https://api.smith.langchain.com"
# The fields LangSmith's run ingestion takes (langsmith.schemas.RunLikeDict); the rest of an
# export record (child ids, feedback stats, token sums) is derived by the server itself.
INGEST_FIELDS = (
    "id",
    "name",
    "run_type",
    "start_time",
    "end_time",
    "inputs",
    "outputs",
    "error",
    "extra",
    "tags",
    "parent_run_id",
    "trace_id",
    "dotted_order",
    "session_name",
)


class PushError(RuntimeError):
    """The server refused or could not be reached; the message says which and what it answered."""


@dataclass
class PushResult:
    """What one push sent: runs, feedback, how many feedback records the server already had, the project."""

    project: str
    project_id: str
    runs: int
    traces: int
    feedback: int
    feedback_already_there: int = 0
    endpoint: str = DEFAULT_ENDPOINT
    errors: list[str] = field(default_factory=list)


def ingest_records(records: Sequence[dict[str, Any]], redactor: Redactor) -> list[dict[str, Any]]:
    """Export records cut to LangSmith's ingestion fields, redacted again as JSON text."""
    out = []
    for record in records:
        run = {name: record[name] for name in INGEST_FIELDS if record.get(name) is not None}
        out.append(json.loads(redactor.json(run)))  # type: ignore[arg-type]
    return out


def push_traces(
    db: Any,
    trace_ids: Sequence[str],
    *,
    project: str,
    api_url: str,
    api_key: str | None,
    redactor: Redactor | None = None,
    description: str | None = None,
) -> PushResult:
    """Send the runs and feedback of ``trace_ids`` to the LangSmith project ``project`` (created if missing)."""
    import langsmith
    from langsmith import utils as ls_utils

    redactor = redactor or Redactor.from_environ()
    runs = load_runs(db, trace_ids)
    feedback = load_feedback(db, trace_ids)
    records = ingest_records(langsmith_runs(runs, feedback, project=project), redactor)
    feedback_records = [json.loads(redactor.json(f)) for f in langsmith_feedback(feedback)]  # type: ignore[arg-type]

    errors: list[Exception] = []
    client = langsmith.Client(
        api_url=api_url,
        api_key=api_key,
        auto_batch_tracing=False,  # every request is sent now, in this call, and its failure reported
        tracing_error_callback=errors.append,
    )
    try:
        try:
            session = client.create_project(project, upsert=True, description=description)
        except (ls_utils.LangSmithConnectionError, OSError):
            raise PushError(
                f"cannot reach {api_url}: check the endpoint (--endpoint or $LANGSMITH_ENDPOINT) and the network"
            ) from None
        except ls_utils.LangSmithError as exc:
            raise PushError(f"{api_url} refused project {project!r}: {_first_line(exc)}") from None
        client.batch_ingest_runs(create=records)
        if errors:
            raise PushError(f"{api_url} did not take the runs: {_first_line(errors[0])}")
        already = 0
        for f in feedback_records:
            try:
                client.create_feedback(
                    run_id=f["run_id"],
                    trace_id=f["trace_id"],
                    key=f["key"],
                    score=f["score"],
                    value=f["value"],
                    comment=f["comment"],
                    feedback_id=f["id"],
                    session_id=session.id,
                    feedback_source_type="model",
                    source_info=f["feedback_source"]["metadata"],
                    stop_after_attempt=3,
                )
            except ls_utils.LangSmithConflictError:
                already += 1
            except ls_utils.LangSmithError as exc:
                raise PushError(f"{api_url} did not take feedback {f['id']}: {_first_line(exc)}") from None
    finally:
        client.close()
    return PushResult(
        project=project,
        project_id=str(session.id),
        runs=len(records),
        traces=len(set(trace_ids)),
        feedback=len(feedback_records),
        feedback_already_there=already,
        endpoint=api_url,
    )


def _first_line(exc: BaseException) -> str:
    """The error's text on one line (the langsmith client breaks its messages over several)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"
