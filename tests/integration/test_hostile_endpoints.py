"""Issue 25 rows 4, 5, 6 and 11 end to end: a run against a hostile endpoint ends each affected
row with a clear error (never a hang, a crash or gigabytes of memory); lone surrogates in model
text are stored safely and replay; an edited cache entry is corrupt, never a replayed verdict."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import JUDGE, TARGET, USER, judge_says, read_json, scenario, script, write_benchmark

from pytest_evalbench.gate.decision import EXIT_INCOMPLETE
from pytest_evalbench.testing import FakeLLMServer, Reply, by_model

pytestmark = pytest.mark.usefixtures("quick_backoff")  # in-process runs retry after short backoffs

ROWS = [scenario("m01_s001_v01", "m01"), scenario("m01_s002_v01", "m01")]


def entries(bench: Path, model: str) -> list[Path]:
    paths = sorted((bench / ".evalbench-cache").glob("*/*.json"))
    return [p for p in paths if json.loads(p.read_text())["request"]["body"]["model"] == model]


@functools.cache
def gzip_bomb() -> bytes:
    """32 KB that inflate to 32 MB (compressed once per process)."""
    return gzip.compress(b"[" * (32 << 20))


def hostile_cases() -> list[Any]:
    """Each attack on each role, without xdist on both transports and under xdist. Under xdist only
    one attack runs here: what xdist adds (a worker's errors reaching the controller's counts and
    exit status) is the same for all three; the others are the slow stage's (`-m slow`)."""
    cases = []
    for attack in ("endless", "bomb", "redirect"):
        for role in (USER, JUDGE):
            for workers, transport in (("0", "aiohttp"), ("2", "aiohttp"), ("0", "openai")):
                twin = workers == "2" and (attack, role) != ("bomb", JUDGE)
                cases.append(pytest.param(attack, role, workers, transport, marks=[pytest.mark.slow] if twin else [],
                                          id=f"{attack}-{role}-{workers}-{transport}"))
    return cases


@pytest.mark.parametrize(("attack", "role", "workers", "transport"), hostile_cases())
def test_hostile_answer_ends_its_rows_with_a_clear_error(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                         attack: str, role: str, workers: str, transport: str) -> None:
    hostile = {"endless": lambda: Reply(endless=True),
               "bomb": lambda: Reply(raw_body=gzip_bomb(), headers={"Content-Encoding": "gzip"}),
               "redirect": lambda: Reply(status=307, headers={"Location": "http://127.0.0.1:9/steal?key=k"},
                                         raw_body=b"")}[attack]()
    routes: dict[str, Any] = {USER: lambda r: "Thought: ok\nMessage: I need some help",
                              TARGET: lambda r: "Sure, where to?", JUDGE: judge_says(True)}
    routes[role] = lambda r: hostile
    bench_env.set_responder(by_model(routes))
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    # in-process: --evalbench-timeout bounds each whole call, so a cap that failed ends the run too
    result = pytester.runpytest("--benchmark=demo", "-n", workers, "--evalbench-timeout=30",
                                f"--evalbench-transport={transport}")
    assert result.ret == EXIT_INCOMPLETE
    result.assert_outcomes(errors=2)
    expected = {"endless": "*response too large*answer over the size cap*",
                "bomb": "*response too large*inflates past the cap*",
                "redirect": "*HTTP 307: redirect to http://127.0.0.1:9 (another origin) not followed*"}[attack]
    result.stdout.fnmatch_lines([expected])
    assert "steal" not in result.stdout.str()
    # at most one call per row (identical calls share one): never retried
    assert 1 <= len([r for r in bench_env.requests if r["model"] == role]) <= 2
    assert last_run_status(bench) == "incomplete"


def last_run_status(bench: Path) -> str:
    status = read_json(bench / "last_run.json")
    return str(status["status"])


