"""The plugin's HTTP/1.1 client against a server that sends scripted bytes: framing, keep-alive,
the stale-connection retry, TLS, and the failures the transport layer classifies."""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trustme

from pytest_evalbench.llm.http1 import HTTPClient, Origin, ProtocolError, Response, ServerDisconnected
from pytest_evalbench.llm.transport import HTTPTransport, classify, proxy_for
from pytest_evalbench.llm.types import Endpoint

Handler = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """Answers each request on a connection with the next scripted handler; counts connections."""

    def __init__(self, *handlers: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handlers = list(handlers)
        self.connections = 0
        self.requests: list[bytes] = []
        self.tls = tls

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.handlers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                await self.handlers.pop(0)(request, writer)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        port = self.server.sockets[0].getsockname()[1]
        return f"{'https' if self.tls else 'http'}://localhost:{port}/v1/chat/completions"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()


def send(*parts: bytes, close: bool = False, pause: float = 0.0) -> Handler:
    """A handler writing `parts` one by one (drained, `pause` apart), then closing if asked."""

    async def handle(request: bytes, writer: asyncio.StreamWriter) -> None:
        for part in parts:
            writer.write(part)
            await writer.drain()
            if pause:
                await asyncio.sleep(pause)
        if close:
            writer.close()

    return handle


def ok(body: bytes = b'{"a": 1}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def run(server: RawServer, *bodies: bytes, timeout: float = 5.0,
        client: HTTPClient | None = None) -> list[Response | BaseException]:
    """POST each body in turn through one client; answers or the exceptions raised."""

    async def go() -> list[Response | BaseException]:
        http = client or HTTPClient(timeout)
        out: list[Response | BaseException] = []
        async with server as url:
            for body in bodies:
                try:
                    out.append(await http.post(url, body, {"Content-Type": "application/json"}))
                except Exception as exc:
                    out.append(exc)
            await http.close()
        return out

    return asyncio.run(go())


def test_keep_alive_reuses_one_connection_and_sends_a_complete_request() -> None:
    server = RawServer(send(ok(b"one")), send(ok(b"two", b"X-RateLimit-Remaining-Requests: 5\r\n")))
    first, second = run(server, b'{"q": 1}', b'{"q": 2}')
    assert isinstance(first, Response) and isinstance(second, Response)
    assert (first.status, first.body, second.body) == (200, b"one", b"two")
    assert second.headers["x-ratelimit-remaining-requests"] == "5"  # names lower-cased
    assert server.connections == 1
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"Host: localhost:" in head and b"Content-Length: 8" in head and body == b'{"q": 1}'


def test_bodies_framed_every_way_and_split_anywhere() -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"4;ext=1\r\nchat\r\n7\r\n-answer\r\n0\r\nX-Trailer: t\r\n\r\n")
    zipped = gzip.compress(b'{"z": true}')
    encoded = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(zipped), zipped)
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after 100")
    old = b"HTTP/1.0 200 OK\r\n\r\nuntil close"
    byte_by_byte = send(*[chunked[i:i + 1] for i in range(len(chunked))])
    server = RawServer(byte_by_byte, send(encoded), send(interim), send(old, close=True), send(ok(b"new")))
    answers = run(server, b"1", b"2", b"3", b"4", b"5")
    assert [a.body for a in answers if isinstance(a, Response)] == [
        b"chat-answer", b'{"z": true}', b"after 100", b"until close", b"new"]
    assert server.connections == 2  # the HTTP/1.0 answer ended its connection


async def hang_up(request: bytes, writer: asyncio.StreamWriter) -> None:
    writer.close()  # read the request, answer nothing


def test_server_closing_an_idle_connection_is_retried_once_on_a_new_one() -> None:
    # the keep-alive race: the server drops a connection the client has just taken from its pool;
    # nothing came back on it, so the request goes again, once, on a fresh connection
    server = RawServer(send(ok(b"first")), hang_up, send(ok(b"second")))
    answers = run(server, b"1", b"2")
    assert [a.body for a in answers if isinstance(a, Response)] == [b"first", b"second"]
    assert server.connections == 2 and len(server.requests) == 3


def test_fresh_connection_hung_up_is_not_retried() -> None:
    server = RawServer(hang_up, send(ok()))
    (answer,) = run(server, b"1")
    assert isinstance(answer, ServerDisconnected) and server.connections == 1


