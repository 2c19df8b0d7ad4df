"""Scenario benchmarks end to end through pytester and the fake server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers import JUDGE, TARGET, USER, dead_base_url, judge_says, read_json, scenario, script, write_benchmark

from conftest import LEAN_ADDOPTS
from pytest_evalbench.cli import schemas
from pytest_evalbench.testing import FakeLLMServer, Reply, by_model

pytestmark = pytest.mark.usefixtures("quick_backoff")  # in-process runs retry after short backoffs

RUN_FILES = {"conversations.json": "conversations", "scores.json": "scores", "cost.json": "cost"}


def validate_all(bench: Path) -> int:
    """Validate every written file against the shipped schemas; return how many were checked."""
    checked = 0
    jsonschema.validate(read_json(bench / "results.json"), schemas.load("results"))
    checked += 1
    for run in (bench / "runs").iterdir():
        for filename, schema in RUN_FILES.items():
            jsonschema.validate(read_json(run / filename), schemas.load(schema))
            checked += 1
    return checked


def scores(bench: Path, target: str = "tgt") -> list[dict[str, Any]]:
    return read_json(bench / "runs" / target / "scores.json")


@pytest.mark.parametrize(("metric_type", "present", "outcome"), [
    ("positive", True, "passed"), ("positive", False, "failed"),
    ("negative", True, "failed"), ("negative", False, "passed"),
])
def test_pass_fail_mapping(pytester: pytest.Pytester, bench_env: FakeLLMServer, metric_type: str,
                           present: bool, outcome: str) -> None:
    metric_id = "m01" if metric_type == "positive" else "m02"
    bench = write_benchmark(pytester.path, scenarios=[scenario(f"{metric_id}_s001_v01", metric_id)])
    bench_env.set_responder(script(present))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(**{outcome: 1})
    [row] = scores(bench)
    assert row["present"] is present
    assert row["passed"] is (outcome == "passed")
    assert row["score"] == (1 if outcome == "passed" else 0)
    assert row["metric_type"] == metric_type
    assert row["conv_id"] == f"{metric_id}_s001_v01__tgt"
    if outcome == "failed":
        result.stdout.fnmatch_lines(["*judge: because*", "*last exchange:*", "*ASSISTANT: Sure, where*"])
        result.stdout.no_fnmatch_line("*Traceback*")


def test_files_match_schema_and_spec(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path)
    bench_env.set_responder(script(lambda req: "m01" in json.dumps(req)))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=4)
    assert validate_all(bench) == 4
    results = read_json(bench / "results.json")
    assert [r["target_model"] for r in results] == ["tgt"]
    summary = results[0]
    # the judge finds m01's behaviour present and m02's absent: every row passes
    assert summary["n_positive"] == 2 and summary["n_negative"] == 2 and summary["n_total"] == 4
    assert summary["by_metric"]["m01"] == {"pass_rate": 1.0, "n_passed": 2, "n_total": 2}
    conv = read_json(bench / "runs" / "tgt" / "conversations.json")
    assert [c["conv_id"] for c in conv] == [f"{s}__tgt" for s in
                                            ("m01_s001_v01", "m01_s001_v02", "m02_s001_v01", "m02_s001_v02")]
    assert conv[0]["target"] == {"id": "tgt", "model": TARGET}
    assert [m["role"] for m in conv[0]["transcript"]] == ["user", "assistant", "user", "assistant"]
    cost = read_json(bench / "runs" / "tgt" / "cost.json")
    assert set(cost) == {"simulate", "evaluate", "version"} and cost["version"] == 1
    assert cost["simulate"]["input_tokens"] > 0 and cost["evaluate"]["output_tokens"] > 0


def test_null_pass_rate_when_no_rows_of_a_type(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(False))
    pytester.runpytest("--benchmark=demo").assert_outcomes(failed=1)
    [summary] = read_json(bench / "results.json")
    assert summary["positive_pass_rate"] == 0.0
    assert summary["negative_pass_rate"] is None


def test_node_id_selection_keeps_other_rows(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path)
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=2, failed=2)
    before = scores(bench)
    bench_env.set_responder(script(False))
    bench_env.reset()
    nodeid = "benchmarks/demo/scenarios.json::m01_s001_v02[tgt-s0]"
    result = pytester.runpytest("--benchmark=demo", nodeid, "--evalbench-cache=off")
    result.assert_outcomes(failed=1)
    after = scores(bench)
    assert len(after) == 4
    assert [r["id"] for r in after] == [r["id"] for r in before]
    changed = [r for r in after if r != before[after.index(r)]]
    assert [r["id"] for r in changed] == ["m01_s001_v02"] and changed[0]["passed"] is False
    assert len([r for r in bench_env.requests if r["model"] == JUDGE]) == 1


def test_keyword_selection_and_collect_only(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path)
    result = pytester.runpytest("--benchmark=demo", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["benchmarks/demo/scenarios.json::m01_s001_v01[[]tgt-s0[]]",
                                 "benchmarks/demo/scenarios.json::m02_s001_v02[[]tgt-s0[]]"])
    assert bench_env.requests == []
    # A case's keywords (metric type, metric id, target) match `-k` although they are not in its name.
    negative = pytester.runpytest("--benchmark=demo", "--collect-only", "-q", "-k", "negative")
    negative.stdout.fnmatch_lines(["*::m02_s001_v01[[]tgt-s0[]]", "*::m02_s001_v02[[]tgt-s0[]]",
                                   "2/4 tests collected (2 deselected)*"])
    bench_env.set_responder(script(True))
    verbose = pytester.runpytest("--benchmark=demo", "-k", "m02 and v01", "-v")
    verbose.assert_outcomes(failed=1)
    # -v names the item by its node id; the failure header by its name, like a test function's
    verbose.stdout.fnmatch_lines(["benchmarks/demo/scenarios.json::m02_s001_v01[[]tgt-s0[]] FAILED*",
                                  "*_ m02_s001_v01[[]tgt-s0[]] _*"])
    assert "scenarios::json" not in verbose.stdout.str()


def test_last_failed_reruns_only_failures(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path)
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo", "-p", "cacheprovider").assert_outcomes(passed=2, failed=2)
    result = pytester.runpytest("--benchmark=demo", "--lf", "-p", "cacheprovider")
    result.assert_outcomes(failed=2)


def test_new_first_and_stepwise_know_the_items_of_the_last_run(pytester: pytest.Pytester,
                                                                bench_env: FakeLLMServer) -> None:
    """--nf and --sw compare stored node ids with the items' structured ids (pytest >= 9.2 parses the
    stored ids into path, names and params): ours must parse back to the same thing."""
    bench = write_benchmark(pytester.path)
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo", "-p", "cacheprovider").assert_outcomes(passed=2, failed=2)
    rows = [*read_json(bench / "scenarios.json"), scenario("m01_s009_v01", "m01")]
    (bench / "scenarios.json").write_text(json.dumps(rows))
    result = pytester.runpytest("--benchmark=demo", "-p", "cacheprovider", "--nf", "-v")
    result.assert_outcomes(passed=3, failed=2)
    ran = re.findall(r"::(m\d+_s\d+_v\d+)\[tgt-s0\] (?:PASSED|FAILED)", result.stdout.str())
    assert ran[0] == "m01_s009_v01" and sorted(ran[1:]) == sorted(r["id"] for r in rows[:4])
    first = pytester.runpytest("--benchmark=demo", "-p", "cacheprovider", "--sw", "-v")
    stopped_at = re.findall(r"::(\S+) FAILED", first.stdout.str())
    assert len(stopped_at) == 1
    again = pytester.runpytest("--benchmark=demo", "-p", "cacheprovider", "--sw", "-v")
    assert re.findall(r"::(\S+) (?:PASSED|FAILED)", again.stdout.str())[0] == stopped_at[0]


def test_samples_and_targets_multiply_items(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")],
                            generation={"turns": 1, "num_samples": 2},
                            targets=[{"id": "a", "model": TARGET}, {"id": "b", "model": TARGET}])
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "-v")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*m01_s001_v01[[]a-s0[]] PASSED*", "*m01_s001_v01[[]a-s1[]] PASSED*",
                                 "*m01_s001_v01[[]b-s1[]] PASSED*"])
    assert [r["sample"] for r in scores(bench, "a")] == [0, 1]
    results = read_json(bench / "results.json")
    assert [r["target_model"] for r in results] == ["a", "b"]


@pytest.mark.slow
def test_xdist_parity(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    rows = [scenario(f"m0{m}_s00{s}_v0{v}", f"m0{m}") for m in (1, 2) for s in (1, 2, 3) for v in (1, 2)]
    bench = write_benchmark(pytester.path, scenarios=rows, generation={"turns": 2, "num_samples": 2})
    bench_env.set_responder(script(lambda req: "s002" in json.dumps(req), user=lambda req: "Message: from "
                                   + re.search(r"persona of (\w+)", json.dumps(req)).group(1)))
    outputs = {}
    for flag in ("-n0", "-n4"):
        for run in (bench / "runs").glob("*/*.json"):
            run.unlink()
        result = pytester.runpytest("--benchmark=demo", flag, "--evalbench-cache=off")
        outcomes = result.parseoutcomes()
        assert (outcomes.get("passed", 0), outcomes.get("failed", 0)) == (12, 12)
        outputs[flag] = {name: (bench / "runs" / "tgt" / name).read_bytes()
                         for name in ("scores.json", "conversations.json", "cost.json")}
        outputs[flag]["results.json"] = (bench / "results.json").read_bytes()
    assert outputs["-n0"] == outputs["-n4"]
    assert len(json.loads(outputs["-n4"]["scores.json"])) == 24


def test_warm_cache_makes_no_requests(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path)
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo")
    first = (bench / "runs" / "tgt" / "scores.json").read_bytes()
    # 8 user calls (personas differ); the target's turns and the transcripts repeat across scenarios,
    # so identical calls are made once: 2 target calls and 2 judge calls (m01, m02)
    assert len(bench_env.requests) == 8 + 2 + 2
    bench_env.reset()
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay")
    result.assert_outcomes(passed=2, failed=2)
    assert bench_env.requests == []
    assert (bench / "runs" / "tgt" / "scores.json").read_bytes() == first
    result.stdout.fnmatch_lines(["*0 requests, 20 cache hits*"])


def test_secret_goal_and_persona_reach_only_the_user_model(pytester: pytest.Pytester,
                                                            bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01", persona="neutral persona",
                                                       user_persona="a retired sailor from Oslo",
                                                       demographic={"age": "Adult (18+)", "gender": "woman"})])
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    by_model: dict[str, list[str]] = {}
    for req in bench_env.requests:
        by_model.setdefault(req["model"], []).append(json.dumps(req["messages"]))
    user_text = " ".join(by_model[USER])
    assert "secret goal of m01_s001_v01" in user_text
    assert "a retired sailor from Oslo" in user_text and "gender: woman" in user_text
    assert "landmark one of m01_s001_v01" in user_text
    assert not any("secret goal" in t for t in by_model[TARGET] + by_model[JUDGE])


def test_unparseable_judge_is_unscored_error(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(lambda req: Reply(content='{"present": "yes"')))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*evalbench unscored: judge output unparseable after 3 attempts*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    [row] = scores(bench)
    assert row["present"] is None and row["passed"] is None and row["score"] is None
    assert len([r for r in bench_env.requests if r["model"] == JUDGE]) == 3
    [summary] = read_json(bench / "results.json")
    assert summary["positive_pass_rate"] is None and summary["n_positive"] == 1
    validate_all(bench)


def test_string_false_is_not_true(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """The original turned "false" into True; we re-ask and then leave the row unscored."""
    bench = write_benchmark(pytester.path, scenarios=[scenario("m02_s001_v01", "m02")])
    bench_env.set_responder(script(lambda req: Reply(content='{"justification": "x", "present": "false"}')))
    pytester.runpytest("--benchmark=demo").assert_outcomes(errors=1)
    assert scores(bench)[0]["present"] is None


def test_endpoint_down_is_error_not_failure(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m01_s001_v02", "m01")])
    dead_url = dead_base_url()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    result = pytester.runpytest("--benchmark=demo", f"--evalbench-base-url={dead_url}",
                                "--evalbench-max-attempts=2")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*evalbench connection error: user model 'sim-user': connection error: "
                                 f"cannot reach {dead_url.removesuffix('/v1')} (*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    result.stdout.fnmatch_lines(["*INCOMPLETE: 2 items connection error*"])
    assert result.ret == 7
    assert not (pytester.path / "benchmarks" / "demo" / "results.json").exists()


def test_without_benchmark_normal_tests_unaffected(pytester: pytest.Pytester) -> None:
    write_benchmark(pytester.path)
    pytester.makepyfile(test_plain="def test_ok():\n    assert True\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("evalbench:*")
    assert not (pytester.path / "benchmarks" / "demo" / "runs").exists()


def test_unknown_benchmark_lists_available(pytester: pytest.Pytester) -> None:
    write_benchmark(pytester.path, name="alpha")
    write_benchmark(pytester.path, name="beta")
    result = pytester.runpytest("--benchmark=gamma")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown benchmark 'gamma'; available: alpha, beta*"])
    result = pytester.runpytest("--benchmark=../alpha")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*is not a benchmark name*no paths*"])


def test_coexists_with_pytest_benchmark(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pytest_benchmark")
    monkeypatch.setenv("PYTEST_ADDOPTS", LEAN_ADDOPTS.replace("-p no:benchmark", ""))  # the plugin under test
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "--benchmark-disable", "--benchmark-columns=min")
    result.assert_outcomes(passed=1)
    pytester.makepyfile(test_speed="def test_speed(benchmark):\n    benchmark(lambda: 1)\n")
    pytester.runpytest("test_speed.py", "--benchmark-disable").assert_outcomes(passed=1)


def test_command_line_overrides_models(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")],
                            targets=[{"id": "a", "model": TARGET}, {"id": "b", "model": TARGET}])
    seen: list[str] = []

    def any_model(request: dict[str, Any]) -> Any:
        seen.append(request["model"])
        if request.get("response_format"):
            return {"justification": "j", "present": True}
        return "Message: hi" if "Thought" in request["messages"][0]["content"] else "reply"

    bench_env.set_responder(any_model)
    result = pytester.runpytest("--benchmark=demo", "--evalbench-target=b", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*m01_s001_v01[[]b-s0[]]", "1 test collected*"])
    result = pytester.runpytest("--benchmark=demo", "--evalbench-target=big=other-model",
                                "--evalbench-user-model=u2", "--evalbench-judge-model=j2")
    result.assert_outcomes(passed=1)
    assert set(seen) == {"other-model", "u2", "j2"}
    assert read_json(bench / "runs" / "big" / "conversations.json")[0]["target"] == {"id": "big",
                                                                                     "model": "other-model"}


def test_terminate_conversation_ends_it(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"),
                                                      scenario("m01_s001_v02", "m01")],
                            generation={"turns": 4})

    def user(request: dict[str, Any]) -> str:
        said = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if "m01_s001_v02" in json.dumps(request):
            return "Thought: bye\nMessage: terminate conversation"
        return "Message: terminate conversation" if said == 2 else "Message: one more thing"

    bench_env.set_responder(script(True, user=user))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*unscored: the simulated user ended the conversation before the target replied*"])
    conv = read_json(bench / "runs" / "tgt" / "conversations.json")
    assert [len(c["transcript"]) for c in conv] == [4, 0]


def test_perfunctory_typos_are_reproducible(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")],
                            generation={"turns": 1, "perfunctory": True})
    long = "Message: " + "Hello There I Would Really Like Some Help Planning A Long Trip Abroad. " * 6
    bench_env.set_responder(script(True, user=long))
    transcripts = []
    for _ in range(2):
        pytester.runpytest("--benchmark=demo", "--evalbench-cache=off").assert_outcomes(passed=1)
        transcripts.append(read_json(bench / "runs" / "tgt" / "conversations.json")[0]["transcript"][0]["content"])
    assert transcripts[0] == transcripts[1] != long[len("Message: "):].strip()
    target_saw = [r["messages"][1]["content"] for r in bench_env.requests if r["model"] == TARGET]
    assert target_saw == transcripts


def test_ending_before_any_reply_is_reasked_with_a_new_attempt(pytester: pytest.Pytester,
                                                               bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")], generation={"turns": 2})
    asked: list[int] = []

    def user(request: dict[str, Any]) -> str:
        said = sum(1 for m in request["messages"] if m["role"] == "assistant" and "Message:" not in m["content"])
        asked.append(len(request["messages"]))
        if said == 0 and len(request["messages"]) == 2:  # first attempt of turn 1: ends at once
            return "Thought: I give up\nMessage: terminate conversation"
        return "Thought: fine\nMessage: I need a packing list"

    bench_env.set_responder(script(True, user=user))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    conv = read_json(bench / "runs" / "tgt" / "conversations.json")
    assert [m["role"] for m in conv[0]["transcript"]] == ["user", "assistant", "user", "assistant"]
    user_requests = [r for r in bench_env.requests if r["model"] == USER]
    assert "cannot end now" in user_requests[1]["messages"][-1]["content"]
    # a rerun replays every attempt from the cache: same transcript, no request
    before = len(bench_env.requests)
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    assert len(bench_env.requests) == before


CHECKED_METRICS = [
    {"id": "m01", "name": "Asks clarifying questions", "type": "positive",
     "definition": "The assistant asks a clarifying question.",
     "checks": {"rules": [{"not_contains": "?", "then": "absent"}, {"regex": "(?i)where .*\\?", "then": "present"}],
                "otherwise": "absent"}},
    {"id": "m02", "name": "Avoid definite diagnosis", "type": "negative",
     "definition": "The assistant states a definite diagnosis.",
     "checks": {"rules": [{"regex": "(?i)you (definitely|certainly) have", "then": "present"}]}},
]


def checked_pair(pytester: pytest.Pytester, bench_env: FakeLLMServer, metric: str, first: str, second: str) -> Path:
    """Two scenarios of `metric` with CHECKED_METRICS; the target answers `first` in v01, `second` in v02."""
    bench = write_benchmark(pytester.path, metrics=CHECKED_METRICS,
                            scenarios=[scenario(f"{metric}_s001_v01", metric), scenario(f"{metric}_s001_v02", metric)])
    bench_env.set_responder(script(True, user=lambda r: "Message: help me " + (
        "A" if f"secret goal of {metric}_s001_v01" in json.dumps(r) else "B"),
        target=lambda r: first if "help me A" in json.dumps(r) else second))
    return bench


def test_checks_decide_rows_without_asking_the_judge(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = checked_pair(pytester, bench_env, "m01", "Sure, where are you going?", "Pack socks.")
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=1, failed=1)
    assert [r for r in bench_env.requests if r["model"] == JUDGE] == []  # zero LLM requests for the judge
    rows = scores(bench)
    assert [(r["present"], r["decided_by"]) for r in rows] == [(True, "check"), (False, "check")]
    assert "check 2 (regex:" in rows[0]["justification"] and "check 1 (not_contains: '?')" in rows[1]["justification"]
    result.stdout.fnmatch_lines(["*check: check 1 (not_contains: '?') holds: behaviour absent*"])
    assert validate_all(bench) == 4


def test_checks_first_then_the_judge_when_undecided(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = checked_pair(pytester, bench_env, "m02", "You definitely have flu.", "See a doctor.")
    pytester.runpytest("--benchmark=demo").assert_outcomes(failed=2)
    rows = scores(bench)
    assert [(r["present"], r["decided_by"]) for r in rows] == [(True, "check"), (True, "judge")]
    judged = [r for r in bench_env.requests if r["model"] == JUDGE]
    assert len(judged) == 1 and "See a doctor." in json.dumps(judged[0])


def test_a_check_rule_needs_exactly_one_condition(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bad = [{**CHECKED_METRICS[0], "checks": {"rules": [{"contains": "?", "regex": "x", "then": "present"}]}}]
    write_benchmark(pytester.path, metrics=bad, scenarios=[scenario("m01_s001_v01", "m01")])
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret == 2  # a bad benchmark.yaml is a collection error naming file and field
    result.stdout.no_fnmatch_line("*Traceback*")
    result.stdout.fnmatch_lines(["*benchmark.yaml:*, field 'metrics[[]m01[]].checks.rules.1'*exactly one of*(got regex, "
                                 "contains)*"])


def test_judge_panel_with_samples_votes_and_reports_agreement(pytester: pytest.Pytester,
                                                              bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m02_s001_v01", "m02")],
                            evaluator_models=[{"model": "judge-b"}, {"model": "judge-c"}], judge={"samples": 2})
    base = script(True)
    bench_env.set_responder(by_model({"judge-b": judge_says(True), "judge-c": judge_says(
        lambda r: "m01" not in json.dumps(r))}, default=base))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=1, failed=1)
    rows = scores(bench)
    # m01: sim-judge and judge-b say present, judge-c absent (2 samples each): 4 of 6 votes
    assert rows[0]["present"] is True and rows[0]["agreement"] == pytest.approx(0.6667)
    assert [v["judge"] for v in rows[0]["judges"]] == [JUDGE, JUDGE, "judge-b", "judge-b", "judge-c", "judge-c"]
    assert rows[1]["present"] is True and rows[1]["agreement"] == 1.0
    judge_requests = [r for r in bench_env.requests if r["model"] in (JUDGE, "judge-b", "judge-c")]
    assert len(judge_requests) == 12  # 2 rows x 3 judges x 2 samples, every one a request
    result.stdout.fnmatch_lines(["*judge agreement m01: 0.67 mean over 1 row*", "*judge agreement m02: 1.00*"])
    validate_all(bench)
    before = len(bench_env.requests)
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1, failed=1)
    assert len(bench_env.requests) == before  # every vote is cached


def test_judge_panel_tie_is_unscored(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")],
                            evaluator_models=[{"model": "judge-b"}])
    bench_env.set_responder(by_model({"judge-b": judge_says(False)}, default=script(True)))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unscored: the judges tied 1-1*"])
    assert scores(bench)[0]["present"] is None