def test_lone_surrogates_in_model_text_are_stored_and_replay(pytester: pytest.Pytester,
                                                             bench_env: FakeLLMServer) -> None:
    # the target's reply carries a literal lone surrogate (a "\ud800" escape in the response JSON);
    # the judge's justification carries one inside its own JSON answer
    bench_env.set_responder(script(True, target="broken \ud800 text",
                                   user="Thought: ok\nMessage: help \udfff me"))
    bench_env.set_responder(by_model({USER: lambda r: "Thought: ok\nMessage: help \udfff me",
                                      TARGET: lambda r: "broken \ud800 text",
                                      JUDGE: judge_says(True, justification="cites \ud800 the reply")}))
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    first = pytester.runpytest("--benchmark=demo", "--evalbench-html=report.html")
    first.assert_outcomes(passed=2)
    assert first.ret == 0 and last_run_status(bench) == "complete"
    conversations = read_json(bench / "runs" / "tgt" / "conversations.json")
    assert conversations[0]["transcript"][1]["content"] == "broken \ufffd text"
    scores = json.dumps(read_json(bench / "runs" / "tgt" / "scores.json"))
    assert "cites \\ufffd the reply" in scores
    replay = pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay")
    replay.assert_outcomes(passed=2)
    assert replay.ret == 0


@pytest.mark.parametrize("tamper", ["verdict", "undecodable", "surrogate-key"])
def test_edited_or_unreadable_cache_entry_is_corrupt(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                     tamper: str) -> None:
    bench_env.set_responder(script(True))
    bench = write_benchmark(pytester.path, scenarios=ROWS[:1], generation={"turns": 1})
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    (entry_path,) = entries(bench, JUDGE)
    entry = json.loads(entry_path.read_text())
    if tamper == "verdict":  # a plausible edit: the recorded verdict flipped, all else as it was
        entry["response"]["content"] = entry["response"]["content"].replace("true", "false")
        entry_path.write_text(json.dumps(entry))
    elif tamper == "undecodable":
        entry_path.write_bytes(entry_path.read_bytes().replace(b"because", b"bec\xff\xfese"))
    else:  # a lone surrogate escape where the hash is computed
        entry["request"]["body"]["model"] = "\ud800"
        entry_path.write_text(json.dumps(entry))
    replay = pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay")
    assert replay.ret == EXIT_INCOMPLETE
    replay.assert_outcomes(errors=1)
    replay.stdout.fnmatch_lines([f"*corrupt cache entry: {entry_path}: *"])
    assert "INTERNALERROR" not in replay.stdout.str()
    calls = len(bench_env.requests)
    repaired = pytester.runpytest("--benchmark=demo")
    repaired.assert_outcomes(passed=1)
    assert len(bench_env.requests) == calls + 1  # the corrupt entry was a miss, fetched again
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay").assert_outcomes(passed=1)


def test_huge_judge_and_user_replies_stay_out_of_the_results(pytester: pytest.Pytester,
                                                             bench_env: FakeLLMServer) -> None:
    # 3 MB answers, under the response cap: the judge's is unusable (unscored, named), the user's cut
    flood = "y" * 3_000_000
    bench_env.set_responder(by_model({
        USER: lambda r: f"Thought: ok\nMessage: {flood}", TARGET: lambda r: "Sure, where to?",
        JUDGE: lambda r: json.dumps({"justification": flood, "present": True})}))
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    result = pytester.runpytest("--benchmark=demo", "--evalbench-max-reply-chars=2000", "--evalbench-html=report.html")
    result.stdout.fnmatch_lines(["*the answer is 3000038 characters, over the limit of 2000*"])
    assert result.ret == EXIT_INCOMPLETE and last_run_status(bench) == "incomplete"  # unscored, not scored
    conversations = read_json(bench / "runs" / "tgt" / "conversations.json")
    assert conversations[0]["transcript"][0]["content"].endswith(
        "[evalbench: user message truncated from 3000000 to 2000 characters; see --evalbench-max-reply-chars]")
    for path in bench.rglob("*"):
        if path.is_file() and ".evalbench-cache" not in path.parts:
            assert path.stat().st_size < 200_000, path
