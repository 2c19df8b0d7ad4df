"""What the main thread does per item is what the item needs: a passed item's outcome builds no
failure message (the transcript's tail), a failed one's does (issue 27: the cached replay's cost)."""

from __future__ import annotations

import pytest
from helpers import scenario, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer

COUNTING = """
from pytest_evalbench.plugin.session import plugin_of

built = []


def pytest_collection_finish(session):
    scope = type(plugin_of(session.config).selection.kind).outcome.__globals__  # the module the kind runs in
    original = scope["failure_message"]

    def counted(record, why=None):
        built.append(record.conversation.id)
        return original(record, why)

    scope["failure_message"] = counted
    session.config.add_cleanup(lambda: scope.update(failure_message=original))


def pytest_unconfigure(config):
    print(f"\\nfailure messages built: {len(built)}")
"""


@pytest.mark.parametrize(("present", "outcome", "built"), [(True, {"passed": 3}, 0), (False, {"failed": 3}, 3)])
def test_only_failed_items_build_a_failure_message(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                   present: bool, outcome: dict[str, int], built: int) -> None:
    write_benchmark(pytester.path, scenarios=[scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 4)])
    pytester.makeconftest(COUNTING)
    bench_env.set_responder(script(present))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=off", "-s")
    result.assert_outcomes(**outcome)
    result.stdout.fnmatch_lines([f"failure messages built: {built}"])
