"""The batch tier (llm/batch.py) against the fake server's Batch API: one batch for the calls ready
together, resume after a kill without submitting again, failed and expired lines submitted again alone,
an unreadable line an error of its own call only."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_evalbench.base.errors import LLMError
from pytest_evalbench.llm.batch import RECORDS, Batches, parse_roles
from pytest_evalbench.llm.batch_api import checked_id
from pytest_evalbench.llm.cache import cache_key, completion_material
from pytest_evalbench.llm.types import Completion, Endpoint, EngineSettings, EngineStats
from pytest_evalbench.render.progress import Counts, progress_line
from pytest_evalbench.testing import FakeLLMServer


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(lambda request: "answer to " + request["messages"][0]["content"]) as srv:
        yield srv


class Run:
    """One engine's batch tier over a cache directory; `written` holds what it stored."""

    def __init__(self, server: FakeLLMServer, directory: Path, **settings: Any) -> None:
        self.written: dict[str, Completion] = {}
        self.endpoint = Endpoint(model="m", base_url=server.base_url, api_key="k")

        async def write(key: str, material: dict[str, Any], completion: Completion) -> None:
            self.written[key] = completion

        self.batches = Batches(EngineSettings(batch_poll=0.05, **settings), EngineStats(), directory, write)

    def call(self, i: int) -> Any:
        body = {"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]}
        material = completion_material(self.endpoint.identity, body, 0, 0)
        return self.batches.fetch(self.endpoint, body, "judge", cache_key(material), material)

    async def answers(self, n: int) -> list[Any]:
        try:
            return await asyncio.gather(*(self.call(i) for i in range(n)), return_exceptions=True)
        finally:
            await self.batches.aclose()


def record_count(directory: Path) -> int:
    """Batches recorded in the cache directory and not read back yet."""
    return len(list((directory / RECORDS).glob("*.json"))) if (directory / RECORDS).exists() else 0


def contents(results: list[Any]) -> list[Any]:
    return [r.content if isinstance(r, Completion) else type(r).__name__ for r in results]


def test_calls_ready_together_go_in_one_batch(server: FakeLLMServer, tmp_path: Path) -> None:
    run = Run(server, tmp_path)
    results = asyncio.run(run.answers(5))
    assert contents(results) == [f"answer to question {i}" for i in range(5)]
    assert len(server.batch.batches) == 1 and len(server.batch.lines) == 5
    assert server.requests == []  # no synchronous request
    assert len(run.written) == 5  # every answer stored under its cache key
    assert record_count(tmp_path) == 0  # the record goes once its answers are stored
    assert run.batches.counts.submitted == run.batches.counts.done == 1


def test_a_killed_run_resumes_its_batches_without_submitting_again(server: FakeLLMServer, tmp_path: Path) -> None:
    server.batch.delay = 60.0
    first = Run(server, tmp_path)

    async def killed() -> None:
        calls = asyncio.gather(*(first.call(i) for i in range(3)))
        while record_count(tmp_path) == 0:
            await asyncio.sleep(0.02)
        calls.cancel()  # the run is killed after the submission
        await asyncio.gather(calls, return_exceptions=True)
        await first.batches.aclose()

    asyncio.run(killed())
    assert len(server.batch.batches) == 1 and record_count(tmp_path) == 1
    record = json.loads(next((tmp_path / RECORDS).iterdir()).read_text())
    assert record["id"] in server.batch.batches and len(record["lines"]) == 3
    server.batch.delay = 0.0
    second = Run(server, tmp_path)
    results = asyncio.run(second.answers(3))
    assert contents(results) == [f"answer to question {i}" for i in range(3)]
    assert len(server.batch.batches) == 1  # resumed, not submitted (and paid) twice
    assert second.batches.counts.submitted == 0 and second.batches.counts.resumed == 1
    assert record_count(tmp_path) == 0


def test_a_resumed_batch_stores_answers_nobody_asked_for(server: FakeLLMServer, tmp_path: Path) -> None:
    server.batch.delay = 60.0
    first = Run(server, tmp_path)

    async def killed() -> None:
        calls = asyncio.gather(*(first.call(i) for i in range(3)))
        while record_count(tmp_path) == 0:
            await asyncio.sleep(0.02)
        calls.cancel()
        await asyncio.gather(calls, return_exceptions=True)
        await first.batches.aclose()

    asyncio.run(killed())
    server.batch.delay = 0.0
    second = Run(server, tmp_path)
    assert contents(asyncio.run(second.answers(1))) == ["answer to question 0"]
    assert len(second.written) == 3 and len(server.batch.batches) == 1


def test_failed_lines_are_submitted_again_alone(server: FakeLLMServer, tmp_path: Path) -> None:
    server.batch.fail_lines = 2
    run = Run(server, tmp_path)
    results = asyncio.run(run.answers(5))
    assert contents(results) == [f"answer to question {i}" for i in range(5)]
    sizes = [batch["request_counts"]["total"] for batch in server.batch.batches.values()]
    assert sizes == [5, 2]
    assert run.batches.counts.resubmitted == 2


def test_an_expired_batch_is_submitted_again(server: FakeLLMServer, tmp_path: Path) -> None:
    server.batch.expire = 1
    run = Run(server, tmp_path)
    results = asyncio.run(run.answers(3))
    assert contents(results) == [f"answer to question {i}" for i in range(3)]
    assert [b["status"] for b in server.batch.batches.values()] == ["expired", "completed"]


def test_lines_failing_past_the_attempts_are_errors(server: FakeLLMServer, tmp_path: Path) -> None:
    server.batch.fail_lines = 100
    run = Run(server, tmp_path, max_attempts=2)
    results = asyncio.run(run.answers(2))
    assert all(isinstance(r, LLMError) and "after 2 submissions" in str(r) for r in results)
    assert len(server.batch.batches) == 2


def test_an_unreadable_output_line_fails_only_its_own_call(server: FakeLLMServer, tmp_path: Path) -> None:
    server.batch.garbage_lines = 1
    run = Run(server, tmp_path)
    results = asyncio.run(run.answers(3))
    assert contents(results)[1:] == ["answer to question 1", "answer to question 2"]
    assert isinstance(results[0], LLMError) and "could not be read" in str(results[0])
    assert len(run.written) == 2 and len(server.batch.batches) == 1  # an error, not submitted again


def test_a_planted_record_line_is_never_stored(server: FakeLLMServer, tmp_path: Path) -> None:
    """A record line whose material does not hash to its key (an edited file) is dropped."""
    (tmp_path / RECORDS).mkdir()
    (tmp_path / RECORDS / "batch-x.json").write_text(json.dumps(
        {"id": "batch-x", "lines": {"0" * 64: {"endpoint": "e", "body": {}, "sample": 0, "attempt": 0}}}))
    run = Run(server, tmp_path)
    assert contents(asyncio.run(run.answers(1))) == ["answer to question 0"]
    assert "0" * 64 not in run.written


def test_roles_option() -> None:
    assert parse_roles("judge, user") == {"judge", "user"}
    assert parse_roles("all") == {"judge", "target", "user"}
    with pytest.raises(ValueError, match="'jugde'"):
        parse_roles("jugde")


def test_progress_line_shows_batches() -> None:
    line = progress_line(Counts(done=1, total=4, batches=(3, 1, 2, 185.0)), 10.0)
    assert "batches 3 submitted, 1 in progress, 2 done (3m05s since submission)" in line
    assert "batches" not in progress_line(Counts(done=1, total=4), 10.0)


def test_an_item_waiting_redraws_the_progress_line_and_keeps_its_pipelines_own_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`Scheduler.wait` calls the heartbeat while the item's work is pending; a pipeline that itself
    raised TimeoutError (the wait's own exception class) is that error, not one more heartbeat."""
    import concurrent.futures
    import threading
    from types import SimpleNamespace

    from pytest_evalbench.plugin import scheduler

    monkeypatch.setattr(scheduler, "BEAT", 0.02)
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    engine = SimpleNamespace(submit=lambda *args: future, awaited=lambda waited: [waited])
    source = SimpleNamespace(run=SimpleNamespace(engine=engine), kind=SimpleNamespace(expect_cases=lambda cases: None))
    beats: list[int] = []
    waiter = scheduler.Scheduler(source, heartbeat=lambda: beats.append(1))  # type: ignore[arg-type]
    item = SimpleNamespace(nodeid="x", case=None)
    threading.Timer(0.2, future.set_exception, [TimeoutError("the app did not reply")]).start()
    with pytest.raises(TimeoutError, match="the app did not reply"):
        waiter.wait(item)  # type: ignore[arg-type]
    assert len(beats) >= 3


def test_a_batch_holds_at_most_the_providers_lines(server: FakeLLMServer, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_evalbench.llm import batch

    monkeypatch.setattr(batch, "MAX_LINES", 2)
    run = Run(server, tmp_path)
    assert contents(asyncio.run(run.answers(5))) == [f"answer to question {i}" for i in range(5)]
    assert sorted(b["request_counts"]["total"] for b in server.batch.batches.values()) == [1, 2, 2]


def round_gaps(server: FakeLLMServer, turns: dict[int, int], monkeypatch: pytest.MonkeyPatch,
               tmp_path: Path, quiet: float) -> tuple[list[int], float]:
    """Conversations answered one batch round per turn (`turns`: conversation -> its number of turns),
    with a quiet period of `quiet` seconds: (lines per batch, seconds from the first round's answers to
    the second round's submission)."""
    from pytest_evalbench.llm import batch

    monkeypatch.setattr(batch, "QUIET", quiet)
    run = Run(server, tmp_path)
    answered: list[float] = []

    async def conversation(i: int) -> None:
        for turn in range(turns[i]):
            await run.call(100 * turn + i)
            answered.append(time.time())

    async def main() -> None:
        try:
            await asyncio.gather(*(conversation(i) for i in turns))
        finally:
            await run.batches.aclose()

    asyncio.run(main())
    created = sorted(b["_created"] for b in server.batch.batches.values())
    sizes = [len(b["_custom_ids"]) for b in sorted(server.batch.batches.values(), key=lambda b: b["_created"])]
    return sizes, created[1] - min(answered)


def test_a_round_is_submitted_once_every_conversation_it_answered_has_made_its_next_call(
        server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes, gap = round_gaps(server, dict.fromkeys(range(5), 3), monkeypatch, tmp_path, quiet=1.0)
    assert sizes == [5, 5, 5]  # one batch a round, none split
    assert gap < 0.5  # not the quiet period's second


def test_a_conversation_that_ends_leaves_the_round_to_the_quiet_period(
        server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its next call may come from another task (one that gathered it): nothing tells that the round
    is complete, so the calls collected wait for the quiet period."""
    sizes, gap = round_gaps(server, {0: 1, 1: 2, 2: 2}, monkeypatch, tmp_path, quiet=0.5)
    assert sizes == [3, 2]
    assert gap >= 0.5


@pytest.mark.parametrize("hostile", ["../files", "a/b", "", ".hidden", "x" * 201, None, 7, "id?x=1", "id#x"])
def test_an_id_from_the_provider_goes_into_a_path_only_when_it_is_a_plain_id(hostile: Any) -> None:
    with pytest.raises(ValueError, match="file id"):
        checked_id(hostile, "file")
    assert checked_id("file-abc_1.2:3", "file") == "file-abc_1.2:3"


def test_an_output_file_whose_id_is_not_plain_is_never_requested(server: FakeLLMServer, tmp_path: Path) -> None:
    """A batch object naming `../..` as its output file: the lines are submitted again, never read from
    another path of the host."""
    desk = server.batch
    finish = desk._finish

    def hostile_finish(batch: dict[str, Any], *args: Any) -> None:
        finish(batch, *args)
        batch["output_file_id"] = "../../v1/secret"

    desk._finish = hostile_finish  # type: ignore[method-assign]
    results = asyncio.run(Run(server, tmp_path, max_attempts=2).answers(2))
    assert [type(r).__name__ for r in results] == ["LLMError", "LLMError"]
    assert len(server.batch.batches) == 2  # submitted once more, then an error of each call
