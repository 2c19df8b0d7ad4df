"""Both transports against the fake server: the same answers, the same failure classes, the whole
call bounded by the timeout, TLS verified, and the environment's proxies used as documented."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time

import openai
import pytest
import trustme
from helpers import CALL_BODY, CALL_HEADER, CALL_KEY, dead_base_url, transport_call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_evalbench.llm.transport import (
    AiohttpTransport,
    Failure,
    OpenAITransport,
    classify,
    make_transport,
    parse_completion,
    wire_json,
)
from pytest_evalbench.llm.types import Completion, Endpoint
from pytest_evalbench.testing import FakeLLMServer, Reply


def test_make_transport_names() -> None:
    assert isinstance(make_transport("aiohttp", 1), AiohttpTransport)
    assert isinstance(make_transport("openai", 1), OpenAITransport)
    with pytest.raises(ValueError, match="unknown transport 'http': choose one of aiohttp, openai"):
        make_transport("http", 1)


def test_answer_and_request_are_the_same_through_both(transport_name: str) -> None:
    with FakeLLMServer(lambda r: Reply(content="hello", prompt_tokens=7, completion_tokens=3,
                                       tool_calls=[{"id": "c1", "type": "function",
                                                   "function": {"name": "f", "arguments": "{}"}}])) as srv:
        completion = transport_call(transport_name, srv.base_url)
        sent = srv.requests[0]
    assert isinstance(completion, Completion)
    assert (completion.content, completion.input_tokens, completion.output_tokens) == ("hello", 7, 3)
    assert completion.tool_calls == [{"id": "c1", "name": "f", "arguments": "{}"}]
    assert sent["messages"] == CALL_BODY["messages"] and sent["model"] == "m"
    assert sent["_headers"]["authorization"] == f"Bearer {CALL_KEY}" and sent["_headers"]["x-team-key"] == CALL_HEADER
    assert sent["_target"] == "/v1/chat/completions"


def test_credentials_in_the_url_are_never_sent(transport_name: str) -> None:
    with FakeLLMServer(lambda r: Reply(content="hello")) as srv:
        completion = transport_call(transport_name, srv.base_url.replace("://", "://admin:url-pw-4242@"))
        (sent,) = srv.requests
    assert isinstance(completion, Completion) and completion.content == "hello"
    assert sent["_headers"]["authorization"] == f"Bearer {CALL_KEY}"
    assert "url-pw-4242" not in str(sent) and "admin" not in str(sent)


@pytest.mark.parametrize(("reply", "kind", "retryable", "retry_after"), [
    (Reply(status=429, headers={"Retry-After": "2"}), "rate limited", True, 2.0),
    (Reply(status=503), "server error", True, None),
    (Reply(status=401), "request rejected", False, None),
    (Reply(raw_body=b"not json"), "bad response", True, None),
    (Reply(raw_body=b'{"choices": []}'), "bad response", True, None),
    (Reply(wire=b"SSH-2.0-OpenSSH_9.6\r\n\r\n"), "bad response", True, None),
    (Reply(wire=b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"), "bad response", True, None),
    (Reply(wire=b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{\"part"), "connection error", True, None),
], ids=["429", "503", "401", "not-json", "no-choice", "not-http", "bad-length", "cut-short"])
def test_failures_classify_alike(transport_name: str, reply: Reply, kind: str, retryable: bool,
                                 retry_after: float | None) -> None:
    with FakeLLMServer(lambda r: reply) as srv:
        failure = transport_call(transport_name, srv.base_url)
    assert isinstance(failure, Failure), failure
    assert (failure.category, failure.retryable, failure.retry_after) == (kind, retryable, retry_after)
    if reply.status >= 400:
        assert failure.message.startswith(f"HTTP {reply.status}")


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
CHUNKED = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("wire", [
    CHUNKED + b"0x1f\r\n" + b"a" * 31 + b"\r\n0\r\n\r\n",  # a chunk size is hex digits only
    CHUNKED + b"1_0\r\n" + b"a" * 16 + b"\r\n0\r\n\r\n",
    CHUNKED + b"-5\r\nhello\r\n0\r\n\r\n",
    CHUNKED + b"3\r\nchat\r\n0\r\n\r\n",  # a chunk longer than its size line
    HEAD + b"Content-Length: -1\r\n\r\n{}",
    HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n",  # both framings
    b"HTTP/1.1 \xb200 OK\r\nContent-Length: 0\r\n\r\n",  # a status of non-ASCII digits
    b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70_000 + b"\r\n\r\n",  # a head without end
], ids=["hex-prefix", "underscore", "negative-chunk", "long-chunk", "negative-length", "two-framings",
        "non-ascii-status", "huge-head"])
def test_malformed_framing_is_a_bad_response(transport_name: str, wire: bytes) -> None:
    with FakeLLMServer(lambda r: Reply(wire=wire)) as srv:
        failure = transport_call(transport_name, srv.base_url, timeout=5.0)
    assert isinstance(failure, Failure), failure
    assert (failure.category, failure.retryable) == ("bad response", True)


@st.composite
def mutated_answers(draw: st.DrawFn) -> bytes:
    """A valid answer (framed by length or chunks) with a few bytes replaced, inserted or deleted."""
    body = b'{"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}'
    if draw(st.booleans()):
        wire = bytearray(HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    else:
        wire = bytearray(CHUNKED + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(wire) - 1))
        byte = draw(st.sampled_from([b"\r", b"\n", b":", b" ", b"0", b"f", b"x", b"-", b"\x00", b"\xff", b";"]))
        action = draw(st.sampled_from(["replace", "insert", "delete"]))
        if action == "replace":
            wire[at:at + 1] = byte
        elif action == "insert":
            wire[at:at] = byte
        else:
            del wire[at]
    return bytes(wire)


def test_any_bytes_end_the_call_with_an_answer_or_a_classified_failure(transport_name: str) -> None:
    """Whatever an endpoint sends before it closes the connection, the call ends (never a hang) with a
    completion or a failure of a known class (never an unclassified error)."""
    with FakeLLMServer() as srv:

        @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a call per example
        @given(st.one_of(st.binary(max_size=300), mutated_answers(),
                         st.builds(lambda b: b"HTTP/1.1 200 OK\r\n" + b, st.binary(max_size=200))))
        def check(wire: bytes) -> None:
            srv.set_responder(lambda r: Reply(wire=wire))
            answer = transport_call(transport_name, srv.base_url, timeout=5.0)
            if isinstance(answer, Failure):
                assert answer.category != "error" and answer.category != "timeout", (wire, answer)

        check()


def test_refused_connection_and_dropped_connection(transport_name: str) -> None:
    refused = transport_call(transport_name, dead_base_url())
    assert isinstance(refused, Failure) and (refused.category, refused.connection) == ("connection error", True)
    with FakeLLMServer(lambda r: Reply(drop_connection=True)) as srv:
        dropped = transport_call(transport_name, srv.base_url)
    assert isinstance(dropped, Failure) and dropped.category == "connection error" and dropped.retryable


def test_slow_answer_is_a_timeout(transport_name: str) -> None:
    with FakeLLMServer(lambda r: Reply(content="late", delay=2.0)) as srv:
        failure = transport_call(transport_name, srv.base_url, timeout=0.3)
    assert isinstance(failure, Failure) and failure.category == "timeout" and not failure.connection


def test_timeout_bounds_the_whole_call_of_a_server_that_trickles(transport_name: str) -> None:
    # a byte every 0.05 s never lets a read time out; the body would take 10 s to arrive
    with FakeLLMServer(lambda r: Reply(content="x" * 200, trickle=0.05)) as srv:
        started = time.monotonic()
        failure = transport_call(transport_name, srv.base_url, timeout=0.5)
        elapsed = time.monotonic() - started
    assert isinstance(failure, Failure) and (failure.category, failure.retryable) == ("timeout", True)
    assert elapsed < 3.0  # the timeout (the SDK's has one second of slack), not the body, ended it


def test_trickled_answer_within_the_timeout_is_read(transport_name: str) -> None:
    # the counter-check: the same server, the whole answer inside the timeout
    with FakeLLMServer(lambda r: Reply(content="slowly", trickle=0.002)) as srv:
        completion = transport_call(transport_name, srv.base_url, timeout=10.0)
    assert isinstance(completion, Completion) and completion.content == "slowly"


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def server_tls(authority: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    return context


def test_tls_with_a_trusted_certificate(transport_name: str, authority: trustme.CA, server_tls: ssl.SSLContext) -> None:
    client_tls = ssl.create_default_context()
    authority.configure_trust(client_tls)
    with FakeLLMServer(lambda r: Reply(content="secure"), tls=server_tls) as srv:
        assert srv.base_url.startswith("https://")
        completion = transport_call(transport_name, srv.base_url, tls=client_tls)
    assert isinstance(completion, Completion) and completion.content == "secure"


def test_untrusted_certificate_fails_at_once(transport_name: str, server_tls: ssl.SSLContext) -> None:
    # the system's CAs do not know the test authority: configuration, so never retried
    with FakeLLMServer(lambda r: Reply(content="never read"), tls=server_tls) as srv:
        started = time.monotonic()
        failure = transport_call(transport_name, srv.base_url, timeout=10.0)
        assert srv.requests == []
    assert isinstance(failure, Failure)
    assert (failure.category, failure.retryable, failure.connection) == ("connection error", False, True)
    assert failure.message.startswith("TLS handshake failed (") and "certificate" in failure.message
    assert time.monotonic() - started < 5.0


@pytest.fixture
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment naming no proxy (the machine's own settings do not leak into the test)."""
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


