"""The scripted fake server, exercised through the real `openai` client it stands in for."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import OpenAI

from pytest_evalbench.testing import FakeLLMServer, Reply, by_model, sequence

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Say something."}]


def make_client(srv: FakeLLMServer, timeout: float = 5) -> OpenAI:
    return OpenAI(base_url=srv.base_url, api_key="test-key", max_retries=0, timeout=timeout)


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[FakeLLMServer, OpenAI]]:
    # Building an OpenAI client costs ~0.1 s (TLS context), so simple tests share one pair.
    with FakeLLMServer() as srv, make_client(srv) as c:
        yield srv, c


@pytest.fixture
def server(shared: tuple[FakeLLMServer, OpenAI]) -> FakeLLMServer:
    srv = shared[0]
    srv.set_responder(lambda request: Reply(content="ok"))
    srv.latency = 0.0
    srv.reset()
    return srv


@pytest.fixture
def client(server: FakeLLMServer, shared: tuple[FakeLLMServer, OpenAI]) -> OpenAI:
    return shared[1]


def chat(client: OpenAI, model: str = "cand-1", **kwargs: Any) -> Any:
    return client.chat.completions.create(model=model, messages=MESSAGES, **kwargs)  # type: ignore[arg-type]


def test_binds_to_loopback_only() -> None:
    with pytest.raises(ValueError):
        FakeLLMServer(host="0.0.0.0")
    with FakeLLMServer() as srv:
        assert srv.base_url.startswith("http://127.0.0.1:")
        assert srv.base_url.endswith("/v1")
        assert srv.port > 0


def test_default_responder_echoes_ok(server: FakeLLMServer, client: OpenAI) -> None:
    result = chat(client)
    assert result.object == "chat.completion"
    assert result.model == "cand-1"
    assert result.choices[0].message.role == "assistant"
    assert result.choices[0].message.content == "ok"
    assert result.choices[0].finish_reason == "stop"


def test_plain_content_usage_and_recorded_request(server: FakeLLMServer, client: OpenAI) -> None:
    server.set_responder(lambda request: Reply(content="hello there", prompt_tokens=11, completion_tokens=7,
                                               finish_reason="length"))
    result = chat(client, temperature=0.25)
    assert result.choices[0].message.content == "hello there"
    assert result.choices[0].finish_reason == "length"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens) == (11, 7, 18)

    (recorded,) = server.requests
    assert recorded["model"] == "cand-1"
    assert recorded["messages"] == MESSAGES
    assert recorded["temperature"] == 0.25
    assert recorded["_headers"]["authorization"] == "Bearer test-key"
    assert all(key == key.lower() for key in recorded["_headers"])


def test_usage_is_estimated_when_not_scripted(server: FakeLLMServer, client: OpenAI) -> None:
    server.set_responder(lambda request: "hello world")  # a str is shorthand for Reply(content=...)
    result = chat(client)
    expected_prompt = math.ceil(len(json.dumps(server.requests[0]["messages"])) / 4)
    assert result.usage.prompt_tokens == expected_prompt
    assert result.usage.completion_tokens == math.ceil(len("hello world") / 4)
    assert result.usage.total_tokens == expected_prompt + 3


def test_dict_reply_becomes_json_content(server: FakeLLMServer, client: OpenAI) -> None:
    server.set_responder(lambda request: {"score": 4, "reason": "fine"})
    assert json.loads(chat(client).choices[0].message.content) == {"score": 4, "reason": "fine"}


def test_tool_calls(server: FakeLLMServer, client: OpenAI) -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}
    server.set_responder(lambda request: Reply(content=None, tool_calls=[call], finish_reason="tool_calls"))
    result = chat(client, tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {}}}])
    message = result.choices[0].message
    assert message.content is None
    assert result.choices[0].finish_reason == "tool_calls"
    (tool_call,) = message.tool_calls
    assert tool_call.id == "call_1"
    assert tool_call.function.name == "get_weather"
    assert json.loads(tool_call.function.arguments) == {"city": "Paris"}
    assert server.requests[0]["tools"][0]["function"]["name"] == "get_weather"


def test_429_carries_retry_after(server: FakeLLMServer, client: OpenAI) -> None:
    server.set_responder(lambda request: Reply(status=429, content="slow down", headers={"Retry-After": "0.05"}))
    with pytest.raises(openai.RateLimitError) as info:
        chat(client)
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "0.05"
    assert "slow down" in info.value.message
    assert info.value.body["type"] == "rate_limit_error"  # the client exposes the inner "error" object


def test_an_enforced_rate_limit_answers_like_openai(server: FakeLLMServer, client: OpenAI) -> None:
    from pytest_evalbench.llm.shared_limits import parse
    from pytest_evalbench.testing import RateWindow

    server.rate_window = RateWindow(120, burst=1.0)  # 2 a second, 2 at once
    try:
        answers = [client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
                   for _ in range(2)]
        info = parse(dict(answers[1].headers))
        assert (info.requests.limit, info.requests.remaining) == (120, 0) and 0 < info.requests.reset <= 1.0
        with pytest.raises(openai.RateLimitError) as refused:
            chat(client)
        limited = parse(dict(refused.value.response.headers))
        assert limited.retry_after is not None and 0 < limited.retry_after <= 0.5
        assert limited.requests.remaining == 0 and server.rate_window.limited == 1
        time.sleep(0.6)  # the bucket refills at 2 a second
        assert chat(client)
    finally:
        server.rate_window = None


def test_scripted_500(server: FakeLLMServer, client: OpenAI) -> None:
    server.set_responder(lambda request: Reply(status=500, content="boom"))
    with pytest.raises(openai.InternalServerError) as info:
        chat(client)
    assert info.value.status_code == 500
    assert "boom" in info.value.message


def test_raising_responder_is_a_500_and_server_survives(server: FakeLLMServer, client: OpenAI) -> None:
    def broken(request: dict[str, Any]) -> Reply:
        raise RuntimeError("script exploded")

    server.set_responder(broken)
    with pytest.raises(openai.InternalServerError) as info:
        chat(client)
    assert "script exploded" in info.value.message
    server.set_responder(lambda request: "recovered")
    assert chat(client).choices[0].message.content == "recovered"


def test_raw_non_json_200_body(server: FakeLLMServer, client: OpenAI) -> None:
    server.set_responder(lambda request: Reply(raw_body=b"not json"))
    # The client does not wrap this in an openai exception: the bare JSONDecodeError escapes.
    with pytest.raises(json.JSONDecodeError):
        chat(client)


def test_drop_connection(server: FakeLLMServer, client: OpenAI) -> None:
    server.set_responder(lambda request: Reply(drop_connection=True))
    with pytest.raises(openai.APIConnectionError) as info:
        chat(client)
    assert not isinstance(info.value, openai.APITimeoutError)
    server.set_responder(lambda request: "back")
    assert chat(client).choices[0].message.content == "back"


def test_hang_times_out_and_server_still_stops_fast() -> None:
    srv = FakeLLMServer(lambda request: Reply(content="late", delay=30)).start()
    try:
        with make_client(srv, timeout=0.3) as c, pytest.raises(openai.APITimeoutError):
            chat(c)
        assert len(srv.requests) == 1  # the handler is still sleeping in its delay
    finally:
        started = time.monotonic()
        srv.stop()
    assert time.monotonic() - started < 2.0


def test_stop_interrupts_handler_mid_delay_with_client_waiting() -> None:
    srv = FakeLLMServer(lambda request: Reply(delay=30)).start()
    errors: list[BaseException] = []

    def call() -> None:
        with make_client(srv, timeout=10) as c:
            try:
                chat(c)
            except BaseException as exc:
                errors.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    deadline = time.monotonic() + 2
    while not srv.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    srv.stop()
    worker.join(timeout=5)
    assert time.monotonic() - started < 2.0
    assert len(errors) == 1 and isinstance(errors[0], openai.APIConnectionError)


def test_peak_concurrency_with_eight_threads() -> None:
    with FakeLLMServer(latency=0.2) as srv, make_client(srv) as c:
        barrier = threading.Barrier(8)
        results: list[str] = []

        def call() -> None:
            barrier.wait()
            results.append(chat(c).choices[0].message.content)

        threads = [threading.Thread(target=call) for _ in range(8)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        assert results == ["ok"] * 8
        assert srv.peak_concurrency == 8
        assert len(srv.requests) == 8
        assert elapsed < 8 * 0.2  # really parallel, not serialised

        srv.reset()
        assert srv.requests == [] and srv.peak_concurrency == 0


def test_keeps_up_with_64_concurrent_keepalive_clients() -> None:
    # The first round only answers once all 64 requests are inside the server at the same time
    # (a barrier in the responder), so the peak is deterministic however loaded the machine is;
    # the second round reuses the pooled keep-alive sockets.
    arrived = threading.Barrier(64, timeout=30)

    def responder(request: dict[str, Any]) -> str:
        if len(srv.requests) <= 64:
            arrived.wait()
        return "ok"

    with FakeLLMServer(responder) as srv, make_client(srv, timeout=60) as c:
        failures: list[BaseException] = []

        def call() -> None:
            try:
                chat(c)
                chat(c)
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=call) for _ in range(64)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert len(srv.requests) == 64 * 2
        assert srv.peak_concurrency == 64


def test_sequence_repeats_last_reply(server: FakeLLMServer, client: OpenAI) -> None:
    server.set_responder(sequence("one", Reply(status=503), "last"))
    assert chat(client).choices[0].message.content == "one"
    with pytest.raises(openai.InternalServerError):
        chat(client)
    assert [chat(client).choices[0].message.content for _ in range(3)] == ["last"] * 3


def test_by_model_routes_and_rejects_unknown(server: FakeLLMServer, client: OpenAI) -> None:
    server.set_responder(by_model({"cand-1": lambda r: "candidate", "judge-1": lambda r: {"score": 5}}))
    assert chat(client, model="cand-1").choices[0].message.content == "candidate"
    assert json.loads(chat(client, model="judge-1").choices[0].message.content) == {"score": 5}
    with pytest.raises(openai.NotFoundError) as info:
        chat(client, model="nope")
    assert "nope" in info.value.message

    server.set_responder(by_model({"cand-1": lambda r: "candidate"}, default=lambda r: "fallback"))
    assert chat(client, model="other").choices[0].message.content == "fallback"


def test_models_endpoint(client: OpenAI) -> None:
    assert [model.id for model in client.models.list()] == ["fake"]


def test_cli_prints_base_url_and_stops_on_sigterm() -> None:
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "pytest_evalbench.testing.fake_server", "--latency", "0",
                             "--port", "0"], cwd=repo, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        request = urllib.request.Request(
            f"{base_url}/chat/completions", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"model": "m", "messages": MESSAGES}).encode())
        with urllib.request.urlopen(request, timeout=5) as response:
            assert json.load(response)["choices"][0]["message"]["content"] == "ok"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
