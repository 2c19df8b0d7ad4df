"""Flaky cases end to end: scripted judge votes per transcript give each label, in scores.json,
results.json (pass^k, pass@k) and every surface of the summary; `evalbench rejudge` re-judges the
stored transcripts without calling the target or the simulated user."""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from helpers import JUDGE, TARGET, USER, judge_says, read_json, scenario, write_benchmark

from pytest_evalbench.__main__ import main
from pytest_evalbench.cli import schemas
from pytest_evalbench.testing import FakeLLMServer, by_model

SID = re.compile(r"(m0\d_s\d{3}_v\d{2})")
# per scenario: the votes of each sample's transcript (the sample order does not matter to the labels)
PLAN: dict[str, list[list[bool]]] = {
    "m01_s001_v01": [[True, True, True]] * 3,                                  # not flaky, passes 3/3
    "m01_s001_v02": [[True, True, False], [True, True, True], [True, True, True]],  # judge: one 2-1 split
    "m01_s001_v03": [[True, True, True], [False, False, False], [True, True, True]],  # agent: 2/3 passed
    "m01_s001_v04": [[True, False, False], [True, True, True], [False, False, False]],  # both
}
EXPECTED = {"m01_s001_v01": (None, None),
            "m01_s001_v02": ("judge", "agent: 3/3 samples passed; judge: 1 of 3 transcripts split 2-1"),
            "m01_s001_v03": ("agent", "agent: 2/3 samples passed; judge: 0 of 3 transcripts split"),
            "m01_s001_v04": ("both", "agent: 1/3 samples passed; judge: 1 of 3 transcripts split 2-1")}


def voting_script(plan: dict[str, list[list[bool]]]) -> Callable[[dict[str, Any]], Any]:
    """The user names its scenario, every target reply is unique (so every sample's transcript is),
    and the judge answers the n-th vote on a transcript from the plan of its scenario."""
    lock = threading.Lock()
    counter = itertools.count()
    slots: dict[str, dict[str, int]] = {}
    votes: Counter[str] = Counter()

    def user(request: dict[str, Any]) -> str:
        found = SID.search(json.dumps(request))
        return f"Thought: ok\nMessage: I need help with {found.group(1) if found else '?'}"

    def target(request: dict[str, Any]) -> str:
        return f"Sure, reply number {next(counter)}."

    def present(request: dict[str, Any]) -> bool:
        text = request["messages"][-1]["content"]
        conversation = text.split("CONVERSATION:", 1)[1]
        sid = SID.search(conversation).group(1)  # type: ignore[union-attr]
        with lock:
            slot = slots.setdefault(sid, {}).setdefault(conversation, len(slots[sid]))
            n = votes[conversation]
            votes[conversation] += 1
        return plan[sid][slot][n]

    return by_model({USER: user, TARGET: target, JUDGE: judge_says(present)})


def flaky_bench(root: Path) -> Path:
    return write_benchmark(root, scenarios=[scenario(sid, "m01") for sid in PLAN],
                           generation={"turns": 1, "num_samples": 3, "perfunctory": False, "landmarks": True},
                           judge={"samples": 3}, gate={"mode": "thresholds"})


def roles(server: FakeLLMServer) -> Counter[str]:
    return Counter(str(r["model"]) for r in server.requests)


def test_each_flaky_label_and_pass_k_in_files_and_every_surface(pytester: pytest.Pytester,
                                                                bench_env: FakeLLMServer) -> None:
    bench = flaky_bench(pytester.path)
    bench_env.set_responder(voting_script(PLAN))
    result = pytester.runpytest("--benchmark=demo", "-p", "no:xdist", "--evalbench-cache=off",
                                "--evalbench-markdown=summary.md")
    assert roles(bench_env)[JUDGE] == 4 * 3 * 3
    scores = read_json(bench / "runs" / "tgt" / "scores.json")
    assert len(scores) == 12
    for row in scores:
        assert (row.get("flaky"), row.get("flaky_detail")) == EXPECTED[row["id"]], row["id"]
    # pass^3: only v01 and v02 pass all three samples -> 2/4; pass@3: every case passes once -> 4/4
    jsonschema.validate(scores, schemas.load("scores"))
    jsonschema.validate(read_json(bench / "results.json"), schemas.load("results"))
    entry = read_json(bench / "results.json")[0]
    assert entry["pass_k"] == {"m01": {"k": 3, "n_cases": 4, "n_excluded": 0, "pass_hat_k": 0.5, "pass_at_k": 1.0}}
    line = "pass^3 0.50, pass@3 1.00 tgt m01: over 4 cases, k = 3 samples per case"
    result.stdout.fnmatch_lines([f"*{line}*", "*flaky cases: 3 *",
                                 f"*flaky: judge tgt m01_s001_v02 (m01): {EXPECTED['m01_s001_v02'][1]}*"])
    result.stdout.no_fnmatch_line("*flaky: * tgt m01_s001_v01 *")
    markdown = (pytester.path / "summary.md").read_text()
    html = (bench / "report.html").read_text()
    for label, detail in (EXPECTED["m01_s001_v03"], EXPECTED["m01_s001_v04"]):
        assert f"flaky: {label} tgt" in markdown and detail in markdown
        assert f"flaky: {label} tgt" in html and detail in html
    assert line in markdown and line in html


