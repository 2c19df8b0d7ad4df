"""Every item of a data file shares one fixture closure (plugin/_compat.fixture_info): a user's
conftest fixtures (autouse, and overrides of the plugin's own) still reach every item."""

from __future__ import annotations

import pytest
from helpers import scenario, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer

CONFTEST = """
import pytest

seen = []
wrapped = []


@pytest.fixture(autouse=True)
def count_items(request):
    seen.append(request.node.name)


@pytest.fixture
def evalbench_record(evalbench_record, request):
    wrapped.append(request.node.name)
    return evalbench_record


def pytest_sessionfinish(session):
    print(f"\\nautouse saw {len(seen)} items, the override wrapped {len(wrapped)}")
"""


def test_conftest_fixtures_reach_every_item(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=[scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 4)])
    pytester.makeconftest(CONFTEST)
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=off", "-s")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*autouse saw 3 items, the override wrapped 3*"])
