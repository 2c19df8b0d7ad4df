"""CPU of one LLM call on the engine path (not part of the test suite): `Engine.complete` (cache off,
the default aiohttp transport) against the `targets.py` endpoint answering at once in its own process,
`--concurrency` calls at a time, without pytest; a plain aiohttp client making the same requests beside
it, so what the package adds to the HTTP library is read apart.

    python tests/perf/call_cpu.py [--calls 2000] [--concurrency 64] [--repeat 3]

Prints, per round, this process's CPU per call (user + system: what the load of other processes moves
least) for both clients. To compare two versions of the package, run the script from this tree with
`PYTHONPATH` naming the other tree's root, then without.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from targets import Server

import pytest_evalbench
from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.costs import PriceTable
from pytest_evalbench.llm.engine import Engine
from pytest_evalbench.llm.types import Endpoint, EngineSettings

SYSTEM = {"role": "system", "content": "You are a helpful assistant. " * 10}


def messages(i: int) -> list[dict[str, Any]]:
    """A short conversation, different per call (every call is a cache miss and its own request)."""
    return [SYSTEM, {"role": "user", "content": f"question {i}: " + "hello there " * 30}]


async def in_parallel(calls: int, concurrency: int, one: Any) -> float:
    """CPU seconds per call of `calls` calls of `one(i)`, at most `concurrency` at a time."""
    slots = asyncio.Semaphore(concurrency)

    async def limited(i: int) -> None:
        async with slots:
            await one(i)

    start = time.process_time()
    await asyncio.gather(*(limited(i) for i in range(calls)))
    return (time.process_time() - start) / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import aiohttp

    server = Server()
    engine = Engine(EngineSettings(concurrency=args.concurrency), ResponseCache(Path(tempfile.mkdtemp()), "off"),
                    PriceTable())
    endpoint = Endpoint(model="sim-target", base_url=server.base_url, api_key="sk-perf")
    url = f"{server.base_url}/chat/completions"
    headers = {"Authorization": "Bearer sk-perf", "Content-Type": "application/json"}
    numbers = itertools.count()

    async def engine_call(_: int) -> None:
        await engine.complete(endpoint, messages(next(numbers)), role="target", phase="run", sample=0)

    async def rounds() -> tuple[list[float], list[float]]:
        ours, plain = [], []
        async with aiohttp.ClientSession() as session:
            async def plain_call(i: int) -> None:
                body = orjson.dumps({"model": "sim-target", "messages": messages(i)})
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()

            for _ in range(args.repeat + 1):  # the first round of each warms imports and connections
                ours.append(await in_parallel(args.calls, args.concurrency, engine_call))
                plain.append(await in_parallel(args.calls, args.concurrency, plain_call))
        return ours[1:], plain[1:]

    try:
        ours, plain = engine.run(rounds())
    finally:
        engine.close()
        server.stop()
    print(f"package: {Path(pytest_evalbench.__file__).parent}")
    for name, values in (("Engine.complete", ours), ("plain aiohttp", plain)):
        rounds_text = ", ".join(f"{v * 1e6:.0f}" for v in values)
        print(f"{name}: {statistics.median(values) * 1e6:.0f} us CPU per call (median; rounds {rounds_text}); "
              f"{args.calls} calls, concurrency {args.concurrency}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