def test_rejudge_calls_only_the_judge_past_the_cache_and_writes_rejudge_json(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, capsys: pytest.CaptureFixture[str]) -> None:
    bench = flaky_bench(pytester.path)
    bench_env.set_responder(voting_script(PLAN))
    pytester.runpytest("--benchmark=demo", "-p", "no:xdist")  # cache on: every original verdict is cached
    stored = read_json(bench / "runs" / "tgt" / "scores.json")
    bench_env.reset()
    bench_env.set_responder(by_model({JUDGE: judge_says(True)}))  # any target or user call would be a 404
    capsys.readouterr()
    assert main(["rejudge", "demo", "--samples", "2", "--root", str(pytester.path)]) == 0
    assert roles(bench_env) == Counter({JUDGE: 12 * 2})  # none served by the stored judgments' cache entries
    report = read_json(bench / "runs" / "tgt" / "rejudge.json")
    jsonschema.validate(report, schemas.load("rejudge"))
    assert read_json(bench / "runs" / "tgt" / "scores.json") == stored  # the run's files are untouched
    # stored majorities: v01 T T T, v02 T T T, v03 two T one F, v04 one T two F -> 9 of 12 True; the new
    # verdicts are all True: they agree with each other (1.0) and with the stored judgment on 9 of 12
    assert report["k"] == 2 and report["judges"] == [JUDGE] and report["skipped"] == 0
    assert report["by_metric"] == {"m01": {"transcripts": 12, "split": 3, "flipped": 3, "self_agreement": 1.0,
                                           "stored_agreement": 0.75}}
    noisy = {c["id"] for c in report["cases"] if c["judge_noise"]}
    assert noisy == {"m01_s001_v03", "m01_s001_v04"}
    v04 = next(c for c in report["cases"] if c["id"] == "m01_s001_v04")
    assert sorted((t["stored"], t["votes"], t["split"]) for t in v04["samples"]) == [
        (False, [True, True], True), (False, [True, True], True), (True, [True, True], False)]
    out = capsys.readouterr().out
    assert "m01: new judgments agree with each other 1.00, with the stored judgment 0.75; 3 of 12 transcripts split, " \
           "3 flipped" in out
    assert "judge noise: m01_s001_v04 (m01): 2 of 3 transcripts split" in out
    assert "llm: 24 judge requests sent by this command, 0 answered from the cache" in out
    bench_env.reset()  # the same k again replays the first rejudge's answers
    assert main(["rejudge", "demo", "--samples", "2", "--root", str(pytester.path)]) == 0
    assert roles(bench_env) == Counter()
    assert "llm: 0 judge requests sent by this command, 24 answered from the cache" in capsys.readouterr().out


def test_rejudge_errors_are_one_line(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    flaky_bench(pytester.path)
    assert main(["rejudge", "nope", "--root", str(pytester.path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evalbench rejudge: error: unknown benchmark 'nope'; available: demo") and err.count("\n") == 1
    assert main(["rejudge", "demo", "--root", str(pytester.path)]) == 2
    err = capsys.readouterr().err
    assert "no stored run to re-judge" in err and "pytest --benchmark=demo" in err and err.count("\n") == 1
    assert roles(bench_env) == Counter()


def test_rejudge_keeps_the_budget_and_writes_nothing_past_it(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    bench = flaky_bench(pytester.path)
    bench_env.set_responder(voting_script(PLAN))
    pytester.runpytest("--benchmark=demo", "-p", "no:xdist")
    spec = yaml.safe_load((bench / "benchmark.yaml").read_text())
    spec["pricing"] = {JUDGE: {"input_per_million": 0.0, "output_per_million": 1000.0}}  # a judge call: ~$1
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec))
    bench_env.reset()
    capsys.readouterr()
    assert main(["rejudge", "demo", "--max-cost", "0.5", "--root", str(pytester.path)]) == 2
    err = capsys.readouterr().err
    assert "budget exhausted" in err and "--max-cost" in err and "--evalbench-max-cost" not in err
    assert roles(bench_env) == Counter()
    assert not (bench / "runs" / "tgt" / "rejudge.json").exists()


def test_judge_noise_with_one_sample_per_case(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """num_samples 1, judge samples 3: no pass^k (k = 1), but a split transcript is still `flaky: judge`."""
    plan = {"m01_s001_v01": [[True, False, True]], "m01_s001_v02": [[False, False, False]]}
    bench = write_benchmark(pytester.path, scenarios=[scenario(sid, "m01") for sid in plan],
                            generation={"turns": 1, "num_samples": 1, "perfunctory": False, "landmarks": True},
                            judge={"samples": 3})
    bench_env.set_responder(voting_script(plan))
    result = pytester.runpytest("--benchmark=demo", "-p", "no:xdist", "--evalbench-cache=off")
    scores = {r["id"]: r for r in read_json(bench / "runs" / "tgt" / "scores.json")}
    assert scores["m01_s001_v01"]["flaky"] == "judge"
    assert scores["m01_s001_v01"]["flaky_detail"] == "agent: 1/1 samples passed; judge: 1 of 1 transcript split 2-1"
    assert "flaky" not in scores["m01_s001_v02"]
    assert "pass_k" not in read_json(bench / "results.json")[0]
    result.stdout.fnmatch_lines(["*flaky: judge tgt m01_s001_v01 (m01): *split 2-1*"])
    result.stdout.no_fnmatch_line("*pass^*")
