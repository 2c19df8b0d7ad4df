"""A chain whose answer frees a slot lets the call that slot goes to be sent before it prepares its
own next call (pipelines.py `hand_off`, awaited by `Engine.complete` once a fetched answer is
counted): in a burst of answers, waiting calls get on the wire first."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.costs import PriceTable
from pytest_evalbench.llm.engine import Engine
from pytest_evalbench.llm.types import Completion, Endpoint, EngineSettings


class RecordingTransport:
    """Answers every call after a short wait; records when each call is sent."""

    def __init__(self, order: list[str]) -> None:
        self.order = order

    async def complete(self, endpoint: Endpoint, body: dict[str, Any], headers_out: dict[str, str] | None = None,
                       *, data: bytes | None = None) -> Completion:
        self.order.append(f"send {body['messages'][0]['content']}")
        await asyncio.sleep(0.01)
        return Completion("ok", input_tokens=1, output_tokens=1)

    async def aclose(self) -> None:
        pass


def test_the_call_a_freed_slot_goes_to_is_sent_before_the_answered_chain_goes_on(tmp_path: Path) -> None:
    order: list[str] = []
    engine = Engine(EngineSettings(concurrency=1), ResponseCache(tmp_path, "off"), PriceTable(),
                    transport=RecordingTransport(order))  # type: ignore[arg-type]
    endpoint = Endpoint(model="m", base_url="http://127.0.0.1:9/v1", api_key="sk-test")

    async def chain(name: str) -> None:
        await engine.complete(endpoint, [{"role": "user", "content": name}], role="target", phase="run", sample=0)
        order.append(f"{name} goes on")

    async def both() -> None:
        await asyncio.gather(chain("a"), chain("b"))

    try:
        engine.run(both())
    finally:
        engine.close()
    assert order == ["send a", "send b", "a goes on", "b goes on"]
