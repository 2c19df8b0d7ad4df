"""Issue 25 rows 4 and 5, on both transports: no redirect is followed (a request and its secrets
only go where the run sent them), and no answer gets more memory than the cap (a Content-Length
over it, an endless chunked body, a gzip or deflate bomb)."""

from __future__ import annotations

import gzip
import time
import zlib

import pytest
from helpers import CALL_HEADER, CALL_KEY, transport_call

from pytest_evalbench.llm.transport import Failure
from pytest_evalbench.llm.types import MAX_RESPONSE_BYTES, Completion
from pytest_evalbench.testing import FakeLLMServer, Reply

CAP = 1 << 20
SMALL = b'{"choices": [{"message": {"content": "small"}, "finish_reason": "stop"}]}'


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_redirect_to_another_origin_is_refused_and_nothing_reaches_it(transport_name: str, status: int) -> None:
    with FakeLLMServer(lambda r: Reply(content="stolen")) as elsewhere:
        port = elsewhere.port
        location = f"http://user:pw@127.0.0.1:{port}/v1/chat/completions?token=tok-in-query"
        with FakeLLMServer(lambda r: Reply(status=status, headers={"Location": location}, raw_body=b"")) as srv:
            failure = transport_call(transport_name, srv.base_url, max_bytes=CAP)
            assert len(srv.requests) == 1
        assert elsewhere.requests == []  # neither the request nor its key and headers went there
    assert isinstance(failure, Failure)
    assert (failure.category, failure.retryable) == ("request rejected", False)
    assert failure.message.startswith(f"HTTP {status}: redirect to http://127.0.0.1:{port} (another origin)")
    for secret in (CALL_KEY, CALL_HEADER, "tok-in-query", "pw", "/v1/chat"):
        assert secret not in failure.message


def test_redirect_within_the_origin_is_not_followed_either(transport_name: str) -> None:
    with FakeLLMServer(lambda r: Reply(status=307, headers={"Location": "/v2/chat/completions"}, raw_body=b"")) as srv:
        failure = transport_call(transport_name, srv.base_url, max_bytes=CAP)
        assert len(srv.requests) == 1
    assert isinstance(failure, Failure)
    assert failure.category == "request rejected" and "(the same origin)" in failure.message


def test_endless_chunked_body_ends_at_the_cap(transport_name: str) -> None:
    with FakeLLMServer(lambda r: Reply(endless=True)) as srv:
        started = time.monotonic()
        failure = transport_call(transport_name, srv.base_url, max_bytes=CAP, timeout=10.0)
    assert isinstance(failure, Failure), failure
    assert (failure.category, failure.retryable) == ("response too large", False)
    assert failure.message.startswith("answer over the size cap")
    assert time.monotonic() - started < 8  # ended by the cap, not by the timeout


def test_content_length_over_the_cap_is_refused_before_the_body(transport_name: str) -> None:
    # one byte of the body announced comes, then the connection closes: refused for the header, not cut short
    announced = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{" % (CAP + 1)
    with FakeLLMServer(lambda r: Reply(wire=announced)) as srv:
        failure = transport_call(transport_name, srv.base_url, max_bytes=CAP, timeout=10.0)
    assert isinstance(failure, Failure), failure
    assert (failure.category, failure.retryable) == ("response too large", False)
    assert f"Content-Length {CAP + 1} over the cap of {CAP} bytes" in failure.message


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compression_bomb_is_not_inflated_past_the_cap(transport_name: str, encoding: str) -> None:
    spaces = b" " * (64 << 20)  # 64 MiB of spaces in ~64 KiB
    bomb = gzip.compress(spaces, compresslevel=9) if encoding == "gzip" else zlib.compress(spaces, 9)
    with FakeLLMServer(lambda r: Reply(raw_body=bomb, headers={"Content-Encoding": encoding})) as srv:
        failure = transport_call(transport_name, srv.base_url, max_bytes=CAP)
    assert isinstance(failure, Failure), failure
    assert (failure.category, failure.retryable) == ("response too large", False)
    assert f"{encoding} body inflates past the cap of 1.0 MiB" in failure.message


@pytest.mark.parametrize(("encoding", "body", "kind"), [
    ("gzip", gzip.compress(SMALL, mtime=0)[:-12], "bad response"),  # truncated stream
    ("deflate", b"not deflate at all", "bad response"),
    ("br", SMALL, "bad response"),  # never asked for
])
def test_compressed_bodies_that_do_not_decode_are_bad_responses(transport_name: str, encoding: str, body: bytes,
                                                                 kind: str) -> None:
    with FakeLLMServer(lambda r: Reply(raw_body=body, headers={"Content-Encoding": encoding})) as srv:
        failure = transport_call(transport_name, srv.base_url, max_bytes=CAP)
    assert isinstance(failure, Failure) and (failure.category, failure.retryable) == (kind, True)


def test_body_over_the_cap_is_refused_and_one_under_it_is_read(transport_name: str) -> None:
    text = "x" * (CAP // 2)
    with FakeLLMServer(lambda r: Reply(content=text)) as srv:
        answer = transport_call(transport_name, srv.base_url, max_bytes=CAP)
        assert isinstance(answer, Completion) and answer.content == text
        failure = transport_call(transport_name, srv.base_url, max_bytes=CAP // 4)
        assert isinstance(failure, Failure) and failure.category == "response too large"
    for encoding, body in (("gzip", gzip.compress(SMALL)), ("deflate", zlib.compress(SMALL))):
        with FakeLLMServer(lambda r, e=encoding, b=body: Reply(raw_body=b, headers={"Content-Encoding": e})) as srv:
            answer = transport_call(transport_name, srv.base_url, max_bytes=CAP)
            assert isinstance(answer, Completion) and answer.content == "small", encoding


def test_the_default_cap_is_4_mib(transport_name: str) -> None:
    assert MAX_RESPONSE_BYTES == 4 << 20
    padding = b" " * (MAX_RESPONSE_BYTES - len(SMALL))  # JSON whitespace: the body is exactly the cap
    with FakeLLMServer(lambda r: Reply(raw_body=SMALL + padding)) as srv:
        answer = transport_call(transport_name, srv.base_url)
        assert isinstance(answer, Completion) and answer.content == "small"
    with FakeLLMServer(lambda r: Reply(raw_body=SMALL + padding + b" ")) as srv:
        failure = transport_call(transport_name, srv.base_url)
    assert isinstance(failure, Failure) and failure.category == "response too large"


def test_lone_surrogate_in_an_error_message_is_made_safe(transport_name: str) -> None:
    with FakeLLMServer(lambda r: Reply(status=400, content="bad \ud800 request")) as srv:
        failure = transport_call(transport_name, srv.base_url, max_bytes=CAP)
    assert isinstance(failure, Failure)
    assert failure.category == "request rejected" and "bad \ufffd request" in failure.message
    failure.message.encode("utf-8")  # writable to any file
