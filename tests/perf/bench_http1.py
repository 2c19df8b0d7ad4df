"""Client CPU per request of the built-in HTTP/1.1 client (`llm/http1.py`) on loopback.

The server runs in a separate process (its CPU is not counted); the number reported is the client
process's CPU time (user + system, `time.process_time`) per request, which a loaded machine does
not inflate the way wall time is. Three framings: Content-Length, chunked, gzip.

    python tests/perf/bench_http1.py [--requests 20000] [--concurrency 32] [--repeat 3] [--parse-only]

EVALBENCH_HTTP1_MODULE=<module> measures another copy of http1 (e.g. a previous version saved as
pytest_evalbench/llm/_http1_old.py) for a before/after comparison on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import importlib
import os

# EVALBENCH_HTTP1_MODULE names another copy of the module (e.g. the previous version) to compare
HTTPClient = importlib.import_module(os.environ.get("EVALBENCH_HTTP1_MODULE", "pytest_evalbench.llm.http1")).HTTPClient

BODY = json.dumps({
    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "word " * 80},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 40, "completion_tokens": 80, "total_tokens": 120}}).encode()
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\n"
        b"x-ratelimit-remaining-requests: 499\r\nx-ratelimit-remaining-tokens: 199000\r\n")
ANSWERS = {
    "length": HEAD + b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY),
    "chunked": HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        len(BODY[:300]), BODY[:300], len(BODY[300:]), BODY[300:]),
    "gzip": HEAD + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (
        len(gzip.compress(BODY)), gzip.compress(BODY)),
}


def serve(port_out: multiprocessing.SimpleQueue) -> None:  # type: ignore[type-arg]
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                    if line[:7].lower() == b"x-kind:":
                        kind = line[7:].strip().decode()
                await reader.readexactly(length)
                writer.write(ANSWERS[kind])
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        port_out.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


async def measure(url: str, kind: str, requests: int, concurrency: int) -> float:
    client = HTTPClient(30.0)
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    headers = {"Content-Type": "application/json", "Authorization": "Bearer k", "X-Kind": kind}
    await asyncio.gather(*(client.post(url, body, headers) for _ in range(concurrency)))  # warm connections
    left = requests

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            response = await client.post(url, body, headers)
            assert response.status == 200 and response.body == BODY, response

    start = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    spent = time.process_time() - start
    await client.close()
    return spent / requests * 1e6


class _NullTransport(asyncio.Transport):
    def write(self, data: Any) -> None:
        pass

    def abort(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


async def parse_only(kind: str, requests: int) -> float:
    """CPU per answer of the parsing alone: the answer fed to one connection in two pieces, no socket."""
    module = importlib.import_module(os.environ.get("EVALBENCH_HTTP1_MODULE", "pytest_evalbench.llm.http1"))
    connection = module._Connection()
    connection.connection_made(_NullTransport())
    wire = ANSWERS[kind]
    half = len(wire) // 2
    start = time.process_time()
    for _ in range(requests):
        waiter = connection.send(b"")
        connection.data_received(wire[:half])
        connection.data_received(wire[half:])
        assert waiter.result().body == BODY
    return (time.process_time() - start) / requests * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parse-only", action="store_true", help="time the response parsing alone (no server)")
    args = parser.parse_args()
    if args.parse_only:
        for kind in ANSWERS:
            runs = [asyncio.run(parse_only(kind, args.requests)) for _ in range(args.repeat)]
            print(f"{kind:8s} parse CPU per answer: best {min(runs):5.2f} us")
        return 0
    ports: multiprocessing.SimpleQueue = multiprocessing.SimpleQueue()  # type: ignore[type-arg]
    server = multiprocessing.Process(target=serve, args=(ports,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{ports.get()}/v1/chat/completions"
    try:
        for kind in ANSWERS:
            runs = [asyncio.run(measure(url, kind, args.requests, args.concurrency)) for _ in range(args.repeat)]
            print(f"{kind:8s} client CPU per request: best {min(runs):6.1f} us, median {sorted(runs)[len(runs) // 2]:6.1f} us")
    finally:
        server.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
