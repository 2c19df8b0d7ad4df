"""Independent end-to-end checks of issues 24, 25 and 29 (review2): variations of each issue's
table the helpers' own tests did not try, against the fake server, on a clean copy."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import JUDGE, TARGET, USER, read_json, scenario, script, write_benchmark
from test_dataset import scores, write_dataset
from test_printed_commands import shell, terminal_command
from test_stored_answers import APP, LIVE, MULTI, multi, write_bench

from pytest_evalbench.gate.decision import EXIT_INCOMPLETE
from pytest_evalbench.testing import FakeLLMServer, Reply, by_model

pytestmark = pytest.mark.usefixtures("quick_backoff")  # in-process runs retry after short backoffs

XDIST = pytest.mark.parametrize("workers", ["0", pytest.param("2", marks=pytest.mark.slow)], ids=["n0", "n2"])
FAST = ["--evalbench-cache=off", "--evalbench-max-attempts=1", "-p", "no:randomly"]
ROWS = [scenario(f"m01_s00{i}_v01", "m01") for i in (1, 2, 3, 4)]
HOSTILE_NAME = "Bad \x1b[2J\x1b]0;owned\x07 name\n::error file=x.py::pwned <img src=x onerror=alert(1)>"
PRINTABLE_HOSTILE = "Bad `name` ::error file=x.py::pwned ##[error]mid <img src=x onerror=alert(1)>"
"""Printable and one line (benchmark.yaml's names and texts refuse control characters, and names line
breaks), yet hostile: backticks, HTML, workflow commands."""


def persona_says_id(request: dict[str, Any]) -> str:
    return "Message: I am " + re.search(r"persona of (\w+)", json.dumps(request)).group(1)


def inert(output: str) -> None:
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", output), "raw control character in output"
    assert [line for line in output.splitlines() if re.match(r"\s*(::|##\[)", line)] == []


@XDIST
def test_hostile_metric_name_from_benchmark_yaml_is_inert(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                          monkeypatch: pytest.MonkeyPatch, workers: str) -> None:
    step = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    metrics = [{"id": "m01", "name": PRINTABLE_HOSTILE, "type": "positive", "definition": "asks", "examples": ["x"]}]
    bench = write_benchmark(pytester.path, scenarios=ROWS[:2], metrics=metrics,
                            thresholds={"min_positive_pass_rate": 0.9})
    bench_env.set_responder(script(False))
    result = pytester.runpytest_subprocess("--benchmark=demo", "-n", workers, "-v", "-rA", *FAST,
                                           "--junitxml=junit.xml", "--evalbench-markdown=summary.md")
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output
    inert(output)
    summary = step.read_text()
    assert "<img" not in summary and "\x1b" not in summary
    assert "<img" not in (bench / "report.html").read_text()  # escaped (a browser shows ESC inertly)
    assert "\x1b" not in (pytester.path / "junit.xml").read_text()


def _secret(tag: str) -> str:
    import secrets
    return f"QZ{tag}{secrets.token_hex(12)}"


def _leaks(root: Path, output: str, value: str) -> list[str]:
    found = ["output"] if value[:4] in output else []
    return found + [str(p.relative_to(root)) for p in root.rglob("*")
                    if p.is_file() and p.name != "conftest.py" and value[:4].encode() in p.read_bytes()]


@XDIST
def test_header_secret_echoed_by_judge_and_app_exception_never_leaks(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, workers: str) -> None:
    token = _secret("t")
    monkeypatch.setenv("TEAM_TOKEN", token)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "step_summary.md"))
    pytester.makeconftest("""
import os
def pytest_evalbench_make_target(config, target):
    if target.id != "app":
        return None
    def app(messages):
        raise RuntimeError("upstream said: bad token " + os.environ["TEAM_TOKEN"] + " for you")
    return app
