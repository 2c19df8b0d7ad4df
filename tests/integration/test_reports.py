"""Reports people read, end to end: terminal summary, progress line, Markdown, history, errors."""

from __future__ import annotations

import json

import pytest
from helpers import dead_base_url, scenario, script, write_benchmark
from test_gating import judge_passes_except, user_says_id

from pytest_evalbench.testing import FakeLLMServer

pytestmark = pytest.mark.usefixtures("quick_backoff")  # in-process runs retry after short backoffs

THRESHOLD_GATE = {"gate": {"mode": "thresholds"}, "thresholds": {"min_positive_pass_rate": 0.1, "decision": "point"}}


def test_progress_lines_in_a_captured_run(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """Without a terminal, plain progress lines (here after every item) with counts and the end."""
    write_benchmark(pytester.path)
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-progress-every=0")
    result.assert_outcomes(passed=2, failed=2)
    lines = [line for line in result.stdout.lines if line.startswith("evalbench: ") and " done " in line]
    assert len(lines) == 4
    assert lines[0].startswith("evalbench: 1/4 done (0 failed, 0 errors), ")
    assert "in flight" in lines[0] and "requests" in lines[0] and "tokens" in lines[0] and "$" in lines[0]
    assert "ETA " in lines[0]
    assert lines[-1].startswith("evalbench: 4/4 done (2 failed, 0 errors)") and "took " in lines[-1]


def test_progress_line_is_off_when_asked(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path)
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-progress-every=-1")
    result.stdout.no_fnmatch_line("evalbench: */4 done*")


def test_summary_says_where_results_went_and_why_exit_0(pytester: pytest.Pytester,
                                                         bench_env: FakeLLMServer) -> None:
    """FAILED lines ending in exit 0 (gate: thresholds): the last evalbench line says why."""
    bench = write_benchmark(pytester.path, spec=THRESHOLD_GATE)
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        "  rule: min_positive_pass_rate 0.10 tgt: 1.00 held (of 2 rows, detects drops >= 0.00)",
        "results: benchmarks/demo/{results.json, runs/, last_run.json, report.html, history.jsonl}",
        "evalbench: PASSED (exit 0): 2 cases failed, the build gates on thresholds only"])
    for name in ("results.json", "last_run.json", "report.html", "history.jsonl"):
        assert (bench / name).is_file(), name
    result.stdout.no_fnmatch_line("*cannot pass or fail*")


def test_html_none_skips_the_report(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path)
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-html=none")
    assert not (bench / "report.html").exists()
    result.stdout.no_fnmatch_line("*report.html*")


def failures_section(result: pytest.RunResult) -> str:
    """The FAILURES section alone: with CI set, pytest's short summary repeats the whole message."""
    return result.stdout.str().split("short test summary info")[0]


def test_failures_compact_by_default_full_transcript_with_v(pytester: pytest.Pytester,
                                                            bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")],
                    generation={"turns": 3, "num_samples": 1, "perfunctory": False, "landmarks": True})
    counter = iter(range(100))
    bench_env.set_responder(script(False, user=lambda r: f"Thought: t\nMessage: user turn {next(counter)}"))
    result = pytester.runpytest("--benchmark=demo")
    out = failures_section(result)
    assert "judge: because" in out and "last exchange:" in out
    assert out.count("USER: user turn") == 1 and "full transcript:" not in out
    result = pytester.runpytest("--benchmark=demo", "-v", "--evalbench-cache=replay")
    out = failures_section(result)
    assert "full transcript:" in out and out.count("USER: user turn") == 1 + 3