ELSEWHERE = "http://api.example.invalid/v1"
"""An endpoint that only a proxy can reach (the .invalid domain never resolves)."""


def test_proxy_for_reads_the_environment(no_proxies: pytest.MonkeyPatch) -> None:
    from pytest_evalbench.llm.transport import proxy_for

    assert proxy_for("https://api.openai.com/v1/chat/completions") is None
    no_proxies.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    no_proxies.setenv("NO_PROXY", "internal.corp")
    assert proxy_for("https://api.openai.com/v1/chat/completions") == "http://proxy.corp:3128"
    assert proxy_for("https://llm.internal.corp/v1/chat/completions") is None
    assert proxy_for("http://api.openai.com/v1/chat/completions") is None  # no HTTP_PROXY
    assert proxy_for("https://127.0.0.1:8080/v1/chat/completions") is None  # a local server, always direct


def test_requests_go_through_the_environments_proxy(transport_name: str, no_proxies: pytest.MonkeyPatch) -> None:
    with FakeLLMServer(lambda r: Reply(content="via proxy", prompt_tokens=3)) as proxy:
        no_proxies.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        completion = transport_call(transport_name, ELSEWHERE)
        (sent,) = proxy.requests
    assert isinstance(completion, Completion) and (completion.content, completion.input_tokens) == ("via proxy", 3)
    assert sent["_target"] == f"{ELSEWHERE}/chat/completions"  # the absolute form a proxy is sent
    assert sent["_headers"]["authorization"] == f"Bearer {CALL_KEY}"