""")
    headers = {"X-Team-Token": {"env": "TEAM_TOKEN"}}
    write_benchmark(pytester.path, scenarios=ROWS[:2], targets=[{"id": "tgt", "model": TARGET}, {"id": "app"}],
                    evaluator_model={"model": JUDGE, "headers": headers})

    def respond(request: dict[str, Any]) -> Any:
        if request["model"] == JUDGE:  # the judge quotes the request headers it got, split and whole
            echoed = request["_headers"].get("x-team-token", "")
            return {"justification": f"you sent {echoed}; prefix {echoed[:10]}", "present": False}
        return script(True)(request)

    bench_env.set_responder(respond)
    result = pytester.runpytest_subprocess("--benchmark=demo", "-n", workers, "-rA", "-v", "--junitxml=junit.xml",
                                           "--evalbench-markdown=summary.md", "--evalbench-cache=on")
    output = result.stdout.str() + result.stderr.str()
    assert "RuntimeError" in output and "you sent" in output
    assert _leaks(pytester.path, output, token) == []


@XDIST
def test_outage_in_the_middle_of_a_run_is_incomplete(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                     workers: str) -> None:
    """Two rows measured, two hit a dead endpoint: exit 7, the history line incomplete without rates."""
    bench = write_benchmark(pytester.path, scenarios=ROWS, thresholds={"min_positive_pass_rate": 0.5},
                            gate={"mode": "thresholds"})

    def respond(request: dict[str, Any]) -> Any:
        if any(f"persona of m01_s00{i}_v01" in json.dumps(request) for i in (3, 4)):
            return Reply(status=503, content="down")
        return script(True, user=persona_says_id)(request)

    bench_env.set_responder(respond)
    result = pytester.runpytest("--benchmark=demo", "-n", workers, *FAST)
    result.assert_outcomes(passed=2, errors=2)
    assert result.ret == EXIT_INCOMPLETE
    last = json.loads((bench / "history.jsonl").read_text().splitlines()[-1])
    assert last["complete"] is False and last["rates"] == {}
    assert read_json(bench / "last_run.json")["status"] == "incomplete"
    result.stdout.fnmatch_lines(["evalbench: INCOMPLETE (exit 7)*"])


@XDIST
def test_k_selection_on_a_dataset_is_gated_on_its_rows(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                        workers: str) -> None:
    write_dataset(pytester.path, thresholds={"min_positive_pass_rate": 0.9}, gate={"mode": "thresholds"})
    bench_env.set_responder(scores({"CoherenceExplain": 2}))
    first = pytester.runpytest("--benchmark=agents", "-n", workers, *FAST)
    assert first.ret == 6, first.stdout.str()
    # the passing rows, selected with -k: gated on them alone
    again = pytester.runpytest("--benchmark=agents", "-n", workers, *FAST, "-k", "001 or 002")
    again.assert_outcomes(passed=2)
    again.stdout.no_fnmatch_line("*THRESHOLD BREACH*")
    assert again.ret == 0, again.stdout.str()


@XDIST
def test_last_failed_after_a_failure_is_gated_on_the_rerun(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                             workers: str) -> None:
    write_benchmark(pytester.path, scenarios=ROWS, thresholds={"min_positive_pass_rate": 0.9, "decision": "point"},
                    gate={"mode": "thresholds"})
    bench_env.set_responder(script(lambda r: "I am m01_s001_v01" not in json.dumps(r), user=persona_says_id))
    first = pytester.runpytest("--benchmark=demo", "-n", workers, *FAST)
    assert first.ret == 6
    bench_env.set_responder(script(True, user=persona_says_id))
    again = pytester.runpytest("--benchmark=demo", "-n", workers, *FAST, "--lf")
    again.assert_outcomes(passed=1)
    assert again.ret == 0, again.stdout.str()


# --------------------------------------------------------------------------- stored answers, files


@XDIST
def test_symlinked_answers_directory_out_of_the_benchmark_is_refused(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, workers: str) -> None:
    pytester.makeconftest(APP)
    bench = write_bench(pytester.path)
    outside = pytester.path / "elsewhere"
    outside.mkdir()
    (outside / f"{MULTI}.jsonl").write_text("precious\n")
    (bench / "answers").symlink_to(outside, target_is_directory=True)
    bench_env.set_responder(by_model({"model-multi": multi,
                                      JUDGE: lambda r: {"explanation": "ok", "score": 5}}))
    result = pytester.runpytest("--benchmark=agentsleague", "-n", workers, *LIVE, "--evalbench-cache=off")
    assert (outside / f"{MULTI}.jsonl").read_text() == "precious\n"
    assert sorted(p.name for p in outside.iterdir()) == [f"{MULTI}.jsonl"]
    assert result.ret == 4, result.stdout.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@XDIST
def test_judge_gzip_bomb_on_a_dataset_ends_its_rows_with_an_error(pytester: pytest.Pytester,
                                                                  bench_env: FakeLLMServer, workers: str) -> None:
    import gzip
    bomb = Reply(raw_body=gzip.compress(b" " * (64 << 20)), headers={"Content-Encoding": "gzip"})
    bench = write_dataset(pytester.path)
    bench_env.set_responder(lambda r: bomb)
    result = pytester.runpytest("--benchmark=agents", "-n", workers, *FAST)  # every call has a deadline
    assert result.ret == EXIT_INCOMPLETE, result.stdout.str()
    result.stdout.fnmatch_lines(["*inflates past the cap*"])
    assert read_json(bench / "last_run.json")["status"] == "incomplete"


@XDIST
def test_surrogate_in_a_cached_entry_replays_under_xdist(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                         workers: str) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    bench_env.set_responder(by_model({USER: lambda r: "Thought: ok\nMessage: help \udfff me",
                                      TARGET: lambda r: "broken \ud800 text",
                                      JUDGE: lambda r: {"justification": "cites \ud800 it", "present": True}}))
    pytester.runpytest("--benchmark=demo", "-n", workers).assert_outcomes(passed=4)
    # a cache entry whose stored text carries a lone surrogate escape, as an older version wrote it
    for path in (bench / ".evalbench-cache").glob("*/*.json"):
        text = path.read_text()
        path.write_text(text.replace("\\ufffd", "\\ud800"))
    bench_env.set_responder(lambda r: pytest.fail("no call in replay"))
    replay = pytester.runpytest("--benchmark=demo", "-n", workers, "--evalbench-cache=replay")
    output = replay.stdout.str() + replay.stderr.str()
    assert "INTERNALERROR" not in output and "Traceback" not in output
    assert replay.ret in (0, EXIT_INCOMPLETE), output
    if replay.ret == EXIT_INCOMPLETE:
        replay.stdout.fnmatch_lines(["*corrupt cache entry*"])


# --------------------------------------------------------------------------- printed commands elsewhere


def test_rerun_command_pasted_in_another_directory(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=ROWS, gate={"mode": "thresholds"})
    bench_env.set_responder(script(lambda r: "I am m01_s002_v01" not in json.dumps(r), user=persona_says_id))
    first = pytester.runpytest("--benchmark=demo", *FAST)
    command = terminal_command(first.stdout.str(), "rerun the failed and errored cases with:")
    sub = pytester.path / "sub"
    sub.mkdir()
    rerun = shell(command, sub)
    out = rerun.stdout + rerun.stderr
    # either it runs the failed case, or it says in one line why not: never a silent 'no tests ran'
    assert "1 failed" in rerun.stdout or ("benchmark" in out and rerun.returncode == 4), out


BAD = "x\x1b]0;owned\x07\n::error file=x.py::pwned\n<img src=x onerror=alert(1)>"


@XDIST
def test_hostile_profile_name_in_a_collection_error_is_inert(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                             workers: str) -> None:
    """A broken case file's error lists the policy's profile names (free text from benchmark.yaml):
    they reached the terminal raw (ESC, OSC, a `::error` workflow command at line start)."""
    from test_dataset import example_rows
    bench = write_dataset(pytester.path)
    spec = read_json_yaml(bench)
    profiles = spec["dataset"]["policy"]["profiles"]
    profiles[HOSTILE_NAME] = profiles.pop("prep_default")
    spec["dataset"]["policy"]["default_profile"] = HOSTILE_NAME
    write_dataset(pytester.path, example_rows(), dataset=spec["dataset"])
    result = pytester.runpytest_subprocess("--benchmark=agents", "-n", workers, *FAST)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED and "the policy defines Bad \\x1b[2J" in output, output
    assert "Traceback" not in output
    inert(output)


@XDIST
def test_hostile_dataset_fields_and_judge_text_are_inert(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                         monkeypatch: pytest.MonkeyPatch, workers: str) -> None:
    from test_dataset import example_rows
    step = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    rows = example_rows()
    for row in rows:
        row.update(topic_family=BAD, model_answer=BAD + row["model_answer"], question=BAD + row["question"],
                   context=BAD)
    bench = write_dataset(pytester.path, rows)
    bench_env.set_responder(scores({"CoherenceExplain": lambda r: Reply(content=json.dumps(
        {"explanation": "judge\n" + BAD, "score": 1}))}))
    result = pytester.runpytest_subprocess("--benchmark=agents", "-n", workers, "-v", "-rA", *FAST,
                                           "--evalbench-markdown=summary.md", "--junitxml=junit.xml")
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and result.ret == 1, output  # gate: cases
    inert(output)
    for path in (step, pytester.path / "summary.md", bench / "report.html"):
        assert "<img" not in path.read_text(), path


def read_json_yaml(bench: Path) -> dict[str, Any]:
    import yaml
    return dict(yaml.safe_load((bench / "benchmark.yaml").read_text()))


@XDIST
def test_hostile_env_name_in_a_usage_error_is_inert(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                    workers: str) -> None:
    """A header's `{env: NAME}` with a name nobody set: the usage error quotes the name."""
    headers = {"X-Team": {"env": "NOPE\x1b]0;owned\x07\n::error file=x.py::pwned"}}
    write_benchmark(pytester.path, scenarios=ROWS[:1], evaluator_model={"model": JUDGE, "headers": headers})
    bench_env.set_responder(script(True))
    result = pytester.runpytest_subprocess("--benchmark=demo", "-n", workers, *FAST)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.USAGE_ERROR), output
    assert "Traceback" not in output
    inert(output)


