"""The item memo (issue 27, llm/item_memo.py): a replay whose items are all answered from the cache
leaves each item's record beside the cache; a later replay of the same item reads that one entry
instead of re-running the chain, writes byte-identical result files and counts the same cache hits.
Anything that shapes the item's requests, a deleted or re-recorded cache entry, a corrupt entry and
an app target all mean the chain runs again."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import JUDGE, METRICS, TARGET, USER, judge_says, scenario, script, write_benchmark

from pytest_evalbench.llm.cache import ResponseCache, entry_digest
from pytest_evalbench.testing import FakeLLMServer, by_model

ROWS = [scenario("m01_s001_v01", "m01"), scenario("m01_s001_v02", "m01"), scenario("m02_s001_v01", "m02")]
SESSION_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?")
LLM_LINE = re.compile(r"llm: .*")


@pytest.fixture
def cache_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys of every cache entry read (the runs are in-process): a memo hit reads none."""
    reads: list[str] = []
    get = ResponseCache.get

    def counted(self: ResponseCache, key: str, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        reads.append(key)
        return get(self, key, *args, **kwargs)

    monkeypatch.setattr(ResponseCache, "get", counted)
    return reads


def memo_files(bench: Path) -> list[Path]:
    return sorted((bench / ".evalbench-cache" / ".items").glob("*/*.item"))


def cache_entries(bench: Path) -> list[Path]:
    return sorted((bench / ".evalbench-cache").glob("??/*.json"))


def results(bench: Path) -> dict[str, str]:
    """Every result file (the cache and the inputs aside), session times masked."""
    found: dict[str, str] = {}
    for path in sorted(bench.rglob("*")):
        name = str(path.relative_to(bench))
        if not path.is_file() or ".evalbench-cache" in path.parts or name in ("benchmark.yaml", "scenarios.json"):
            continue
        text = path.read_text()
        found[name] = SESSION_TIME.sub("<time>", text)
    return found


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, str]:
    result = pytester.runpytest("--benchmark=demo", "-p", "no:randomly", *args)
    lines = [line for line in result.outlines if LLM_LINE.search(line)]
    assert len(lines) == 1, result.outlines
    return result, lines[0]


def recorded(pytester: pytest.Pytester, server: FakeLLMServer, **spec: Any) -> Path:
    """A benchmark recorded (run 1) and run again from its cache (run 2: memoises every item)."""
    bench = write_benchmark(pytester.path, scenarios=ROWS, **spec)
    server.set_responder(script(True))
    run(pytester)[0].assert_outcomes(passed=2, failed=1)
    run(pytester)[0].assert_outcomes(passed=2, failed=1)
    assert len(memo_files(bench)) == len(ROWS)
    server.reset()
    return bench


PRICED = {"pricing": {name: {"input_per_million": 0.37, "output_per_million": 1.13} for name in (USER, TARGET, JUDGE)}}
"""Prices whose sums are not exact in binary: each hit must add the same numbers as the chain."""


@pytest.mark.parametrize("judge", [{}, {"judge": {"samples": 3}}], ids=["one vote", "three votes"])
def test_memo_hits_write_the_same_files_and_count_the_same_hits(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, cache_reads: list[str], judge: dict[str, Any]) -> None:
    votes = 3 if judge else 1
    calls = (4 + votes) * len(ROWS)
    bench = write_benchmark(pytester.path, scenarios=ROWS, spec={**PRICED, **judge})
    bench_env.set_responder(script(True))
    run(pytester)[0].assert_outcomes(passed=2, failed=1)
    recorded_requests = len(bench_env.requests)
    history = (bench / "history.jsonl").read_bytes()  # each run appends: the report's trends grow
    shutil.rmtree(bench / ".evalbench-cache" / ".items", ignore_errors=True)  # memos of items fetched alone
    cache_reads.clear()
    second, llm_second = run(pytester, "--evalbench-cache=replay")  # every chain replayed
    second.assert_outcomes(passed=2, failed=1)
    files_second = results(bench)
    assert len(cache_reads) == calls and memo_files(bench) == []  # `replay` reads memos, never writes
    cache_reads.clear()
    (bench / "history.jsonl").write_bytes(history)
    run(pytester)[0].assert_outcomes(passed=2, failed=1)  # `on`: every chain replayed, and memoised
    assert len(cache_reads) == calls and len(memo_files(bench)) == len(ROWS)
    assert results(bench) == files_second
    for args in (["--evalbench-cache=replay"], ["--evalbench-cache=on"], ["--evalbench-cache=replay", "-n", "2"]):
        cache_reads.clear()
        (bench / "history.jsonl").write_bytes(history)
        result, llm = run(pytester, *args)
        result.assert_outcomes(passed=2, failed=1)
        assert cache_reads == [] or "-n" in args  # every item from its memo: no cache entry read, no request
        assert llm == llm_second and f"0 requests, {calls} cache hits" in llm
        assert results(bench) == files_second
    assert len(bench_env.requests) == recorded_requests  # only the recording run asked


