"""The system Chromium, headless, driven over its DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON
messages ended by NUL on file descriptors 3 and 4): open a page, wait for its load, evaluate JavaScript in it.
Enough to click a served page's buttons and read its timing without Playwright or selenium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--remote-debugging-pipe"]


class Chromium:
    """One headless Chromium with one page; `close` ends it."""

    def __init__(self, profile: Path, timeout: float = 60.0) -> None:
        to_child, self._write = os.pipe()
        self._read, from_child = os.pipe()

        def wire() -> None:  # the child's fd 3 reads our commands, its fd 4 writes the answers
            read_end, write_end = os.dup(to_child), os.dup(from_child)  # neither is clobbered by the other's dup2
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.proc = subprocess.Popen([CHROMIUM or "chromium", *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=wire,  # noqa: PLW1509
                                     pass_fds=(3, 4, to_child, from_child))
        os.close(to_child)
        os.close(from_child)
        self.timeout = timeout
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable", session=True)
        self.send("Runtime.enable", session=True)
        self.send("Log.enable", session=True)  # the browser's own messages: CSP violations, failed loads

    def _message(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                raise ConnectionError("chromium closed its pipe: " + self.proc.stderr.read().decode()[-2000:])
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = False) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._message()
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def wait_for(self, method: str) -> dict[str, Any]:
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            event = self._message()
            if event.get("method") == method:
                return event
            self.events.append(event)

    def open(self, url: str) -> None:
        """Navigate the page and wait for its load event."""
        self.events.clear()
        self.send("Page.navigate", {"url": url}, session=True)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of `expression` in the page (a promise is awaited)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True},
                           session=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def console(self) -> list[dict[str, Any]]:
        """Console messages, uncaught exceptions and the browser's log entries (a CSP violation, a failed load)
        the page produced so far."""
        return [e for e in self.events
                if e.get("method") in ("Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded")]

    def close(self) -> None:
        try:
            os.write(self._write, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
            self.proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self._write)
            os.close(self._read)
            if self.proc.stderr:
                self.proc.stderr.close()