def test_no_proxy_exempts_a_host(transport_name: str, no_proxies: pytest.MonkeyPatch) -> None:
    with FakeLLMServer(lambda r: Reply(content="via proxy")) as proxy:
        no_proxies.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        no_proxies.setenv("NO_PROXY", "example.invalid")
        failure = transport_call(transport_name, ELSEWHERE, timeout=3.0)
        assert proxy.requests == []  # sent directly, where the name does not resolve
    assert isinstance(failure, Failure) and failure.category in ("connection error", "timeout")


def test_loopback_endpoint_never_goes_through_a_proxy(transport_name: str, no_proxies: pytest.MonkeyPatch) -> None:
    with FakeLLMServer(lambda r: Reply(content="via proxy")) as proxy, \
            FakeLLMServer(lambda r: Reply(content="direct")) as srv:
        no_proxies.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        no_proxies.setenv("ALL_PROXY", f"http://127.0.0.1:{proxy.port}")
        completion = transport_call(transport_name, srv.base_url)
        assert proxy.requests == [] and len(srv.requests) == 1
    assert isinstance(completion, Completion) and completion.content == "direct"


def test_a_proxys_credentials_stay_out_of_the_message(transport_name: str, no_proxies: pytest.MonkeyPatch) -> None:
    dead = dead_base_url().removesuffix("/v1")
    no_proxies.setenv("HTTP_PROXY", dead.replace("http://", "http://proxy-user:proxy-pw-4242@"))
    failure = transport_call(transport_name, ELSEWHERE)
    assert isinstance(failure, Failure) and failure.category == "connection error"
    assert "proxy-pw-4242" not in failure.message and "proxy-user" not in failure.message


