"""Records are typed inside a process and JSON only at the boundaries (issue 13): the judged-row
hook sees JSON with pass/fail not yet derived, xdist carries JSON, and the result files and the
results hook are what they were."""

from __future__ import annotations

import json

import pytest
from helpers import read_json, scenario, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer

SEEN_HOOK = """
import json, pathlib

def pytest_evalbench_judged_row(config, row, record):
    seen = pathlib.Path("seen.jsonl")
    with seen.open("a") as fh:
        fh.write(json.dumps({"id": row["id"], "passed": row["passed"], "score": row["score"],
                             "status": record["status"], "record_keys": sorted(record)}) + "\\n")
    if row["id"].endswith("v02"):
        row["present"] = False

def pytest_evalbench_results(config, benchmark, results, records):
    pathlib.Path("published.json").write_text(json.dumps(
        {"results": results, "statuses": sorted(r["status"] for r in records),
         "scores": sorted((r["score"]["id"], r["score"]["passed"]) for r in records)}))
"""


@pytest.mark.parametrize("workers", [[], ["-n", "1"]])  # one worker: its records cross to the controller as with two
def test_pass_fail_is_derived_once_after_the_judged_row_hook(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                             workers: list[str]) -> None:
    pytester.makeconftest(SEEN_HOOK)
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m01_s001_v02", "m01"),
                                                      scenario("m02_s001_v01", "m02")], generation={"turns": 1})
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", *workers)
    result.assert_outcomes(passed=1, failed=2)
    seen = [json.loads(line) for line in (pytester.path / "seen.jsonl").read_text().splitlines()]
    # the hook runs before anything decided pass/fail: nothing of it is in the row or the record yet
    assert sorted(s["id"] for s in seen) == ["m01_s001_v01", "m01_s001_v02", "m02_s001_v01"]
    assert {(s["passed"], s["score"], s["status"]) for s in seen} == {(None, None, None)}
    assert seen[0]["record_keys"] == ["benchmark", "conversation", "score", "status", "target_id", "usage"]
    # ...and what it changed decided the verdict: m01 v02 is now absent (a positive metric fails)
    rows = read_json(bench / "runs" / "tgt" / "scores.json")
    assert [(r["id"], r["present"], r["passed"], r["score"]) for r in rows] == [
        ("m01_s001_v01", True, True, 1), ("m01_s001_v02", False, False, 0), ("m02_s001_v01", True, False, 0)]
    published = read_json(pytester.path / "published.json")
    assert published["statuses"] == ["failed", "failed", "passed"]
    assert published["scores"] == [["m01_s001_v01", True], ["m01_s001_v02", False], ["m02_s001_v01", False]]
    # the results hook sees results.json's entries; `version` is the file's, not the entries'
    assert published["results"] == [{k: v for k, v in r.items() if k != "version"} for r in read_json(bench / "results.json")]


def test_without_a_judged_row_hook_the_verdict_is_the_judges(pytester: pytest.Pytester,
                                                             bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m02_s001_v01", "m02")],
                            generation={"turns": 1})
    bench_env.set_responder(script(True))
    # in-process: the hook test's xdist run carries the unchanged rows' verdicts across processes
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1, failed=1)
    rows = read_json(bench / "runs" / "tgt" / "scores.json")
    assert [(r["present"], r["passed"], r["score"]) for r in rows] == [(True, True, 1), (True, False, 0)]


def test_a_hook_writing_an_undocumented_field_errors_that_item(pytester: pytest.Pytester,
                                                              bench_env: FakeLLMServer) -> None:
    """The row is validated as it comes back from the hook: the item ERRORs (exit 7), the others are
    written, instead of the whole result write failing at the end of the session."""
    pytester.makeconftest("""
def pytest_evalbench_judged_row(config, row, record):
    if row["id"] == "m01_s001_v02":
        row["reviewer"] = "me"
""")
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m01_s001_v02", "m01")],
                            generation={"turns": 1})
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=1, errors=1)
    assert result.ret == 7
    assert [r["id"] for r in read_json(bench / "runs" / "tgt" / "scores.json")] == ["m01_s001_v01"]
