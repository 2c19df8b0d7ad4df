"""A small HTTP/1.1 client on asyncio for JSON POSTs: the wire of the default transport.

Why not aiohttp: at high concurrency one pytest process is bound by client CPU, and a general
client (cookie jar, tracing signals, multidict headers, stream readers, URL objects) costs more
CPU per request than a chat-completions exchange needs, and about 130 ms to import. This client
does only what such an exchange needs: keep-alive connections per origin, TLS, a request body with
Content-Length, a response body by Content-Length, chunked transfer or connection close, gzip or
deflate content encoding. No proxies, redirects, cookies or HTTP/2 (the endpoints we speak to
need none; `--evalbench-transport=aiohttp|openai` remain for anything else).

Parsing is llhttp's (the parser of Node.js, through httptools, as uvicorn uses it): strict about
framing (a chunk size is hex digits only, one Content-Length, never with Transfer-Encoding), so
no hand-written parser decides where an answer ends. Redirects are answers like any other (the
transport refuses them); nothing here ever sends a request anywhere but the origin asked for.

Every answer is bounded: its head by MAX_HEAD, its body by `max_bytes` both as received and as
decompressed (an endless chunked body or a gzip bomb ends in `ResponseTooLarge` after at most
that many bytes held), its bytes on the wire by twice that plus the head.

Failures are standard exceptions, so the transport layer classifies them like any client's:
`ConnectionError` (refused, reset, closed before the answer was complete), `TimeoutError` (the
whole exchange exceeded its bound) and `ProtocolError`, a `ValueError` (not HTTP), of which
`ResponseTooLarge` (an answer over the caps) is one.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

from .pool import Pool
from .types import MAX_RESPONSE_BYTES, check_base_url

MAX_HEAD = 64 * 1024
"""Bytes of status line and headers accepted before the answer is called malformed."""


class ProtocolError(ValueError):
    """The peer's bytes are not a valid HTTP/1.1 response."""


class ResponseTooLarge(ProtocolError):
    """The answer's body is over the cap (received or decompressed): a broken or hostile endpoint,
    which asking again would not fix."""


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


class _Inflater:
    """A gzip or deflate body inflated as it arrives, never past `max_bytes`."""

    def __init__(self, encoding: str, max_bytes: int) -> None:
        self.encoding = encoding
        self.max_bytes = max_bytes
        self._inflater = zlib.decompressobj(_WBITS[encoding])
        self._inflated = 0

    def inflate(self, data: bytes, final: bool = False) -> bytes:
        """Inflate the next piece (or, `final`, what the decompressor still holds) within the cap."""
        inflater = self._inflater
        room = self.max_bytes - self._inflated
        try:
            out = inflater.flush() if final else inflater.decompress(data, room + 1)
        except zlib.error as exc:
            raise ProtocolError(f"bad {self.encoding} body: {exc}") from None
        self._inflated += len(out)
        if self._inflated > self.max_bytes:
            raise ResponseTooLarge(f"{self.encoding} body inflates past the cap of {_size(self.max_bytes)}")
        if final and not inflater.eof:
            raise ProtocolError(f"bad {self.encoding} body: truncated")
        return bytes(out)


def _until_close(status: int, headers: Mapping[str, str]) -> bool:
    """Whether an answer's body is delimited by the connection's close."""
    return not (status < 200 or status in (204, 304) or "content-length" in headers
                or "chunked" in headers.get("transfer-encoding", "").lower())