def test_parse_completion_and_bad_bodies() -> None:
    body = {"choices": [{"message": {"content": "hi", "tool_calls": [
        {"id": "c1", "function": {"name": "f", "arguments": "{}"}}]}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    completion = parse_completion(body)
    assert (completion.content, completion.input_tokens, completion.output_tokens) == ("hi", 3, 2)
    assert completion.tool_calls == [{"id": "c1", "name": "f", "arguments": "{}"}]
    for bad in ("<html>", {"foo": 1}, {"choices": None}, {"choices": [{"message": {"content": 5}}]}):
        with pytest.raises((TypeError, KeyError, IndexError, AttributeError)):
            parse_completion(bad)
        assert classify(TypeError("x")).category == "bad response"
    assert classify(json.JSONDecodeError("x", "d", 0)).retryable


def test_classify_transport_failures() -> None:
    import httpx2

    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")

    def status(code: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
        response = httpx2.Response(code, headers=headers or {}, request=request)
        cls = {429: openai.RateLimitError, 500: openai.InternalServerError,
               401: openai.AuthenticationError}.get(code, openai.APIStatusError)
        return cls(f"error {code}", response=response, body=None)

    limited = classify(status(429, {"retry-after": "2"}))
    assert (limited.category, limited.retryable, limited.retry_after) == ("rate limited", True, 2.0)
    assert classify(status(500)).retryable and not classify(status(401)).retryable
    assert classify(openai.APITimeoutError(request=request)).category == "timeout"
    assert classify(openai.APIConnectionError(request=request)).connection
    assert classify(httpx2.ConnectError("refused")).category == "connection error"
    assert classify(httpx2.ReadTimeout("slow")).category == "timeout"
    assert classify(TimeoutError()).category == "timeout"  # the whole-call bound


def test_refused_connection_is_not_a_timeout() -> None:
    # The aiohttp backend wraps a refused connection as ConnectTimeout -> APITimeoutError; the
    # circuit breaker only trips on connection failures, so the real cause must win.
    import httpx2

    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
    try:
        try:
            try:
                raise ConnectionRefusedError(111, "Connect call failed")
            except ConnectionRefusedError as refused:
                raise httpx2.ConnectTimeout("Cannot connect to host") from refused
        except httpx2.ConnectTimeout as wrapped:
            raise openai.APITimeoutError(request=request) from wrapped
    except openai.APITimeoutError as exc:
        failure = classify(exc)
    assert (failure.category, failure.connection, failure.retryable) == ("connection error", True, True)
    assert "ConnectionRefusedError" in failure.message


def test_trickling_server_is_cut_off_by_the_whole_call_timeout() -> None:
    # Every byte arrives well within the read timeout, but the body never ends.
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n")
            deadline = time.monotonic() + 8  # a regression fails the time check below, never hangs
            while not stop.wait(0.1) and time.monotonic() < deadline:
                try:
                    conn.sendall(b" ")
                except OSError:
                    return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    endpoint = Endpoint("m", f"http://127.0.0.1:{listener.getsockname()[1]}/v1", api_key="k")

    async def call() -> None:
        transport = OpenAITransport(timeout=0.5)
        try:
            await transport.complete(endpoint, {"model": "m", "messages": []})
        finally:
            await transport.aclose()

    started = time.monotonic()
    try:
        with pytest.raises(Exception) as info:
            asyncio.run(call())
    finally:
        stop.set()
        listener.close()
    assert classify(info.value).category == "timeout"
    assert time.monotonic() - started < 5


def test_the_wire_body_is_compact_json_and_any_body_can_be_sent() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "naïve “quotes” \n\t \u2028 🙂"}], "temperature": 0.7}
    assert wire_json(body) == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    huge = {"model": "m", "seed": 2**70, "messages": []}  # orjson refuses an integer past 64 bits
    assert json.loads(wire_json(huge)) == huge