def test_configuration_problem_is_reported_once(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every item hits the same dead endpoint: one full message, the others point at it; the
    summary collapses them into "N items: <message>" and never talks about numbers it did not print."""
    rows = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 7)]
    write_benchmark(pytester.path, scenarios=rows)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    result = pytester.runpytest("--benchmark=demo", f"--evalbench-base-url={dead_base_url()}",
                                "--evalbench-max-attempts=1")
    result.assert_outcomes(errors=6)
    out = result.stdout.str()
    assert out.count("cannot reach http://127.0.0.1:") <= 3  # the first item, its short-summary line, the summary
    result.stdout.fnmatch_lines(["ERROR 6 items: evalbench connection error: *cannot reach http://127.0.0.1:*"])
    assert out.count("same error as benchmarks/demo/scenarios.json::m01_s001_v01[tgt-s0]") >= 5
    result.stdout.fnmatch_lines(["  INCOMPLETE: 6 items connection error*",
                                 "evalbench: INCOMPLETE (exit 7): incomplete numbers (INCOMPLETE above) neither pass nor fail"])
    result.stdout.no_fnmatch_line("*numbers above*")
    assert result.ret == 7


def test_markdown_summary_for_ci(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """GITHUB_STEP_SUMMARY is appended to; --evalbench-markdown writes its own file; the table has
    the change vs baseline and flipped cases are pasteable node ids."""
    write_benchmark(pytester.path, scenarios=[scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 5)],
                    spec=THRESHOLD_GATE)
    bench_env.set_responder(script(True, user=user_says_id))
    assert pytester.runpytest("--benchmark=demo", "--evalbench-save-baseline", "--evalbench-cache=off").ret == 0
    step = pytester.path / "step_summary.md"
    step.write_text("previous step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    bench_env.set_responder(script(judge_passes_except({"m01_s002_v01"}), user=user_says_id))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-compare", "--evalbench-cache=off",
                                "--evalbench-markdown=summary.md")
    assert result.ret == 0
    text = (pytester.path / "summary.md").read_text()
    assert step.read_text() == "previous step\n" + text
    assert text.startswith("## ⚠️ evalbench `demo`: passed (exit 0)")  # with a failed case: not a green check
    assert "| target | metric | rate (k/n) | 95% CI | baseline | change | change 95% CI |" in text
    assert "| tgt | m01 Asks clarifying questions | 3/4 (0.75) | [0.30, 0.95] | 1.00 | -0.25 |" in text
    assert "- min_positive_pass_rate 0.10 tgt: 0.75 held" in text
    assert "pytest --benchmark=demo --evalbench-cache=off 'benchmarks/demo/scenarios.json::m01_s002_v01[tgt-s0]'" in text
    assert f"HTML report: `{pytester.path / 'benchmarks' / 'demo' / 'report.html'}`" in text
    assert "\n1 case failed, the build gates on thresholds only\n" in text


def test_history_appends_one_line_per_run(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, spec=THRESHOLD_GATE)
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo")
    bench_env.set_responder(script(False))
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=off")
    lines = [json.loads(line) for line in (bench / "history.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    assert [line["rates"]["tgt"]["m01"] for line in lines] == [1.0, 0.0]
    assert [line["rates"]["tgt"]["m02"] for line in lines] == [0.0, 1.0]
    assert lines[0]["models"] == {"target": ["tgt=sim-target"], "user": ["sim-user"], "judge": ["sim-judge"]}
    assert lines[0]["gate"] == {"verdict": "passed", "exit_code": 0,
                                "rules": ["min_positive_pass_rate 0.10 tgt: 1.00 held (of 2 rows, detects drops >= 0.00)"]}
    assert lines[1]["gate"] == {"verdict": "regression", "exit_code": 6,  # positive rate 0.0 < 0.1
                                "rules": ["min_positive_pass_rate 0.10 tgt: 0.00 breached (of 2 rows, detects drops >= 0.00)"]}
    assert lines[1]["counts"]["tgt"]["m01"] == {"k": 0, "n": 2, "unscored": 0}
    assert lines[1]["cases"] == {"passed": 2, "failed": 2}
    assert set(lines[0]) == {"time", "commit", "benchmark", "models", "rates", "counts", "cases", "complete", "scope",
                             "cost", "gate", "version"}
    assert [(line["complete"], line["scope"]) for line in lines] == [(True, "full")] * 2
    page = (bench / "report.html").read_text()
    assert 'data-testid="trend-tgt-m01"><svg class="spark"' in page  # two runs: a trend line is drawn


def test_hint_when_a_benchmark_is_collected_without_benchmark(pytester: pytest.Pytester) -> None:
    write_benchmark(pytester.path)
    result = pytester.runpytest("benchmarks/demo")
    result.stdout.fnmatch_lines(["evalbench: benchmarks/demo is a benchmark; its cases run only with "
                                 "`pytest --benchmark=demo benchmarks/demo`"])


def test_live_progress_line_on_a_terminal(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """On a TTY the line is redrawn in place (carriage returns) and replaces pytest's dots."""
    import os
    import pty
    import subprocess
    import sys

    write_benchmark(pytester.path)
    bench_env.set_responder(script(True))
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "--benchmark=demo", "-p", "no:cacheprovider"],
                            cwd=pytester.path, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    out = b"".join(chunks).decode("utf-8", "replace")
    assert "\revalbench: 4/4 done (2 failed, 0 errors)" in out
    assert "in flight" in out and "took " in out
    assert "scenarios.json ..FF" not in out  # no per-item letters under the live line


