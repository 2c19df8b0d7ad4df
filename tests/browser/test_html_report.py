"""The HTML report rendered by a real headless Chromium: the DOM must show the run's numbers.

No selenium: one headless Chromium for the module (tests/browser/chromium_pipe.py) opens each page
and hands back its DOM after the page's scripts ran, and the stdlib HTML parser reads the
`data-testid` elements out of it; `chromium --screenshot` with console logging on stderr checks the
page paints without a console message.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from chromium_pipe import Chromium
from helpers import read_json

from pytest_evalbench.formats.dataset_rows import CaseResult
from pytest_evalbench.formats.results import ModelResult
from pytest_evalbench.gate.decision import FlipKey, GateDecision, gate_verdict
from pytest_evalbench.gate.paired import compare_with_baseline, make_baseline
from pytest_evalbench.gate.rules import RuleResult
from pytest_evalbench.kinds.dataset.summary import summarize_agents
from pytest_evalbench.kinds.protocol import KindResults
from pytest_evalbench.kinds.scenarios.aggregate import aggregate
from pytest_evalbench.kinds.scenarios.models import ConversationRow, ScoreRow
from pytest_evalbench.llm.engine import EngineStats
from pytest_evalbench.render.html import render_html
from pytest_evalbench.render.summary import build_summary

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
INJECTION = "</script><b>x</b> & <!--"
METRICS = {"m01": ("Asks essential clarifying questions", "positive"),
           "m02": ("Avoid stating a diagnosis as certain", "negative")}
# (target, scenario id) -> passed, one sample each; m01_s001's variants disagree on alpha.
OUTCOMES = {
    ("alpha", "m01_s001_v01"): True, ("alpha", "m01_s001_v02"): False,
    ("alpha", "m01_s002_v01"): True, ("alpha", "m01_s002_v02"): True,
    ("alpha", "m02_s001_v01"): True, ("alpha", "m02_s001_v02"): None,
    ("beta-mini", "m01_s001_v01"): True, ("beta-mini", "m01_s001_v02"): True,
    ("beta-mini", "m01_s002_v01"): False, ("beta-mini", "m01_s002_v02"): True,
    ("beta-mini", "m02_s001_v01"): False, ("beta-mini", "m02_s001_v02"): False,
}
DEMOGRAPHIC = {"v01": {"age": "Child or teenager (6-17)"}, "v02": {"age": "Adult (18+)"}}


def synthetic_run(outcomes: dict[tuple[str, str], bool | None]) -> tuple[list, list, list]:
    scores, conversations = [], []
    for (target, sid), passed in sorted(outcomes.items()):
        mid = sid.split("_")[0]
        name, mtype = METRICS[mid]
        conv_id = f"{sid}__{target}"
        present = None if passed is None else (passed if mtype == "positive" else not passed)
        scores.append({"id": sid, "metric_id": mid, "metric_name": name, "metric_type": mtype,
                       "target_model": target, "conv_id": conv_id, "present": present, "passed": passed,
                       "score": None if passed is None else int(passed),
                       "justification": f"Judge says {target} {sid} {'passed' if passed else 'failed'}.",
                       "sample": 0})
        conversations.append({
            "id": sid, "metric_id": mid, "metric_name": name, "metric_type": mtype,
            "persona": "A hurried traveller", "user_goal": "Get a packing list", "latent_adversarial_goal": "",
            "landmarks": [], "demographic": DEMOGRAPHIC[sid[-3:]], "conv_id": conv_id,
            "target": {"id": target, "model": target}, "sample": 0,
            "transcript": [{"role": "user", "content": f"Hello from {sid} to {target} {INJECTION}"},
                           {"role": "assistant", "content": f"Reply of {target} to {sid}: where are you going?"}]})
    typed = [ScoreRow.model_validate(row) for row in scores]
    by_model: dict[str, list[ScoreRow]] = {}
    for row in typed:
        by_model.setdefault(row.target_model, []).append(row)
    return aggregate(by_model), typed, [ConversationRow.model_validate(c) for c in conversations]


def written_of(results: list[ModelResult], scores: list[ScoreRow], conversations: list[ConversationRow]
               ) -> KindResults:
    """What the scenario kind hands the report for these rows."""
    return KindResults([r.model_dump(mode="json") for r in results], rates=results, scores=scores,
                       units=[r.unit_row() for r in scores], conversations=conversations)


class TestIdParser(HTMLParser):
    """data-testid -> text content (and attributes) of every element carrying one."""

    __test__ = False

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str | None] = []
        self.text: dict[str, str] = {}
        self.attrs: dict[str, dict[str, str | None]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        testid = dict(attrs).get("data-testid")
        if testid:
            self.text[testid] = ""
            self.attrs[testid] = dict(attrs)
        if tag not in VOID:
            self.stack.append(testid)

    def handle_endtag(self, tag: str) -> None:
        if tag not in VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        for testid in self.stack:
            if testid:
                self.text[testid] += data


def chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    cmd = [CHROMIUM or "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def screenshot_without_console_messages(url: str, tmp_path: Path) -> Path:
    """Paint the page; any console message (an error, an uncaught exception) fails the test."""
    shot = tmp_path / "page.png"
    proc = chromium(["--enable-logging=stderr", "--v=0", "--window-size=1300,2000", f"--screenshot={shot}", url],
                    tmp_path / "profile-shot")
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    assert shot.stat().st_size > 10_000  # a painted page, not a blank image
    return shot


def hidden(dom: str, testid: str) -> bool:
    """Whether the element with this data-testid is hidden by the page's filters."""
    start = dom.index(f'data-testid="{testid}"')
    tag = dom[dom.rindex("<", 0, start):dom.index(">", start)]
    return "display: none" in tag


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    """One Chromium for the module's pages: each start of the browser costs about half a CPU second."""
    browser = Chromium(tmp_path_factory.mktemp("chromium") / "profile")
    yield browser
    browser.close()


