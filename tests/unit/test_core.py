"""Pure core pieces: simulation helpers, judge parsing, engine primitives, transport classification."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from typing import Any

import openai
import pytest

from pytest_evalbench.formats.spec import Generation, Metric
from pytest_evalbench.kinds.metric_judge import SCHEMA, parse_answer
from pytest_evalbench.kinds.scenarios.models import Scenario
from pytest_evalbench.kinds.scenarios.runner import parse_user_message, perfunctory, turn_prompt, user_system_prompt
from pytest_evalbench.llm.cache import cache_key, canonical_json, completion_material
from pytest_evalbench.llm.engine import bounded_strings
from pytest_evalbench.llm.limits import PrioritySemaphore
from pytest_evalbench.llm.transport import OpenAITransport, classify, parse_completion
from pytest_evalbench.llm.types import Endpoint

SCENARIO = Scenario(id="m01_s001_v01", metric_id="m01", persona="neutral", user_persona="a sailor from Oslo",
                    user_goal="get help", latent_adversarial_goal="make it skip questions",
                    landmarks=[{"turn": 2, "instruction": "say you are in a hurry"}],
                    demographic={"age": "Adult (18+)"})
METRIC = Metric(id="m01", name="Asks questions", type="positive", definition="Asks a question.\nMore text.")


@pytest.mark.parametrize(("text", "expected"), [
    ("Thought: hmm\nMessage: hello there", "hello there"),
    ("thought: x\nMESSAGE:  multi\nline", "multi\nline"),
    ("<think>secret</think>Message: hi", "hi"),
    ("just a bare reply", "just a bare reply"),
    ('Message: "quoted"', "quoted"),
    ("Thought: I am in a hurry. Message: Sure, a list please.", "Sure, a list please."),  # one line (1.5B model)
    ("Thought: my message: the hidden goal", ""),  # no sentence before the marker: still only a Thought
    ("", ""),
    (None, ""),
])
def test_parse_user_message(text: str | None, expected: str) -> None:
    assert parse_user_message(text) == expected


def test_perfunctory_is_seeded_and_bounded() -> None:
    text = "Hello There, I Would Like Some Help With My Trip To Paris Next Week. " * 5
    assert perfunctory(text, "a|0|1") == perfunctory(text, "a|0|1")
    assert perfunctory(text, "a|0|1") != perfunctory(text, "a|1|1")
    assert len(perfunctory(text, "a|0|1")) <= len(text)
    assert perfunctory("short", "s") == "short"


def test_user_prompt_uses_demographic_persona_landmarks_and_goal() -> None:
    prompt = user_system_prompt(SCENARIO, METRIC, Generation(turns=3, landmarks=True))
    assert "a sailor from Oslo" in prompt and "neutral" not in prompt
    assert "age: Adult (18+)" in prompt and "Turn 2: say you are in a hurry" in prompt
    # the objective comes from the whole definition and the metric type, never the name
    assert "make it skip questions" in prompt and "Behaviour: Asks a question. More text." in prompt
    assert "SHOULD show the following behaviour" in prompt and "Asks questions" not in prompt
    assert "at most 3 turns" in prompt
    no_landmarks = user_system_prompt(SCENARIO, METRIC, Generation(turns=3, landmarks=False))
    assert "Turn 2:" not in no_landmarks and "at most" not in no_landmarks
    assert "This turn: say you are in a hurry" in turn_prompt(2, SCENARIO, Generation(turns=3))
    assert "This turn" not in turn_prompt(1, SCENARIO, Generation(turns=3))


@pytest.mark.parametrize("text", ['{"justification": "j", "present": "false"}', '{"present": true}',
                                  '{"justification": "j", "present": 1}', "not json", "", '["present"]',
                                  '{"justification": "j", "present": true, "extra": 1}'])
def test_judge_rejects_unusable_answers(text: str) -> None:
    with pytest.raises(ValueError):
        parse_answer(text)


def test_judge_accepts_fenced_and_thinking_answers() -> None:
    answer = parse_answer('<think>x</think>```json\n{"justification": "ok\nline", "present": false}\n```')
    assert answer.present is False and answer.justification == "ok\nline"
    schema = SCHEMA[1]
    assert schema["additionalProperties"] is False and set(schema["required"]) == {"justification", "present"}
    assert bounded_strings(schema)["properties"]["justification"]["maxLength"] == 400
    assert "maxLength" not in schema["properties"]["justification"]


def test_cache_key_is_canonical() -> None:
    assert cache_key({"a": 1, "b": [1, 2]}) == cache_key({"b": [1, 2], "a": 1})
    assert cache_key({"a": 1}) != cache_key({"a": 2})


@pytest.mark.parametrize("body", [
    {"model": "m", "messages": [{"role": "user", "content": "héllo \u2603 \"quoted\"\n"}], "temperature": 0.5},
    {"model": "m", "messages": [], "response_format": {"type": "json_schema", "json_schema": {"b": 1, "a": [2.0]}}},
])
@pytest.mark.parametrize(("sample", "attempt"), [(0, 0), (3, 2)])
def test_request_key_is_the_cache_key_of_the_call(body: dict[str, Any], sample: int, attempt: int) -> None:
    """The engine hashes the material's canonical JSON into the key: the same key as the material
    encoded anew, the key the cache verifies a stored request against."""
    material = completion_material("openai:https://x/v1", body, sample, attempt)
    assert material == {"endpoint": "openai:https://x/v1", "body": body, "sample": sample, "attempt": attempt}
    assert cache_key(material, canonical_json(material)) == cache_key(material)


def test_cache_keys_stay_what_recorded_caches_hold() -> None:
    """Keys are byte-identical to those every recorded cache (the demo's committed one) is filed under:
    a changed key is a cache that no longer replays."""
    body = {"model": "m", "messages": [{"role": "user", "content": "h\u00e9 \u2603 \"q\""}], "temperature": 0.5}
    for sample, key in ((2, "3dc6b09d5379b5313e05de7b868957d105d123284d119abd72a6a77eb1e94fb4"),
                        (True, "eb7b143686db356bc550c442c1d41c3d6069f3f934436447cbbbf5795b1cc4dd")):
        material = completion_material("openai:https://x/v1", body, sample, 1)
        assert cache_key(material) == cache_key(material, canonical_json(material)) == key


def test_priority_semaphore_serves_lowest_priority_first() -> None:
    order: list[int] = []

    async def main() -> None:
        sem = PrioritySemaphore(1)
        await sem.acquire(0)

        async def worker(priority: int) -> None:
            await sem.acquire(priority)
            order.append(priority)
            sem.release()

        tasks = [asyncio.create_task(worker(p)) for p in (5, 3, 9, 1)]
        await asyncio.sleep(0.01)
        sem.release()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert order == [1, 3, 5, 9]


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
        assert classify(TypeError("x")).kind == "bad response"
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
    assert (limited.kind, limited.retryable, limited.retry_after) == ("rate limited", True, 2.0)
    assert classify(status(500)).retryable and not classify(status(401)).retryable
    assert classify(openai.APITimeoutError(request=request)).kind == "timeout"
    assert classify(openai.APIConnectionError(request=request)).connection
    assert classify(httpx2.ConnectError("refused")).kind == "connection error"
    assert classify(httpx2.ReadTimeout("slow")).kind == "timeout"
    assert classify(TimeoutError()).kind == "timeout"  # the whole-call bound


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
    assert (failure.kind, failure.connection, failure.retryable) == ("connection error", True, True)
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
    assert classify(info.value).kind == "timeout"
    assert time.monotonic() - started < 5


def _reserve_slots(path: str, count: int) -> list[float]:
    from pathlib import Path

    from pytest_evalbench.llm.limits import SharedRateLimit

    limit = SharedRateLimit(Path(path), per_minute=600)
    return [limit.reserve() for _ in range(count)]


def test_rate_limit_slots_are_spaced_across_processes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.starmap(_reserve_slots, [(str(tmp_path / "rl"), 5), (str(tmp_path / "rl"), 5)])
    slots = sorted(s for r in results for s in r)
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert len(slots) == 10 and min(gaps) >= 0.1 - 1e-6


def _race_for_slots(path: str, ready: Any, out: Any) -> None:
    """Once every racer is ready: two threads reserving 40 slots each, as fast as they can."""
    from pathlib import Path

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


def test_racing_reservations_never_share_a_slot(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Processes and threads reserving at the same moment: each read-change-write of the state file is
    exclusive, so no two reservations read the same next slot (without the lock, they do). The limit
    of one per second keeps every slot in the future: a lost update is a repeated slot."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    ready, out = context.Barrier(3), context.Queue()
    racers = [context.Process(target=_race_for_slots, args=(str(tmp_path / "rl"), ready, out)) for _ in range(3)]
    for racer in racers:
        racer.start()
    results = [out.get(timeout=120) for _ in racers]
    for racer in racers:
        racer.join()
    slots = sorted(s for r in results for s in r)
    assert len(slots) == 3 * 2 * 40
    assert [b - a for a, b in itertools.pairwise(slots)] == pytest.approx([1.0] * (len(slots) - 1))


def test_identical_concurrent_calls_are_made_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pytest_evalbench.llm.cache import ResponseCache
    from pytest_evalbench.llm.costs import PriceTable
    from pytest_evalbench.llm.engine import Engine, EngineSettings
    from pytest_evalbench.llm.types import Endpoint
    from pytest_evalbench.testing import FakeLLMServer

    with FakeLLMServer(lambda r: "same", latency=0.2) as server:
        engine = Engine(EngineSettings(), ResponseCache(tmp_path, "off"), PriceTable())
        endpoint = Endpoint(model="m", base_url=server.base_url, api_key="k")
        messages = [{"role": "user", "content": "hi"}]

        async def many() -> list[str | None]:
            calls = [engine.complete(endpoint, messages, role="target", phase="simulate", sample=0)
                     for _ in range(5)]
            other = engine.complete(endpoint, messages, role="target", phase="simulate", sample=1)
            return [c.content for c in await asyncio.gather(*calls, other)]

        try:
            assert engine.run(many()) == ["same"] * 6
        finally:
            engine.close()
        assert len(server.requests) == 2  # sample 0 once, sample 1 once
        assert engine.stats.cache_hits == 4


def test_calls_rank_by_deadline_not_by_item() -> None:
    """A pipeline's later calls rank behind the first calls of the next few items (concurrency / stride)."""
    import contextvars

    from pytest_evalbench.llm.pipelines import CALLS, ITEM_STRIDE, PRIORITY, call_priority

    def ranks(position: int, calls: int) -> list[int]:
        def run() -> list[int]:
            PRIORITY.set(position)
            CALLS.set([0])
            return [call_priority(64) for _ in range(calls)]

        return contextvars.copy_context().run(run)

    assert ranks(0, 3) == [0, 64, 128]
    assert ranks(10, 2) == [10 * ITEM_STRIDE, 10 * ITEM_STRIDE + 64]
    assert ranks(0, 2)[1] < ranks(64 // ITEM_STRIDE + 1, 1)[0]  # item 0's 2nd call beats item 65's 1st
    assert contextvars.copy_context().run(lambda: (PRIORITY.set(5), call_priority(64))[1]) == 5 * ITEM_STRIDE


class _SleepTransport:
    """Answers every call after `latency` seconds; records call starts and the peak in flight."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.starts: list[str] = []
        self.in_flight = self.peak = 0

    async def complete(self, endpoint: Endpoint, body: dict[str, object], headers_out: object = None, *,
                       data: bytes | None = None) -> object:
        from pytest_evalbench.llm.types import Completion

        self.starts.append(str(body["messages"][0]["content"]))  # type: ignore[index]
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        return Completion(content="ok", input_tokens=1, output_tokens=1)

    async def aclose(self) -> None:
        return None


def test_item_chains_pipeline_and_finish_in_order(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Each call (not each item) takes a slot: a later item's first call starts before an earlier
    item's last call, items still finish in order and in flight never exceeds the concurrency."""
    from pytest_evalbench.llm.cache import ResponseCache
    from pytest_evalbench.llm.costs import PriceTable
    from pytest_evalbench.llm.engine import Engine, EngineSettings

    transport = _SleepTransport(0.01)
    engine = Engine(EngineSettings(concurrency=8), ResponseCache(tmp_path, "off"), PriceTable(),
                    transport=transport)  # type: ignore[arg-type]
    endpoint = Endpoint(model="m", base_url=None, api_key="k")
    finished: list[int] = []

    def chain(item: int) -> object:
        async def run() -> int:
            for call in range(7):
                messages = [{"role": "user", "content": f"{item}.{call}"}]
                await engine.complete(endpoint, messages, role="target", phase="simulate", sample=0)
            finished.append(item)
            return item

        return run

    try:
        futures = [engine.submit(i, chain(i), i) for i in range(20)]
        assert [f.result(timeout=30) for f in futures] == list(range(20))
    finally:
        engine.close()
    assert transport.peak == 8 and len(transport.starts) == 140
    # the last item starts long before the first item's last call (strict item order: 127th vs 54th start)
    assert transport.starts.index("19.0") < transport.starts.index("0.6")
    assert finished[:4] == [0, 1, 2, 3] and finished[-1] >= 16  # early items first, roughly in order
