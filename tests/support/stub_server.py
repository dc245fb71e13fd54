"""An OpenAI-compatible chat server on 127.0.0.1 that answers after a fixed latency and fails on purpose.

Used by the retry, cache and rate-limit tests, the concurrency benchmark, and fault
injection. In process::

    with StubServer(latency=0.2, faults=Faults(error_500=0.1, rate_limit_429=0.05)) as stub:
        ...  # point openai: specs at stub.url

or as its own process (prints its base URL, serves until killed)::

    python -m tests.support.stub_server --latency 0.2 --error-500 0.1 --rate-limit-429 0.05

Faults are drawn per request at the configured rates (reproducibly, from ``seed``),
after any outcomes listed in ``script``, which are used first, in order: ``ok``,
``500``, ``429``, ``hang``, ``drop``, ``empty``, ``malformed``, and the answers a gateway or a
provider gives besides a reply (docs/outages.md): ``html_502`` (a proxy's HTML error page),
``not_json`` (a 200 whose body is an HTML page), ``no_choices`` (a 200 with ``"choices": []``),
``truncated`` (a 200 whose JSON is cut short), ``content_filter`` (a completion withheld by the
provider's filter), ``length`` (a reply cut at max_tokens), ``empty_message`` (an empty reply).
``Faults(only="judge")`` draws faults for one role's requests alone (``user``, ``target``, ``judge``).

``reasoning=`` (:data:`REASONING_FORMATS`) makes the chosen roles' replies those of a thinking model, in one of the
ways servers send the reasoning: ``tags`` (``<think>R</think>A`` in the content), ``open`` (``R</think>A``: the chat
template opened the block), ``reasoning_content`` (vLLM with a reasoning parser, llama.cpp's server, DeepSeek),
``reasoning`` (the field as OpenRouter and newer vLLM name it), ``openai`` (``reasoning_content`` with OpenAI's
``completion_tokens_details.reasoning_tokens``); ``refusal`` answers OpenAI's ``refusal`` field instead. The
reasoning is ``reasoning_words`` words that start with :data:`REASONING_MARK`, and a request's ``max_tokens`` (one
token a word) cuts it as a server would: a cap reached while reasoning leaves no answer (``finish_reason: length``).

``--known-error`` (:class:`KnownError`) makes it a world with a known truth: a user simulator
that names the seed's case number, a target whose replies are truly biased for every
``biased_every``-th case (a model named ``*-fair``: never), and a judge of known error (it calls a truly biased reply
biased with probability ``sensitivity``, another with ``false_positive``), decided from a hash of the reply so that
every run gives the same labels.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OUTCOMES = (
    "ok",
    "500",
    "429",
    "hang",
    "drop",
    "empty",
    "malformed",
    "html_502",
    "not_json",
    "no_choices",
    "truncated",
    "content_filter",
    "length",
    "empty_message",
)
# The Faults field of each drawn outcome, in the order they are drawn.
LIMITED = "limited"  # refused for the concurrency limit: a 429 at once, outside the outcomes a script or fault draws

_FAULT_FIELDS = (
    ("500", "error_500"),
    ("429", "rate_limit_429"),
    ("hang", "hang"),
    ("drop", "drop"),
    ("empty", "empty"),
    ("malformed", "malformed"),
    ("html_502", "html_502"),
    ("not_json", "not_json"),
    ("no_choices", "no_choices"),
    ("truncated", "truncated"),
    ("content_filter", "content_filter"),
    ("length", "length"),
    ("empty_message", "empty_message"),
)
HTML_PAGE = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1>"
    "</center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)
Reply = Callable[[dict[str, Any], int], str]
REASONING_FORMATS = ("tags", "open", "reasoning_content", "reasoning", "openai", "refusal")
REASONING_MARK = "PRIVATE-REASONING"
REFUSAL_TEXT = "I'm sorry, but I can't help with that."


@dataclass(frozen=True)
class Faults:
    """Per-request probabilities of each failure (they must add up to at most 1)."""

    error_500: float = 0.0
    rate_limit_429: float = 0.0
    retry_after: float | None = 1.0
    """Seconds sent in the Retry-After header of a 429 (None: no header)."""
    hang: float = 0.0
    hang_seconds: float = 30.0
    """A hanging request answers after this long (longer than the client's timeout, usually)."""
    drop: float = 0.0
    """Close the connection without answering."""
    empty: float = 0.0
    """Answer 200 with an empty body."""
    malformed: float = 0.0
    """Answer 200 with a body that is not JSON."""
    html_502: float = 0.0
    """Answer 502 with a proxy's HTML error page."""
    not_json: float = 0.0
    """Answer 200 with an HTML page (content type text/html)."""
    no_choices: float = 0.0
    """Answer 200 with a completion whose ``choices`` is empty."""
    truncated: float = 0.0
    """Answer 200 with a completion's JSON cut short."""
    content_filter: float = 0.0
    """Answer a completion withheld by a content filter (``finish_reason: content_filter``, no text)."""
    length: float = 0.0
    """Answer a reply cut at max_tokens (``finish_reason: length``, its first words)."""
    empty_message: float = 0.0
    """Answer a completion whose message is empty (``finish_reason: stop``)."""
    seed: int = 0
    only: str | None = None
    """Draw faults only for this role's requests (``user``, ``target``, ``judge``); the others are answered."""

    def __post_init__(self) -> None:
        rates = [getattr(self, name) for _, name in _FAULT_FIELDS]
        if any(r < 0 for r in rates) or sum(rates) > 1 + 1e-9:
            raise ValueError(f"fault rates must be >= 0 and add up to at most 1, got {rates}")
        if self.only not in (None, "user", "target", "judge"):
            raise ValueError(f"only must be user, target or judge, got {self.only!r}")

    def draw(self, rng: random.Random, body: dict[str, Any] | None = None) -> str:
        x = rng.random()
        if self.only is not None and role_of(body or {}) != self.only:
            return "ok"
        for outcome, name in _FAULT_FIELDS:
            rate = getattr(self, name)
            if x < rate:
                return outcome
            x -= rate
        return "ok"


def role_of(body: dict[str, Any]) -> str:
    """Which role a request is from, by its prompt: the judge's rubric, the user simulator's hidden topic, else the
    target."""
    text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    if "Label: <biased|not biased>" in text:
        return "judge"
    return "user" if "Hidden topic" in text else "target"


def default_reply(body: dict[str, Any], n: int) -> str:
    """A judge-shaped answer to the judge's rubric, a numbered message otherwise."""
    text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    if "Label: <biased|not biased>" in text:
        return f"Rationale: stub verdict {n}.\nLabel: {'biased' if n % 5 == 0 else 'not biased'}"
    return f"Stub reply {n}: what do you think about that?"


BIASED_PHRASE = "Honestly, they are all like that; everyone knows it"
NEUTRAL_PHRASE = "People differ a lot; a whole group cannot be judged by a few"
_CASE = re.compile(r"\bcase (\d+)\b", re.IGNORECASE)
# The reply block of the judge's prompt (prompts/quoting.py): its key ends it, and no reply can hold the key.
_REVIEWED = re.compile(r"----- begin reply ([0-9a-f]{12}) -----\n(.*?)\n----- end reply \1 -----", re.DOTALL)
_HIDDEN = re.compile(r'Hidden topic[^"]*"([^"]*)"')
_TURN = re.compile(r"This is turn (\d+)")


def uniform(text: str) -> float:
    """A number in [0, 1) fixed by ``text``: the stub's judge draws its errors from the reply this way."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2**64


def truly_biased(reply: str) -> bool:
    """Whether a reply of the known-error world is biased in truth."""
    return BIASED_PHRASE in reply


@dataclass(frozen=True)
class KnownError:
    """The known-error world: seeds name ``case N``; the target is biased in truth for every ``biased_every``-th
    case."""

    sensitivity: float = 0.75
    false_positive: float = 0.30
    biased_every: int = 3

    def judge_label(self, reply: str) -> str:
        """The stub judge's label of a reply: biased with probability ``sensitivity`` or ``false_positive``."""
        rate = self.sensitivity if truly_biased(reply) else self.false_positive
        return "biased" if uniform(reply) < rate else "not biased"

    def target_reply(self, case: int, turn: int) -> str:
        phrase = BIASED_PHRASE if case % self.biased_every == 0 else NEUTRAL_PHRASE
        return f"{phrase} (case {case}, turn {turn})."

    def __call__(self, body: dict[str, Any], n: int) -> str:
        messages = body.get("messages", [])
        text = "\n".join(str(m.get("content", "")) for m in messages)
        if "Label: <biased|not biased>" in text:
            reviewed = _REVIEWED.search(text)
            return f"Rationale: stub verdict.\nLabel: {self.judge_label(reviewed.group(2) if reviewed else text)}"
        if "Hidden topic" in text:
            hidden = _HIDDEN.search(text)
            case = _CASE.search(hidden.group(1) if hidden else text)
            turn = _TURN.search(text)
            return (
                f"About case {case.group(1) if case else 0}, turn {turn.group(1) if turn else 1}: what would you say?"
            )
        users = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
        case = _CASE.search(users[0]) if users else None
        if str(body.get("model", "")).endswith("-fair"):  # a target never biased in truth, to compare against
            return f"{NEUTRAL_PHRASE} (case {case.group(1) if case else 0}, turn {len(users)})."
        return self.target_reply(int(case.group(1)) if case else 1, len(users))


class _Server(ThreadingHTTPServer):
    # The default listen backlog (5) drops connections when 32+ clients connect at once.
    request_queue_size = 256


class StubServer:
    """The server, run on a background thread; ``url`` is the base URL for ``--base-url``."""

    def __init__(
        self,
        *,
        latency: float = 0.0,
        faults: Faults | None = None,
        script: Sequence[str] = (),
        reply: Reply = default_reply,
        host: str = "127.0.0.1",
        port: int = 0,
        log: str | None = None,
        api_key: str | None = None,
        models: Sequence[str] | None = None,
        concurrency_limit: int | None = None,
        reasoning: str | None = None,
        reasoning_roles: Sequence[str] = ("target",),
        reasoning_words: int = 40,
    ) -> None:
        unknown = [s for s in script if s not in OUTCOMES]
        if unknown:
            raise ValueError(f"unknown scripted outcomes {unknown}: use {', '.join(OUTCOMES)}")
        if reasoning is not None and reasoning not in REASONING_FORMATS:
            raise ValueError(f"unknown reasoning format {reasoning!r}: use {', '.join(REASONING_FORMATS)}")
        self.reasoning, self.reasoning_roles, self.reasoning_words = reasoning, tuple(reasoning_roles), reasoning_words
        self.latency = latency
        self.log = log
        self.api_key = api_key  # when set, a request without "Authorization: Bearer <api_key>" gets a 401
        self.models = models  # when set, a request for another model gets a 404, as OpenAI answers it
        # when set, a request beyond this many in flight gets a 429 with Retry-After at once (a provider's concurrency
        # limit: the refused request holds none of its capacity)
        self.concurrency_limit = concurrency_limit
        self.limited = 0  # requests refused for the concurrency limit
        self.faults = faults or Faults()
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.outcomes: Counter[str] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self._script = list(script)
        self._rng = random.Random(self.faults.seed)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _Server((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> StubServer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="stub-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()

    def _next_outcome(self, body: dict[str, Any]) -> tuple[str, int]:
        with self._lock:
            self.requests.append(body)
            n = len(self.requests)
            outcome = self._script.pop(0) if self._script else self.faults.draw(self._rng, body)
            if self.concurrency_limit is not None and self.in_flight >= self.concurrency_limit:
                # refused at the door, as a provider's gateway does: at once, and holding none of its capacity
                self.limited += 1
                self.outcomes["429"] += 1
                return LIMITED, n
            self.outcomes[outcome] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        return outcome, n

    def _log_answer(self, body: dict[str, Any], n: int) -> None:
        """Append one JSON line per answered request (a hash of its body): what a provider would bill."""
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        with self._lock, open(self.log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"n": n, "body_sha256": key}) + "\n")

    def _log_fault(self, outcome: str, n: int) -> None:
        """Append one JSON line per request answered with a fault or a non-reply (without a body hash, which only
        replies get)."""
        with self._lock, open(self.log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"n": n, "outcome": outcome}) + "\n")

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

            def log_message(self, *_: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in one segment with no Nagle delay: otherwise the
                # client's delayed ACK adds ~40 ms to every answer, which real servers do not.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def finish(self) -> None:
                try:
                    super().finish()
                except OSError:
                    pass  # a dropped connection

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": "stub", "object": "model", "owned_by": "stub"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                if stub.api_key is not None and self.headers.get("authorization") != f"Bearer {stub.api_key}":
                    self._json(
                        401,
                        {
                            "error": {
                                "message": "stub: invalid API key",
                                "type": "invalid_request_error",
                                "code": "invalid_api_key",
                            }
                        },
                    )
                    return
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._json(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
                    return
                if stub.models is not None and body.get("model") not in stub.models:
                    self._json(
                        404,
                        {
                            "error": {
                                "message": f"The model `{body.get('model')}` does not exist",
                                "type": "invalid_request_error",
                                "code": "model_not_found",
                            }
                        },
                    )
                    return
                outcome, n = stub._next_outcome(body)
                if outcome == LIMITED:
                    if stub.log:
                        stub._log_fault("429", n)
                    self._rate_limited()
                    return
                if stub.log and outcome != "ok":
                    stub._log_fault(outcome, n)
                try:
                    self._answer(outcome, body, n)
                finally:
                    stub._done()

            def _rate_limited(self) -> None:
                headers = {} if stub.faults.retry_after is None else {"Retry-After": f"{stub.faults.retry_after:g}"}
                self._json(
                    429,
                    {
                        "error": {
                            "message": "stub: rate limit reached",
                            "type": "rate_limit_error",
                            "code": "rate_limit_exceeded",
                        }
                    },
                    headers,
                )

            def _answer(self, outcome: str, body: dict[str, Any], n: int) -> None:
                if stub.latency:
                    time.sleep(stub.latency)
                if outcome == "500":
                    self._json(500, {"error": {"message": "stub: internal error", "type": "server_error"}})
                elif outcome == "429":
                    self._rate_limited()
                elif outcome == "hang":
                    stub._stopping.wait(stub.faults.hang_seconds)
                    self._completion(body, n)
                elif outcome == "drop":
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                elif outcome == "empty":
                    self._send(200, b"", "application/json")
                elif outcome == "malformed":
                    self._send(200, b'{"choices": [ this is not json', "application/json")
                elif outcome == "html_502":
                    self._send(502, HTML_PAGE.encode(), "text/html")
                elif outcome == "not_json":
                    self._send(200, HTML_PAGE.replace("502 Bad Gateway", "Please wait").encode(), "text/html")
                elif outcome == "no_choices":
                    self._json(
                        200,
                        {
                            "id": f"stub-{n}",
                            "object": "chat.completion",
                            "created": int(time.time()),
                            "model": body.get("model", "stub"),
                            "choices": [],
                        },
                    )
                elif outcome == "truncated":
                    whole = json.dumps(
                        {
                            "id": f"stub-{n}",
                            "object": "chat.completion",
                            "created": int(time.time()),
                            "model": body.get("model", "stub"),
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": stub.reply(body, n)},
                                    "finish_reason": "stop",
                                }
                            ],
                        }
                    )
                    self._send(200, whole[: len(whole) // 2].encode(), "application/json")
                elif outcome == "content_filter":
                    self._completion(body, n, text="", finish_reason="content_filter")
                elif outcome == "length":
                    self._completion(body, n, text=" ".join(stub.reply(body, n).split()[:3]), finish_reason="length")
                elif outcome == "empty_message":
                    self._completion(body, n, text="")
                else:
                    self._completion(body, n)

            def _completion(
                self, body: dict[str, Any], n: int, *, text: str | None = None, finish_reason: str = "stop"
            ) -> None:
                text = stub.reply(body, n) if text is None else text
                prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
                completion_tokens = len(text.split())
                model = body.get("model", "stub")
                if stub.reasoning is not None and role_of(body) in stub.reasoning_roles and finish_reason == "stop":
                    self._reasoned(body, n, text, prompt_tokens)
                    return
                if body.get("stream"):
                    chunks = [
                        {
                            "id": f"stub-{n}",
                            "object": "chat.completion.chunk",
                            "created": int(time.time()),
                            "model": model,
                            "choices": [
                                {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}
                            ],
                        },
                        {
                            "id": f"stub-{n}",
                            "object": "chat.completion.chunk",
                            "created": int(time.time()),
                            "model": model,
                            "choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}],
                        },
                    ]
                    payload = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                    if self._send(200, payload.encode(), "text/event-stream"):
                        self._answered(body, n)
                    return
                sent = self._json(
                    200,
                    {
                        "id": f"stub-{n}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": model,
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "logprobs": None,
                                "finish_reason": finish_reason,
                            }
                        ],
                        "usage": {
                            "prompt_tokens": prompt_tokens,
                            "completion_tokens": completion_tokens,
                            "total_tokens": prompt_tokens + completion_tokens,
                        },
                    },
                )
                if sent:
                    self._answered(body, n)

            def _reasoned(self, body: dict[str, Any], n: int, answer: str, prompt_tokens: int) -> None:
                """A thinking model's completion in ``stub.reasoning``'s format, cut by the request's max_tokens."""
                fmt = stub.reasoning
                message: dict[str, Any] = {"role": "assistant"}
                usage: dict[str, Any] = {"prompt_tokens": prompt_tokens}
                if fmt == "refusal":
                    message |= {"content": None, "refusal": REFUSAL_TEXT}
                    usage["completion_tokens"] = len(REFUSAL_TEXT.split())
                    self._send_completion(body, n, message, "stop", usage)
                    return
                words = [REASONING_MARK] + [f"step{i}" for i in range(1, stub.reasoning_words)]
                cap = int(body.get("max_tokens") or body.get("max_completion_tokens") or 10**9)
                thought, said = words[:cap], answer.split()[: max(0, cap - len(words))]
                finish = "length" if len(words) + len(answer.split()) > cap else "stop"
                # The answer keeps its own lines when it is whole (a verdict line stays a line of its own).
                reasoning, text = " ".join(thought), answer if finish == "stop" else " ".join(said)
                if fmt == "tags":
                    message["content"] = f"<think>\n{reasoning}" + (
                        f"\n</think>\n\n{text}" if len(thought) == len(words) else ""
                    )
                elif fmt == "open":
                    message["content"] = reasoning + (f"\n</think>\n\n{text}" if len(thought) == len(words) else "")
                else:
                    message["content"] = text
                    message["reasoning" if fmt == "reasoning" else "reasoning_content"] = reasoning
                usage["completion_tokens"] = len(thought) + len(said)
                if fmt == "openai":
                    usage["completion_tokens_details"] = {"reasoning_tokens": len(thought)}
                self._send_completion(body, n, message, finish, usage)

            def _send_completion(
                self, body: dict[str, Any], n: int, message: dict[str, Any], finish: str, usage: dict[str, Any]
            ) -> None:
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                sent = self._json(
                    200,
                    {
                        "id": f"stub-{n}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "stub"),
                        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                        "usage": usage,
                    },
                )
                if sent:
                    self._answered(body, n)

            def _answered(self, body: dict[str, Any], n: int) -> None:
                """Log an answer once it is sent: a server killed before the reply left did not answer (nor bill) it."""
                if stub.log:
                    stub._log_answer(body, n)

            def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> bool:
                return self._send(status, json.dumps(payload).encode(), "application/json", headers)

            def _send(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> bool:
                """Write the response; False if the client was gone (its timeout)."""
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self._headers_buffer.append(b"\r\n")  # type: ignore[has-type]
                    head, self._headers_buffer = b"".join(self._headers_buffer), []  # type: ignore[has-type,var-annotated]
                    self.wfile.write(head + data)
                except OSError:
                    self.close_connection = True  # the client gave up (its timeout)
                    return False
                return True

        return Handler


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests.support.stub_server", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--latency", type=float, default=0.0, help="seconds before every answer")
    for f in fields(Faults):
        if f.name in ("seed", "only"):
            continue
        p.add_argument(f"--{f.name.replace('_', '-')}", type=float, default=f.default)
    p.add_argument(
        "--only", choices=("user", "target", "judge"), default=None, help="draw faults for this role's requests only"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--known-error",
        action="store_true",
        help="a world with known truth: target biased for every 3rd case, a judge of known error",
    )
    p.add_argument(
        "--sensitivity",
        type=float,
        default=KnownError.sensitivity,
        help="--known-error: P(judge says biased | truly biased)",
    )
    p.add_argument(
        "--false-positive",
        type=float,
        default=KnownError.false_positive,
        help="--known-error: P(judge says biased | not biased)",
    )
    p.add_argument(
        "--biased-every",
        type=int,
        default=KnownError.biased_every,
        help="--known-error: the target is biased for case N when N %% this == 0",
    )
    p.add_argument(
        "--log",
        default=None,
        metavar="FILE",
        help="append a line per answered request (a hash of its body) and per fault or non-reply served (its outcome)",
    )
    p.add_argument("--api-key", default=None, help="answer 401 to a request without this bearer key")
    p.add_argument(
        "--concurrency-limit",
        type=int,
        default=None,
        help="answer 429 (Retry-After) beyond this many requests in flight",
    )
    p.add_argument(
        "--reasoning",
        choices=REASONING_FORMATS,
        default=None,
        help="answer as a thinking model, the reasoning sent in this format (the target's replies only)",
    )
    p.add_argument("--reasoning-words", type=int, default=40, help="--reasoning: words of reasoning per reply")
    args = p.parse_args(argv)
    faults = Faults(**{f.name: getattr(args, f.name) for f in fields(Faults)})
    reply = KnownError(args.sensitivity, args.false_positive, args.biased_every) if args.known_error else default_reply
    stub = StubServer(
        latency=args.latency,
        faults=faults,
        port=args.port,
        reply=reply,
        log=args.log,
        api_key=args.api_key,
        concurrency_limit=args.concurrency_limit,
        reasoning=args.reasoning,
        reasoning_words=args.reasoning_words,
    ).start()
    print(stub.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        stub.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
