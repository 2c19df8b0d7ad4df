"""Hooks that pytest-evalbench calls and teams implement in their conftest.py.

All are declared through `pytest_addhooks`; implement them like any pytest hook (plain functions
named as below in a conftest.py or plugin). Targets are made in every process (xdist workers
included); row and result hooks run where the row is judged and on the controller respectively.
"""

from __future__ import annotations

from typing import Any

import pytest
from pluggy import HookspecMarker

hookspec = HookspecMarker("pytest")


@hookspec(firstresult=True)
def pytest_evalbench_make_target(config: pytest.Config, target: Any) -> Any:
    """Return the team's own app for a target of benchmark.yaml, or None to use its `model`.

    `target` is the `TargetConfig` (id, model, system_prompt, params, ...). The returned object is
    called with the conversation so far (a list of `{"role", "content"}` dicts, user/assistant
    only) and returns the reply: a `str`, a `pytest_evalbench.TargetReply`, or a dict
    `{"content": str, "tool_calls": [{"tool", "arguments", "outcome"?}]}`. Sync and async
    callables both work. Exceptions it raises make that item ERROR with the app's traceback.
    """


@hookspec
def pytest_evalbench_argument_matchers(config: pytest.Config) -> Any:
    """Return named argument matchers for trajectory checks: `{name: matcher}`.

    A trajectory check names one as its `arguments` or in `per_tool`; it is called as
    `matcher(expected_arguments, made_arguments)` and returns True when they fit (anything else, or
    an exception, is a configuration error naming the matcher). Every implementation's mapping is
    merged; two that supply the same name are an error.
    """


@hookspec
def pytest_evalbench_judged_row(config: pytest.Config, row: dict[str, Any], record: dict[str, Any]) -> None:
    """Inspect or adjust a judged score row before it is recorded (runs where the item ran).

    `row` is the scores.json row (mutable: add nothing outside the documented fields); `record`
    holds the conversation and usage (both as JSON). `passed`/`score` are null here: they are
    derived from `present`, once, after this hook (so changing `present` decides them).
    """


@hookspec
def pytest_evalbench_results(config: pytest.Config, benchmark: str, results: list[dict[str, Any]],
                             records: list[dict[str, Any]]) -> None:
    """Receive the aggregated results.json entries (controller only), e.g. to publish them.

    `records` are this session's per-item records (conversation, score, usage).
    """