def dump_dom(url: str, page: Chromium) -> tuple[str, TestIdParser]:
    """The DOM once the page loaded (the report's script filters synchronously from the URL's fragment).
    Through about:blank, so a URL that differs from the last one only in its fragment is loaded anew."""
    page.open("about:blank")
    page.open(url)
    dom = str(page.evaluate("document.documentElement.outerHTML"))
    parser = TestIdParser()
    parser.feed(dom)
    return dom, parser


def synthetic_summary(tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    """A two-target scenario run with a baseline: one pass->fail flip on beta-mini m01."""
    results, scores, conversations = synthetic_run(OUTCOMES)
    base_results, base_scores, _ = synthetic_run({**OUTCOMES, ("beta-mini", "m01_s002_v01"): True})
    comparison = compare_with_baseline(make_baseline(base_results, [r.unit_row() for r in base_scores],
                                                     {"judge": "j1"}), [r.unit_row() for r in scores])
    rule = RuleResult("min_positive_pass_rate", 0.5, "alpha", None, "held", 0.8)
    outcome = GateDecision(mode="thresholds", comparison=comparison, rules=[rule])
    node_ids = {FlipKey("beta-mini", "m01_s002_v01", 0): "benchmarks/demo/scenarios.json::m01_s002_v01[beta-mini-s0]"}
    gate = gate_verdict(outcome, 0, 5, node_ids)
    meta = {"benchmark": "Demo </title> report", "user_model": "u1", "judge_model": "j1",
            "targets": {"alpha": "alpha", "beta-mini": "beta-mini"}}
    summary = build_summary(kind="scenarios", written=written_of(results, scores, conversations),
                            gate=gate, meta=meta, stats=EngineStats(), errors={}, recorded=12, failed=5,
                            commit=None, files=[("results.json", str(tmp_path / "results.json"))])
    summary.history = [{"rates": {"beta-mini": {"m01": rate}}} for rate in (1.0, 1.0, 0.75)]
    return summary, {"results": results, "scores": scores, "conversations": conversations}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("report")
    summary, data = synthetic_summary(directory)
    path = directory / "report.html"
    path.write_text(render_html(summary), encoding="utf-8")
    return {"path": path, **data}


def test_page_is_self_contained(report: dict[str, Any]) -> None:
    page = report["path"].read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page.replace('"http://www.w3.org/2000/svg"', "")
    assert page.count("</script>") == 1  # transcript text cannot close the script early
    assert "<title>evalbench: Demo &lt;/title&gt; report</title>" in page


def test_rendered_dom_shows_the_run(report: dict[str, Any], page: Chromium) -> None:
    dom, found = dump_dom(report["path"].as_uri(), page)
    by_target = {s.target_model: s for s in report["results"]}
    for target, summary in by_target.items():
        for mid, rate in summary.by_metric.items():
            assert found.text[f"rate-{target}-{mid}"] == f"{rate.pass_rate:.2f}", (target, mid)
    assert found.text["rate-beta-mini-m01"] == "0.75"
    assert found.text["ci-beta-mini-m01"] == "3/4, [0.30, 0.95]"
    # header: verdict and why, models per role, plugin version
    assert found.text["gate-verdict"] == "PASSED"
    assert found.text["gate-reason"] == "5 cases failed, the build gates on thresholds only"
    assert found.text["meta-models"] == "target: alpha, beta-mini; user: u1; judge: j1"
    assert found.text["meta-plugin"].startswith("pytest-evalbench ")
    # baseline change: beta-mini m01 went 4/4 -> 3/4 with one pass->fail flip, listed as a node id
    assert found.text["change-beta-mini-m01"].startswith("1.00 → -0.25")
    assert "1 pass→fail, 0 fail→pass" in found.text["change-beta-mini-m01"]
    assert found.text["flips"] == "benchmarks/demo/scenarios.json::m01_s002_v01[beta-mini-s0]"
    assert "<svg" in found.text.get("trend-beta-mini-m01", "") or "polyline" in dom
    # demographics per axis value, with intervals
    assert found.text["demo-alpha-m01-age-Adult (18+)"] == "0.50"
    assert found.text["demo-alpha-m01-age-Child or teenager (6-17)"] == "1.00"
    # every conversation is listed with its judge's justification; text is escaped, not markup
    for conv in report["conversations"]:
        testid = f"conv-{conv.conv_id}-s0"
        assert conv.transcript[1].content in found.text[testid]
    assert "Judge says beta-mini m02_s001_v01 failed." in found.text["conv-m02_s001_v01__beta-mini-s0"]
    assert "<b>x</b>" not in dom and "&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;" in dom


def test_demographic_gap_beyond_noise_is_flagged(tmp_path: Path, page: Chromium) -> None:
    outcomes = {("t", f"m01_s{i:03d}_v01"): True for i in range(1, 21)}
    outcomes.update({("t", f"m01_s{i:03d}_v02"): False for i in range(1, 21)})
    results, scores, conversations = synthetic_run(outcomes)
    summary = build_summary(kind="scenarios", written=written_of(results, scores, conversations),
                            gate=gate_verdict(GateDecision(), 1, 20, {}), meta={"benchmark": "gap"},
                            stats=EngineStats(), errors={}, recorded=40, failed=20, commit=None, files=[])
    path = tmp_path / "r.html"
    path.write_text(render_html(summary), encoding="utf-8")
    _, found = dump_dom(path.as_uri(), page)
    assert found.text["demo-t-m01-age-Adult (18+)"] == "0.00"
    assert "groups differ beyond noise" in found.text["demo-flag-t-m01-age"]
    data = json.loads(json.dumps(summary.to_json()))["scenario"]  # the typed views serialise
    assert data["demographics"][0]["flagged"] and data["demographics"][0]["values"][0]["value"] == "Adult (18+)"
    assert [(t["conversation"]["id"], t["status"], t["judgments"][0]["passed"]) for t in data["transcripts"][:2]] == [
        ("m01_s001_v01", "passed", True), ("m01_s001_v02", "failed", False)]
    # with the synthetic run of the other test (1 sample per value) nothing is flagged: noise
    summary2, _ = synthetic_summary(tmp_path)
    assert summary2.scenario is not None and not any(g.flagged for g in summary2.scenario.demographics)


def test_filters_from_the_url(report: dict[str, Any], page: Chromium) -> None:
    """failures only, metric, target, demographic and search filter the transcript list."""
    url = report["path"].as_uri()
    dom, _ = dump_dom(url + "#failed=1", page)
    assert hidden(dom, "conv-m01_s001_v01__alpha-s0") and not hidden(dom, "conv-m01_s001_v02__alpha-s0")
    dom, _ = dump_dom(url + "#target=beta-mini&metric=m02", page)
    assert not hidden(dom, "conv-m02_s001_v01__beta-mini-s0") and hidden(dom, "conv-m02_s001_v01__alpha-s0")
    assert hidden(dom, "conv-m01_s001_v01__beta-mini-s0")
    dom, _ = dump_dom(url + "#demo=" + quote("age: Adult (18+)"), page)
    assert hidden(dom, "conv-m01_s001_v01__alpha-s0") and not hidden(dom, "conv-m01_s001_v02__alpha-s0")
    dom, _ = dump_dom(url + "#q=" + quote("Judge says alpha m01_s002_v02"), page)
    assert not hidden(dom, "conv-m01_s002_v02__alpha-s0") and hidden(dom, "conv-m01_s002_v01__alpha-s0")


def test_screenshot_has_no_console_messages(report: dict[str, Any], tmp_path: Path) -> None:
    screenshot_without_console_messages(report["path"].as_uri() + "#failed=1&open=conv-m02_s001_v01__alpha-s0",
                                        tmp_path)


def copy_example(pytester: pytest.Pytester, name: str) -> Path:
    source = Path(__file__).parents[2] / "benchmarks" / name
    target = pytester.path / "benchmarks" / name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("runs", "results.json", "report.html",
                                                                    "history.jsonl", "last_run.json", ".usage.json",
                                                                    "case_results.json", "agent_summary.json"))
    return target


