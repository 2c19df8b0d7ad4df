"""Issue 25 rows 4 and 5, on every transport: no redirect is followed (a request and its secrets
only go where the run sent them), and no answer gets more memory than the cap (endless chunked
body, gzip bomb, a huge Content-Length)."""

from __future__ import annotations

import asyncio
import gzip
import time
from typing import Any

import pytest

from pytest_evalbench.llm.transport import TRANSPORTS, Failure, classify, make_transport
from pytest_evalbench.llm.types import Endpoint
from pytest_evalbench.testing import FakeLLMServer, Reply

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
KEY = "sk-redirect-secret-0123456789"
TEAM = "team-header-secret-9876543210"
CAP = 1 << 20


@pytest.fixture(params=TRANSPORTS)
def transport_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def call(name: str, base_url: str, max_bytes: int = CAP, timeout: float = 10.0) -> Any:
    """The completion, or the classified failure of one call."""

    async def run() -> Any:
        transport = make_transport(name, timeout, max_bytes)
        endpoint = Endpoint("m", base_url, api_key=KEY, headers={"X-Team-Key": TEAM})
        try:
            return await transport.complete(endpoint, BODY)
        except Exception as exc:
            return classify(exc)
        finally:
            await transport.aclose()

    return asyncio.run(run())


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_redirect_to_another_origin_is_refused_and_nothing_reaches_it(transport_name: str, status: int) -> None:
    with FakeLLMServer(lambda r: Reply(content="stolen")) as elsewhere:
        port = elsewhere.port
        location = f"http://user:pw@127.0.0.1:{port}/v1/chat/completions?token=tok-in-query"
        with FakeLLMServer(lambda r: Reply(status=status, headers={"Location": location}, raw_body=b"")) as srv:
            failure = call(transport_name, srv.base_url)
            assert len(srv.requests) == 1
        assert elsewhere.requests == []  # neither the request nor its key and headers went there
    assert isinstance(failure, Failure)
    assert (failure.kind, failure.retryable) == ("request rejected", False)
    assert failure.message.startswith(f"HTTP {status}: redirect to http://127.0.0.1:{port} (another origin)")
    for secret in (KEY, TEAM, "tok-in-query", "pw", "/v1/chat"):
        assert secret not in failure.message


def test_redirect_within_the_origin_is_not_followed_either(transport_name: str) -> None:
    with FakeLLMServer(lambda r: Reply(status=307, headers={"Location": "/v2/chat/completions"}, raw_body=b"")) as srv:
        failure = call(transport_name, srv.base_url)
        assert len(srv.requests) == 1
    assert failure.kind == "request rejected" and "(the same origin)" in failure.message


def test_endless_chunked_body_ends_at_the_cap(transport_name: str) -> None:
    with FakeLLMServer(lambda r: Reply(endless=True)) as srv:
        started = time.monotonic()
        failure = call(transport_name, srv.base_url)
    assert isinstance(failure, Failure), failure
    assert (failure.kind, failure.retryable) == ("response too large", False)
    assert failure.message.startswith("answer over the size cap")
    assert time.monotonic() - started < 8  # ended by the cap, not by the timeout


def test_gzip_bomb_is_not_inflated_past_the_cap(transport_name: str) -> None:
    bomb = gzip.compress(b" " * (64 << 20), compresslevel=9)  # 64 MiB of spaces in ~64 KiB
    with FakeLLMServer(lambda r: Reply(raw_body=bomb, headers={"Content-Encoding": "gzip"})) as srv:
        failure = call(transport_name, srv.base_url)
    assert isinstance(failure, Failure), failure
    assert (failure.kind, failure.retryable) == ("response too large", False)


def test_body_over_the_cap_is_refused_and_one_under_it_is_read(transport_name: str) -> None:
    text = "x" * (CAP // 2)
    with FakeLLMServer(lambda r: Reply(content=text)) as srv:
        assert call(transport_name, srv.base_url).content == text
        assert call(transport_name, srv.base_url, max_bytes=CAP // 4).kind == "response too large"
    zipped = gzip.compress(b'{"choices": [{"message": {"content": "small"}, "finish_reason": "stop"}]}')
    with FakeLLMServer(lambda r: Reply(raw_body=zipped, headers={"Content-Encoding": "gzip"})) as srv:
        assert call(transport_name, srv.base_url).content == "small"


def test_lone_surrogate_in_an_error_message_is_made_safe(transport_name: str) -> None:
    with FakeLLMServer(lambda r: Reply(status=400, content="bad \ud800 request")) as srv:
        failure = call(transport_name, srv.base_url)
    assert failure.kind == "request rejected" and "bad \ufffd request" in failure.message
    failure.message.encode("utf-8")  # writable to any file
