"""Items get their record through the `evalbench_record` fixture like any pytest fixture: a user's
conftest fixtures (autouse, and overrides of the plugin's own) and hooks reach every item."""

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


def three_items(pytester: pytest.Pytester, bench_env: FakeLLMServer, conftest: str) -> None:
    """Three scenarios whose judge finds the behaviour, and `conftest`."""
    write_benchmark(pytester.path, scenarios=[scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 4)])
    pytester.makeconftest(conftest)
    bench_env.set_responder(script(True))


def run_three(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """The three items run, uncached, output shown: all pass."""
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=off", "-s", *args)
    result.assert_outcomes(passed=3)
    return result


def test_conftest_fixtures_reach_every_item(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    three_items(pytester, bench_env, CONFTEST)
    run_three(pytester).stdout.fnmatch_lines(["*autouse saw 3 items, the override wrapped 3*"])


def test_an_override_that_raises_errors_every_item(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """A conftest `evalbench_record` that does not call the plugin's still replaces it."""
    write_benchmark(pytester.path, scenarios=[scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 3)])
    pytester.makeconftest("import pytest\n\n@pytest.fixture\ndef evalbench_record():\n"
                          "    raise RuntimeError('the override ran')\n")
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=off")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*the override ran*"])


CALLS = """
import pytest

called = []


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    called.append(pyfuncitem.name)
    return (yield)


def pytest_sessionfinish(session):
    print(f"\\npyfunc_call saw {len(called)} items")
"""


def test_a_conftest_wrapping_the_test_call_sees_every_item(pytester: pytest.Pytester,
                                                         bench_env: FakeLLMServer) -> None:
    """A conftest wrapping `pytest_pyfunc_call` sees each item's call."""
    three_items(pytester, bench_env, CALLS)
    run_three(pytester).stdout.fnmatch_lines(["*pyfunc_call saw 3 items*"])
