"""Connections opened before the requests that take them (llm/pool.py, `Engine.warm`): as many as
asked, each taken by one request (none opened twice), none when a call would not go to the network,
and a warm-up that cannot connect changes nothing about how the requests then fail."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest

from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.engine import Engine
from pytest_evalbench.llm.http1 import HTTPClient, Origin
from pytest_evalbench.llm.pricing import PriceTable
from pytest_evalbench.llm.types import Endpoint, EngineSettings

ANSWER = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                  "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()


class CountingServer:
    """Answers every request with ANSWER on keep-alive connections; counts connections and requests."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                await reader.readexactly(length)
                self.requests += 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(ANSWER), ANSWER))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def settle(self) -> None:
        """Let the server's side of connects and requests already made run."""
        for _ in range(20):
            await asyncio.sleep(0.01)


def post_all(client: HTTPClient, url: str, count: int) -> asyncio.Future[list[object]]:
    return asyncio.gather(*(client.post(url + "/chat/completions", b"{}", {}) for _ in range(count)))


def test_warm_opens_the_connections_before_any_request_and_requests_take_them() -> None:
    async def main() -> tuple[int, int, int, int]:
        server = CountingServer()
        url = await server.start()
        client = HTTPClient(5.0)
        await client.warm(Origin.of(url + "/chat/completions"), 3, 5.0)
        await server.settle()
        before = (server.connections, server.requests)
        await post_all(client, url, 3)
        await client.warm(Origin.of(url + "/chat/completions"), 3, 5.0)  # 3 idle already: none more
        await server.settle()
        await client.close()
        server.server.close()
        return (*before, server.connections, server.requests)

    assert asyncio.run(main()) == (3, 0, 3, 3)


def test_requests_take_connections_still_opening_instead_of_opening_more() -> None:
    async def main() -> tuple[int, int]:
        server = CountingServer()
        url = await server.start()
        client = HTTPClient(5.0)
        await client.warm(Origin.of(url + "/chat/completions"), 4, 0.0)  # returns before any connect ends
        await post_all(client, url, 4)
        await server.settle()
        await client.close()
        server.server.close()
        return server.connections, server.requests

    assert asyncio.run(main()) == (4, 4)


def test_a_warm_up_that_cannot_connect_leaves_requests_failing_as_before() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1/chat/completions"

    async def main() -> BaseException | None:
        client = HTTPClient(5.0)
        await client.warm(Origin.of(url), 2, 5.0)  # refused: nothing raised here
        try:
            await client.post(url, b"{}", {})
        except ConnectionError as exc:
            return exc
        finally:
            await client.close()
        return None

    assert isinstance(asyncio.run(main()), ConnectionError)


@pytest.mark.parametrize(("mode", "expected"), [("off", 3), ("refresh", 3), ("on", 0), ("replay", 0)])
def test_engine_warms_only_when_every_call_is_a_request(tmp_path: Path, mode: str, expected: int) -> None:
    """min(items, concurrency) connections per origin, shared by the roles on it; none to an endpoint
    without a key (its calls fail before connecting) and none when a cache may answer."""
    loop = asyncio.new_event_loop()
    server = CountingServer()
    url = loop.run_until_complete(server.start())
    engine = Engine(EngineSettings(concurrency=3), ResponseCache(tmp_path, mode), PriceTable())
    try:
        user = Endpoint(model="u", base_url=url, api_key="sk-test")
        judge = Endpoint(model="j", base_url=url + "/", api_key="sk-test")  # the same origin
        keyless = Endpoint(model="k", base_url=None, api_key=None)  # api.openai.com: never reached
        engine.warm([user, judge, keyless], 10)
        loop.run_until_complete(server.settle())
        assert server.connections == expected
        assert server.requests == 0
        engine.warm([user], 10)  # the idle ones count: nothing more
        loop.run_until_complete(server.settle())
        assert server.connections == expected
    finally:
        engine.close()
        server.server.close()
        loop.close()
