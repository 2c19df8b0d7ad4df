"""Both transports against the fake server: same answers, same failure classification."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from helpers import dead_base_url

from pytest_evalbench.llm.transport import TRANSPORTS, AiohttpTransport, HTTPTransport, OpenAITransport, classify, make_transport
from pytest_evalbench.llm.types import Endpoint
from pytest_evalbench.testing import FakeLLMServer, Reply

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(params=TRANSPORTS)
def transport_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def call(name: str, base_url: str, body: dict[str, Any] = BODY, timeout: float = 5.0) -> Any:
    """The completion, or the classified failure of one call."""

    async def run() -> Any:
        transport = make_transport(name, timeout)
        try:
            return await transport.complete(Endpoint("m", base_url, api_key="sk-secret"), body)
        except Exception as exc:
            return classify(exc)
        finally:
            await transport.aclose()

    return asyncio.run(run())


def test_make_transport_names() -> None:
    assert isinstance(make_transport("http", 1), HTTPTransport)
    assert isinstance(make_transport("aiohttp", 1), AiohttpTransport)
    assert isinstance(make_transport("openai", 1), OpenAITransport)


def test_answer_and_request_are_the_same_through_both(transport_name: str) -> None:
    with FakeLLMServer(lambda r: Reply(content="hello", prompt_tokens=7, completion_tokens=3,
                                       tool_calls=[{"id": "c1", "type": "function",
                                                   "function": {"name": "f", "arguments": "{}"}}])) as srv:
        completion = call(transport_name, srv.base_url)
        sent = srv.requests[0]
    assert (completion.content, completion.input_tokens, completion.output_tokens) == ("hello", 7, 3)
    assert completion.tool_calls == [{"id": "c1", "name": "f", "arguments": "{}"}]
    assert sent["messages"] == BODY["messages"] and sent["model"] == "m"


@pytest.mark.parametrize(("reply", "kind", "retryable", "retry_after"), [
    (Reply(status=429, headers={"Retry-After": "2"}), "rate limited", True, 2.0),
    (Reply(status=503), "server error", True, None),
    (Reply(status=401), "request rejected", False, None),
    (Reply(raw_body=b"not json"), "bad response", True, None),
    (Reply(raw_body=b'{"choices": []}'), "bad response", True, None),
])
def test_failures_classify_alike(transport_name: str, reply: Reply, kind: str, retryable: bool,
                                 retry_after: float | None) -> None:
    with FakeLLMServer(lambda r: reply) as srv:
        failure = call(transport_name, srv.base_url)
    assert (failure.kind, failure.retryable, failure.retry_after) == (kind, retryable, retry_after)
    assert "sk-secret" not in failure.message
    if reply.status >= 400:
        assert failure.message.startswith(f"HTTP {reply.status}")


def test_refused_connection_and_dropped_connection(transport_name: str) -> None:
    refused = call(transport_name, dead_base_url())
    assert (refused.kind, refused.connection) == ("connection error", True)
    with FakeLLMServer(lambda r: Reply(drop_connection=True)) as srv:
        dropped = call(transport_name, srv.base_url)
    assert dropped.kind == "connection error" and dropped.retryable


def test_slow_answer_is_a_timeout(transport_name: str) -> None:
    with FakeLLMServer(lambda r: Reply(content="late", delay=2.0)) as srv:
        failure = call(transport_name, srv.base_url, timeout=0.3)
    assert failure.kind == "timeout" and not failure.connection
