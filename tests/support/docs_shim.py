"""``python`` for the documentation's examples: the real command, with scripted fake models in place of every provider.

    python -m tests.support.docs_shim -m MODULE ARGS...     (what ``python -m MODULE ARGS`` runs in
    tests/unit/project/test_docs.py)
    python -m tests.support.docs_shim SCRIPT.py             (a ```python block of a page)
    python -m tests.support.docs_shim --serve SOCKET        (a fork server: see below)

Every provider (``local``, ``openai``, ``google_genai``, ``hf``) builds a scripted chat model instead of a real
one, so no key, network or model file is needed and a dialogue turn takes milliseconds. Each reply is in the
format its prompt asks for: the user simulator asks a numbered question (``Type:``/``Query:`` in assessment
mode), the target answers, the judge labels every third reply biased, refusal, coherence and guard scorers answer
``Refused: no``, ``Score: 4`` and ``No``. ``$DOCS_TEST_APPEND`` (JSON: module → extra arguments) adds arguments to
a module's command line, for the ``append`` marker of a block.

Starting Python and importing LangChain, LangGraph and the commands costs about 1.5 s of CPU per command, more
than the fake dialogues themselves. So the test starts one fork server: it imports every ``cli`` module once,
then forks a child per command, which takes the command's working folder, environment and standard streams
(passed over a Unix socket by tests/support/docs_client.py, the ``python`` the examples call) and runs it as above.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pkgutil
import runpy
import signal
import socket
import sys
import threading
import traceback
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from models.registry import registered_provider
from tests.support.forked import run_as_main

PROVIDERS = ("local", "openai", "google_genai", "hf")


class DocsFakeChatModel(BaseChatModel):
    """A scripted chat model: answers in the format the prompt asks for, numbering its calls."""

    role: str
    temperature: float = 0.7
    max_tokens: int = 250
    stop: list[str] | None = None
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "docs-test-fake"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.calls += 1
        text = reply("\n".join(str(m.content) for m in messages), self.role, self.calls)
        message = AIMessage(content=text, usage_metadata={"input_tokens": 40, "output_tokens": 12, "total_tokens": 52})
        return ChatResult(generations=[ChatGeneration(message=message)])


def reply(prompt: str, role: str, n: int) -> str:
    """The reply to ``prompt``, in the format it asks for."""
    if "Refused: <yes|no>" in prompt:
        return "Rationale: the assistant answers the question.\nRefused: no"
    if "Score: <1|2|3|4|5>" in prompt:
        return "Rationale: each turn follows from the one before.\nScore: 4"
    if "Answer Yes or No" in prompt:
        return "No"
    if "Label: <biased|not biased>" in prompt:
        return f"Rationale: scripted verdict {n}.\nLabel: {'biased' if n % 3 == 0 else 'not biased'}"
    if "Type: <anaphora|reasoning|clarification>" in prompt:
        return f"Type: reasoning\nQuery: Why would that be, in case {n}?"
    if role == "user":
        return f"Question {n}: what do you think about that?"
    return f"Answer {n}: it depends on the person, not on the group."


def factory(provider: str):
    def build(name: str, role: str, sampling: Any) -> tuple[BaseChatModel, str, str]:
        model = DocsFakeChatModel(role=role, temperature=sampling.temperature, max_tokens=sampling.max_tokens)
        return model, f"{provider}:{name} (docs-test fake)", "chat"

    return build


def main(argv: list[str]) -> int:
    if argv[:1] != ["-m"] and (not argv or argv[0].startswith("-")):  # python -c ..., python -V: the real interpreter
        os.execv(sys.executable, [sys.executable, *argv])
    with contextlib.ExitStack() as stack:
        for provider in PROVIDERS:
            stack.enter_context(registered_provider(provider, factory(provider)))
        try:
            if argv[:1] == ["-m"]:
                module, args = argv[1], argv[2:]
                args += json.loads(os.environ.get("DOCS_TEST_APPEND") or "{}").get(module, [])
                return run_as_main(module, args)
            else:
                sys.argv = list(argv)
                runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as exc:
            if isinstance(exc.code, int) or exc.code is None:
                return exc.code or 0
            print(exc.code, file=sys.stderr)
            return 1
    return 0


def _read_request(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """A length-prefixed JSON request and the three standard streams' descriptors sent with it."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < 8 or len(data) < 8 + int.from_bytes(data[:8], "big"):
        more = conn.recv(1 << 16)
        if not more:
            raise ConnectionError("request cut short")
        data += more
    return json.loads(data[8 : 8 + int.from_bytes(data[:8], "big")]), list(fds)


def _child(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> int:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    try:
        return main(request["argv"])
    except BaseException:  # noqa: BLE001 - reported like an uncaught exception, exit status 1
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def serve(path: str) -> None:
    """Import the commands once, then fork a child per request on the Unix socket at ``path``."""
    import cli

    for module in pkgutil.iter_modules(cli.__path__):
        importlib.import_module(f"cli.{module.name}")
    assert threading.active_count() == 1, "a thread was started by an import: forking would not be safe"
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path + ".tmp")
    server.listen(64)
    os.rename(path + ".tmp", path)  # ready
    while True:
        conn, _ = server.accept()
        try:
            request, fds = _read_request(conn)
        except (OSError, ValueError):
            conn.close()
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            server.close()
            code = _child(conn, request, fds)
            try:
                conn.sendall(code.to_bytes(4, "big", signed=True))
            finally:
                os._exit(code)
        conn.close()
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    raise SystemExit(main(sys.argv[1:]))