def test_missing_key_is_one_usage_error_before_the_run(pytester: pytest.Pytester, fake_llm: FakeLLMServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """With the cache off every call needs the network: a missing key is known before the run."""
    write_benchmark(pytester.path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=off", "-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*environment variable not set: OPENAI_API_KEY (needed by user_model, "
                                 "evaluator_model, target 'tgt')*"])
    assert fake_llm.requests == []
    result.stdout.no_fnmatch_line("*ERROR at setup*")


def test_unpriced_models_named_under_xdist_and_cost_json_says_replays_count(
        pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, spec=THRESHOLD_GATE)
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "-n", "2")
    result.stdout.fnmatch_lines(["llm: * requests, *; $0.0000 spent this run; $0.0000 priced usage of the results, "
                                 "cached replays included (as in cost.json); no price for sim-judge, sim-target, "
                                 "sim-user (counted as $0, so --evalbench-max-cost cannot limit them; add `pricing:` to "
                                 "benchmark.yaml)"])
    cost = json.loads((bench / "runs" / "tgt" / "cost.json").read_text())
    phases = {phase: entry["cached_replays_counted"] for phase, entry in cost.items() if phase != "version"}
    assert phases == {"simulate": True, "evaluate": True} and cost["version"] == 1


def test_failure_summary_keeps_teardown_output_and_drops_quiet_phase_reports(
        pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """pytest's terminal reporter keeps the passed setup/teardown reports for the whole session;
    ours without teardown output are dropped as they arrive (`plugin/memory_bound.py`), output that
    a teardown printed is still shown under its failure."""
    write_benchmark(pytester.path)
    bench_env.set_responder(script(True))
    pytester.makeconftest("""
import pytest

@pytest.fixture(autouse=True)
def noisy(request):
    yield
    if request.node.name.startswith("m02_s001_v01"):
        print("teardown says hello")

kept = []
during = []

def pytest_runtest_logfinish(nodeid):
    reporter = pytest_runtest_logfinish.config.pluginmanager.get_plugin("terminalreporter")
    during.append(len(reporter.stats.get("", ())))

def pytest_configure(config):
    pytest_runtest_logfinish.config = config

@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter):
    kept.extend(r.nodeid for r in terminalreporter.stats.get("", ()))
    terminalreporter.write_line(f"quiet reports kept: {sorted(set(kept))}")
    terminalreporter.write_line(f"setup/teardown reports held after each item: {during}")
""")
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*_ m02_s001_v01[[]tgt-s0[]] _*", "*Captured stdout teardown*",
                                 "teardown says hello", "*_ m02_s001_v02[[]tgt-s0[]] _*"])
    kept_line = next(line for line in result.stdout.lines if line.startswith("quiet reports kept: "))
    assert kept_line == "quiet reports kept: ['benchmarks/demo/scenarios.json::m02_s001_v01[tgt-s0]']"
    # dropped as they arrive, not only at the end: the list never holds more than the noisy teardown
    result.stdout.fnmatch_lines(["setup/teardown reports held after each item: [[]0, 0, 1, 1[]]"])