def test_merge_of_a_shard_that_hit_an_outage_says_so(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    bench_env.set_responder(script(True, user=persona_says_id))
    assert pytester.runpytest("--benchmark=demo", "--evalbench-shard=1/2", *FAST).ret == 0
    from helpers import dead_base_url
    monkeypatch.setenv("OPENAI_BASE_URL", dead_base_url())
    down = pytester.runpytest("--benchmark=demo", "--evalbench-shard=2/2", *FAST)
    assert down.ret == EXIT_INCOMPLETE
    merged = subprocess.run([sys.executable, "-m", "pytest_evalbench", "merge", "demo",
                             *(str(bench / "shards" / f"{k}-of-2") for k in (1, 2))],
                            cwd=pytester.path, capture_output=True, text=True, check=False)
    assert merged.returncode == EXIT_INCOMPLETE, merged.stdout + merged.stderr
    assert "incomplete: 2 of the benchmark's 4 items have no record" in merged.stderr
    # only the first shard handed to the merge: incomplete too
    only_one = subprocess.run([sys.executable, "-m", "pytest_evalbench", "merge", "demo", str(bench / "shards" / "1-of-2")],
                              cwd=pytester.path, capture_output=True, text=True, check=False)
    assert only_one.returncode == EXIT_INCOMPLETE and "2 of the benchmark's 4 items" in only_one.stderr


@XDIST
def test_token_query_parameter_of_the_base_url_never_leaks(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                           monkeypatch: pytest.MonkeyPatch, workers: str) -> None:
    token = _secret("q")
    monkeypatch.setenv("OPENAI_BASE_URL", bench_env.base_url + f"?api-version=1&token={token}")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "step_summary.md"))
    write_benchmark(pytester.path, scenarios=ROWS[:2])

    def respond(request: dict[str, Any]) -> Any:
        if request["model"] == TARGET:
            return Reply(status=400, content=f"bad url /chat/completions?token={token}; tok {token[:12]}")
        return script(True)(request)

    bench_env.set_responder(respond)
    result = pytester.runpytest_subprocess("--benchmark=demo", "-n", workers, "-rA", "--junitxml=junit.xml",
                                           "--evalbench-markdown=summary.md")
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == EXIT_INCOMPLETE, output
    assert _leaks(pytester.path, output, token) == []


