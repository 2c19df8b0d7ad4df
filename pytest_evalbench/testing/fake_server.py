"""A scripted, OpenAI-compatible chat server for tests and the performance script.

Why a home-grown server: the plugin talks to models only through the official `openai` client, so
the only faithful way to exercise retries, timeouts, rate limits and broken bodies is to speak real
HTTP to it. This module does that with the standard library only, binds to 127.0.0.1 exclusively
and stops promptly even while handlers are sleeping in a scripted delay.

Typical use::

    with FakeLLMServer(sequence("first", Reply(status=429, headers={"Retry-After": "0"}))) as srv:
        client = OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
"""

from __future__ import annotations

import argparse
import http.client
import importlib
import itertools
import json
import math
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Union

__all__ = ["FakeLLMServer", "Reply", "Responder", "by_model", "main", "sequence"]

_LOOPBACK = "127.0.0.1"
_ENDLESS = "\x00endless"  # marks a scripted endless answer between _chat and do_POST (never sent)


@dataclass
class Reply:
    """One scripted answer of the fake server.

    Every fault a real endpoint can produce is a field here, so a test states the fault it wants
    instead of monkeypatching the client.
    """

    content: str | None = ""
    tool_calls: list[dict[str, Any]] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str = "stop"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None
    delay: float | None = None
    drop_connection: bool = False
    endless: bool = False
    """Answer 200 with a chunked body that never ends (until the client hangs up): a hostile endpoint."""


Responder = Callable[[dict[str, Any]], Union[Reply, str, dict[str, Any]]]
"""Gets the parsed request JSON; a str means Reply(content=str), a dict means JSON content."""


def _echo_ok(request: dict[str, Any]) -> Reply:
    """Default responder: a fixed "ok" keeps tests that do not care about content short."""
    return Reply(content="ok")


def _coerce(answer: Reply | str | dict[str, Any]) -> Reply:
    """Normalise what a responder returned, so responders can stay one-liners."""
    if isinstance(answer, Reply):
        return answer
    if isinstance(answer, str):
        return Reply(content=answer)
    if isinstance(answer, dict):
        return Reply(content=json.dumps(answer))
    raise TypeError(f"responder returned {type(answer).__name__}; expected Reply, str or dict")