def test_answers_cut_short_or_not_http_fail_as_the_transport_classifies_them() -> None:
    cut = RawServer(send(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{\"part", close=True))
    (cut_short,) = run(cut, b"1")
    assert isinstance(cut_short, ServerDisconnected)
    assert classify(cut_short).kind == "connection error" and classify(cut_short).retryable

    for garbage in (b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
                    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"):
        (broken,) = run(RawServer(send(garbage, close=True)), b"1")
        assert isinstance(broken, ProtocolError), garbage
        assert classify(broken).kind == "bad response"


def test_timeout_bounds_the_whole_exchange_and_refusal_is_a_connection_error() -> None:
    trickle = RawServer(send(b"HTTP/1.1 200 OK\r\n", b"Content-Length: 2\r\n", b"\r\n", b"{}", pause=0.2))
    (late,) = run(trickle, b"1", timeout=0.3)
    assert isinstance(late, TimeoutError) and classify(late).kind == "timeout"

    async def refused() -> BaseException:
        try:
            await HTTPClient(1.0).post("http://127.0.0.1:9/v1/chat/completions", b"{}", {})
        except Exception as exc:
            return exc
        raise AssertionError("port 9 answered")

    failure = classify(asyncio.run(refused()))
    assert (failure.kind, failure.connection) == ("connection error", True)


def test_cancelled_caller_is_not_turned_into_a_timeout() -> None:
    async def go() -> Any:
        server = RawServer(send(ok(), pause=0.0))
        server.handlers[0] = _never_answer
        async with server as url:
            task = asyncio.create_task(HTTPClient(5.0).post(url, b"{}", {}))
            await asyncio.sleep(0.1)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                return "cancelled"
        return "finished"

    assert asyncio.run(go()) == "cancelled"


async def _never_answer(request: bytes, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(10)


def test_tls_with_certificate_verification() -> None:
    authority = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("localhost").configure_cert(server_tls)
    client = HTTPClient(5.0)
    client._tls = ssl.create_default_context()
    authority.configure_trust(client._tls)
    (answer,) = run(RawServer(send(ok(b"secure")), tls=server_tls), b"1", client=client)
    assert isinstance(answer, Response) and answer.body == b"secure"

    untrusting = HTTPClient(5.0)  # the system's CAs do not know this authority
    (rejected,) = run(RawServer(send(ok()), tls=server_tls), b"1", client=untrusting)
    assert isinstance(rejected, ssl.SSLCertVerificationError)
    failure = classify(rejected)
    assert (failure.kind, failure.retryable) == ("connection error", False)
    assert failure.message.startswith("TLS handshake failed (") and "certificate" in failure.message


def test_origin_of_urls() -> None:
    assert Origin.of("https://api.openai.com/v1/chat/completions") == Origin(
        "https", "api.openai.com", 443, "/v1/chat/completions")
    assert Origin.of("http://[::1]:8080/x?api-version=1").host_header == "[::1]:8080"
    assert Origin.of("http://h/x?api-version=1").target == "/x?api-version=1"
    with pytest.raises(ValueError, match="not an http"):
        Origin.of("ftp://h/x")


def _clear_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def test_proxy_for_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_proxies(monkeypatch)
    assert proxy_for("https://api.openai.com/v1/chat/completions") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", "internal.corp")
    assert proxy_for("https://api.openai.com/v1/chat/completions") == "http://proxy.corp:3128"
    assert proxy_for("https://llm.internal.corp/v1/chat/completions") is None
    assert proxy_for("http://api.openai.com/v1/chat/completions") is None  # no HTTP_PROXY
    assert proxy_for("https://127.0.0.1:8080/v1/chat/completions") is None  # a local server, always direct


def test_default_transport_goes_through_the_environments_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in client speaks no proxy protocol: with HTTP_PROXY set the request goes through
    aiohttp to the proxy (absolute-form request line), and the answer reads the same."""
    _clear_proxies(monkeypatch)
    answer = json.dumps({"choices": [{"message": {"content": "via proxy"}, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 2}}).encode()
    proxy = RawServer(send(ok(answer)))

    async def go() -> Any:
        async with proxy as url:
            monkeypatch.setenv("HTTP_PROXY", url.split("/v1")[0])
            transport = HTTPTransport(5.0)
            try:
                return await transport.complete(Endpoint("m", "http://api.example.invalid/v1", api_key="k"),
                                                {"model": "m", "messages": []})
            finally:
                await transport.aclose()

    completion = asyncio.run(go())
    assert (completion.content, completion.input_tokens) == ("via proxy", 3)
    assert proxy.requests[0].startswith(b"POST http://api.example.invalid/v1/chat/completions HTTP/1.1\r\n")


def test_status_code_of_non_ascii_digits_is_a_protocol_error_not_a_hang() -> None:
    # "²".isdigit() is true but int("²") raises: the ValueError escaped data_received and
    # connection_lost into the event loop and the caller waited for the whole timeout
    (answer,) = run(RawServer(send(b"HTTP/1.1 \xb200 OK\r\nContent-Length: 0\r\n\r\n")), b"1", timeout=2.0)
    assert isinstance(answer, ProtocolError) and classify(answer).kind == "bad response"


def test_negative_sizes_are_protocol_errors() -> None:
    # int("-5", 16) is -5: the chunk slice ran backwards and a garbled body came back
    # ("-6" made the parser loop for ever inside data_received, freezing the event loop);
    # a negative Content-Length was taken as a complete, empty body
    garbled = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n"
    negative = b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}"
    for answer in (garbled, negative):
        (broken,) = run(RawServer(send(answer, close=True)), b"1", timeout=2.0)
        assert isinstance(broken, ProtocolError), (answer, broken)


def test_chunk_data_must_end_where_its_size_says() -> None:
    # a chunk longer than its size line: the CRLF after the data was never checked, so the
    # body was silently cut to "cha" (the stray "t\r" was skipped, "\n0" read as the last chunk)
    short = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nchat\r\n0\r\n\r\n"
    (broken,) = run(RawServer(send(short, close=True)), b"1", timeout=2.0)
    assert isinstance(broken, ProtocolError)


def test_204_ends_at_its_head_whatever_its_framing_headers_say() -> None:
    # RFC 9112 6.3: a 204 or 304 never has a body; Transfer-Encoding/Content-Length on it were
    # honoured first, so the client waited for a body that never comes (until the timeout)
    empty = b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n"
    server = RawServer(send(empty), send(ok(b"next")))
    first, second = run(server, b"1", b"2", timeout=2.0)
    assert isinstance(first, Response) and (first.status, first.body) == (204, b"")
    assert isinstance(second, Response) and second.body == b"next" and server.connections == 1


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.10 cannot tell two cancel requests apart")
def test_caller_cancelled_as_the_timeout_fires_stays_cancelled() -> None:
    # the whole-call timer and the caller's cancel land in the same loop iteration: the caller's
    # cancellation was turned into a (retryable) TimeoutError and its cancel request lost
    async def go() -> Any:
        async with RawServer(_never_answer) as url:
            task = asyncio.create_task(HTTPClient(0.2).post(url, b"{}", {}))
            await asyncio.sleep(0.05)
            asyncio.get_running_loop().call_later(0.16, task.cancel)  # due just after the client's timer
            time.sleep(0.3)  # block the loop: both timers fire in its next iteration, the client's first
            try:
                await task
            except asyncio.CancelledError:
                return "cancelled"
            except TimeoutError:
                return f"timeout (cancel requests left: {task.cancelling()})"
        return "finished"

    assert asyncio.run(go()) == "cancelled"


def test_bytes_on_an_idle_connection_retire_it() -> None:
    """A server that talks out of turn (here a 408 sent while the connection is idle) must not
    have its words read as the answer to the next request."""
    server = RawServer(send(ok(b"one"), b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n", pause=0.05),
                       send(ok(b"two")))

    async def go() -> list[Response]:
        client = HTTPClient(5.0)
        async with server as url:
            first = await client.post(url, b"1", {})
            await asyncio.sleep(0.3)  # the unsolicited 408 arrives while the connection sits in the pool
            second = await client.post(url, b"2", {})
            await client.close()
        return [first, second]

    first, second = asyncio.run(go())
    assert (first.body, second.status, second.body) == (b"one", 200, b"two")
    assert server.connections == 2


def test_hang_up_after_an_interim_answer_is_not_retried() -> None:
    # the server did answer something (100 Continue) before closing: it saw the request, so asking
    # again could run it twice
    server = RawServer(send(ok(b"first")), send(b"HTTP/1.1 100 Continue\r\n\r\n", close=True), send(ok(b"again")))
    first, second = run(server, b"1", b"2")
    assert isinstance(first, Response) and isinstance(second, ServerDisconnected)
    assert server.connections == 1