@XDIST
def test_budget_stop_history_line_is_incomplete(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                workers: str) -> None:
    from test_budget import PRICED, expensive
    rows = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 9)]
    bench = write_benchmark(pytester.path, scenarios=rows, spec=PRICED, thresholds={"min_positive_pass_rate": 0.5})
    bench_env.set_responder(expensive)
    result = pytester.runpytest("--benchmark=demo", "--evalbench-max-cost=6", "-n", workers,
                                "--evalbench-cache=off")
    assert result.ret == EXIT_INCOMPLETE
    last = json.loads((bench / "history.jsonl").read_text().splitlines()[-1])
    assert last["complete"] is False and last["rates"] == {}
    assert "THRESHOLD" not in result.stdout.str()


@XDIST
def test_hostile_app_exception_is_inert(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                        monkeypatch: pytest.MonkeyPatch, workers: str) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "step_summary.md"))
    pytester.makeconftest("""
def pytest_evalbench_make_target(config, target):
    def app(messages):
        raise RuntimeError("boom\\x1b]0;owned\\x07\\n::error file=x.py::pwned\\n<img src=x onerror=alert(1)>")
    return app
""")

    bench = write_benchmark(pytester.path, scenarios=ROWS[:2], targets=[{"id": "app"}])
    bench_env.set_responder(script(True))
    result = pytester.runpytest_subprocess("--benchmark=demo", "-n", workers, "-rA", "-v", *FAST,
                                           "--evalbench-markdown=summary.md")
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == EXIT_INCOMPLETE and "boom" in output, output
    inert(output)
    for path in (pytester.path / "step_summary.md", pytester.path / "summary.md", bench / "report.html"):
        assert "<img" not in path.read_text(), path


