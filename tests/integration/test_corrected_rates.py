"""A run with calibration.json on file shows corrected rates beside observed ones (results.json, the
summary, the terminal); `judge: {correct_rates: true}` makes the gate read them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from helpers import JUDGE, read_json, scenario, script, write_benchmark

from pytest_evalbench.cli import schemas
from pytest_evalbench.testing import FakeLLMServer

SCENARIOS = [scenario(f"m01_s00{i}_v01", "m01") for i in range(1, 5)]


def calibrate(bench: Path, confusion: dict[str, dict[str, int]], judge: str = JUDGE) -> None:
    entry = {"metric_id": "m01", "judge": judge, "n": 20, "unscored": 0, "agreement": 0.85, "kappa": 0.7,
             "kappa_ci": [0.4, 0.9], "weighting": "none", "confusion": confusion}
    (bench / "calibration.json").write_text(json.dumps([entry]))


GOOD = {"present": {"present": 9, "absent": 1}, "absent": {"present": 2, "absent": 8}}
COIN = {"present": {"present": 5, "absent": 5}, "absent": {"present": 5, "absent": 5}}


def test_corrected_rate_beside_the_observed_one(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=SCENARIOS)
    calibrate(bench, GOOD)
    # the user of m01_s001 says "help A", the others "help B"; the judge finds the behaviour in B only
    user = lambda r: f"Thought: ok\nMessage: help {'A' if 'm01_s001' in json.dumps(r) else 'B'}"  # noqa: E731
    bench_env.set_responder(script(lambda r: "help B" in json.dumps(r), user=user))  # 3 of 4 present (= passed)
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret == 1
    entry = read_json(bench / "results.json")[0]
    jsonschema.validate(read_json(bench / "results.json"), schemas.load("results"))
    # p = 0.75: (0.75 + 0.8 - 1) / 0.7 = 0.785714
    corrected = entry["by_metric"]["m01"]["corrected"]
    assert corrected["pass_rate"] == 0.7857 and corrected["judge_rows"] == 4 and corrected["undefined"] is None
    assert entry["corrected_positive"] == corrected and "corrected_negative" not in entry
    assert "corrected" not in entry["by_scenario"]["m01_s001_v01"]
    low, high = corrected["ci"]
    assert f"3/4 (0.75); corrected 0.79 [{low:.2f}, {high:.2f}]" in result.stdout.str()
    assert f"3/4 (0.75); corrected 0.79 [{low:.2f}, {high:.2f}]" in (bench / "report.html").read_text()


def test_no_calibration_no_corrected_fields(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=SCENARIOS)
    calibrate(bench, GOOD, judge="another-judge")  # calibrated for another judge: says nothing about this one
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    assert "corrected" not in json.dumps(read_json(bench / "results.json"))
    assert "; corrected" not in result.stdout.str()


@pytest.mark.parametrize("correct_rates", [False, True])
def test_gate_with_an_undefined_correction(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                           correct_rates: bool) -> None:
    bench = write_benchmark(pytester.path, scenarios=SCENARIOS, judge={"correct_rates": correct_rates},
                            gate={"mode": "thresholds"}, thresholds={"min_positive_pass_rate": 0.5})
    calibrate(bench, COIN)
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    result.stdout.fnmatch_lines(["*4/4 (1.00); corrected: undefined (sensitivity + specificity ≤ 1)*"])
    if correct_rates:
        result.stdout.fnmatch_lines(["*min_positive_pass_rate 0.50 tgt: not evaluated (corrected rate undefined: "
                                     "sensitivity + specificity ≤ 1)*"])
    else:
        result.stdout.fnmatch_lines(["*min_positive_pass_rate 0.50 tgt: 1.00 held*"])
