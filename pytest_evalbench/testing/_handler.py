"""The fake server's HTTP side: the request handler, its routes and how a `Reply` becomes bytes, and
the state the handler shares with `FakeLLMServer` (recorded requests, counters, knobs).

Rate limits. A provider's request limit for the fake server: R requests per minute, enforced as a token
bucket that holds `burst` seconds' worth (the short-period enforcement real providers apply to a
per-minute limit), with OpenAI's headers on every answer and a 429 beyond it.
"""

from __future__ import annotations

import http.client
import itertools
import json
import math
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from pytest_evalbench.testing._batches import BatchDesk
from pytest_evalbench.testing.scripts import Reply, Responder, coerce, echo_ok
from pytest_evalbench.testing.tiers import FLEX_REFUSAL, FlexRefusals, PromptCache

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


def _error_body(status: int, message: str | None, code: str | None = None) -> bytes:
    """OpenAI-style error JSON, so the client builds its usual APIStatusError subclasses."""
    kind, usual = _ERROR_KINDS.get(status, ("server_error" if status >= 500 else "api_error", str(status)))
    code = code or usual
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


class ServerState:
    """What the handler reads and counts: the script, latency, limits and the recorded requests.

    It records every chat request and the peak number handled at once, so tests can assert on
    what the plugin sent and on how parallel it really was.
    """

    def __init__(self, responder: Responder | None, latency: float) -> None:
        self.latency: float = latency
        self.requests: list[dict[str, Any]] = []
        self.peak_concurrency: int = 0
        self.max_in_flight: int | None = None
        """Enforced limit: a request beyond it is answered 429 at once (not recorded, counted in
        `rejected`), as a provider's concurrency or rate limiter would."""
        self.limit_headers: dict[str, str] = {}
        """Headers of those 429s (e.g. Retry-After, x-ratelimit-remaining-requests)."""
        self.rejected = 0
        self.rate_window: RateWindow | None = None
        """Enforced requests per minute (`RateWindow`): x-ratelimit-* headers on every chat answer,
        429 with Retry-After beyond it (counted in its `limited`, not recorded)."""
        self.flex = FlexRefusals()
        """Flex requests to refuse with 429 "resource unavailable" (`flex.remaining`; not recorded,
        counted in `flex.refused`)."""
        self.prompt_cache: PromptCache | None = None
        """When set, answers report the prompt tokens the provider's cache would have read."""
        self._responder: Responder = responder or echo_ok
        self.batch = BatchDesk()
        """The Batch API's files, batches and knobs (`_batches.py`): its lines are not in `requests`."""
        self._lock = threading.Lock()
        self._active = 0
        self._ids = itertools.count(1)
        self._sockets: set[socket.socket] = set()
        self._stopping = threading.Event()

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


class QuietHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer tuned for many short keep-alive requests and a quiet stderr."""

    daemon_threads = True
    request_queue_size = 1024  # a burst of 128+ new connections must not wait on SYN retries
    allow_reuse_address = True
    owner: ServerState

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hanging up (timeouts, drop tests) are expected; do not print tracebacks."""


