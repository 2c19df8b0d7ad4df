"""The one bounded read, state files read as input, usage numbers and rate pacing bounded by the
run's own limits (unit level; end to end in tests/integration/test_hostile_state.py)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from pytest_evalbench.base.errors import InputError, LLMError
from pytest_evalbench.base.files import NotRegularFile, TooLarge, read_bounded, read_json_or_default, read_result
from pytest_evalbench.base.inputs import parse_yaml, read_text
from pytest_evalbench.llm.costs import PriceTable
from pytest_evalbench.llm.limits import FileLedger, Limits, SharedRateLimit
from pytest_evalbench.llm.shared_limits import SharedLimits, parse
from pytest_evalbench.llm.transport import BadUsage, classify, parse_completion
from pytest_evalbench.llm.types import Endpoint, EngineSettings, EngineStats, Usage


def test_read_bounded_counts_bytes_read_not_the_size_stat_reports(tmp_path: Path) -> None:
    zero = tmp_path / "scenarios.json"
    zero.symlink_to("/dev/zero")  # stat: size 0, a character device
    with pytest.raises(NotRegularFile):
        read_bounded(zero)
    fifo = tmp_path / "cases.jsonl"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(NotRegularFile):  # refused at once: the open does not wait for a writer
        read_bounded(fifo)
    assert time.monotonic() - started < 5
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 5000)
    with pytest.raises(TooLarge):
        read_bounded(big, 4096)
    assert read_bounded(big, 5000) == b"x" * 5000
    with pytest.raises(InputError, match="not a regular file"):
        read_text(zero)
    with pytest.raises(InputError, match="not a regular file"):
        read_result(fifo, {}, dict)
    with pytest.warns(UserWarning, match="not a regular file"):
        assert read_json_or_default(zero, "default") == "default"


def test_deep_json_in_a_result_file_is_one_error(tmp_path: Path) -> None:
    deep = tmp_path / "cost.json"
    deep.write_text("[" * 100_000)
    with pytest.raises(InputError, match=r"cost\.json"):
        read_result(deep, {}, dict)
    with pytest.warns(UserWarning, match="nested deeper than 64 levels"):
        assert read_json_or_default(deep, []) == []


def test_control_character_in_yaml_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        parse_yaml("name: demo\ndescription: a\x1bb\n", tmp_path / "benchmark.yaml")
    assert str(info.value).startswith(f"{tmp_path / 'benchmark.yaml'}:2: ") and "U+001B" in str(info.value)


def completion(usage: object) -> dict[str, object]:
    return {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": usage}


@pytest.mark.parametrize("usage", [{"prompt_tokens": -30000}, {"completion_tokens": 10**400},
                                   {"prompt_tokens": True}, {"prompt_tokens": 2.5}, {"prompt_tokens": "12"},
                                   {"completion_tokens": 10**9 + 1}, [1, 2]])
def test_unbelievable_usage_is_a_bad_response(usage: object) -> None:
    with pytest.raises(BadUsage) as info:
        parse_completion(json.loads(json.dumps(completion(usage))))
    failure = classify(info.value)
    assert failure.category == "bad response" and failure.retryable
    assert len(failure.message) <= 300


def test_believable_usage_is_kept() -> None:
    done = parse_completion(completion({"prompt_tokens": 12, "completion_tokens": 10**9}))
    assert (done.input_tokens, done.output_tokens) == (12, 10**9)
    assert parse_completion(completion(None)).input_tokens == 0


def test_usage_read_back_from_a_file_never_goes_negative() -> None:
    assert Usage.from_json({"input_tokens": -5, "output_tokens": 10**400, "cost": -29999.0}) == Usage()
    assert Usage.from_json({"input_tokens": 3, "output_tokens": 4, "cost": 0.5}) == Usage(3, 4, 0.5)
    assert Usage.from_json({"cost": float("nan")}).cost == 0.0


def test_a_ledger_that_cannot_be_believed_stops_spending(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    ledger.write_text(json.dumps({"spent": -29999, "reserved": 0, "stopped": False}))
    assert FileLedger(ledger).try_reserve(0.01, 1.0) == "stop"
    ledger.write_text(json.dumps({"spent": 0.5, "reserved": 0, "stopped": False}))
    assert FileLedger(ledger).try_reserve(0.01, 1.0) == "ok"


def test_planted_state_files_are_ignored_with_one_warning(tmp_path: Path) -> None:
    limits_file = tmp_path / ".endpoint-limits"
    now = time.time()
    limits_file.write_text(json.dumps({"http://h:80": {"updated": 1e15, "req_gap": 120, "next": 1e15},
                                       "http://k:80": {"updated": now, "hold": now + 1e9}}))
    shared = SharedLimits(limits_file)
    with pytest.warns(UserWarning, match=r"\.endpoint-limits: an entry claims times"):
        assert shared.reserve("http://h:80") <= time.time() + 1
    assert shared.state("http://k:80") is None
    rate = tmp_path / ".rate-limit"
    rate.write_text("9e99")
    with pytest.warns(UserWarning, match=r"\.rate-limit: next slot"):
        assert SharedRateLimit(rate, 600).reserve() <= time.time() + 1
    rate.write_text("nan")
    with pytest.warns(UserWarning, match=r"\.rate-limit: next slot"):
        assert SharedRateLimit(rate, 600).reserve() <= time.time() + 1


def test_a_pace_past_the_retry_budget_ends_the_call(tmp_path: Path) -> None:
    settings = EngineSettings(max_retry_seconds=1.0, timeout=5.0)
    limits = Limits(settings, EngineStats(), PriceTable({}), tmp_path / ".rate-limit")
    endpoint = Endpoint("m", "http://127.0.0.1:9/v1", api_key="k")
    key = limits.key(endpoint)
    limits.shared.learn(key, parse({"x-ratelimit-limit-requests": "0.5"}), limited=False)

    async def two_calls() -> None:
        limits.open_slots()
        for _ in range(2):
            async with limits.admission(endpoint) as admitted:
                await admitted.admit({"messages": []}, b"{}", "target", time.monotonic() + 1.0)

    started = time.monotonic()
    with pytest.raises(LLMError, match=r"would hold this request 1\d\d\.\ds, longer than its retry budget allows"):
        asyncio.run(two_calls())
    assert time.monotonic() - started < 5

