"""A small HTTP/1.1 client on asyncio for JSON POSTs: the wire of the default transport.

Why not aiohttp: at high concurrency one pytest process is bound by client CPU, and a general
client (cookie jar, tracing signals, multidict headers, stream readers, URL objects) costs more
CPU per request than a chat-completions exchange needs, and about 130 ms to import. This client
does only what such an exchange needs: keep-alive connections per origin, TLS, a request body with
Content-Length, a response body by Content-Length, chunked transfer or connection close, gzip or
deflate content encoding. No proxies, redirects, cookies or HTTP/2 (the endpoints we speak to
need none; `--evalbench-transport=aiohttp|openai` remain for anything else).

Failures are standard exceptions, so the transport layer classifies them like any client's:
`ConnectionError` (refused, reset, closed before the answer was complete), `TimeoutError` (the
whole exchange exceeded its bound) and `ProtocolError`, a `ValueError` (not HTTP).
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from .types import check_base_url

MAX_HEAD = 64 * 1024
"""Bytes of status line and headers accepted before the answer is called malformed."""


class ProtocolError(ValueError):
    """The peer's bytes are not a valid HTTP/1.1 response."""


class ServerDisconnected(ConnectionError):
    """The connection closed before the response was complete."""


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    headers: Mapping[str, str]
    """Lower-cased names; repeated headers joined with ", "."""
    body: bytes