class Handler(BaseHTTPRequestHandler):
    """Routes /v1/chat/completions and /v1/models to the owning FakeLLMServer."""

    protocol_version = "HTTP/1.1"
    server_version = "FakeLLM/1.0"
    sys_version = ""
    disable_nagle_algorithm = True  # headers and body go out as one packet anyway; avoid 40 ms stalls
    wbufsize = -1  # buffered: status line, headers and body are flushed together
    server: QuietHTTPServer

    def setup(self) -> None:
        """Register the socket so stop() can unblock threads idling on keep-alive reads (over TLS,
        after the handshake: a client that refuses the certificate ends the connection there)."""
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()
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

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None, trickle: float | None = None) -> None:
        """Write one complete response, always with Content-Length so keep-alive works; with `trickle`,
        its body one byte at a time, `trickle` seconds apart (until the client goes away or the server stops)."""
        self.send_response(status)
        extra = {k.lower(): v for k, v in (headers or {}).items()}
        if "content-type" not in extra:
            self.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            if name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if trickle is None:
            self.wfile.write(body)
            self.wfile.flush()
            return
        self.close_connection = True
        try:
            self.wfile.flush()
            for i in range(len(body)):
                if self.server.owner._wait(trickle):
                    return
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
        except OSError:
            pass

    def _send_wire(self, data: bytes) -> None:
        """Write `data` as it is, then close: whatever a broken endpoint sends instead of an answer."""
        self.close_connection = True
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            pass
        self._drop()

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
        path = self._route()
        if path == "/v1/_stats":  # out-of-process use (performance script): counters as JSON
            owner = self.server.owner
            body: dict[str, Any] = {"requests": len(owner.requests), "peak_concurrency": owner.peak_concurrency,
                    "rejected": owner.rejected,
                    "limited": owner.rate_window.limited if owner.rate_window else 0}
            self._send(200, json.dumps(body).encode())
        elif path.startswith(("/v1/batches/", "/v1/files/")):
            owner = self.server.owner
            status, raw = owner.batch.get(path, owner._responder, _render)
            self._send(status, raw if status == 200 else _error_body(status, f"no such object: {path}"),
                       {"Content-Type": "application/octet-stream"} if path.endswith("/content") else None)
        elif path in ("/v1/models", "/models"):
            body = {"object": "list",
                    "data": [{"id": "fake", "object": "model", "created": 0, "owned_by": "pytest-evalbench"}]}
            self._send(200, json.dumps(body).encode())
        else:
            self._send(404, _error_body(404, f"no route for GET {path}"))

    def _route(self) -> str:
        """The request's path, without query or trailing slash; a request sent through a proxy names
        the whole URL (absolute form, RFC 9112 3.2.2), which a server accepts as well."""
        target = self.path
        if target.startswith(("http://", "https://")):
            target = urlsplit(target).path
        return target.split("?", 1)[0].rstrip("/")

    def do_POST(self) -> None:
        """Chat completions; everything else is a 404 in OpenAI's error shape."""
        raw = self._read_body()
        path = self._route()
        if path == "/v1/_control":  # out-of-process use: {"latency": s, "reset": true}
            control = json.loads(raw or b"{}")
            if control.get("reset"):
                self.server.owner.reset()
            if "latency" in control:
                self.server.owner.latency = float(control["latency"])
            if "max_in_flight" in control:
                self.server.owner.max_in_flight = control["max_in_flight"]
            if "rate_limit" in control:  # requests per minute (None: no limit), optional "burst" seconds
                rpm = control["rate_limit"]
                self.server.owner.rate_window = RateWindow(float(rpm), float(control.get("burst", 1.0))) if rpm else None
            self._send(200, b"{}")
            return
        if path in ("/v1/files", "/v1/batches"):
            status, made = self.server.owner.batch.post(path, raw, self.headers.get("Content-Type") or "")
            self._send(status, json.dumps(made).encode())
            return
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send(404, _error_body(404, f"no route for POST {path}"))
            return
        owner = self.server.owner
        limit_headers: dict[str, str] = {}
        if owner.rate_window is not None:
            admitted, limit_headers = owner.rate_window.take()
            if not admitted:
                self._send(429, _error_body(429, "Rate limit reached for requests"), limit_headers)
                return
        if owner.flex.refuse(raw):
            self._send(429, _error_body(429, FLEX_REFUSAL, "resource_unavailable"))
            return
        if not owner._enter():
            self._send(429, _error_body(429, "too many requests in flight"), owner.limit_headers)
            return
        answer: tuple[Reply, int, bytes, dict[str, str]] | None = None
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
            return
        reply, status, body, headers = answer
        if reply.wire is not None:
            self._send_wire(reply.wire)
        elif reply.endless:
            self._send_endless()
        else:
            self._send(status, body, {**limit_headers, **headers}, reply.trickle)

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

    def _chat(self, owner: ServerState, raw: bytes) -> tuple[Reply, int, bytes, dict[str, str]]:
        """Record the request, ask the responder, then wait out latency and delay."""
        try:
            request = json.loads(raw or b"null")
            if not isinstance(request, dict):
                raise ValueError("request body must be a JSON object")
        except ValueError as exc:
            if owner._wait(owner.latency):
                raise _Dropped from None
            return Reply(), 400, _error_body(400, f"invalid JSON body: {exc}"), {}
        request["_headers"] = {k.lower(): v for k, v in self.headers.items()}
        request["_target"] = self.path  # the whole URL when the request came through a proxy
        owner._record(request)
        try:
            reply = coerce(owner._responder(request))
            cache = owner.prompt_cache.usage(request) if owner.prompt_cache is not None else {}
            status, body, headers = _render(reply, request, owner._next_id(), cache)
        except Exception as exc:  # a broken responder must not take the server down
            reply = Reply()
            status, body, headers = 500, _error_body(500, f"{type(exc).__name__}: {exc}"), {}
        if owner._wait(owner.latency + (reply.delay or 0.0)):
            raise _Dropped  # stop() interrupted the wait: the server is going away
        if reply.drop_connection:
            raise _Dropped
        return reply, status, body, headers


def _render(reply: Reply, request: dict[str, Any], seq: int,
            cache: dict[str, Any] | None = None) -> tuple[int, bytes, dict[str, str]]:
    """Build status, body and headers for one Reply (error JSON, raw bytes or a chat.completion);
    `cache`: usage fields of the provider's prompt cache (`PromptCache`), which `reply.cached_tokens`
    overrides."""
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
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion, **(cache or {})}
    if reply.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    body: dict[str, Any] = {
        "id": f"chatcmpl-fake-{seq}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or "fake",
        "choices": [{"index": 0, "message": message, "logprobs": reply.logprobs,
                     "finish_reason": reply.finish_reason}],
        "usage": usage,
    }
    if isinstance(request.get("service_tier"), str):  # the tier that served it, as OpenAI names it
        body["service_tier"] = request["service_tier"]
    return reply.status, json.dumps(body).encode(), headers


def duration(seconds: float) -> str:
    """Seconds in OpenAI's reset format: "20ms", "1s", "6m0s", "1h2m3.5s"."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{secs:.3f}".rstrip("0").rstrip(".") + "s"
    if minutes or hours:
        text = f"{int(minutes)}m{text}"
    return f"{int(hours)}h{text}" if hours else text


class RateWindow:
    """At most `per_minute` requests a minute, `burst` seconds' worth at once; thread-safe."""

    def __init__(self, per_minute: float, burst: float = 1.0) -> None:
        self.per_minute = per_minute
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * burst)
        self._tokens = self.capacity
        self._at = time.monotonic()
        self._lock = threading.Lock()
        self.limited = 0
        """Requests answered 429."""

    def take(self) -> tuple[bool, dict[str, str]]:
        """Admit one request (True) or refuse it; the x-ratelimit-* headers (and Retry-After on a refusal)."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
            self._at = now
            admitted = self._tokens >= 1
            if admitted:
                self._tokens -= 1
            else:
                self.limited += 1
            tokens = self._tokens
        headers = {"x-ratelimit-limit-requests": f"{self.per_minute:g}",
                   "x-ratelimit-remaining-requests": str(int(tokens)),
                   "x-ratelimit-reset-requests": duration((self.capacity - tokens) / self.rate)}
        if not admitted:
            wait = (1 - tokens) / self.rate
            headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
            headers["Retry-After"] = str(max(1, math.ceil(wait)))
        return admitted, headers
