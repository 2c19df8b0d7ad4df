"""What the limit tests run in other OS processes (multiprocessing's `spawn`: fresh interpreters that
share nothing but the files under test).

A spawned interpreter imports the module that defines its target to find it. Defined in a test
module, that is the test module with everything it imports (pytest, the fake server, the engine),
once per process; defined here, each target imports only the package module it exercises."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

KEY = "http://127.0.0.1:8000/v1"
"""The endpoint of the shared-limits tests (tests/unit/test_shared_limits.py)."""


def race_for_slots(path: str, ready: Any, out: Any) -> None:
    """Once every racer is ready: two threads reserving 40 slots each of a shared one-a-second limit,
    as fast as they can; the slots they got go to `out`."""
    from pytest_evalbench.llm.limits import SharedRateLimit

    limit = SharedRateLimit(Path(path), per_minute=60)
    slots: list[float] = []
    ready.wait()

    def loop() -> None:
        for _ in range(40):
            slots.append(limit.reserve())

    threads = [threading.Thread(target=loop) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put(slots)


def reserve_rate_slots(path: str, count: int) -> list[float]:
    """`count` slots of a shared limit of 600 calls a minute."""
    from pytest_evalbench.llm.limits import SharedRateLimit

    limit = SharedRateLimit(Path(path), per_minute=600)
    return [limit.reserve() for _ in range(count)]


def reserve_many(path: str, count: int) -> None:
    """Up to `count` calls of $0.10 against a $1.00 budget kept in the ledger file at `path`, each
    settled at its reserved price; stops at the first refusal."""
    from pytest_evalbench.llm.limits import Budget, FileLedger

    async def run() -> None:
        budget = Budget(1.0, FileLedger(Path(path)))
        for _ in range(count):
            if not await budget.reserve(0.1):
                return
            budget.settle(0.1, 0.1)

    asyncio.run(run())


def reserve_slots(path: str, count: int) -> list[float]:
    """`count` start slots of KEY in the shared view at `path`."""
    from pytest_evalbench.llm.shared_limits import SharedLimits

    limits = SharedLimits(Path(path))
    return [limits.reserve(KEY) for _ in range(count)]


def send_paced(path: str, url: str, count: int, barrier: threading.Barrier) -> list[float]:
    """`count` chat requests to the fake server at `url`, each started at the slot the shared view
    grants and teaching it the answer's headers; the times they were sent."""
    from pytest_evalbench.llm.shared_limits import SharedLimits, parse

    limits = SharedLimits(Path(path))
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    barrier.wait(30)
    sent = []
    for _ in range(count):
        time.sleep(max(0.0, limits.reserve(KEY) - time.time()))
        sent.append(time.time())
        request = urllib.request.Request(f"{url}/chat/completions", data=body,
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                limits.learn(KEY, parse(dict(answer.headers)), limited=False)
        except urllib.error.HTTPError as refused:
            limits.learn(KEY, parse(dict(refused.headers)), limited=refused.code == 429)
    return sent


def learn_429(path: str) -> None:
    """Teach the shared view at `path` a 429 of KEY with a Retry-After of one second."""
    from pytest_evalbench.llm.shared_limits import SharedLimits, parse

    SharedLimits(Path(path)).learn(KEY, parse({"retry-after": "1"}), limited=True)