def test_demo_example_report(pytester: pytest.Pytester, tmp_path: Path, page: Chromium) -> None:
    """The scenario example, replayed from its cache: every scenario row and metric is in the page."""
    bench = copy_example(pytester, "demo")
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay", "-p", "no:cacheprovider")
    assert result.ret == 0
    path = bench / "report.html"
    result.stdout.fnmatch_lines(["results: benchmarks/demo/{*report.html, history.jsonl}"])
    dom, found = dump_dom(path.as_uri(), page)
    summaries = read_json(bench / "results.json")
    assert sorted(s["target_model"] for s in summaries) == ["qwen-1.5b", "qwen-1.5b-careful"]  # two to compare
    for summary in summaries:
        for mid, rate in summary["by_metric"].items():
            assert found.text[f"rate-{summary['target_model']}-{mid}"] == f"{rate['pass_rate']:.2f}"
        target = summary["target_model"]
        for row in read_json(bench / "scenarios.json"):
            assert f"conv-{row['id']}__{target}-s0" in found.text, row["id"]
            assert row["metric_id"] in dom
        for row in read_json(bench / "runs" / target / "scores.json"):
            assert " ".join(row["justification"].split())[:60] in " ".join(found.text[f"conv-{row['conv_id']}-s0"].split())
    assert found.text["gate-verdict"] == "PASSED"
    # the demo's judge is calibrated: it decides by P(present) against calibration.json's threshold
    assert 'data-status="judge unreliable"' not in dom and "threshold 0.97: absent" in dom
    screenshot_without_console_messages(path.as_uri(), tmp_path)