_ERROR_KINDS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "bad_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "forbidden"),
    404: ("not_found_error", "not_found"),
    408: ("timeout_error", "timeout"),
    409: ("conflict_error", "conflict"),
    422: ("invalid_request_error", "unprocessable_entity"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def _error_body(status: int, message: str | None) -> bytes:
    """OpenAI-style error JSON, so the client builds its usual APIStatusError subclasses."""
    kind, code = _ERROR_KINDS.get(status, ("server_error" if status >= 500 else "api_error", str(status)))
    if not message:
        try:
            message = f"{status} {http.client.responses[status]}"
        except KeyError:
            message = f"HTTP {status}"
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


def _estimate(text: str) -> int:
    """Roughly four characters per token: good enough for cost and budget arithmetic in tests."""
    return math.ceil(len(text) / 4)


class _Dropped(Exception):
    """Raised inside a handler to close the socket without answering."""


class _HTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer tuned for many short keep-alive requests and a quiet stderr."""

    daemon_threads = True
    request_queue_size = 1024  # a burst of 128+ new connections must not wait on SYN retries
    allow_reuse_address = True
    owner: FakeLLMServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hanging up (timeouts, drop tests) are expected; do not print tracebacks."""


class _Handler(BaseHTTPRequestHandler):
    """Routes /v1/chat/completions and /v1/models to the owning FakeLLMServer."""

    protocol_version = "HTTP/1.1"
    server_version = "FakeLLM/1.0"
    sys_version = ""
    disable_nagle_algorithm = True  # headers and body go out as one packet anyway; avoid 40 ms stalls
    wbufsize = -1  # buffered: status line, headers and body are flushed together
    server: _HTTPServer

    def setup(self) -> None:
        """Register the socket so stop() can unblock threads idling on keep-alive reads."""
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        """Unregister and close quietly even when the peer already went away."""
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.owner._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the per-request access log: it would flood test output."""

    # -- plumbing ---------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        """Write one complete response, always with Content-Length so keep-alive works."""
        self.send_response(status)
        extra = {k.lower(): v for k, v in (headers or {}).items()}
        if "content-type" not in extra:
            self.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            if name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _drop(self) -> None:
        """Close without a response: the client sees the server disconnect mid-request."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    # -- routes -----------------------------------------------------------------------------------

    def do_GET(self) -> None:
        """Only /v1/models exists; some clients probe it before chatting."""
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v1/_stats":  # out-of-process use (performance script): counters as JSON
            owner = self.server.owner
            body: dict[str, Any] = {"requests": len(owner.requests), "peak_concurrency": owner.peak_concurrency,
                    "rejected": owner.rejected}
            self._send(200, json.dumps(body).encode())
        elif path in ("/v1/models", "/models"):
            body = {"object": "list",
                    "data": [{"id": "fake", "object": "model", "created": 0, "owned_by": "pytest-evalbench"}]}
            self._send(200, json.dumps(body).encode())
        else:
            self._send(404, _error_body(404, f"no route for GET {path}"))

    def do_POST(self) -> None:
        """Chat completions; everything else is a 404 in OpenAI's error shape."""
        raw = self._read_body()
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v1/_control":  # out-of-process use: {"latency": s, "reset": true}
            control = json.loads(raw or b"{}")
            if control.get("reset"):
                self.server.owner.reset()
            if "latency" in control:
                self.server.owner.latency = float(control["latency"])
            if "max_in_flight" in control:
                self.server.owner.max_in_flight = control["max_in_flight"]
            self._send(200, b"{}")
            return
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send(404, _error_body(404, f"no route for POST {path}"))
            return
        owner = self.server.owner
        if not owner._enter():
            self._send(429, _error_body(429, "too many requests in flight"), owner.limit_headers)
            return
        answer: tuple[int, bytes, dict[str, str]] | None = None
        try:
            answer = self._chat(owner, raw)
        except _Dropped:
            pass
        finally:
            # Leave before writing: once a client holds its answer the request no longer counts
            # as in flight, so peak_concurrency and reset() never see a stale handler.
            owner._leave()
        if answer is None:
            self._drop()
        elif answer[2].get(_ENDLESS):
            self._send_endless()
        else:
            self._send(*answer)

    def _send_endless(self) -> None:
        """A chunked body of 64 KiB chunks, written until the client goes away or the server stops."""
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"%x\r\n%s\r\n" % (1 << 16, b'{"choices": ' + b" " * ((1 << 16) - 12))
        try:
            while not self.server.owner._stopping.is_set():
                self.wfile.write(chunk)
                self.wfile.flush()
        except OSError:
            pass

    def _chat(self, owner: FakeLLMServer, raw: bytes) -> tuple[int, bytes, dict[str, str]]:
        """Record the request, ask the responder, then wait out latency and delay."""
        try:
            request = json.loads(raw or b"null")
            if not isinstance(request, dict):
                raise ValueError("request body must be a JSON object")
        except ValueError as exc:
            if owner._wait(owner.latency):
                raise _Dropped from None
            return 400, _error_body(400, f"invalid JSON body: {exc}"), {}
        request["_headers"] = {k.lower(): v for k, v in self.headers.items()}
        owner._record(request)
        try:
            reply = _coerce(owner._responder(request))
            status, body, headers = _render(reply, request, owner._next_id())
        except Exception as exc:  # a broken responder must not take the server down
            reply = Reply()
            status, body, headers = 500, _error_body(500, f"{type(exc).__name__}: {exc}"), {}
        if owner._wait(owner.latency + (reply.delay or 0.0)):
            raise _Dropped  # stop() interrupted the wait: the server is going away
        if reply.drop_connection:
            raise _Dropped
        if reply.endless:
            return status, b"", {_ENDLESS: "1"}
        return status, body, headers


def _render(reply: Reply, request: dict[str, Any], seq: int) -> tuple[int, bytes, dict[str, str]]:
    """Build status, body and headers for one Reply (error JSON, raw bytes or a chat.completion)."""
    headers = dict(reply.headers)
    if reply.raw_body is not None:
        return reply.status, reply.raw_body, headers
    if reply.status != 200:
        return reply.status, _error_body(reply.status, reply.content), headers
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    prompt = reply.prompt_tokens
    if prompt is None:
        prompt = _estimate(json.dumps(request.get("messages", [])))
    completion = reply.completion_tokens
    if completion is None:
        completion = _estimate(reply.content or "")
    body = {
        "id": f"chatcmpl-fake-{seq}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or "fake",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }
    return reply.status, json.dumps(body).encode(), headers


class FakeLLMServer:
    """A scripted OpenAI-compatible endpoint on 127.0.0.1, run in a background thread.

    It records every chat request and the peak number handled at once, so tests can assert on
    what the plugin sent and on how parallel it really was.
    """

    def __init__(self, responder: Responder | None = None, *, latency: float = 0.0,
                 host: str = _LOOPBACK, port: int = 0) -> None:
        if host not in (_LOOPBACK, "localhost"):
            raise ValueError(f"FakeLLMServer binds to {_LOOPBACK} only, not {host!r}")
        self.latency: float = latency
        self.requests: list[dict[str, Any]] = []
        self.peak_concurrency: int = 0
        self.max_in_flight: int | None = None
        """Enforced limit: a request beyond it is answered 429 at once (not recorded, counted in
        `rejected`), as a provider's concurrency or rate limiter would."""
        self.limit_headers: dict[str, str] = {}
        """Headers of those 429s (e.g. Retry-After, x-ratelimit-remaining-requests)."""
        self.rejected = 0
        self._responder: Responder = responder or _echo_ok
        self._port = port
        self._lock = threading.Lock()
        self._active = 0
        self._ids = itertools.count(1)
        self._sockets: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> FakeLLMServer:
        """Bind and serve in a daemon thread; returns self so `FakeLLMServer().start()` chains."""
        if self._httpd is not None:
            raise RuntimeError("FakeLLMServer is already running")
        self._stopping = threading.Event()
        httpd = _HTTPServer((_LOOPBACK, self._port), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"FakeLLMServer:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop promptly: wake sleeping handlers, close keep-alive sockets, release the port."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=2.0)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- public knobs -----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (useful when constructed with port=0)."""
        if self._httpd is None:
            raise RuntimeError("FakeLLMServer is not running; call start() first")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """What to pass as `base_url` to the OpenAI client."""
        return f"http://{_LOOPBACK}:{self.port}/v1"

    def set_responder(self, responder: Responder) -> None:
        """Swap the script between phases of a test without restarting the server."""
        self._responder = responder

    def reset(self) -> None:
        """Forget recorded requests and the concurrency peak (the list object is kept)."""
        with self._lock:
            self.requests.clear()
            self.peak_concurrency = 0
            self.rejected = 0

    # -- used by the handler ----------------------------------------------------------------------

    def _record(self, request: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(request)

    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def _enter(self) -> bool:
        """Count a request in; False (and counted as rejected) when it is over `max_in_flight`."""
        with self._lock:
            if self.max_in_flight is not None and self._active >= self.max_in_flight:
                self.rejected += 1
                return False
            self._active += 1
            self.peak_concurrency = max(self.peak_concurrency, self._active)
            return True

    def _leave(self) -> None:
        with self._lock:
            self._active -= 1

    def _track(self, sock: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._sockets.add(sock)
            else:
                self._sockets.discard(sock)

    def _wait(self, seconds: float) -> bool:
        """Sleep that stop() interrupts; True means the server is stopping."""
        if seconds <= 0:
            return self._stopping.is_set()
        return self._stopping.wait(seconds)


# -- responder helpers ----------------------------------------------------------------------------


def by_model(routes: dict[str, Responder], default: Responder | None = None) -> Responder:
    """Route on request["model"], so one server can play candidate and judge at the same time."""

    def route(request: dict[str, Any]) -> Reply | str | dict[str, Any]:
        model = request.get("model")
        responder = routes.get(model) if isinstance(model, str) else None
        if responder is None:
            responder = default
        if responder is None:
            return Reply(status=404, content=f"The model {model!r} does not exist")
        return responder(request)

    return route


def sequence(*replies: Reply | str | dict[str, Any] | Responder) -> Responder:
    """Answer with the given replies in call order, repeating the last one once exhausted.

    Thread-safe, so the order is the order in which requests reached the server. A callable item
    is invoked with the request, which lets a script mix fixed and computed answers.
    """
    if not replies:
        raise ValueError("sequence() needs at least one reply")
    lock = threading.Lock()
    position = [0]

    def next_reply(request: dict[str, Any]) -> Reply | str | dict[str, Any]:
        with lock:
            item = replies[min(position[0], len(replies) - 1)]
            position[0] += 1
        if callable(item):
            return item(request)
        return item

    return next_reply


def schema_answer(request: dict[str, Any]) -> dict[str, Any]:
    """Answer like a provider that enforces the JSON Schema in `response_format` and nothing more:
    the smallest valid object. Arrays get exactly `minItems` items (1 when the schema sets none),
    strings `minLength` characters (or a short distinct text), integers `minimum` (or 1), enums
    their first value. A client that needs more than its schema says will not get it."""
    root = ((request.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    counter = itertools.count(1)

    def build(node: dict[str, Any]) -> Any:
        if "$ref" in node:
            return build(root.get("$defs", {})[node["$ref"].rsplit("/", 1)[-1]])
        for key in ("anyOf", "oneOf", "allOf"):
            if key in node:
                return build(node[key][0])
        if "enum" in node:
            return node["enum"][0]
        kind = node.get("type")
        if kind == "object":
            return {name: build(sub) for name, sub in node.get("properties", {}).items()}
        if kind == "array":
            return [build(node.get("items", {})) for _ in range(node.get("minItems", 1))]
        if kind == "integer":
            return int(node.get("minimum", 1))
        if kind == "number":
            return float(node.get("minimum", 1))
        if kind == "boolean":
            return False
        text = f"text {next(counter)}"
        return text.ljust(int(node.get("minLength", 0)), ".")

    return build(root)


# -- command line ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Serve "ok" until SIGTERM/SIGINT: lets the performance script run the server out of process."""
    parser = argparse.ArgumentParser(prog="python -m pytest_evalbench.testing.fake_server",
                                     description="Scripted OpenAI-compatible server on 127.0.0.1.")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds every chat response waits")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--reply", default="ok", help="assistant content of every answer")
    parser.add_argument("--responder", metavar="MODULE:NAME", help="import this Responder instead of --reply")
    args = parser.parse_args(argv)

    done = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGINT, on_signal)
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, on_signal)
    text: str = args.reply
    responder: Responder = lambda request: Reply(content=text)  # noqa: E731
    if args.responder:
        module, _, name = args.responder.partition(":")
        responder = getattr(importlib.import_module(module), name)
    with FakeLLMServer(responder, latency=args.latency, port=args.port) as server:
        print(server.base_url, flush=True)
        while not done.wait(0.2):  # short waits keep signal handling responsive on every platform
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
