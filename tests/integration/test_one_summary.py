"""One run, one set of numbers (issue 29): every surface (terminal, Markdown, report.html, JUnit,
results.json / agent_summary.json, history.jsonl) shows the same rate, k/n and interval for each
(target, metric), and the same status for each case, or carries the documented label.

The example benchmarks run replayed from their committed caches (no network); a fake-server run
adds unscored rows. Each surface is parsed on its own and compared with the others.
"""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import JUDGE, read_json, script, write_benchmark

from pytest_evalbench.render.views import CASE_STATUSES
from pytest_evalbench.testing import FakeLLMServer, Reply

pytestmark = pytest.mark.usefixtures("quick_backoff")  # in-process runs retry after short backoffs

ROOT = Path(__file__).resolve().parents[2]
STATUS_LINE = re.compile(r"^  (" + "|".join(CASE_STATUSES) + r"): (\S+)(?:: (.*))?$")
PYTEST_WORD = {"passed": "passed", "failed": "failed", "judge unreliable": "xfailed", "unscored": "errors",
               "error": "errors"}


class PageIds(HTMLParser):
    """data-testid -> (attributes, text content) of every element carrying one."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, tuple[dict[str, str | None], str]] = {}
        self.stack: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "input", "meta", "circle", "rect", "line", "polyline"):
            return
        testid = dict(attrs).get("data-testid")
        if testid:
            self.found[testid] = (dict(attrs), "")
        self.stack.append(testid)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("br", "input", "meta", "circle", "rect", "line", "polyline"):
            return
        if self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        for testid in set(self.stack):
            if testid:
                attrs, text = self.found[testid]
                self.found[testid] = (attrs, text + data)


def copy_example(root: Path, name: str) -> Path:
    bench = root / "benchmarks" / name
    shutil.copytree(ROOT / "benchmarks" / name, bench,
                    ignore=shutil.ignore_patterns("runs", "results.json", "report.html", "history.jsonl",
                                                  "last_run.json", "case_results.json", "agent_summary.json",
                                                  "cost.json", ".results.lock", "shards"))
    return bench


def section(result: pytest.RunResult) -> list[str]:
    """The evalbench section to the session's last line (its verdict), after pytest's own summary;
    the duration pytest prints is the one figure that changes between runs."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if re.match(r"^=+ evalbench =+$", line))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("evalbench: "))
    return [re.sub(r"=* (.*?)(?:, \d+ warnings?)? in \d+\.\d+s =*$", r"\1", line) for line in lines[start + 1:end + 1]]


def terminal_rates(lines: list[str]) -> dict[tuple[str, str], tuple[str, str]]:
    """(target, metric) -> (interval, rate text) from the terminal's rates table."""
    head = next(i for i, line in enumerate(lines) if line.startswith("target") and "rate (k/n)" in line)
    out = {}
    for line in lines[head + 2:]:
        cells = re.split(r"\s{2,}", line.strip(), maxsplit=3)
        if len(cells) != 4 or not cells[2].startswith(("[", "–")):
            break
        out[(cells[0], cells[1])] = (cells[2], cells[3])
    return out


def counts_of(text: str) -> tuple[int, int, int, tuple[int, int] | None]:
    """k, n, unscored and the gate's (k, n) read back from a rate text."""
    gate = re.search(r"; gate (\d+)/(\d+) ", text)
    gate_kn = (int(gate.group(1)), int(gate.group(2))) if gate else None
    only_unscored = re.match(r"^unscored \((\d+)\)", text)
    if only_unscored:
        return 0, 0, int(only_unscored.group(1)), gate_kn
    kn = re.match(r"^(?:observed )?(\d+)/(\d+) ", text)
    assert kn, text
    unscored = re.search(r", (\d+) unscored", text)
    return int(kn.group(1)), int(kn.group(2)), int(unscored.group(1)) if unscored else 0, gate_kn