def test_a_memo_hit_is_not_dumped_again(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An item answered from its memo writes the same files from the memo's JSON: its typed record is
    never dumped to JSON again (`ScenarioRecord.to_json`), only the chain's records are; also with a
    conftest fixture that sees the record."""
    from pytest_evalbench.scenarios.models import ScenarioRecord
    from pytest_evalbench.spool import Spool

    spooled: list[str] = []
    add = Spool.add

    def add_counted(self: Spool[Any], key: Any, value: Any) -> None:
        spooled.extend([key] if isinstance(key, str) and "::" in key else [])
        add(self, key, value)

    monkeypatch.setattr(Spool, "add", add_counted)

    bench = recorded(pytester, bench_env)
    history = (bench / "history.jsonl").read_bytes()
    shutil.rmtree(bench / ".evalbench-cache" / ".items")
    run(pytester, "--evalbench-cache=replay")[0].assert_outcomes(passed=2, failed=1)  # every chain replayed
    chained = results(bench)
    run(pytester)  # memoised again
    dumps: list[str] = []
    to_json = ScenarioRecord.to_json

    def counted(self: ScenarioRecord) -> dict[str, Any]:
        dumps.append(self.conversation.id)
        return to_json(self)

    monkeypatch.setattr(ScenarioRecord, "to_json", counted)
    (bench / "history.jsonl").write_bytes(history)
    spooled.clear()
    run(pytester, "--evalbench-cache=replay")[0].assert_outcomes(passed=2, failed=1)
    assert dumps == [] and len(spooled) == len(ROWS) and results(bench) == chained
    pytester.makeconftest("import pytest\n\n@pytest.fixture\ndef evalbench_record(evalbench_record):\n"
                          "    return evalbench_record\n")
    (bench / "history.jsonl").write_bytes(history)
    spooled.clear()
    run(pytester, "--evalbench-cache=replay")[0].assert_outcomes(passed=2, failed=1)
    assert dumps == [] and len(spooled) == len(ROWS) and results(bench) == chained


def test_a_recording_run_leaves_memos_of_the_items_it_fetched(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, cache_reads: list[str]) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS)
    # each row's own conversation: no call is shared in flight with another item
    bench_env.set_responder(script(True, user=lambda r: "Thought: ok\nMessage: help with "
                                   + hashlib.sha256(r["messages"][0]["content"].encode()).hexdigest()[:8]))
    run(pytester)[0].assert_outcomes(passed=2, failed=1)
    assert len(bench_env.requests) == 5 * len(ROWS) and len(memo_files(bench)) == len(ROWS)
    recorded_files = {k: v for k, v in results(bench).items() if k.startswith("runs")}
    cache_reads.clear()
    run(pytester, "--evalbench-cache=replay")[0].assert_outcomes(passed=2, failed=1)
    assert cache_reads == [] and {k: v for k, v in results(bench).items() if k.startswith("runs")} == recorded_files


def _judge_examples(pytester: pytest.Pytester) -> list[str]:
    write_benchmark(pytester.path, scenarios=ROWS, metrics=[dict(METRICS[0], examples=["A new example?"]),
                                                            METRICS[1]])
    return []


def _judge_model(pytester: pytest.Pytester) -> list[str]:
    return ["--evalbench-judge-model=sim-judge-2"]


def _turns(pytester: pytest.Pytester) -> list[str]:
    write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1, "num_samples": 1, "perfunctory": False,
                                                               "landmarks": True})
    return []


def _reply_bound(pytester: pytest.Pytester) -> list[str]:
    return ["--evalbench-max-reply-chars=25"]


def _row(pytester: pytest.Pytester) -> list[str]:
    write_benchmark(pytester.path, scenarios=[dict(ROWS[0], user_goal="get other help"), *ROWS[1:]])
    return []


@pytest.mark.parametrize("change", [_judge_examples, _judge_model, _turns, _reply_bound, _row],
                         ids=["judge prompt", "judge model", "benchmark setting", "run setting", "row"])
def test_what_shapes_the_requests_misses(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                         cache_reads: list[str], change: Callable[[pytest.Pytester], list[str]]
                                         ) -> None:
    bench = recorded(pytester, bench_env)
    cache_reads.clear()
    run(pytester, "--evalbench-cache=replay")[0].assert_outcomes(passed=2, failed=1)
    assert cache_reads == []  # unchanged: every item from its memo
    args = change(pytester)
    # the changed requests are answered anew, and now the judge says "absent": a stale memo would say present
    bench_env.set_responder(by_model({USER: lambda r: "Thought: ok\nMessage: I need "
                                      + ("other" if "get other help" in json.dumps(r) else "some") + " help",
                                      TARGET: lambda r: "Sure, where are you going?",
                                      JUDGE: judge_says(False), "sim-judge-2": judge_says(False)}))
    run(pytester, *args)
    assert bench_env.requests
    scores = {r["id"]: r["present"] for r in json.loads((bench / "runs" / "tgt" / "scores.json").read_text())}
    changed = {_row: ["m01_s001_v01"], _judge_examples: ["m01_s001_v01", "m01_s001_v02"]}.get(
        change, [r["id"] for r in ROWS])
    assert all(scores[i] is not True for i in changed) and all(scores[i] is True for i in scores if i not in changed)


def _judge_entry(bench: Path, metric_id: str) -> Path:
    """The cache entry of the judge's call on `metric_id`'s conversations."""
    found = [p for p in cache_entries(bench) if json.loads(p.read_text())["request"]["body"]["model"] == JUDGE
             and f"BEHAVIOUR TO DETECT ({metric_id})" in p.read_text()]
    assert len(found) == 1
    return found[0]


def test_a_rerecorded_or_deleted_cache_entry_misses(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                     cache_reads: list[str]) -> None:
    bench = recorded(pytester, bench_env)
    path = _judge_entry(bench, "m02")  # re-recorded: the judge now says "absent", so the m02 row passes
    entry = json.loads(path.read_text())
    entry["response"]["content"] = json.dumps({"justification": "because", "present": False})
    entry["digest"] = entry_digest(entry["key"], entry["request"], entry["response"])
    path.write_text(json.dumps(entry))
    cache_reads.clear()
    run(pytester, "--evalbench-cache=replay")[0].assert_outcomes(passed=3)
    assert entry["key"] in cache_reads and len(cache_reads) == 5  # the m01 items from their memos
    _judge_entry(bench, "m01").unlink()  # deleted: a replay miss, an error of both m01 items
    result, _ = run(pytester, "--evalbench-cache=replay")
    result.assert_outcomes(passed=1, errors=2)
    assert bench_env.requests == []


def test_a_corrupt_memo_entry_misses(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                     cache_reads: list[str]) -> None:
    bench = recorded(pytester, bench_env)
    history = (bench / "history.jsonl").read_bytes()
    _, llm_before = run(pytester, "--evalbench-cache=replay")
    before = results(bench)
    (bench / "history.jsonl").write_bytes(history)
    memos = memo_files(bench)
    edited = memos[0].read_text().replace('"because"', '"becauze"')  # a justification edited by hand
    assert edited != memos[0].read_text()
    memos[0].write_text(edited)
    memos[1].write_bytes(memos[1].read_bytes()[:40])  # cut short
    memos[2].write_bytes(b"\xff\xfe not text")
    cache_reads.clear()
    result, llm_after = run(pytester, "--evalbench-cache=replay")
    result.assert_outcomes(passed=2, failed=1)
    assert len(cache_reads) == 5 * len(ROWS) and bench_env.requests == []  # every chain replayed
    assert results(bench) == before and llm_after == llm_before
    run(pytester)[0].assert_outcomes(passed=2, failed=1)  # rewritten by a run with the cache on
    cache_reads.clear()
    run(pytester, "--evalbench-cache=replay")[0].assert_outcomes(passed=2, failed=1)
    assert cache_reads == []


def test_a_fresh_checkout_of_the_cache_and_its_memos_hits(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                          cache_reads: list[str]) -> None:
    """Memos check their cache files by content: the benchmark copied away and back (new inodes and
    mtimes, as a fresh checkout of committed files) replays every item from its memo; no ignore file
    keeps them out of git, and the one earlier versions wrote is removed."""
    bench = recorded(pytester, bench_env)
    _, llm_before = run(pytester, "--evalbench-cache=replay")
    before = results(bench)
    moved = pytester.path / "elsewhere"
    shutil.move(bench, moved)
    shutil.copytree(moved, bench, copy_function=shutil.copyfile)  # new files: other inodes and times
    old = bench / ".evalbench-cache" / ".items" / ".gitignore"
    assert not old.exists()
    cache_reads.clear()
    result, llm_after = run(pytester, "--evalbench-cache=replay")
    result.assert_outcomes(passed=2, failed=1)
    assert cache_reads == [] and llm_after == llm_before and bench_env.requests == []
    assert results(bench).keys() == before.keys()
    old.write_text("# item memos: valid only beside this cache's files\n*\n")
    shutil.rmtree(memo_files(bench)[0].parent)  # its memo written again by an `on` run
    run(pytester)[0].assert_outcomes(passed=2, failed=1)
    assert not old.exists() and len(memo_files(bench)) == len(ROWS)


def test_an_app_target_never_uses_the_memo(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest("""
from pathlib import Path

def pytest_evalbench_make_target(config, target):
    if target.id != "app":
        return None

    def app(messages):
        with open(Path(config.rootpath) / "app-calls.txt", "a") as log:
            log.write("call\\n")
        return "Sure, where are you going?"
    return app
""")
    bench = write_benchmark(pytester.path, scenarios=ROWS, targets=[{"id": "tgt", "model": TARGET}, {"id": "app"}])
    bench_env.set_responder(script(True))
    for mode in ("on", "on", "replay"):
        run(pytester, f"--evalbench-cache={mode}")[0].assert_outcomes(passed=4, failed=2)
    # the model target's items are memoised; the app's never: it answered every turn of every run
    assert len(memo_files(bench)) == len(ROWS)
    assert (pytester.path / "app-calls.txt").read_text().count("call") == 3 * len(ROWS) * 2


def test_a_secret_of_this_run_in_a_memo_misses(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                               cache_reads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    token = "sk-live-0123456789abcdefghijKLMN"
    bench = write_benchmark(pytester.path, scenarios=ROWS)
    bench_env.set_responder(script(True, target=f"Sure, use the token {token} for that."))
    run(pytester)
    run(pytester)
    assert len(memo_files(bench)) == len(ROWS)
    cache_reads.clear()
    run(pytester, "--evalbench-cache=replay")
    assert cache_reads == []  # hits while the token is nobody's secret
    monkeypatch.setenv("OPENAI_API_KEY", token)  # now it is this run's key: masked wherever it shows
    run(pytester)
    assert len(set(cache_reads)) >= 2 * len(ROWS)  # every chain replayed (and asked on, masked)
    conversations = (bench / "runs" / "tgt" / "conversations.json").read_text()
    assert token not in conversations and "Sure, use the token" in conversations
