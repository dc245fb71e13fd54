"""A LangSmith API stand-in on 127.0.0.1 that records every request and checks it against langsmith's own schemas.

Enough of the API for ``Client.create_project``, ``Client.batch_ingest_runs`` and
``Client.create_feedback``: ``GET /info``, ``POST /sessions``, ``POST /runs/batch``,
``POST /feedback``. A payload the schemas reject gets a 422 with the reason (so the
client, and the test, fail); an id seen before gets a 409, as LangSmith answers.

    with LangSmithRecorder(size_limit_bytes=20_000) as server:
        ...  # point Client(api_url=server.url) at it; then read server.runs, server.feedback
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from langsmith import schemas

# <%Y%m%dT%H%M%S%fZ><run uuid>, one part per level from the root: what LangSmith orders runs by.
_DOTTED_PART = re.compile(r"^\d{8}T\d{12}Z[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LangSmithRecorder:
    size_limit_bytes: int | None = None
    fail_runs_with: int | None = None
    """Answer every POST /runs/batch with this HTTP status (a server that refuses)."""
    requests: list[Recorded] = field(default_factory=list)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    feedback: dict[str, dict[str, Any]] = field(default_factory=dict)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    rejected: list[str] = field(default_factory=list)
    tenant_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def __enter__(self) -> LangSmithRecorder:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, payload: Any) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _record(self) -> Recorded:
                length = int(self.headers.get("Content-Length") or 0)
                entry = Recorded(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length)
                )
                with recorder._lock:
                    recorder.requests.append(entry)
                return entry

            def do_GET(self) -> None:
                self._record()
                if self.path.split("?")[0] == "/info":
                    config: dict[str, Any] = {"use_multipart_endpoint": False}
                    if recorder.size_limit_bytes:
                        config["size_limit_bytes"] = recorder.size_limit_bytes
                    info = {"version": "0.10.0", "batch_ingest_config": config}
                    schemas.LangSmithInfo(**info)
                    return self._answer(200, info)
                self._answer(404, {"detail": "not found"})

            def do_POST(self) -> None:
                entry = self._record()
                path = self.path.split("?")[0]
                try:
                    if entry.headers.get("content-encoding"):
                        raise ValueError(f"unexpected Content-Encoding {entry.headers['content-encoding']}")
                    payload = json.loads(entry.body)
                    if path == "/sessions":
                        return self._answer(200, recorder._session(payload))
                    if path == "/runs/batch":
                        if recorder.fail_runs_with:
                            return self._answer(recorder.fail_runs_with, {"detail": "refused on purpose"})
                        status = recorder._runs(payload)
                        return self._answer(status, {"detail": "conflict"} if status == 409 else {})
                    if path == "/feedback":
                        status, body = recorder._feedback(payload)
                        return self._answer(status, body)
                except (ValueError, TypeError, KeyError) as exc:  # pydantic's ValidationError is a ValueError
                    with recorder._lock:
                        recorder.rejected.append(f"{path}: {exc}")
                    return self._answer(422, {"detail": str(exc)})
                self._answer(404, {"detail": "not found"})

        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- validation against langsmith.schemas ---------------------------------------------------

    def _session(self, payload: dict[str, Any]) -> dict[str, Any]:
        name = payload["name"]
        with self._lock:
            existing = next((s for s in self.sessions.values() if s["name"] == name), None)
            session = existing or {
                "id": payload.get("id") or str(uuid.uuid4()),
                "name": name,
                "description": payload.get("description"),
                "extra": payload.get("extra"),
                "start_time": datetime.now(UTC).isoformat(),
                "tenant_id": self.tenant_id,
                "reference_dataset_id": None,
            }
            schemas.TracerSession(**session)
            self.sessions[session["id"]] = session
        return session

    def _runs(self, payload: dict[str, Any]) -> int:
        if set(payload) - {"post", "patch"}:
            raise ValueError(f"unexpected batch keys {sorted(set(payload) - {'post', 'patch'})}")
        conflict = False
        for run in payload.get("post", []):
            unknown = set(run) - set(schemas.RunLikeDict.__annotations__)
            if unknown:
                raise ValueError(f"run {run.get('id')} has fields the API does not take: {sorted(unknown)}")
            parsed = schemas.RunBase(**run)  # ids are UUIDs, times datetimes, inputs a dict, ...
            if not run.get("trace_id") or not run.get("dotted_order"):
                raise ValueError(f"run {run['id']} lacks trace_id or dotted_order")
            uuid.UUID(run["trace_id"])
            parts = run["dotted_order"].split(".")
            if not all(_DOTTED_PART.match(part) for part in parts) or not parts[-1].endswith(run["id"]):
                raise ValueError(f"run {run['id']} has a malformed dotted_order {run['dotted_order']!r}")
            if (parsed.parent_run_id is None) != (len(parts) == 1) or not parts[0].endswith(run["trace_id"]):
                raise ValueError(f"run {run['id']}: dotted_order does not match its parent and trace")
            if not run.get("session_name"):
                raise ValueError(f"run {run['id']} names no project (session_name)")
            with self._lock:
                if run["id"] in self.runs:
                    conflict = True
                self.runs[run["id"]] = run
        return 409 if conflict else 202

    def _feedback(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        created = schemas.FeedbackCreate(**payload)
        if created.session_id is None or str(created.session_id) not in self.sessions:
            raise ValueError(f"feedback {created.id} names no known project (session_id)")
        with self._lock:
            if str(created.run_id) not in self.runs:
                raise ValueError(f"feedback {created.id} is on run {created.run_id}, which was never ingested")
            if str(created.id) in self.feedback:
                return 409, {"detail": "feedback already exists"}
            self.feedback[str(created.id)] = payload
        return 200, schemas.Feedback(**payload).model_dump(mode="json")
