"""Real headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``): no extra package.

Chromium reads commands from its fd 3 and writes replies and events to its fd 4, each a JSON
object ended by a NUL byte. Enough of the protocol for the report page's tests and benchmark:
open a URL, evaluate JavaScript (awaiting promises), press keys, take screenshots, allow downloads.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser")) if p), None)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--disable-extensions",
    "--mute-audio",
)


class DevToolsError(RuntimeError):
    """Chromium answered a command with an error, or did not answer in time."""


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, profile: Path, *, width: int = 1280, height: int = 900, chromium: str | None = None) -> None:
        binary = chromium or CHROMIUM
        if binary is None:
            raise DevToolsError("no chromium on PATH: apt-get install -y chromium")
        to_browser_r, self._write = os.pipe()
        self._read, from_browser_w = os.pipe()

        def fds() -> None:  # the browser's fd 3 reads our commands, its fd 4 carries its answers
            high = [
                os.dup(to_browser_r),
                os.dup(from_browser_w),
            ]  # out of the way first: a pipe may already sit on 3 or 4
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen(
            [
                binary,
                *FLAGS,
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=fds,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        for domain in ("Page", "Runtime"):
            self.call(f"{domain}.enable", session=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (DevToolsError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass

    # ---------------------------------------------------------------- protocol

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise DevToolsError("chromium did not answer in time")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise DevToolsError(f"chromium closed the pipe (exit status {self.proc.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, *, session: bool = False, timeout: float = 60, **params: Any) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise DevToolsError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, *, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._message(deadline))

    # ---------------------------------------------------------------- page

    def open(self, url: str, *, timeout: float = 60) -> None:
        """Load a page afresh and wait for its load event (by way of about:blank: a new #fragment alone would not
        reload)."""
        for address in ("about:blank", url):
            self.events = [e for e in self.events if e.get("method") != "Page.loadEventFired"]
            self.call("Page.navigate", session=True, url=address)
            self.wait_event("Page.loadEventFired", timeout=timeout)

    def js(self, expression: str, *, timeout: float = 60) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.call(
            "Runtime.evaluate",
            session=True,
            timeout=timeout,
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
        )
        if "exceptionDetails" in result:
            raise DevToolsError(
                f"{expression[:80]}: {result['exceptionDetails'].get('exception', {}).get('description')}"
            )
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 30) -> Any:
        """Poll a JavaScript expression until it is truthy."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.05)
        raise DevToolsError(f"timed out waiting for {expression}")

    def key(self, key: str, *, code: str | None = None, text: str | None = None, shift: bool = False) -> None:
        """Press and release one key in the focused element (Tab, Enter, ArrowDown, a letter...)."""
        codes = {"Tab": 9, "Enter": 13, "Escape": 27, " ": 32, "ArrowDown": 40, "ArrowUp": 38}
        common = {
            "key": key,
            "code": code or key,
            "windowsVirtualKeyCode": codes.get(key, ord(key.upper()[0])),
            "modifiers": 8 if shift else 0,
        }
        self.call(
            "Input.dispatchKeyEvent",
            session=True,
            type="keyDown",
            **common,
            **({"text": text} if text is not None else {"text": "\r"} if key == "Enter" else {}),
        )
        self.call("Input.dispatchKeyEvent", session=True, type="keyUp", **common)

    def screenshot(self, path: Path, *, full: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full:
            params["captureBeyondViewport"] = True
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", session=True, **params)["data"]))
        return path

    def allow_downloads(self, folder: Path) -> None:
        self.call("Browser.setDownloadBehavior", behavior="allow", downloadPath=str(folder), eventsEnabled=True)
