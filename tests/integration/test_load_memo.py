"""A session that reads the same scenarios.json under the same benchmark.yaml and code takes its rows
from the load memo instead of parsing and validating every row again (issue 27: a third of a cached
10,000-item replay's start); any change of the file loads it as usual, errors and warnings included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import scenario, script, write_benchmark

from pytest_evalbench.scenarios import kind as scenario_kind
from pytest_evalbench.scenarios.load_memo import memo_path
from pytest_evalbench.testing import FakeLLMServer

ROWS = [scenario("m01_s001_v01", "m01"), scenario("m01_s002_v01", "m01", note="kept")]


@pytest.fixture
def bench(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> Path:
    bench_env.set_responder(script(True))
    return write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every full load of scenarios.json in this process."""
    seen: list[str] = []
    real = scenario_kind.iter_scenarios

    def counted(bench_dir: Path, spec: Any) -> Any:
        seen.append(bench_dir.name)
        return real(bench_dir, spec)

    monkeypatch.setattr(scenario_kind, "iter_scenarios", counted)
    return seen


def memo(bench: Path) -> Path:
    return memo_path(bench / ".evalbench-cache", bench / "scenarios.json")


def test_the_same_file_is_not_loaded_again(pytester: pytest.Pytester, bench: Path, loads: list[str]) -> None:
    first = pytester.runpytest("--benchmark=demo", "--collect-only", "-q")
    assert loads == ["demo"] and not memo(bench).exists()  # a session that runs no item writes no memo
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=2)
    assert loads == ["demo", "demo"] and memo(bench).is_file()
    second = pytester.runpytest("--benchmark=demo", "--collect-only", "-q")
    assert loads == ["demo", "demo"]  # the rows came from the memo
    ids = [line for line in first.outlines if "::" in line]
    assert ids and [line for line in second.outlines if "::" in line] == ids
    for result in (first, second):  # the load's warning is given again
        result.stdout.fnmatch_lines(["*scenarios.json: unknown key kept and ignored: note (in 1 row, first row 2)*"])
    pytester.runpytest("--benchmark=demo", "-k", "s002").assert_outcomes(passed=1)  # -k reads the restored rows
    assert loads == ["demo", "demo"]


def test_an_edited_file_is_loaded_again(pytester: pytest.Pytester, bench: Path, loads: list[str]) -> None:
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=2)
    (bench / "scenarios.json").write_text(json.dumps([*ROWS, scenario("m01_s003_v01", "m01")]))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=3)
    assert loads == ["demo", "demo"]
    (bench / "scenarios.json").write_text(json.dumps([*ROWS, scenario("m01_s003_v01", "nope")]))
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*scenarios.json, row 3 (id m01_s003_v01), field 'metric_id': unknown metric id 'nope'*"])


def test_a_changed_benchmark_yaml_loads_the_file_again(pytester: pytest.Pytester, bench: Path,
                                                       loads: list[str]) -> None:
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=2)
    write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1}, metrics=[
        {"id": "m01", "name": "Renamed", "definition": "asks", "type": "positive"}])
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=2)
    assert loads == ["demo", "demo"]
    names = {r["metric_name"] for r in json.loads((bench / "runs" / "tgt" / "scores.json").read_text())}
    assert names == {"Renamed"}


def test_benchmarks_sharing_a_cache_directory_keep_a_memo_each(pytester: pytest.Pytester, bench: Path,
                                                               loads: list[str]) -> None:
    other = write_benchmark(pytester.path, "other", scenarios=ROWS[:1], generation={"turns": 1})
    shared = pytester.path / "shared-cache"
    for name in ("demo", "other", "demo", "other"):
        pytester.runpytest(f"--benchmark={name}", f"--evalbench-cache-dir={shared}").assert_outcomes(
            passed=2 if name == "demo" else 1)
    assert loads == ["demo", "other"]  # the second session of each read its own memo
    assert memo_path(shared, bench / "scenarios.json") != memo_path(shared, other / "scenarios.json")
    assert len(list((shared / ".loads").glob("*.load"))) == 2


@pytest.mark.parametrize("damage", ["garbage\n", "truncate"])
def test_a_damaged_memo_is_a_miss(pytester: pytest.Pytester, bench: Path, loads: list[str], damage: str) -> None:
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=2)
    path = memo(bench)
    path.write_text(damage if damage != "truncate" else path.read_text()[:-20])
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=2)
    assert loads == ["demo", "demo"]


def test_without_the_cache_there_is_no_memo(pytester: pytest.Pytester, bench: Path, loads: list[str]) -> None:
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=off").assert_outcomes(passed=2)
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=off").assert_outcomes(passed=2)
    assert loads == ["demo", "demo"] and not memo(bench).exists()


def test_a_memo_is_never_written_through_a_link(pytester: pytest.Pytester, bench: Path, tmp_path_factory: Any) -> None:
    outside = tmp_path_factory.mktemp("outside")
    (bench / ".evalbench-cache").mkdir()
    (bench / ".evalbench-cache" / ".loads").symlink_to(outside, target_is_directory=True)
    result = pytester.runpytest("--benchmark=demo")  # as a link of the cache's entry directories: before any call
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*.evalbench-cache/.loads: resolves to*outside the benchmark directory*"])
    assert list(outside.iterdir()) == []


def test_rows_handed_over_are_taken_as_loaded_and_anything_else_loads_the_file(tmp_path: Path) -> None:
    # what an xdist controller hands its workers (`pack_rows`): its rows and the load's warnings
    from pytest_evalbench.errors import EvalbenchWarning
    from pytest_evalbench.scenarios.load_memo import load_rows, pack_rows
    from pytest_evalbench.scenarios.models import Scenario
    from pytest_evalbench.scenarios.runner import StoredScenario

    loaded = [StoredScenario(Scenario.model_validate(row)) for row in ROWS]
    handed = pack_rows(loaded, [("scenarios.json: unknown key kept and ignored: note", "scenarios.json", 1)])
    parsed: list[str] = []

    def load() -> list[StoredScenario]:
        parsed.append("file")
        return loaded

    with pytest.warns(EvalbenchWarning, match="unknown key kept and ignored: note"):
        rows, remember = load_rows(tmp_path / "scenarios.json", None, tmp_path, False, False, load, handed)  # type: ignore[arg-type]
    assert parsed == [] and remember is None
    assert [(r.id, r.metric_id, r.metric_type, r.demographic, r.row_json) for r in rows] == [
        (r.id, r.metric_id, r.metric_type, r.demographic, r.row_json) for r in loaded]
    for damaged in ("", "garbage", handed[:-5], '{"rows": [[1, 2]]}'):
        rows, _ = load_rows(tmp_path / "scenarios.json", None, tmp_path, False, False, load, damaged)  # type: ignore[arg-type]
        assert rows == loaded
    assert parsed == ["file"] * 4
