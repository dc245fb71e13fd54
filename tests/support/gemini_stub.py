"""A Gemini-format stub on 127.0.0.1: ``POST /v1beta/models/MODEL:generateContent``, as the Gemini API answers it.

Its replies are those of :mod:`tests.support.stub_server` (a judge-shaped verdict to the judge's rubric, a numbered
message otherwise); the roles named in ``thinking_roles`` answer as a thinking model does: a thought part (``"thought":
true``, its text starting with :data:`tests.support.stub_server.REASONING_MARK`) before the answer when the request
asks for the thoughts (``thinkingConfig.includeThoughts``), and ``thoughtsTokenCount`` in the usage either way. A
request's ``maxOutputTokens`` (one token a word) covers thoughts and answer, as Gemini 2.5 counts them. Point
``google_genai:`` specs at it with ``base_url`` and any ``GOOGLE_API_KEY``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.stub_server import REASONING_MARK, default_reply, role_of


class GeminiStub:
    """The server on a background thread; ``url`` is the base URL for a ``google_genai:`` spec."""

    def __init__(self, *, thinking_roles: Sequence[str] = ("target",), thought_words: int = 30) -> None:
        self.thinking_roles, self.thought_words = tuple(thinking_roles), thought_words
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> GeminiStub:
        threading.Thread(target=self._server.serve_forever, name="stub-gemini", daemon=True).start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, body: dict[str, Any], n: int) -> dict[str, Any]:
        """The generateContent response to ``body``, the ``n``-th request."""
        chat = as_chat(body)
        text = default_reply(chat, n)
        config = body.get("generationConfig") or {}
        thinking = config.get("thinkingConfig") or {}
        cap = int(config.get("maxOutputTokens") or 10**9)
        # The API takes the config's field names in either case (the SDK sends some in snake case).
        include = thinking.get("includeThoughts", thinking.get("include_thoughts"))
        budget = thinking.get("thinkingBudget", thinking.get("thinking_budget"))
        thinks = role_of(chat) in self.thinking_roles and budget != 0
        thought = ([REASONING_MARK] + [f"step{i}" for i in range(1, self.thought_words)]) if thinks else []
        thought, said = thought[:cap], text.split()[: max(0, cap - len(thought))]
        parts: list[dict[str, Any]] = []
        if thought and include:
            parts.append({"text": " ".join(thought), "thought": True})
        if said:
            parts.append({"text": " ".join(said)})
        prompt = sum(len(m["content"].split()) for m in chat["messages"])
        usage = {"promptTokenCount": prompt, "candidatesTokenCount": len(said)}
        if thought:
            usage["thoughtsTokenCount"] = len(thought)
        usage["totalTokenCount"] = prompt + len(said) + len(thought)
        finish = "MAX_TOKENS" if len(said) < len(text.split()) else "STOP"
        return {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
            "usageMetadata": usage,
            "modelVersion": "stub-gemini",
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                if not self.path.split("?")[0].endswith(":generateContent"):
                    self._send(404, {"error": {"code": 404, "message": f"no route {self.path}", "status": "NOT_FOUND"}})
                    return
                with stub._lock:
                    stub.requests.append(body)
                    n = len(stub.requests)
                self._send(200, stub.answer(body, n))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def as_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A generateContent request as chat messages (``role`` and ``content``), as the OpenAI stub reads them."""
    messages = []
    if system := body.get("systemInstruction") or body.get("system_instruction"):
        messages.append({"role": "system", "content": " ".join(p.get("text", "") for p in system.get("parts", []))})
    for content in body.get("contents") or []:
        text = " ".join(p.get("text", "") for p in content.get("parts", []) if isinstance(p, dict))
        messages.append({"role": "assistant" if content.get("role") == "model" else "user", "content": text})
    return {"messages": messages}
