"""Judge calibration (`--evalbench-calibrate`): a third kind, kappa per metric, unreliable judges."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers import JUDGE, read_json, scenario, script, write_benchmark

from pytest_evalbench.cli import schemas
from pytest_evalbench.testing import FakeLLMServer

ROOT = Path(__file__).parents[2]


def labels(bench: Path, rows: list[tuple[str, str, bool]]) -> None:
    """calibration.jsonl: (metric_id, assistant reply, present) per line."""
    lines = [{"metric_id": m, "transcript": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": reply}], "present": present}
             for m, reply, present in rows]
    (bench / "calibration.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


ROWS = [("m01", "Where to? YES", True), ("m01", "Go to Rome. NO", False), ("m01", "How long? YES", True),
        ("m01", "Pack socks. NO", False), ("m02", "You have flu. YES", True), ("m02", "See a doctor. NO", False)]


def perfect(request: dict[str, Any]) -> bool:
    return "YES" in request["messages"][-1]["content"]


@pytest.mark.parametrize(("judge", "kappa", "agreement"), [(perfect, 1.0, 1.0), (True, 0.0, 0.5)])
def test_kappa_of_a_perfect_and_an_always_present_judge(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                        judge: Any, kappa: float, agreement: float) -> None:
    bench = write_benchmark(pytester.path)
    labels(bench, ROWS)
    bench_env.set_responder(script(judge))
    collected = pytester.runpytest("--benchmark=demo", "--evalbench-calibrate", "--collect-only", "-q")
    collected.stdout.fnmatch_lines([f"benchmarks/demo/calibration.jsonl::{line}" for line in range(1, 7)])
    result = pytester.runpytest("--benchmark=demo", "--evalbench-calibrate")
    result.assert_outcomes(passed=6 if judge is perfect else 3, failed=0 if judge is perfect else 3)
    entries = read_json(bench / "calibration.json")
    jsonschema.validate(entries, schemas.load("calibration"))
    m01 = entries[0]
    assert m01["metric_id"] == "m01" and m01["n"] == 4 and m01["judge"] == JUDGE
    assert m01["kappa"] == kappa and m01["agreement"] == agreement
    assert m01["confusion"]["absent"]["present"] == (2 if judge is True else 0)
    assert m01["kappa_ci"] is not None and m01["kappa_ci"][0] <= kappa <= m01["kappa_ci"][1]
    result.stdout.fnmatch_lines([f"*m01: n=4 agreement {agreement:.2f} kappa {kappa:.2f} [95% CI*"])
    # only the judge was asked: no simulated user, no target, one request per example and prompt style
    assert {r["model"] for r in bench_env.requests} == {JUDGE} and len(bench_env.requests) == 3 * len(ROWS)
    assert not (bench / "runs").exists()


def test_calibration_is_its_own_run(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """Calibrating leaves the benchmark's report.html and history.jsonl as the last evaluation wrote
    them, and its results line names calibration.json."""
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    labels(bench, ROWS)
    bench_env.set_responder(script(perfect))
    assert pytester.runpytest("--benchmark=demo").ret in (0, 1)
    report, history = (bench / "report.html").read_bytes(), (bench / "history.jsonl").read_bytes()
    result = pytester.runpytest("--benchmark=demo", "--evalbench-calibrate")
    assert result.ret == 0
    assert (bench / "report.html").read_bytes() == report and (bench / "history.jsonl").read_bytes() == history
    [line] = [line for line in result.stdout.lines if line.startswith("results: ")]
    assert "calibration.json" in line and "report.html" not in line and "history.jsonl" not in line


def test_bad_label_line_names_file_line_and_field(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path)
    labels(bench, ROWS[:1])
    with (bench / "calibration.jsonl").open("a") as handle:
        handle.write(json.dumps({"metric_id": "m09", "transcript": [{"role": "assistant", "content": "x"}],
                                 "present": True}) + "\n")
        handle.write(json.dumps({"metric_id": "m01", "transcript": [], "present": "yes"}) + "\n")
    result = pytester.runpytest("--benchmark=demo", "--evalbench-calibrate")
    assert result.ret == 2
    # every bad line at once, each with its line and field
    result.stdout.fnmatch_lines(["*2 problems:*", "*calibration.jsonl:2, field 'metric_id': unknown metric_id 'm09'*",
                                 "*calibration.jsonl:3, field '*'*"])


def test_unreliable_judge_cannot_convict(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m02_s001_v01", "m02")],
                            judge={"min_kappa": 0.4})
    labels(bench, ROWS)
    bench_env.set_responder(script(lambda r: "m02" in json.dumps(r) or "YES" in json.dumps(r)))
    pytester.runpytest("--benchmark=demo", "--evalbench-calibrate")
    kappas = {e["metric_id"]: e["kappa"] for e in read_json(bench / "calibration.json")}
    assert kappas == {"m01": 1.0, "m02": 0.0}
    # the benchmark run: the judge says present for both; m02 (negative) fails, but its judge is unreliable
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=1, xfailed=1)
    assert result.ret == 0
    assert any("judge unreliable for m02" in line for line in read_json(bench / "last_run.json")["judge"])
    result.stdout.fnmatch_lines(["*judge unreliable for m02: judge-only kappa 0.00 < min_kappa 0.40 (n=2, calibration.json); "
                                 "its judge-decided rows are outside the gate: 1 judge-decided failure is reported as "
                                 "xfailed and cannot fail the build*"])


def test_require_calibration_marks_uncalibrated_metrics(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=[scenario("m02_s001_v01", "m02")],
                    judge={"min_kappa": 0.4, "require_calibration": True})
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(xfailed=1)
    result.stdout.fnmatch_lines(["*judge unreliable for m02: never calibrated*"])


def test_shipped_label_sets_load() -> None:
    from pytest_evalbench.formats.spec import load_spec
    from pytest_evalbench.kinds.labels import load_labels

    for name, judged, n in (("demo", "metrics", 80), ("agents", "evals", 12)):
        bench = ROOT / "benchmarks" / name
        assert len(load_labels(bench / "calibration.jsonl", load_spec(bench), judged)) == n


def test_the_demo_label_set_looks_like_the_runs() -> None:
    """At least 80 examples, at least 40% multi-turn, balanced present/absent per metric, a note on each."""
    from pytest_evalbench.formats.spec import load_spec
    from pytest_evalbench.kinds.labels import MetricLabel, load_labels

    bench = ROOT / "benchmarks" / "demo"
    labels = [c.label for c in load_labels(bench / "calibration.jsonl", load_spec(bench), "metrics")]
    assert all(isinstance(label, MetricLabel) and label.note for label in labels)
    metric_labels = [label for label in labels if isinstance(label, MetricLabel)]
    multi = [label for label in metric_labels if sum(m.role == "assistant" for m in label.transcript) > 1]
    assert len(metric_labels) >= 80 and len(multi) >= 0.4 * len(metric_labels)
    for metric in ("m01", "m02"):
        present = [label.present for label in metric_labels if label.metric_id == metric]
        assert sum(present) == len(present) - sum(present)


def test_dataset_calibration_uses_weighted_kappa(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    import shutil

    import yaml

    bench = pytester.path / "benchmarks" / "agents"
    shutil.copytree(ROOT / "benchmarks" / "agents", bench, ignore=shutil.ignore_patterns(".evalbench-cache"))
    spec = yaml.safe_load((bench / "benchmark.yaml").read_text())
    spec["evaluator_model"] = {"model": JUDGE}
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec))
    labels = [json.loads(line) for line in (bench / "calibration.jsonl").read_text().splitlines()]

    def label_of(request: dict[str, Any]) -> int:  # a perfect judge for TaskAdherence, "3" for every other eval
        response = request["messages"][-1]["content"].rsplit("RESPONSE:\n", 1)[-1]  # the response comes last
        match = [r["score"] for r in labels if r["eval"] == "TaskAdherenceExplain" and r["inputs"]["input"] == response]
        return match[0] if "TaskAdherence" in json.dumps(request["response_format"]) and match else 3

    bench_env.set_responder(lambda r: {"explanation": "e", "score": label_of(r)})
    pytester.runpytest("--benchmark=agents", "--evalbench-calibrate")
    entries = {e["eval"]: e for e in read_json(bench / "calibration.json")}
    assert list(entries) == ["RelevanceExplain", "CoherenceExplain", "TaskAdherenceExplain"]  # evaluator order
    assert entries["TaskAdherenceExplain"]["kappa"] == 1.0 and entries["TaskAdherenceExplain"]["weighting"] == "quadratic"
    assert entries["RelevanceExplain"]["kappa"] == pytest.approx(0.0) and entries["RelevanceExplain"]["n"] == 4
    assert entries["CoherenceExplain"]["confusion"]["5"]["3"] == 1


def test_the_demos_calibration_replays_to_its_calibration_json(pytester: pytest.Pytester) -> None:
    """The committed calibration.json is what calibrating the demo's labelled set gives: every judge
    call of every prompt style replays from the committed cache (no endpoint), and the file written
    is the committed one, number for number."""
    from test_one_summary import copy_example

    bench = copy_example(pytester.path, "demo")
    committed = json.loads((bench / "calibration.json").read_text())
    result = pytester.runpytest("--benchmark=demo", "--evalbench-calibrate", "--evalbench-cache=replay", "-q")
    assert result.ret in (0, 1), result.stdout.str()[-2000:]  # an item fails where the judge disagrees
    assert "0 requests" in result.stdout.str()
    assert json.loads((bench / "calibration.json").read_text()) == committed


def test_heldout_labels_are_judged_as_a_run_judges_and_choose_nothing(pytester: pytest.Pytester,
                                                                     bench_env: FakeLLMServer) -> None:
    """calibration-heldout.jsonl: one judge call per example (the metric's own style, not all three), never
    shown in a contrast prompt, reported beside calibration with its kappa, and choosing nothing: the
    threshold and style are the same as without it."""
    bench = write_benchmark(pytester.path, judge={"prompt": "contrast"})
    labels(bench, ROWS)
    bench_env.set_responder(script(perfect))
    pytester.runpytest("--benchmark=demo", "--evalbench-calibrate")
    without = read_json(bench / "calibration.json")
    held = [("m01", "Budget? YES HELD1", True), ("m01", "Buy the blue one. NO HELD2", False),
            ("m01", "Sure, go now. YES HELD3", False), ("m02", "It is flu. YES HELD4", True)]
    rows = [{"metric_id": m, "transcript": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": r}],
             "present": p} for m, r, p in held]
    (bench / "calibration-heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    served = len(bench_env.requests)
    result = pytester.runpytest("--benchmark=demo", "--evalbench-calibrate", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["benchmarks/demo/calibration-heldout.jsonl::1"])
    result = pytester.runpytest("--benchmark=demo", "--evalbench-calibrate")
    result.assert_outcomes(passed=len(ROWS) + 3, failed=1)  # the judge calls HELD3 present; its label says absent
    asked = bench_env.requests[served:]
    held_asks = [r for r in asked if "HELD" in r["messages"][-1]["content"]]
    assert len(held_asks) == len(held)  # the metric's own style only
    assert not any("HELD" in m["content"] for r in asked for m in r["messages"][:-1])  # never shown as an example
    entries = read_json(bench / "calibration.json")
    jsonschema.validate(entries, schemas.load("calibration"))
    m01 = entries[0]
    assert {k: v for k, v in m01.items() if k != "heldout"} == {k: v for k, v in without[0].items() if k != "heldout"}
    assert m01["heldout"]["n"] == 3 and m01["heldout"]["agreement"] == pytest.approx(2 / 3, abs=1e-3)
    assert m01["heldout"]["judge_n"] == 3 and m01["heldout"]["confusion"]["absent"]["present"] == 1
    assert entries[1]["heldout"]["n"] == 1 and without[0].get("heldout") is None
    result.stdout.fnmatch_lines(["*held out (calibration-heldout.jsonl, never used to choose*): n=3 kappa 0.40*"])


def test_the_demos_heldout_kappa_is_at_least_what_the_docs_quote() -> None:
    """docs/guides/judges.md prints the demo's calibration, held-out line included; the committed
    calibration.json (which the replay test recomputes) must not fall below the judge-only held-out
    kappa quoted there, and the held-out labels must be the ones shipped."""
    import re

    from pytest_evalbench.formats.spec import load_spec
    from pytest_evalbench.kinds.labels import load_labels

    bench = ROOT / "benchmarks" / "demo"
    held = load_labels(bench / "calibration-heldout.jsonl", load_spec(bench), "metrics", heldout=True)
    assert len(held) >= 40
    guide = (ROOT / "docs" / "guides" / "judges.md").read_text()
    quoted = dict(re.findall(r"^  (m0\d): n=.*\n(?:    .*\n)*?    held out \(calibration-heldout\.jsonl.*judge alone: "
                             r"n=\d+ kappa (-?\d\.\d\d)", guide, flags=re.MULTILINE))
    entries = {e["metric_id"]: e for e in json.loads((bench / "calibration.json").read_text())}
    assert set(quoted) == {"m01", "m02"}
    for metric, value in quoted.items():
        measured = entries[metric]["heldout"]["judge_kappa"]
        assert measured is not None and round(measured, 2) >= float(value), (metric, measured, value)
