"""``python -m MODULE ARGS`` as a process forked from one that has already imported the tool.

A new interpreter spends about two seconds of CPU importing LangGraph, LangChain and the tool before it does
anything; the suite starts hundreds of such processes. Here they are forked by a multiprocessing fork server that
imported those modules once (per test process), so each starts in milliseconds. What a test checks is unchanged:
each run is its own process, with its own pid, environment, working directory, stdout and stderr, killed by real
signals and reaped with its real exit status; the module runs as ``__main__`` as ``python -m`` runs it.

:func:`popen` returns a :class:`ForkedRun` with the parts of ``subprocess.Popen`` the tests use; :func:`run` is
``subprocess.run(..., capture_output=True, text=True)``. Tests of the command line itself (what a shell runs when a
printed command is pasted) start a real interpreter instead.
"""

from __future__ import annotations

import atexit
import importlib.util
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

REPO = Path(__file__).resolve().parents[2]
PRELOAD = ["tests.support.fake_cli", "dymt", "cli.run"]  # what every command of the tool imports

_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def _main(module: str, args: list[str], env: dict[str, str], cwd: str, out: str, err: str, stdin: str) -> None:
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path, flags in ((0, stdin, os.O_RDONLY), (1, out, os.O_WRONLY), (2, err, os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
    try:
        code = run_as_main(module, args)
    except BaseException:  # noqa: BLE001 (an uncaught error: printed and exit 1, as the interpreter does)
        import traceback

        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_as_main(module: str, args: list[str]) -> int:
    """``python -m module args`` in this process, as the interpreter runs it: the module afresh as
    ``__main__``, in this process's environment; its exit status (a ``SystemExit`` message: printed, status 1)."""
    _consoles_for_this_environment()
    spec = importlib.util.find_spec(module)
    sys.argv = [spec.origin if spec and spec.origin else module, *args]
    sys.modules.pop(module, None)  # not the copy the fork server imported
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 1
        return exc.code or 0
    return 0


def _consoles_for_this_environment() -> None:
    """The tool's consoles (cli/common.py) read COLUMNS, NO_COLOR and TERM when they are made, which was in the fork
    server: make them again, in place (whoever imported them holds the same objects), in this process's environment."""
    from rich.console import Console

    common = sys.modules.get("cli.common")
    for console in (getattr(common, "console", None), getattr(common, "error_console", None)):
        if isinstance(console, Console):
            console.__init__(stderr=console.stderr)  # type: ignore[misc]


class ForkedRun:
    """A forked ``python -m MODULE ARGS``: ``pid``, ``poll``, ``wait``, ``communicate``, ``send_signal``, ``kill``."""

    def __init__(self, module: str, args: Sequence[str], *, env: Mapping[str, str], cwd: Path, stdin: str) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="forked-")
        folder = Path(self._dir.name)
        self._out, self._err, inp = folder / "stdout", folder / "stderr", folder / "stdin"
        for path, text in ((self._out, ""), (self._err, ""), (inp, stdin)):
            path.write_text(text, encoding="utf-8")
        self.args = [sys.executable, "-m", module, *args]
        self._process = _context.Process(
            target=_main, args=(module, list(args), dict(env), str(cwd), str(self._out), str(self._err), str(inp))
        )
        self._process.start()
        self.pid: int = self._process.pid  # type: ignore[assignment]
        self.returncode: Any = None  # as typeshed types Popen.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode  # type: ignore[return-value]

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self._out.read_text(encoding="utf-8"), self._err.read_text(encoding="utf-8")

    @property
    def stdout(self) -> TextIO:
        """What the process wrote to stdout so far, from the start (a new reader each time)."""
        return open(self._out, encoding="utf-8")

    @property
    def stderr(self) -> TextIO:
        return open(self._err, encoding="utf-8")

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self._process.kill()


def popen(
    module: str, *args: str, env: Mapping[str, str] | None = None, cwd: Path = REPO, stdin: str = ""
) -> ForkedRun:
    """Start ``python -m module args`` (in ``cwd``, with ``env``: this process's environment by default)."""
    return ForkedRun(module, args, env=os.environ if env is None else env, cwd=cwd, stdin=stdin)


def run(
    module: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path = REPO,
    input: str = "",  # noqa: A002 (subprocess.run's name)
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([python, -m, module, *args], capture_output=True, text=True)``, forked."""
    proc = popen(module, *args, env=env, cwd=cwd, stdin=input)
    try:
        out, err = proc.communicate(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode or 0, out, err)