@dataclass(frozen=True)
class Origin:
    """Where a URL's requests go, and the request target to put in the request line."""

    scheme: str
    host: str
    port: int
    target: str

    @classmethod
    def of(cls, url: str) -> Origin:
        parts = urlsplit(check_base_url(url))
        assert parts.hostname is not None  # checked
        port = parts.port or (443 if parts.scheme == "https" else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(parts.scheme, parts.hostname, port, target)

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


class _Connection(asyncio.Protocol):
    """One keep-alive connection: parses the answer to the request in flight as bytes arrive."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._waiter: asyncio.Future[Response] | None = None
        self._buffer = bytearray()
        self._head: tuple[int, str, dict[str, str]] | None = None
        self._start = 0  # where the body begins in the buffer
        self._chunks: list[bytes] = []
        self._scan = 0  # chunked parsing position
        self._received = 0  # bytes of the current answer, interim ones included

    # -------------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            # bytes nobody asked for (a late 408 before an idle close, a desynchronised server):
            # they would be read as the next answer, so this connection is never used again
            self.abort()
            return
        self._received += len(data)
        self._buffer += data
        self._settle(eof=False)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self._settle(eof=True) and self._waiter is not None and not self._waiter.done():
            reason = f": {exc}" if exc else ""
            self._waiter.set_exception(ServerDisconnected(
                f"server closed the connection before the answer ended{reason}"))

    def _settle(self, eof: bool) -> bool:
        """Complete the waiting exchange if its answer is all here (or broken); whether it did."""
        waiter = self._waiter
        if waiter is None or waiter.done():
            return False
        try:
            response = self._parse(eof)
        except ProtocolError as exc:
            waiter.set_exception(exc)
            if not eof:
                self.abort()
            return True
        if response is None:
            return False
        waiter.set_result(response)
        return True

    # -------------------------------------------------------------- one exchange
    def send(self, request: bytes) -> asyncio.Future[Response]:
        assert self.transport is not None
        self._buffer.clear()
        self._received = 0
        self._head, self._start, self._chunks, self._scan = None, 0, [], 0
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self._waiter

    @property
    def received_nothing(self) -> bool:
        """No byte of an answer came back (an interim 100 Continue, dropped from the buffer, counts)."""
        return self._received == 0

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _parse(self, eof: bool) -> Response | None:
        """The complete response in the buffer, or None while more bytes are due."""
        while self._head is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD:
                    raise ProtocolError("response head too large")
                return None
            head = _parse_head(bytes(self._buffer[:end]))
            if 100 <= head[0] < 200:  # an interim answer (100 Continue): the real one follows
                del self._buffer[: end + 4]
                continue
            self._head, self._start = head, end + 4
        status, reason, headers = self._head
        body: bytes | None
        if status in (204, 304):  # never a body, whatever the framing headers say (RFC 9112 6.3)
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._chunked()
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"])
                if length < 0:
                    raise ValueError
            except ValueError:
                raise ProtocolError(f"bad Content-Length {headers['content-length']!r}") from None
            available = len(self._buffer) - self._start
            body = bytes(self._buffer[self._start: self._start + length]) if available >= length else None
        else:
            body = bytes(self._buffer[self._start:]) if eof else None  # delimited by the close
        if body is None:
            return None
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding in ("gzip", "deflate") and body:  # no body is no compressed stream
            try:
                body = zlib.decompress(body, 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
            except zlib.error as exc:
                raise ProtocolError(f"bad {encoding} body: {exc}") from None
        return Response(status, reason, headers, body)

    def _chunked(self) -> bytes | None:
        """The decoded body once the last chunk (and trailers) arrived; parsing resumes where it stopped."""
        buffer = self._buffer
        position = max(self._scan, self._start)
        while True:
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                self._scan = position
                return None
            try:
                size = int(bytes(buffer[position:line_end]).split(b";")[0].strip(), 16)
                if size < 0:  # int() takes a sign: a negative size would step the parser backwards
                    raise ValueError
            except ValueError:
                raise ProtocolError("bad chunk size line") from None
            if size == 0:
                if buffer.find(b"\r\n\r\n", line_end) < 0:  # the empty line after the trailers (if any)
                    self._scan = position
                    return None
                return b"".join(self._chunks)
            chunk_end = line_end + 2 + size
            if len(buffer) < chunk_end + 2:
                self._scan = position
                return None
            if buffer[chunk_end: chunk_end + 2] != b"\r\n":
                raise ProtocolError("chunk data longer than its size")
            self._chunks.append(bytes(buffer[line_end + 2: chunk_end]))
            position = chunk_end + 2


def _parse_head(raw: bytes) -> tuple[int, str, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/") or not (code.isascii() and code.isdigit()):  # "²".isdigit() too
        raise ProtocolError(f"not an HTTP response: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise ProtocolError(f"malformed header line {line[:80]!r}")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    if version == "HTTP/1.0" and "keep-alive" not in headers.get("connection", "").lower():
        headers.setdefault("connection", "close")
    return int(code), reason, headers


class HTTPClient:
    """Keep-alive connections per origin, reused most-recent first; one request per connection at a time."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._tls: ssl.SSLContext | None = None

    async def post(self, url: str | Origin, body: bytes, headers: Mapping[str, str]) -> Response:
        """POST `body`; the whole exchange (connect, send, wait, read) is bounded by `timeout`."""
        origin = url if isinstance(url, Origin) else Origin.of(url)
        lines = [f"POST {origin.target} HTTP/1.1", f"Host: {origin.host_header}",
                 f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        expired = False
        cancelling = getattr(task, "cancelling", None)  # Python >= 3.11: cancel requests already pending
        pending = cancelling() if cancelling is not None else 0

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        timer = loop.call_later(self.timeout, expire)
        try:
            return await self._exchange(origin, request)
        except asyncio.CancelledError:
            if not expired:
                raise
            uncancel = getattr(task, "uncancel", None)  # Python >= 3.11: this cancel is handled here
            if uncancel is not None and uncancel() > pending:
                raise  # the caller was cancelled too (as asyncio.timeout does, its cancel wins)
            raise TimeoutError(f"no complete answer within {self.timeout:g}s") from None
        finally:
            timer.cancel()

    async def _exchange(self, origin: Origin, request: bytes) -> Response:
        slot = (origin.scheme, origin.host, origin.port)
        while True:
            connection = self._checkout(slot)
            reused = connection is not None
            if connection is None:
                connection = await self._connect(origin)
            try:
                response = await connection.send(request)
            except ServerDisconnected:
                connection.abort()
                if reused and connection.received_nothing:
                    continue  # an idle connection the server had just closed: ask again on another one
                raise
            except BaseException:
                connection.abort()
                raise
            if "close" in response.headers.get("connection", "").lower() or connection.closed:
                connection.abort()
            else:
                self._idle.setdefault(slot, []).append(connection)
            return response

    def _checkout(self, slot: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(slot)
        while idle:
            connection = idle.pop()
            if not connection.closed and connection.transport is not None and not connection.transport.is_closing():
                return connection
        return None

    async def _connect(self, origin: Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if origin.scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()  # the CA bundle is loaded once per client
            tls = self._tls
        # asyncio sets TCP_NODELAY on TCP sockets itself: a request leaves in one segment at once
        try:
            # happy eyeballs (RFC 8305), as aiohttp does: a host whose IPv6 route is broken costs
            # 0.25 s, not a connect timeout, before its IPv4 address is tried
            _, connection = await loop.create_connection(
                _Connection, origin.host, origin.port, ssl=tls, server_hostname=origin.host if tls else None,
                happy_eyeballs_delay=0.25, interleave=1)
        except (ssl.SSLError, TimeoutError):
            raise  # a certificate problem is configuration; a slow connect is a timeout
        except OSError as exc:  # refused, unreachable network, unknown host: the endpoint is not there
            raise ConnectionError(f"cannot connect to {origin.host}:{origin.port}") from exc
        return connection

    async def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.abort()
        self._idle.clear()
