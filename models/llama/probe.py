"""A first-use probe of llama.cpp in a child process, so a native crash cannot take a run down.

llama-cpp-python builds llama.cpp from source, and a build made with ``-march=native`` on
one machine (or reused from pip's wheel cache) can contain CPU instructions that another
machine advertises but cannot run: AMX tile instructions on some Xeon VMs fault with
SIGSEGV inside ``ggml_backend_amx_mul_mat``, AVX-512 on an AVX2-only CPU dies with SIGILL.
Such a crash kills the whole process with no Python traceback. So before llama.cpp is first
loaded in-process, a child process loads the model and generates a few tokens; if it dies
by a signal, the caller gets one line naming the cause and the reinstall command.

The verdict is cached per build and machine (llama-cpp-python's version, its shared
libraries' sizes and times, the CPU's flags), so the probe costs once; reinstalling
llama-cpp-python changes the key and probes again.

Run as ``python -m nodes.local_probe MODEL.gguf`` it is the child.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import secrets
import signal
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

PROBE_TIMEOUT_S = 300
PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF"
_PROBE_PROMPT = "The quick brown fox jumps over the lazy dog. " * 8  # > one batch of prompt tokens
_verified: set[str] = set()
_lock = threading.Lock()


class LlamaCrashError(RuntimeError):
    """llama.cpp cannot run on this machine: the probe child died or failed."""


def reinstall_command() -> str:
    """The exact command that replaces llama-cpp-python with a portable (AVX2 baseline) build."""
    version = _llama_version()
    pinned = f"llama-cpp-python=={version}" if version else "llama-cpp-python"
    return f"CMAKE_ARGS=\"{PORTABLE_CMAKE_ARGS}\" pip install --force-reinstall --no-cache-dir --no-deps '{pinned}'"


def cache_path() -> Path:
    """Where verdicts are kept: ``$XDG_CACHE_HOME/dymt-esb/llama-probe.json``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dymt-esb" / "llama-probe.json"


def build_key() -> str:
    """Identifies this llama.cpp build on this CPU: version, shared libraries, CPU flags."""
    parts = [f"llama-cpp-python={_llama_version()}", f"python={sys.version_info[:2]}", platform.machine()]
    lib_dir = _llama_lib_dir()
    if lib_dir is not None:
        for lib in sorted(lib_dir.glob("*.so*")):
            stat = lib.stat()
            parts.append(f"{lib.name}:{stat.st_size}:{stat.st_mtime_ns}")
    parts.append(_cpu_flags())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def ensure_llama_runs(model_path: str, *, child: list[str] | None = None) -> None:
    """Probe llama.cpp once per build and machine; raise LlamaCrashError if it cannot run here.

    ``child`` replaces the probe command (tests use it to simulate a crash).
    """
    key = build_key()
    with _lock:
        if key in _verified:
            return
        verdict = _cached(key)
        if verdict is None:
            verdict = _probe(model_path, child)
            _remember(key, verdict)
        if verdict["ok"]:
            _verified.add(key)
            return
        raise LlamaCrashError(verdict["message"])


def _probe(model_path: str, child: list[str] | None) -> dict:
    argv = child or [sys.executable, "-m", "models.llama.probe", model_path]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        )
    except subprocess.TimeoutExpired:
        # Not cached as a crash: a loaded machine may simply be slow.
        raise LlamaCrashError(
            f"the llama.cpp probe (loading {model_path} in a child process) did not finish in "
            f"{PROBE_TIMEOUT_S} s: check the machine's load, or reinstall llama-cpp-python with "
            f"{reinstall_command()}"
        ) from None
    if done.returncode == 0:
        return {"ok": True, "message": ""}
    if done.returncode < 0:
        name = _signal_name(-done.returncode)
        return {
            "ok": False,
            "message": (
                f"llama.cpp crashed with {name} while the embedded model ran in a probe process: "
                f"this llama-cpp-python build uses CPU instructions this machine cannot run (a "
                f"-march=native build, e.g. AMX on a VM that faults on it); reinstall it portably "
                f"with: {reinstall_command()}"
            ),
        }
    last = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "no output")
    return {
        "ok": False,
        "message": (
            f"llama.cpp could not run the embedded model in a probe process (exit status "
            f"{done.returncode}: {last.strip()}); reinstall it with: {reinstall_command()}"
        ),
    }


def _cached(key: str) -> dict | None:
    try:
        verdicts = json.loads(cache_path().read_text())
        verdict = verdicts.get(key)
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(verdict, dict) and isinstance(verdict.get("ok"), bool) and isinstance(verdict.get("message"), str):
        return verdict
    return None


def _remember(key: str, verdict: dict) -> None:
    """Write the verdict atomically; a cache that cannot be written only means probing again."""
    path = cache_path()
    try:
        try:
            verdicts = json.loads(path.read_text())
            if not isinstance(verdicts, dict):
                verdicts = {}
        except (OSError, ValueError):
            verdicts = {}
        verdicts[key] = verdict
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{secrets.token_hex(4)}.partial")
        partial.write_text(json.dumps(verdicts, indent=1))
        partial.replace(path)
    except OSError:
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _llama_version() -> str | None:
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return None


def _llama_lib_dir() -> Path | None:
    """llama_cpp's folder of shared libraries, found without importing (and so loading) them."""
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return lib if lib.is_dir() else None


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return " ".join(sorted(set(line.partition(":")[2].split())))
    except OSError:
        pass
    return platform.processor()


def _child(model_path: str) -> int:
    """Load the model as the run would (same threads, same buffer types) and generate a few tokens."""
    from llama_cpp import Llama

    llama = Llama(model_path=model_path, n_ctx=512, n_threads=os.cpu_count(), verbose=False)
    llama.create_completion(_PROBE_PROMPT, max_tokens=4, temperature=0.0)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m nodes.local_probe MODEL.gguf", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(_child(sys.argv[1]))