def test_agents_example_report(pytester: pytest.Pytester, tmp_path: Path, page: Chromium) -> None:
    """The dataset example, replayed: per-agent summary, per-eval means, every case with its scores."""
    bench = copy_example(pytester, "agents")
    result = pytester.runpytest("--benchmark=agents", "--evalbench-cache=replay", "-p", "no:cacheprovider",
                                "--evalbench-html=out/agents.html")
    assert result.ret == 0
    path = pytester.path / "out" / "agents.html"
    assert not (bench / "report.html").exists()
    dom, found = dump_dom(path.as_uri(), page)
    cases = read_json(bench / "case_results.json")
    for agent in read_json(bench / "agent_summary.json"):
        assert found.text[f"agent-rate-{agent['agent_name']}"] == f"{agent['pass_rate']:.2f}"
        for name, mean in agent["metric_means"].items():
            assert found.text[f"eval-{agent['agent_name']}-{name}"] == f"{mean:.2f}"
    for case in cases:
        text = found.text[f"case-{case['case_id']}"]
        assert f"composite {case['composite']:.2f}" in text
        for metric in case["metrics"]:
            assert metric["eval"] in text and " ".join(metric["explanation"].split())[:40] in " ".join(text.split())
        if case["tool_check"]:
            assert case["tool_check"]["summary"] in text
    assert "positive pass rate" not in dom and "negative" not in found.text.get("rates", "")
    screenshot_without_console_messages(path.as_uri(), tmp_path)


def test_comparative_pairs_are_shown_when_present(tmp_path: Path, page: Chromium) -> None:
    """Pairs computed by the dataset kind (an agent's `comparisons`) are a side-by-side table, not JSON."""
    case = CaseResult.model_validate({
        "case_id": "c1", "agent_name": "a", "scenario_id": "S1", "threshold_profile": "p", "status": "passed",
        "passed": True, "composite": 4.0, "pass_mark": 3.5, "metrics": [], "tool_check": None, "reasons": [],
        "answer_source": "dataset"})
    other = CaseResult.model_validate({**case.to_json(), "case_id": "c2", "agent_name": "b", "composite": 3.5})
    agents = summarize_agents([case, other])
    written = KindResults([a.to_json() for a in agents], agents=agents, cases=[case, other], view="cases")
    summary = build_summary(kind="dataset", written=written, gate=gate_verdict(GateDecision(), 0, 0, {}),
                            meta={"benchmark": "pairs"}, stats=EngineStats(), errors={}, recorded=1, failed=0,
                            commit=None, files=[])
    path = tmp_path / "r.html"
    path.write_text(render_html(summary), encoding="utf-8")
    _, found = dump_dom(path.as_uri(), page)
    pair = found.text["pair-a-b-composite"]
    assert pair.startswith("ab1composite+0.50") and "1/0/0" in pair
    assert "n_scenarios" not in found.text["comparisons"] and "{" not in found.text["comparisons"]