@XDIST
def test_k_selects_a_demographic_value_and_is_gated_on_it(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                          workers: str) -> None:
    rows = [scenario("m01_s001_v01", "m01", demographic={"age": "Adult (18+)"}),
            scenario("m01_s002_v01", "m01", demographic={"age": "Teen (13-17)"})]
    spec = {"demographics": {"age": ["Adult (18+)", "Teen (13-17)"]},
            "thresholds": {"min_positive_pass_rate": 0.9, "decision": "point"}}
    write_benchmark(pytester.path, scenarios=rows, spec=spec)
    bench_env.set_responder(script(lambda r: "I am m01_s002_v01" not in json.dumps(r), user=persona_says_id))
    assert pytester.runpytest("--benchmark=demo", "-n", workers, *FAST).ret == 6
    result = pytester.runpytest("--benchmark=demo", "-n", workers, *FAST, "-k", "Adult")
    result.assert_outcomes(passed=1)
    assert result.ret == 0, result.stdout.str()


def test_symlinked_answers_file_out_of_the_benchmark_is_refused(pytester: pytest.Pytester,
                                                                bench_env: FakeLLMServer) -> None:
    pytester.makeconftest(APP)
    bench = write_bench(pytester.path)
    victim = pytester.path / "precious.jsonl"
    victim.write_text("precious\n")
    (bench / "answers").mkdir()
    (bench / "answers" / f"{MULTI}.jsonl").symlink_to(victim)
    bench_env.set_responder(by_model({"model-multi": multi,
                                      JUDGE: lambda r: {"explanation": "ok", "score": 5}}))
    result = pytester.runpytest("--benchmark=agentsleague", *LIVE, "--evalbench-cache=off")
    assert victim.read_text() == "precious\n"
    assert result.ret == 4, result.stdout.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@XDIST
def test_hostile_scenario_text_is_inert(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                        monkeypatch: pytest.MonkeyPatch, workers: str) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "step_summary.md"))
    rows = [scenario("m01_s001_v01", "m01", persona=BAD, user_goal=BAD, latent_adversarial_goal=BAD,
                     landmarks=[{"turn": 1, "instruction": BAD}])]
    # benchmark.yaml's texts refuse control characters: there the hostile text is printable
    metrics = [{"id": "m01", "name": "m", "type": "positive", "definition": PRINTABLE_HOSTILE,
                "examples": [PRINTABLE_HOSTILE]}]
    bench = write_benchmark(pytester.path, scenarios=rows, metrics=metrics, description=PRINTABLE_HOSTILE)
    bench_env.set_responder(script(False, user=lambda r: "Message: " + BAD))
    result = pytester.runpytest_subprocess("--benchmark=demo", "-n", workers, "-rA", "-v", *FAST,
                                           "--evalbench-markdown=summary.md")
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 1 and "Traceback" not in output, output
    inert(output)
    for path in (pytester.path / "step_summary.md", pytester.path / "summary.md", bench / "report.html"):
        assert "<img" not in path.read_text(), path


def test_hostile_threshold_key_in_a_usage_error_is_inert(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """A per-metric threshold naming no metric: the usage error quotes the key from benchmark.yaml."""
    write_benchmark(pytester.path, scenarios=ROWS[:1],
                    thresholds={"per_metric": {"m9\x1b]0;owned\x07\n::error file=x.py::pwned": {"min_pass_rate": 0.5}}})
    bench_env.set_responder(script(True))
    result = pytester.runpytest_subprocess("--benchmark=demo", *FAST)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.USAGE_ERROR), output
    assert "Traceback" not in output and "m9" in output
    inert(output)


@XDIST
def test_hostile_unknown_key_in_a_warning_is_inert(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                   workers: str) -> None:
    """Unknown keys of scenarios.json rows are kept and named in a warning: the key is input text."""
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01", **{"k\x1b]0;owned\x07\n::error x::y": 1})])
    bench_env.set_responder(script(True))
    result = pytester.runpytest_subprocess("--benchmark=demo", "-n", workers, *FAST)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 0 and "unknown key" in output, output
    inert(output)
