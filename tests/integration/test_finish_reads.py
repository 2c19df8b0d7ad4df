"""The session finish writes this session's spooled records from their JSON: they were valid when
spooled (issue 27: a 10,000-item replay spent a fifth of its finish validating them again)."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import read_json, scenario, script, write_benchmark

from pytest_evalbench.kinds.scenarios.models import ScenarioRecord
from pytest_evalbench.testing import FakeLLMServer


@pytest.mark.parametrize("workers", [[], ["-n", "1"]])  # one worker: its records cross to the controller as with two
def test_the_finish_does_not_validate_this_sessions_records_again(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  workers: list[str]) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m01_s001_v02", "m01")],
                            generation={"turns": 1})
    bench_env.set_responder(script(True))
    typed: list[Any] = []
    real = ScenarioRecord.from_json.__func__  # type: ignore[attr-defined]

    def counted(cls: type[ScenarioRecord], data: dict[str, Any]) -> ScenarioRecord:
        typed.append(data)
        return real(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(ScenarioRecord, "from_json", classmethod(counted))
    result = pytester.runpytest("--benchmark=demo", *workers)
    result.assert_outcomes(passed=2)
    assert typed == []  # this process (the controller with -n 1) typed none of the records it wrote
    rows = read_json(bench / "runs" / "tgt" / "scores.json")
    assert [(r["id"], r["passed"]) for r in rows] == [("m01_s001_v01", True), ("m01_s001_v02", True)]
    assert [r["by_metric"]["m01"]["n_passed"] for r in read_json(bench / "results.json")] == [2]
