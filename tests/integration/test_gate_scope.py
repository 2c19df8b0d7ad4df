"""What a session gates and reports is what it measured (issue 24): outages, node ids, one target.

Every test runs pytest (in-process: each run is a session of its own, with its own exit status)
against the fake server, at `-n 0` and `-n 2`, on both benchmark kinds where the situation applies.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import dead_base_url, read_json, scenario, script, write_benchmark
from test_dataset import scores, write_dataset

from pytest_evalbench.gate.decision import EXIT_INCOMPLETE, EXIT_REGRESSION
from pytest_evalbench.testing import FakeLLMServer

pytestmark = pytest.mark.usefixtures("quick_backoff")  # in-process runs retry after short backoffs

XDIST = [pytest.param([], id="n0"), pytest.param(["-n", "2"], id="n2", marks=pytest.mark.slow)]
ROWS = [scenario(f"m01_s00{i}_v01", "m01") for i in (1, 2, 3, 4)]
THRESHOLDS = {"gate": {"mode": "thresholds"}, "thresholds": {"min_positive_pass_rate": 0.8, "decision": "point"}}
FAST = ["--evalbench-cache=off", "--evalbench-max-attempts=1", "-p", "no:randomly"]


def persona_says_id(request: dict[str, Any]) -> str:
    return "Message: I am " + re.search(r"persona of (\w+)", json.dumps(request)).group(1)


def judge_fails(*failing: str) -> Any:
    return script(lambda r: not any(f"I am {f}" in json.dumps(r) for f in failing), user=persona_says_id)


def run(pytester: pytest.Pytester, name: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest(f"--benchmark={name}", *FAST, *args)


def history(bench: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (bench / "history.jsonl").read_text().splitlines()]


def gate_section(result: pytest.RunResult) -> str:
    """The evalbench section of the terminal summary."""
    out = result.stdout.str()
    return out[out.index("= evalbench ="):]


# --------------------------------------------------------------------------- (a) the endpoint goes down


@pytest.mark.parametrize("xdist", XDIST)
def test_scenario_outage_after_a_full_run_is_incomplete_and_shows_no_old_rate_as_current(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, xdist: list[str]) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS, spec=THRESHOLDS)
    bench_env.set_responder(judge_fails("m01_s001_v01", "m01_s002_v01"))
    first = run(pytester, "demo", *xdist)
    assert first.ret == EXIT_REGRESSION
    first.stdout.fnmatch_lines(["*THRESHOLD BREACH: min_positive_pass_rate 0.80 tgt: 0.50 breached*"])
    results_before = (bench / "results.json").read_bytes()

    monkeypatch.setenv("OPENAI_BASE_URL", dead_base_url())
    down = run(pytester, "demo", *xdist, "--evalbench-markdown=summary.md")
    assert down.ret == EXIT_INCOMPLETE
    markdown = (pytester.path / "summary.md").read_text()
    assert "| 2/4 (0.50) \\[carried over from 20" in markdown and "threshold breach" not in markdown  # Markdown-escaped
    section = gate_section(down)
    assert "THRESHOLD BREACH" not in section and "2/4 (0.50)" not in section.split("not measured in this session")[0]
    down.stdout.fnmatch_lines(["*not measured in this session (1 rate, not gated):",
                               "  tgt m01: 2/4 (0.50), carried over from 20*Z *",
                               "evalbench: INCOMPLETE (exit 7)*"])
    first_line, last = history(bench)
    assert first_line["complete"] is True and first_line["rates"] == {"tgt": {"m01": 0.5}}
    assert last["complete"] is False and last["rates"] == {} and last["gate"]["exit_code"] == EXIT_INCOMPLETE
    assert (bench / "results.json").read_bytes() == results_before  # the files still describe the benchmark
    assert read_json(bench / "last_run.json")["status"] == "incomplete"
    report = (bench / "report.html").read_text()
    assert 'data-testid="ratetext-tgt-m01"' in report and "carried over from" in report


@pytest.mark.parametrize("xdist", XDIST)
def test_dataset_outage_after_a_full_run_is_incomplete_and_shows_no_old_rate_as_current(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, xdist: list[str]) -> None:
    bench = write_dataset(pytester.path, thresholds={"min_positive_pass_rate": 0.9, "decision": "point"},
                          gate={"mode": "thresholds"})
    bench_env.set_responder(scores({"CoherenceExplain": 2}))
    first = run(pytester, "agents", *xdist)
    assert first.ret == EXIT_REGRESSION
    first.stdout.fnmatch_lines(["*THRESHOLD BREACH*"])

    monkeypatch.setenv("OPENAI_BASE_URL", dead_base_url())
    down = run(pytester, "agents", *xdist)
    assert down.ret == EXIT_INCOMPLETE
    section = gate_section(down)
    assert "THRESHOLD BREACH" not in section and "composite mean" not in section
    down.stdout.fnmatch_lines(["*not measured in this session (2 rates, not gated):",
                               "  * pass rate: * carried over from 20*Z *", "evalbench: INCOMPLETE (exit 7)*"])
    first_line, last = history(bench)
    assert first_line["complete"] is True and first_line["rates"]
    assert last["complete"] is False and last["rates"] == {}
    report = (bench / "report.html").read_text()
    # two agents, each labelled in the rates table and in the agents table
    assert report.count("carried over from 20") == 4 and 'data-testid="agents-provenance"' in report


# --------------------------------------------------------------------------- (b) one node id


@pytest.mark.parametrize("xdist", XDIST)
def test_scenario_node_id_of_a_passing_row_is_gated_on_that_row(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                                xdist: list[str]) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS, spec=THRESHOLDS)
    bench_env.set_responder(judge_fails("m01_s001_v01", "m01_s002_v01"))
    assert run(pytester, "demo", *xdist).ret == EXIT_REGRESSION
    one = run(pytester, "demo", *xdist, "benchmarks/demo/scenarios.json::m01_s003_v01[tgt-s0]")
    one.assert_outcomes(passed=1)
    assert one.ret == 0
    one.stdout.fnmatch_lines(["*tgt *m01 *1/1 (1.00)*", "evalbench: PASSED (exit 0)*"])
    assert "THRESHOLD BREACH" not in one.stdout.str()
    assert len(read_json(bench / "runs" / "tgt" / "scores.json")) == 4  # the files keep every row
    last = history(bench)[-1]
    assert last["scope"] == "selection" and last["rates"] == {"tgt": {"m01": 1.0}}
    assert read_json(bench / "last_run.json")["scope"] == "selection"
    # a selection's rates are no trend point of the full benchmark
    from pytest_evalbench.render.summary import read_history
    assert [h["scope"] for h in read_history(bench / "history.jsonl")] == ["full"]


@pytest.mark.parametrize("mode", ["cases", "thresholds"])
@pytest.mark.parametrize("decision", ["interval", "point"])
def test_scenario_node_id_of_a_failing_row_exits_by_its_case_with_the_rule_not_evaluated(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, mode: str, decision: str) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS, spec={
        "gate": {"mode": mode}, "thresholds": {"min_positive_pass_rate": 0.5, "decision": decision}})
    bench_env.set_responder(judge_fails("m01_s001_v01"))
    one = run(pytester, "demo", "benchmarks/demo/scenarios.json::m01_s001_v01[tgt-s0]")
    one.assert_outcomes(failed=1)
    assert one.ret == 1
    assert "THRESHOLD BREACH" not in one.stdout.str() and "REGRESSION" not in one.stdout.str()
    one.stdout.fnmatch_lines(["*min_positive_pass_rate 0.50 tgt: not evaluated (too few rows: 1 < gate.min_rows 10)*",
                              "evalbench: FAILED (exit 1)*"])
    gate = history(bench)[-1]["gate"]
    assert gate["exit_code"] == 1 and gate["rules"] == [
        "min_positive_pass_rate 0.50 tgt: not evaluated (too few rows: 1 < gate.min_rows 10)"]


@pytest.mark.parametrize("xdist", XDIST)
def test_dataset_node_id_of_a_passing_case_is_gated_on_that_case(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                                 xdist: list[str]) -> None:
    bench = write_dataset(pytester.path, thresholds={"min_positive_pass_rate": 0.9, "decision": "point"},
                          gate={"mode": "thresholds"})
    bench_env.set_responder(scores({"CoherenceExplain": 2}))
    assert run(pytester, "agents", *xdist).ret == EXIT_REGRESSION
    passing = next(r["case_id"] for r in read_json(bench / "case_results.json") if r["passed"])
    one = run(pytester, "agents", *xdist, f"benchmarks/agents/cases.jsonl::{passing}")
    one.assert_outcomes(passed=1)
    assert one.ret == 0
    assert "THRESHOLD BREACH" not in one.stdout.str()
    one.stdout.fnmatch_lines(["*pass rate *1/1 (1.00)*", "evalbench: PASSED (exit 0)*"])
    assert len(read_json(bench / "case_results.json")) == 4


# --------------------------------------------------------------------------- (c) one of two targets


@pytest.mark.parametrize("xdist", XDIST)
def test_one_of_two_targets_is_gated_on_that_target_only(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                         xdist: list[str]) -> None:
    from helpers import JUDGE, TARGET, USER

    from pytest_evalbench.testing import by_model

    bench = write_benchmark(pytester.path, scenarios=ROWS, spec=THRESHOLDS,
                            targets=[{"id": "good", "model": TARGET}, {"id": "bad", "model": "bad-target"}])
    bench_env.set_responder(by_model({USER: persona_says_id, TARGET: lambda r: "Certainly: GOOD-ANSWER",
                                      "bad-target": lambda r: "no idea",
                                      JUDGE: lambda r: {"justification": "j", "present": "GOOD-ANSWER" in json.dumps(r)}}))
    first = run(pytester, "demo", *xdist)
    assert first.ret == EXIT_REGRESSION
    first.stdout.fnmatch_lines(["*THRESHOLD BREACH: min_positive_pass_rate 0.80 bad: 0.00 breached*"])
    good = run(pytester, "demo", *xdist, "--evalbench-target=good")
    good.assert_outcomes(passed=4)
    assert good.ret == 0
    assert "THRESHOLD BREACH" not in good.stdout.str()
    good.stdout.fnmatch_lines(["*not measured in this session (1 rate, not gated):",
                               "  bad m01: 0/4 (0.00), carried over from 20*Z *", "evalbench: PASSED (exit 0)*"])
    assert (bench / "runs" / "bad" / "scores.json").is_file()  # the other target's rows stay on disk
    last = history(bench)[-1]
    assert last["scope"] == "selection" and last["rates"] == {"good": {"m01": 1.0}}
    # result files written before the session ledger existed: their rows come from "an earlier session"
    (bench / ".sessions.json").unlink()
    again = run(pytester, "demo", *xdist, "--evalbench-target=good")
    assert again.ret == 0
    again.stdout.fnmatch_lines(["  bad m01: 0/4 (0.00), carried over from an earlier session"])
