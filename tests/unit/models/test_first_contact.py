"""A wrong setting fails fast: an endpoint that never answered and refuses a call (connection refused, unknown host,
TLS, 401, 403, 404) stops graph.run within seconds with one line and status 2, writing nothing; once an endpoint has
answered (in this run or before a resume) the outage budget applies. ``--check`` calls each model once."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from models.circuit import EndpointSettingError, ProviderCircuit, setting_failure
from tests.conftest import REPO
from tests.support import forked
from tests.support.provider_outage import StubProcess, free_port, stored_turns
from tests.support.stub_server import StubServer


class _Status(Exception):
    def __init__(self, status: int, text: str = "") -> None:
        super().__init__(f"Error code: {status} {text}")
        self.status_code = status


class _APIConnectionError(Exception):
    """As the OpenAI SDK raises it: the socket's error two causes down."""


def _wrapped(inner: BaseException) -> Exception:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise _APIConnectionError("Connection error.") from exc
    except _APIConnectionError as outer:
        return outer


@pytest.mark.parametrize(
    ("exc", "what"),
    [
        (_wrapped(ConnectionRefusedError(111, "Connection refused")), "connection refused"),
        (_wrapped(socket.gaierror(-2, "Name or service not known")), "unknown host"),
        (_wrapped(ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")), "TLS error"),
        (_Status(401), "HTTP 401"),
        (_Status(403), "HTTP 403"),
        (_Status(404), "HTTP 404"),
        (_Status(400, "API key not valid. Please pass a valid API key."), "HTTP 401"),
        (_Status(400, "context too long"), None),
        (_Status(500), None),
        (_Status(429), None),
        (TimeoutError("slow"), None),
        (_wrapped(ConnectionResetError()), None),
    ],
)
def test_what_a_first_failure_says_about_the_setting(exc, what):
    assert setting_failure(exc) == what


def test_the_circuit_refuses_an_endpoint_that_never_answered_and_rides_out_one_that_did():
    down = ProviderCircuit("openai @ http://127.0.0.1:9/v1")
    refused = down.first_contact(
        _wrapped(ConnectionRefusedError(111, "Connection refused")), role="target", spec="openai:m"
    )
    assert isinstance(refused, EndpointSettingError)
    assert str(refused) == (
        "the target model openai:m at http://127.0.0.1:9/v1 did not answer (connection refused): "
        "nothing listens there: start the server or correct --base-url"
    )
    with pytest.raises(EndpointSettingError):
        down.admit()  # every later call fails at once
    assert down.report().refused == str(refused)  # what a --processes child sends its parent

    up = ProviderCircuit("openai @ http://x/v1")
    assert up.first_contact(_Status(500), role="user", spec="openai:m") is None  # may pass: the outage logic's
    up.answered(spec="openai:m")
    assert up.first_contact(_wrapped(ConnectionRefusedError()), role="user", spec="openai:m") is None  # an outage now
    assert up.first_contact(_Status(401), role="user", spec="openai:m") is None
    other = up.first_contact(_Status(404), role="target", spec="openai:typo")  # another model, never answered here
    assert other is not None and "check the model name in the spec" in str(other)

    resumed = ProviderCircuit("google_genai")
    resumed.contacted()
    assert resumed.first_contact(_Status(404), role="judge", spec="google_genai:m") is None
    fresh = ProviderCircuit("google_genai")
    line = str(fresh.first_contact(_Status(401), role="judge", spec="google_genai:m"))
    assert "at the google_genai API" in line and "GOOGLE_API_KEY" in line


def test_the_watch_cancels_a_run_once_an_endpoint_is_refused():
    from graph.running.endpoints import stopping_on_wrong_setting

    failures: list[str] = []
    cancelled = []

    async def run():
        async with stopping_on_wrong_setting(lambda: failures):
            try:
                await asyncio.sleep(0.3)
                failures.append("the user model x at y did not answer (HTTP 401): check KEY")
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

    started = time.monotonic()
    with pytest.raises(EndpointSettingError, match="HTTP 401"):
        asyncio.run(run())
    assert cancelled and time.monotonic() - started < 5

    async def done():
        async with stopping_on_wrong_setting(lambda: []):
            await asyncio.sleep(0.3)
            return 7

    assert asyncio.run(done()) == 7


def test_a_cancellation_from_elsewhere_stays_a_cancellation_under_the_watch():
    from graph.running.endpoints import stopping_on_wrong_setting

    async def run():
        async with stopping_on_wrong_setting(lambda: []):
            await asyncio.sleep(60)

    async def main():
        task = asyncio.ensure_future(run())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def _run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> tuple[subprocess.CompletedProcess, float]:
    clean = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN")) and k != "OPENAI_BASE_URL"}
    clean.update(PYTHONPATH=str(REPO), **(env or {}))
    started = time.monotonic()
    done = forked.run("graph.run", *args, cwd=REPO, env=clean, timeout=timeout)
    return done, time.monotonic() - started


def _served(url: str, db: Path, *extra: str) -> list[str]:
    return [
        "--user-model",
        "openai:stub",
        "--target-model",
        "openai:stub",
        "--judge-model",
        "openai:stub",
        "--base-url",
        url,
        "--db",
        str(db),
        "--per-category",
        "1",
        "--turns",
        "2",
        "--no-trace",
        *extra,
    ]


@pytest.mark.slow
def test_nothing_listening_at_the_base_url_stops_the_run_at_once_with_one_line_and_status_2(tmp_path: Path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    db = tmp_path / "never.db"
    done, seconds = _run(*_served(url, db, "--outage-budget", "10m"))
    assert done.returncode == 2, done.stderr[-2000:]
    assert seconds < 15
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [
        f"error: the user model openai:stub at {url} did not answer (connection refused): nothing listens "
        "there: start the server or correct --base-url; nothing was written"
    ], done.stderr
    assert done.stdout == "" and not db.exists()  # the file this command created is gone with its run


@pytest.mark.slow
def test_a_wrong_key_or_path_stops_the_run_naming_what_to_check_and_an_existing_store_keeps_only_its_runs(
    tmp_path: Path,
):
    db = tmp_path / "runs.db"
    with StubServer(api_key="right") as stub:
        done, _ = _run(*_served(stub.url, db, "--run-id", "kept", "--json"), env={"OPENAI_API_KEY": "right"})
        assert done.returncode == 0, done.stderr[-2000:]
        done, seconds = _run(
            *_served(stub.url, db, "--run-id", "wrong-key", "--json", "--no-cache"), env={"OPENAI_API_KEY": "wrong"}
        )
        assert done.returncode == 2 and seconds < 15, done.stderr[-2000:]
        assert (
            "did not answer (HTTP 401): the key was refused: check OPENAI_API_KEY; nothing was written" in done.stderr
        )
        assert done.stdout == ""
        stub.models = ("stub",)  # the user model answers; the target's name has a typo
        typo = [*_served(stub.url, db, "--run-id", "typo", "--no-cache")]
        typo[typo.index("--target-model") + 1] = "openai:stubb"
        done, seconds = _run(*typo, env={"OPENAI_API_KEY": "right"})
        assert done.returncode == 2 and seconds < 15, done.stderr
        assert (
            f"error: the target model openai:stubb at {stub.url} did not answer (HTTP 404): no such model or path: "
            "check the model name in the spec" in done.stderr
        )
    from checkpoints.store import open_writer

    store = open_writer(db, create=False)
    try:
        assert [r["id"] for r in store.runs()] == ["kept"]  # the failed runs left nothing behind
    finally:
        store.close()
    assert len(stored_turns(db, "kept")) == 6


@pytest.mark.slow
def test_a_resumed_run_whose_endpoint_answered_before_waits_out_an_outage_instead(tmp_path: Path):
    stub = StubProcess(tmp_path / "answered.log").start()
    db = tmp_path / "resume.db"
    try:
        done, _ = _run(*_served(stub.url, db, "--run-id", "paused", "--pause-after", "1", "--json"))
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        stub.stop()
    done, _ = _run(*_served(stub.url, db, "--run-id", "paused", "--outage-budget", "3s", "--json"), timeout=120)
    assert done.returncode == 75, done.stderr[-2000:]  # the outage budget, not a setting
    assert "past the outage budget" in done.stderr
    assert all(turns == [(1, True, True)] for turns in stored_turns(db, "paused").values())


@pytest.mark.slow
def test_check_calls_each_distinct_model_once_and_says_how_it_answered(tmp_path: Path):
    with StubServer() as stub:
        done, _ = _run(
            "--user-model",
            "openai:stub",
            "--judge-model",
            "openai:stub",
            "--target-model",
            "openai:a",
            "openai:b",
            "--base-url",
            stub.url,
            "--db",
            str(tmp_path / "c.db"),
            "--check",
            "--json",
        )
        calls = len(stub.requests)
    assert done.returncode == 0, done.stderr
    checks = json.loads(done.stdout)
    assert calls == 3 and sorted(c["spec"] for c in checks) == ["openai:a", "openai:b", "openai:stub"]
    assert [c["roles"] for c in checks if c["spec"] == "openai:stub"] == [["user", "judge"]]
    assert all(c["error"] is None and c["reply"] for c in checks)
    assert not (tmp_path / "c.db").exists()
    url = f"http://127.0.0.1:{free_port()}/v1"
    done, seconds = _run(
        "--user-model",
        "openai:stub",
        "--judge-model",
        "openai:stub",
        "--target-model",
        "openai:stub",
        "--base-url",
        url,
        "--check",
    )
    assert done.returncode == 2 and seconds < 15
    assert f"error  user/judge/target openai:stub (openai @ {url}" in done.stderr
    assert "connection refused" in done.stderr


@pytest.mark.slow
def test_a_wrong_setting_leaves_no_run_behind_on_either_store(tmp_path: Path, backend_db):
    """On SQLite or PostgreSQL: the run the command began is removed again; the store's other runs stay."""
    from checkpoints.store import open_writer

    db = str(tmp_path / "kept.db") if isinstance(backend_db, Path) else backend_db
    with StubServer() as stub:
        done, _ = _run(*_served(stub.url, db, "--run-id", "kept", "--json", "--limit", "1"))
        assert done.returncode == 0, done.stderr[-2000:]
    url = f"http://127.0.0.1:{free_port()}/v1"
    done, seconds = _run(*_served(url, db, "--run-id", "never"))
    assert done.returncode == 2 and seconds < 15, done.stderr[-2000:]
    assert done.stderr.strip().endswith("nothing was written") and len(done.stderr.strip().splitlines()) == 1
    store = open_writer(db, create=False)
    try:
        assert [r["id"] for r in store.runs()] == ["kept"] and store.dialogues("never") == []
    finally:
        store.close()
