"""The HTML report rendered by a real headless Chromium: the DOM must show the run's numbers.

No selenium: `chromium --headless --dump-dom` prints the DOM after the page's scripts ran, and
the stdlib HTML parser reads the `data-testid` elements out of it.
"""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from helpers import read_json, script, write_benchmark

from pytest_evalbench.gate.compare import compare_with_baseline, make_baseline
from pytest_evalbench.render.html import render_html
from pytest_evalbench.scenarios.aggregate import aggregate

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
    by_model: dict[str, list] = {}
    for row in scores:
        by_model.setdefault(row["target_model"], []).append(row)
    return aggregate(by_model), scores, conversations


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


def dump_dom(url: str, tmp_path: Path) -> tuple[str, TestIdParser]:
    proc = chromium(["--dump-dom", url], tmp_path / "profile")
    assert proc.returncode == 0, proc.stderr[-2000:]
    parser = TestIdParser()
    parser.feed(proc.stdout)
    return proc.stdout, parser


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    results, scores, conversations = synthetic_run(OUTCOMES)
    # Baseline: beta-mini also passed m01_s002_v01 -> one pass->fail flip on beta-mini m01 now.
    base_results, base_scores, _ = synthetic_run({**OUTCOMES, ("beta-mini", "m01_s002_v01"): True})
    comparison = compare_with_baseline(make_baseline(base_results, base_scores, {"judge": "j1"}), scores)
    page = render_html(results, scores, conversations, comparison, "Demo </title> report")
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(page, encoding="utf-8")
    return {"path": path, "results": results, "scores": scores, "conversations": conversations}


def test_page_is_self_contained(report: dict[str, Any]) -> None:
    page = report["path"].read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page
    assert page.count("</script>") == 2  # the data script cannot be closed early by transcript text
    assert "<title>Demo &lt;/title&gt; report</title>" in page


def test_rendered_dom_shows_the_run(report: dict[str, Any], tmp_path: Path) -> None:
    dom, found = dump_dom(report["path"].as_uri(), tmp_path)
    by_target = {s["target_model"]: s for s in report["results"]}
    for target, summary in by_target.items():
        for mid, rate in summary["by_metric"].items():
            assert found.text[f"rate-{target}-{mid}"] == f"{rate['pass_rate']:.2f}", (target, mid)
        assert found.text[f"pos-rate-{target}"] == f"{summary['positive_pass_rate']:.2f}"
    assert found.text["neg-rate-alpha"] == "1.00"  # one scored negative row; the unscored one does not count
    assert found.text["rate-beta-mini-m01"] == "0.75"
    assert found.text["ci-beta-mini-m01"].strip().startswith("3/4, 95% CI [0.30, 0.95]")
    # baseline change: beta-mini m01 went 4/4 -> 3/4 with one pass->fail flip
    assert found.text["change-beta-mini-m01"].startswith("vs baseline 1.00: -0.25")
    assert "1 pass->fail, 0 fail->pass" in found.text["change-beta-mini-m01"]
    # demographic variants side by side, the disagreeing base scenario flagged
    assert found.text["variant-alpha-m01_s001_v01"].startswith("1.00")
    assert found.text["variant-alpha-m01_s001_v02"].startswith("0.00")
    assert "flag-m01_s001" in found.text and "flag-m01_s002" in found.text  # beta-mini disagrees on s002
    assert "flag-m02_s001" not in found.text
    assert "Adult (18+)" in dom
    # transcript viewer: first conversation shown by default, escaped text not markup
    first = sorted(report["conversations"], key=lambda c: (c["target"]["id"], c["conv_id"]))[0]
    assert found.text["turn-0"].endswith(first["transcript"][0]["content"])
    assert found.text["turn-1"].endswith(first["transcript"][1]["content"])
    assert found.text["verdict-m01"] == "pass"
    assert found.text["justification-m01"] == "Judge says alpha m01_s001_v01 passed."
    assert "<b>x</b>" not in dom and "&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;" in dom


def test_hash_selects_a_conversation(report: dict[str, Any], tmp_path: Path) -> None:
    convs = sorted(report["conversations"], key=lambda c: (c["target"]["id"], c["conv_id"]))
    index = next(i for i, c in enumerate(convs) if c["conv_id"] == "m02_s001_v01__beta-mini")
    _, found = dump_dom(report["path"].as_uri() + f"#conv={index}", tmp_path)
    assert found.text["turn-1"].endswith("Reply of beta-mini to m02_s001_v01: where are you going?")
    assert found.text["verdict-m02"] == "fail"
    assert found.text["justification-m02"] == "Judge says beta-mini m02_s001_v01 failed."


def test_plugin_writes_report_that_renders(pytester: pytest.Pytester, bench_env: Any, tmp_path: Path) -> None:
    """`--evalbench-html` end to end: run a benchmark, open the file, see its numbers."""
    bench = write_benchmark(pytester.path)
    bench_env.set_responder(script(True, target="I can help with that TRANSCRIPT-MARKER"))
    pytester.runpytest("--benchmark=demo", "--evalbench-html=report.html").assert_outcomes(passed=2, failed=2)
    [summary] = read_json(bench / "results.json")
    _, found = dump_dom((pytester.path / "report.html").as_uri() + "#conv=0", tmp_path)
    assert found.text["pos-rate-tgt"] == f"{summary['positive_pass_rate']:.2f}"
    assert found.text["rate-tgt-m02"] == f"{summary['by_metric']['m02']['pass_rate']:.2f}"
    assert found.text["turn-1"].endswith("I can help with that TRANSCRIPT-MARKER")
    assert found.text["justification-m01"] == "because"