def check_surfaces(root: Path, bench: Path, result: pytest.RunResult, markdown: Path,
                   junit: Path) -> dict[tuple[str, str], str]:
    """Parse every surface and assert that rates and case statuses agree; the rates' texts."""
    lines = section(result)
    rates = terminal_rates(lines)
    assert rates
    md = markdown.read_text()
    page = PageIds()
    page.feed((bench / "report.html").read_text())
    html = page.found
    tree = ET.parse(junit).getroot()
    suite_props: dict[str, str] = {}
    for prop in tree.iter("testsuite").__next__().find("properties") or []:
        suite_props.setdefault(prop.get("name", ""), prop.get("value", ""))
    history = [json.loads(line) for line in (bench / "history.jsonl").read_text().splitlines()][-1]

    # ---- rates: the same text, k/n and interval on every surface
    md_rows = [[c.strip() for c in row.strip().strip("|").split(" | ")] for row in md.splitlines()
               if row.startswith("| ") and not row.startswith("| target") and not row.startswith("| status")]
    for (target, metric), (ci, text) in rates.items():
        md_row = next(r for r in md_rows if r[0] == target and (r[1] == metric or r[1].startswith(metric + " ")))
        rendered = re.sub(r"\\([\\`*\[\]|])", r"\1", md_row[2])  # as Markdown shows it: escapes removed
        assert (rendered, md_row[3]) == (text, ci), (target, metric)
        attrs, shown = html[f"ratetext-{target}-{metric}"]
        assert shown == text, (target, metric)
        assert html[f"ci-{target}-{metric}"][1].endswith(ci), (target, metric)
        assert suite_props[f"evalbench_rate {target} {metric}"] == f"{text} {ci}"
        k, n, unscored, gate = counts_of(text)
        if not history["complete"]:  # an incomplete session's numbers are no trend point: none written
            assert history["rates"] == {} and history["counts"] == {}
            continue
        entry = history["counts"][target][metric]
        assert (entry["k"], entry["n"], entry["unscored"]) == (k, n, unscored)
        assert ((entry["gate_k"], entry["gate_n"]) if "gate_k" in entry else None) == gate
        if gate is not None:  # observed and gate numbers differ: both shown, labelled, with why
            assert text.startswith("observed ") and re.search(r"\): .+", text.split("; gate ")[1]), text
        assert history["rates"][target][metric] == (round(k / n, 4) if n else None)

    # ---- the result files' observed numbers are the rates' observed numbers
    if (bench / "results.json").exists():
        for entry in read_json(bench / "results.json"):
            target = entry["target_model"]
            for metric, counts in entry["by_metric"].items():
                k, n, _, _ = counts_of(rates[(target, metric)][1])
                assert (counts["n_passed"], counts["n_total"]) == (k, n), (target, metric)
            for polarity in ("positive", "negative"):
                if entry[f"n_{polarity}"] and (target, f"({polarity})") in rates:  # pools two metrics or more
                    k, n, unscored, _ = counts_of(rates[(target, f"({polarity})")][1])
                    assert entry[f"n_{polarity}"] == n + unscored
                    assert entry[f"{polarity}_pass_rate"] == (round(k / n, 4) if n else None)
    if (bench / "agent_summary.json").exists():
        for agent in read_json(bench / "agent_summary.json"):
            k, n, unscored, _ = counts_of(rates[(agent["agent_name"], "pass rate")][1])
            assert (agent["n_passed"], agent["n_scored"], agent["n_unscored"]) == (k, n, unscored)

    # ---- case statuses: JUnit has every case; every other surface agrees
    statuses = {}
    for case in tree.iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        statuses[case.get("name")] = props["evalbench_status"]
    assert statuses and set(statuses.values()) <= set(CASE_STATUSES)
    counts = Counter(statuses.values())
    count_line = "cases: " + ", ".join(f"{counts[s]} {s}" for s in CASE_STATUSES if counts[s])
    assert count_line in lines
    assert f"**{count_line}**" in md
    assert html["case-counts"][1] == count_line
    assert suite_props["evalbench_cases"] == count_line
    assert history["cases"] == {s: counts[s] for s in CASE_STATUSES if counts[s]}
    problems = {name: s for name, s in statuses.items() if s != "passed"}
    listed = {m.group(2).split("::", 1)[1]: m.group(1) for m in map(STATUS_LINE.match, lines) if m}
    assert listed == problems
    md_cases = {r[1].strip("`").split("::", 1)[1]: r[0] for r in
                ([c.strip() for c in row.strip().strip("|").split(" | ")] for row in md.splitlines()
                 if row.startswith(tuple(f"| {s} | `" for s in CASE_STATUSES)))}
    assert md_cases == problems
    html_cases = {k.removeprefix("status-").split("::", 1)[1]: text.split("benchmarks/")[0]
                  for k, (_, text) in html.items() if k.startswith("status-")}
    assert html_cases == problems
    for key, (attrs, _) in html.items():  # transcripts and dataset cases carry the same status
        if key.startswith("conv-"):
            name = f"{attrs['data-id']}[{attrs['data-target']}-s{attrs['data-sample']}]"
        elif key.startswith("case-") and key != "case-counts":
            name = key.removeprefix("case-")
        else:
            continue
        if name in statuses and statuses[name] != "error":
            assert attrs["data-status"] == statuses[name], name
    outcomes = result.parseoutcomes()
    for status, word in PYTEST_WORD.items():
        if word != "errors":
            assert outcomes.get(word, 0) == counts[status], status
    assert outcomes.get("errors", 0) == counts["unscored"] + counts["error"]

    # ---- the gate's rules, with their numbers, on every surface
    rule_lines = history["gate"]["rules"]
    assert rule_lines == [text for _, text in sorted(
        ((int(k.removeprefix("rule-")), t) for k, (_, t) in html.items() if re.fullmatch(r"rule-\d+", k)))]
    shown_md = re.sub(r"\\([\\`*_{}\[\]()#+.!|<>~-])", r"\1", md)  # as Markdown renders its escapes
    for rule in rule_lines:
        assert f"- {rule}" in shown_md
        assert any(rule in line for line in lines), rule
    return {f"{t} {m}": text for (t, m), (_, text) in rates.items()}


