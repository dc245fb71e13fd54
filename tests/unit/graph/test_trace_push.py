"""``python -m graph.trace push``: stored runs and judge feedback uploaded with the langsmith client.

The server is tests/support/langsmith_server.py, a real HTTP server on 127.0.0.1 that checks every
payload against langsmith's own schemas (RunBase / RunLikeDict, FeedbackCreate, TracerSession)
and answers 422 to anything they reject.
"""

from __future__ import annotations

import socket

import pytest

from cli import trace as trace_cli
from tests.conftest import SEEDS, default_models, play, scripted
from tests.support.langsmith_server import LangSmithRecorder

LS_KEY = "lsv2_pt_0123456789abcdef0123456789abcdef_0123456789"
SECRET = "svc-canary-0123456789-SECRET"


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = trace_cli.main(list(args))
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]  # the commands exit with a number
    out, err = capsys.readouterr()
    assert len(err.splitlines()) <= 1, f"stderr is not one line: {err!r}"
    return code, " ".join(out.split()), " ".join(err.split())


@pytest.fixture
def played(db, monkeypatch):
    """A run of two dialogues × 2 turns with fake models; the target's replies carry a string that is a secret at push
    time."""
    for name in (
        "LANGSMITH_API_KEY",
        "LANGCHAIN_API_KEY",
        "LANGSMITH_ENDPOINT",
        "LANGCHAIN_ENDPOINT",
        "LANGSMITH_PROJECT",
    ):
        monkeypatch.delenv(name, raising=False)
    target = scripted(lambda m, n: f"Answer {n}, quoting {SECRET}.", spec="fake:target")
    result, store = play(db, default_models(target=target), seeds=SEEDS, turns=2)
    from checkpoints.traces.tables import load_feedback, stored_runs

    runs = stored_runs(store.db)
    stored = {r["id"]: r for r in runs}
    feedback = [f for on_run in load_feedback(store.db, {r["trace_id"] for r in runs}).values() for f in on_run]
    store.close()
    return result, stored, feedback


def test_push_uploads_every_run_and_feedback_of_the_run_in_langsmith_s_schemas(db, played, monkeypatch, capsys):
    result, stored, feedback = played
    monkeypatch.setenv("LANGSMITH_API_KEY", LS_KEY)
    monkeypatch.setenv("MY_SERVICE_API_KEY", SECRET)  # a secret of the uploading process: redacted on the way out
    with LangSmithRecorder(size_limit_bytes=20_000) as server:
        code, out, err = run_cli(
            capsys, "push", "r1", "--endpoint", server.url, "--project", "bias-audit", "--db", str(db)
        )
        assert code == 0, err
        assert server.rejected == []
        assert set(server.runs) == set(stored)  # every run of both dialogues, nothing else
        assert len({r["trace_id"] for r in stored.values()}) == 2
        batches = [r for r in server.requests if r.path == "/runs/batch"]
        assert len(batches) > 1  # split by the server's size limit (20 kB)
        assert {r["session_name"] for r in server.runs.values()} == {"bias-audit"}
        (session,) = server.sessions.values()
        assert session["name"] == "bias-audit"
        calls = [r for r in server.runs.values() if r["run_type"] == "llm"]
        assert len(calls) == 12 and all(r["extra"]["metadata"]["run_id"] == "r1" for r in calls)

        assert set(server.feedback) == {f["id"] for f in feedback} and len(feedback) == 4
        for record in server.feedback.values():
            assert record["key"] == "bias" and record["session_id"] == session["id"]
            assert record["run_id"] in server.runs and server.runs[record["run_id"]]["run_type"] == "llm"
            assert record["feedback_source"]["type"] == "model"
            assert record["trace_id"] == server.runs[record["run_id"]]["trace_id"]

        assert all(r.headers.get("x-api-key") == LS_KEY for r in server.requests if r.method == "POST")
        bodies = b"".join(r.body for r in server.requests).decode()
        assert SECRET not in bodies and "[redacted:MY_SERVICE_API_KEY]" in bodies
        assert LS_KEY not in bodies
        assert out == (
            f"pushed {len(stored)} runs of 2 traces and 4 feedback records of run r1 to project bias-audit at "
            f"{server.url}"
        )

        # Again: the same ids, so nothing new; the server's 409s count as already there.
        code, out, err = run_cli(
            capsys, "push", "r1", "--endpoint", server.url, "--project", "bias-audit", "--db", str(db)
        )
        assert code == 0, err
        assert len(server.feedback) == 4 and len(server.sessions) == 1
        assert "(4 feedback records were already there)" in out


def test_push_takes_a_thread_too_and_the_project_from_the_environment(db, played, monkeypatch, capsys):
    result, stored, _ = played
    thread = result.outcomes[0].thread_id
    monkeypatch.setenv("LANGSMITH_PROJECT", "from-env")
    with LangSmithRecorder() as server:
        monkeypatch.setenv("LANGSMITH_ENDPOINT", server.url)
        code, out, err = run_cli(capsys, "push", thread, "--db", str(db))  # a local server needs no key
        assert code == 0, err
        assert f"of thread {thread} to project from-env" in out
        assert {r["trace_id"] for r in server.runs.values()} == {
            r["trace_id"] for r in stored.values() if r["id"] in server.runs
        } and len({r["trace_id"] for r in server.runs.values()}) == 1


def test_push_refusals_are_one_line(db, played, monkeypatch, capsys):
    code, _, err = run_cli(capsys, "push", "r1", "--db", str(db))
    assert (
        code == 2
        and err == "error: no LangSmith API key: set LANGSMITH_API_KEY (or pass --endpoint for a self-hosted server)"
    )
    code, _, err = run_cli(capsys, "push", "nope", "--endpoint", "http://127.0.0.1:9", "--db", str(db))
    assert code == 2 and err.startswith("error: no trace or thread 'nope'")
    code, _, err = run_cli(capsys, "push", "r1", "--endpoint", "ftp://x", "--db", str(db))
    assert code == 2 and "is not an http(s) URL" in err

    with LangSmithRecorder(fail_runs_with=403) as server:
        code, _, err = run_cli(capsys, "push", "r1", "--endpoint", server.url, "--db", str(db))
        assert code == 1 and err.startswith(f"error: {server.url} did not take the runs:")
        assert server.feedback == {}  # no feedback on runs the server does not have


def test_push_to_nothing_listening_says_so(db, played, capsys):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    code, _, err = run_cli(capsys, "push", "r1", "--endpoint", url, "--db", str(db))
    assert (
        code == 1
        and err == f"error: cannot reach {url}: check the endpoint (--endpoint or $LANGSMITH_ENDPOINT) and the network"
    )