class _Connection(asyncio.Protocol):
    """One keep-alive connection: llhttp (through httptools) parses the answer to the request in
    flight as bytes arrive; the body is kept only up to `max_bytes`."""

    def __init__(self, max_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.max_bytes = max_bytes
        self._waiter: asyncio.Future[Response] | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._received = 0  # bytes of the current answer, interim ones included
        self._head_bytes = 0  # bytes of the current message before its headers ended
        self._in_head = True
        self._reason = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._body_size = 0  # bytes of body received (compressed, if it is)
        self._inflater: _Inflater | None = None  # while a gzip or deflate body arrives
        self._response: Response | None = None

    # -------------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done() or self._parser is None:
            # bytes nobody asked for (a late 408 before an idle close, a desynchronised server):
            # they would be read as the next answer, so this connection is never used again
            self.abort()
            return
        self._received += len(data)
        if self._in_head:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
            if self._in_head and self._head_bytes > MAX_HEAD:
                raise ProtocolError("response head too large")
            if self._received > 2 * self.max_bytes + MAX_HEAD:  # framing (chunk sizes, extensions) counts too
                raise ResponseTooLarge(f"answer larger than {_size(2 * self.max_bytes)} on the wire")
        except httptools.HttpParserCallbackError as exc:
            self._fail(exc.__context__ if isinstance(exc.__context__, ProtocolError)
                       else ProtocolError(f"malformed response ({exc})"))
        except httptools.HttpParserError as exc:
            self._fail(ProtocolError(f"malformed response ({exc})"))
        except ProtocolError as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if not self._in_head and self._parser is not None and _until_close(self._parser.get_status_code(), self._headers):
            try:  # a body delimited by the close (no Content-Length, not chunked) ends here
                waiter.set_result(self._finish())
            except ProtocolError as error:
                waiter.set_exception(error)
            return
        reason = f": {exc}" if exc else ""
        waiter.set_exception(ServerDisconnected(f"server closed the connection before the answer ended{reason}"))

    # -------------------------------------------------------------- httptools callbacks
    def on_message_begin(self) -> None:
        if self._response is not None:  # a second answer to one request: the server is out of step
            self.closed = True
        self._in_head, self._head_bytes, self._reason, self._headers = True, 0, b"", {}
        self._body, self._body_size, self._inflater = [], 0, None

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").strip()
        headers = self._headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        self._in_head = False
        length = self._headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            raise ResponseTooLarge(f"Content-Length {_size(int(length))} over the cap of {_size(self.max_bytes)}")
        encoding = self._headers.get("content-encoding", "identity").strip().lower()
        if encoding in _WBITS:  # inflated as it arrives: a compressed body is never held whole
            self._inflater = _Inflater(encoding, self.max_bytes)

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self.max_bytes:
            raise ResponseTooLarge(f"body longer than the cap of {_size(self.max_bytes)}")
        if self._inflater is not None:
            body = self._inflater.inflate(body)
        self._body.append(body)

    def on_message_complete(self) -> None:
        assert self._parser is not None
        if self._parser.get_status_code() < 200:  # an interim answer (100 Continue): the real one follows
            return
        if self._response is None:
            self._response = self._finish()
            if self._waiter is not None and not self._waiter.done():
                self._waiter.set_result(self._response)

    # -------------------------------------------------------------- one exchange
    def send(self, request: bytes) -> asyncio.Future[Response]:
        assert self.transport is not None
        self._received = 0
        self._response = None
        self._in_head = True
        self._parser = httptools.HttpResponseParser(self)
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

    def _finish(self) -> Response:
        """The complete answer: body decompressed (bounded), HTTP/1.0 answers marked to close."""
        assert self._parser is not None
        headers = self._headers
        if self._inflater is not None and self._body_size:  # no body is no compressed stream
            self._body.append(self._inflater.inflate(b"", final=True))
        body = b"".join(self._body)
        self._body = []
        if self._parser.get_http_version() == "1.0" and "keep-alive" not in headers.get("connection", "").lower():
            headers.setdefault("connection", "close")
        return Response(self._parser.get_status_code(), self._reason.decode("latin-1"), headers, body)


_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """A gzip or deflate body, at most `limit` bytes of it (`ResponseTooLarge` beyond: a
    compression bomb never gets more memory than the cap)."""
    wbits = 16 + zlib.MAX_WBITS if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
    try:
        if len(body) * _MAX_RATIO <= limit:  # cannot inflate past the cap: one call, no stream object
            return zlib.decompress(body, wbits)
        inflater = zlib.decompressobj(wbits)
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ProtocolError(f"bad {encoding} body: {exc}") from None
    if len(out) > limit:
        raise ResponseTooLarge(f"{encoding} body inflates past the cap of {_size(limit)}")
    if not inflater.eof:
        raise ProtocolError(f"bad {encoding} body: truncated")
    return out


_MAX_RATIO = 1040
"""Deflate inflates at most 1032-fold (RFC 1951: a 258-byte match in at most 2 bits), gzip and
zlib wrappers only add bytes: a body this many times under the cap cannot pass it."""


def _size(count: int) -> str:
    return f"{count / (1 << 20):.1f} MiB" if count >= 1 << 20 else f"{count} bytes"


class HTTPClient:
    """Keep-alive connections per origin, reused most-recent first; one request per connection at a time."""

    def __init__(self, timeout: float, max_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._pool: Pool[_Connection] = Pool()
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
            connection = self._pool.checkout(slot)
            reused = connection is not None
            if connection is None:
                connection = await self._pool.claim(slot, lambda: self._connect(origin))
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
                self._pool.checkin(slot, connection)
            return response

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
                lambda: _Connection(self.max_bytes), origin.host, origin.port, ssl=tls,
                server_hostname=origin.host if tls else None, happy_eyeballs_delay=0.25, interleave=1)
        except (ssl.SSLError, TimeoutError):
            raise  # a certificate problem is configuration; a slow connect is a timeout
        except OSError as exc:  # refused, unreachable network, unknown host: the endpoint is not there
            raise ConnectionError(f"cannot connect to {origin.host}:{origin.port}") from exc
        return connection

    async def warm(self, origin: Origin, count: int, wait: float) -> None:
        """Open up to `count` connections to `origin` before the requests that will take them (pool.py);
        wait at most `wait` seconds."""
        await self._pool.warm((origin.scheme, origin.host, origin.port), count, lambda: self._connect(origin), wait)

    async def close(self) -> None:
        self._pool.close()