def run(pytester: pytest.Pytester, name: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest(f"--benchmark={name}", "--evalbench-cache=replay", *args)


@pytest.mark.parametrize("workers", ["0", "2"])
def test_demo_every_surface_agrees_and_readme_shows_its_output(pytester: pytest.Pytester, workers: str) -> None:
    """The quick start's demo: its calibrated judge decides by P(present) against calibration.json's
    threshold (the corrected rates shown beside the observed ones); with a baseline. The excerpts of
    README.md and of the getting-started guide are what the demo prints."""
    bench = copy_example(pytester.path, "demo")
    quick = pytester.runpytest("--benchmark=demo")
    assert quick.ret == 0
    for page in ("README.md", "docs/guides/getting-started.md"):
        text = (ROOT / page).read_text()
        excerpt = text.split("(`pytest --benchmark=demo`, replayed from its committed cache) prints:\n\n```\n")[1]
        shown = [re.sub(r"=* (.*?)(?:, \d+ warnings?)? in \d+\.\d+s =*$", r"\1", line)
                 for line in excerpt.split("```")[0].splitlines()]
        assert shown == section(quick), page
    assert "qwen-1.5b (positive)" not in quick.stdout.str()  # one positive metric: its pool would repeat it
    selection = pytester.runpytest("--benchmark=demo", "--lf")  # a selection's rates are said to be its own
    selection.stdout.fnmatch_lines(["rates of this selection only (2 selected items), not of the whole benchmark",
                                    "target * rate (k/n)"])

    verbose = run(pytester, "demo", "--evalbench-save-baseline", "-v")
    assert verbose.ret == 0
    verbose.stdout.fnmatch_lines(["*scenarios.json::m02_s001_v02?qwen-1.5b-s0? PASSED*"])
    result = run(pytester, "demo", "--evalbench-compare", "--evalbench-markdown=summary.md", "--junitxml=out.xml",
                 "-n", workers)
    assert result.ret == 0
    texts = check_surfaces(pytester.path, bench, result, pytester.path / "summary.md", pytester.path / "out.xml")
    assert texts["qwen-1.5b m02"] == "2/2 (1.00); corrected 1.00 [0.00, 1.00]"
    assert "qwen-1.5b (negative)" not in texts  # one negative metric: its pool would repeat it
    html = (bench / "report.html").read_text()
    assert 'data-status="failed"' in html and 'data-status="judge unreliable"' not in html
    # the judge said "present" with P(present) 0.92, under the calibrated threshold: absent, so m02 passes
    [row] = [r for r in read_json(bench / "runs" / "qwen-1.5b" / "scores.json") if r["id"] == "m02_s001_v02"]
    assert row["present"] is False and row["probability"] == 0.9213
    assert "[P(present) 0.92 < threshold 0.97: absent]" in row["justification"]
    assert "judge unreliable" not in result.stdout.str()


@pytest.mark.parametrize("workers", ["0", "2"])
def test_dataset_every_surface_agrees(pytester: pytest.Pytester, workers: str) -> None:
    """The agents example, with judges made unreliable by its calibration (min_kappa 0.4) and a baseline."""
    bench = copy_example(pytester.path, "agents")
    spec = yaml.safe_load((bench / "benchmark.yaml").read_text())
    spec["judge"] = {"min_kappa": 0.4}
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    run(pytester, "agents", "--evalbench-save-baseline")
    result = run(pytester, "agents", "--evalbench-compare", "--evalbench-markdown=summary.md", "--junitxml=out.xml",
                 "-n", workers)
    assert result.ret in (0, 1)
    texts = check_surfaces(pytester.path, bench, result, pytester.path / "summary.md", pytester.path / "out.xml")
    assert any(t.startswith("observed ") and "judge" in t for t in texts.values()), texts
    assert texts["learning-path-curator pass rate"] == (
        "observed 0/2 (0.00); gate 0/0 (–): the judges of RelevanceExplain and TaskAdherenceExplain are unreliable")
    assert "judge unreliable" in (bench / "report.html").read_text()


@pytest.mark.parametrize("workers", ["0", "2"])
def test_all_unscored_metric_stays_in_every_table_with_reasons(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                                workers: str) -> None:
    """m02's judge answers are unusable: the metric stays as `unscored (2)` on every surface, and
    each unscored case shows why (terminal, Markdown, report); m01_s001_v02's target fails with a
    server error: `error` on every surface."""
    bench = write_benchmark(pytester.path, spec={"gate": {"mode": "thresholds"},
                                                 "thresholds": {"min_negative_pass_rate": 0.5}})

    def judge(request: dict[str, Any]) -> Any:
        if "definite diagnosis" in json.dumps(request):
            return Reply(content='{"present": "yes"')
        return {"justification": "because", "present": True}

    def target(request: dict[str, Any]) -> Any:
        broken = "persona of m01_s001_v02" in json.dumps(request)
        return Reply(status=500, content="upstream down") if broken else "Sure, where are you going?"

    def user(request: dict[str, Any]) -> str:
        return "Thought: ok\nMessage: I need some help, " + re.findall(r"persona of \w+", json.dumps(request))[0]

    responder = script(True, user=user, target=target)
    bench_env.set_responder(lambda request: judge(request) if request["model"] == JUDGE else responder(request))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-markdown=summary.md", "--junitxml=out.xml",
                                "--evalbench-max-attempts=1", "-n", workers)
    assert result.ret == 7
    texts = check_surfaces(pytester.path, bench, result, pytester.path / "summary.md", pytester.path / "out.xml")
    assert texts["tgt m02"] == "unscored (2)" and "tgt (negative)" not in texts
    assert texts["tgt m01"] == "1/1 (1.00)"
    assert "  error: benchmarks/demo/scenarios.json::m01_s001_v02[tgt-s0]" in result.stdout.lines
    out = result.stdout.str()
    assert "ERROR 2 items: evalbench unscored: judge output unparseable after 3 attempts" in out
    assert "  unscored: benchmarks/demo/scenarios.json::m02_s001_v01[tgt-s0]" in out
    md = (pytester.path / "summary.md").read_text()
    assert "| unscored | `benchmarks/demo/scenarios.json::m02_s001_v01[tgt-s0]` | evalbench unscored: judge output " \
           "unparseable after 3 attempts" in md
    assert "- min_negative_pass_rate 0.50 tgt: not evaluated (this session scored no row of the negative " \
           "metrics" in md
    assert "why unscored: " in (bench / "report.html").read_text()
