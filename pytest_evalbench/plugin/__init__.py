"""pytest entry point (`pytest11`): options, hook specs, the public fixtures and the plugin object.

Every hook here is a line or two that delegates; the work lives in `session.py` (pytest glue) and in the
pytest-free core. Without `--benchmark` the plugin registers nothing else, so normal test runs are
unaffected and pay only for this module, `options` and `hookspecs` (standard library and pytest): the
session, the engine, pydantic models, aiohttp and openai are imported in `pytest_configure` once
`--benchmark` is given (tests/unit/test_import_cost.py).

The fixtures `evalbench_case` and `evalbench_record` can be overridden in a conftest.py like any pytest
fixture; `evalbench_record` is where the LLM work of an item is awaited (it was usually prefetched long
before the test starts).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any, cast

import pytest

from pytest_evalbench.plugin import hookspecs
from pytest_evalbench.plugin.nodes import PLUGIN_KEY, CaseItem
from pytest_evalbench.plugin.options import add_options, benchmark_hint, build_settings


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the `--benchmark` and `--evalbench-*` options."""
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Declare the `pytest_evalbench_*` hooks teams implement in conftest.py."""
    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """`--evalbench-estimate` and `--evalbench-plan` plan in one process (printed once, no worker started), also with `-n`."""
    if config.getoption("evalbench_benchmark") and (config.getoption("evalbench_estimate")
                                                    or config.getoption("evalbench_plan") is not None):
        from pytest_evalbench.plugin._compat import single_process

        single_process(config)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """`pytest --benchmark=NAME` imports the conftests of benchmarks/NAME/, not those of `testpaths`; what
    the session freezes is thawed after pytest's own cleanup."""
    from pytest_evalbench.plugin._compat import initial_benchmark_path, thaw_after_pytests_cleanup

    initial_benchmark_path(early_config)
    thaw_after_pytests_cleanup(early_config)


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    """Python's cyclic garbage collector off while the block runs, then as it was before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """With `--benchmark`, resolve settings once, register the plugin object and make every log
    record of the session safe for terminals and CI logs, whatever logger makes it.

    Importing the session's modules and building its settings allocate many objects that live as
    long as the session (modules, classes, the kinds' models): the collector is paused meanwhile and
    they go straight into its permanent generation (`gc.freeze`, as the session does again at its
    loop start; the config's last cleanup gives them back: `_compat.thaw_after_pytests_cleanup`).
    Otherwise the collections these allocations trigger walk them again and again, and so do those
    of the collection phase after: a fixed cost of every process that runs a benchmark (an xdist
    worker, a subprocess run), whatever the benchmark's size."""
    with paused_collector():
        if _configure(config):
            gc.freeze()


def _configure(config: pytest.Config) -> bool:
    """Whether a benchmark session was set up (`--benchmark` given)."""
    settings = build_settings(config)
    if settings is not None:
        from pytest_evalbench.base import safe_text
        from pytest_evalbench.plugin import xdist
        from pytest_evalbench.plugin.session import EvalbenchPlugin

        config.add_cleanup(safe_text.install())
        plugin = EvalbenchPlugin(config, settings)
        config.stash[PLUGIN_KEY] = plugin
        config.pluginmanager.register(plugin, "evalbench-session")
        xdist.register(config)
        if settings.shard:
            from pytest_evalbench.plugin.session import ShardPlugin

            config.pluginmanager.register(ShardPlugin(config, settings.shard), "evalbench-shard")
    return settings is not None


def pytest_report_header(config: pytest.Config) -> Any:
    """One line naming benchmark, models, cache mode and concurrency."""
    if PLUGIN_KEY not in config.stash:
        return None
    from pytest_evalbench.plugin.session import plugin_of

    return plugin_of(config).header()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Without `--benchmark`, collecting a benchmark directory runs nothing: say how to run it."""
    if PLUGIN_KEY in config.stash or exitstatus != pytest.ExitCode.NO_TESTS_COLLECTED:
        return
    hint = benchmark_hint(config.rootpath, [str(a) for a in config.args])
    if hint:
        terminalreporter.write_line(hint, yellow=True)


@pytest.fixture
def evalbench_case(request: pytest.FixtureRequest) -> Any:
    """The case of the current item: `ScenarioItem` (scenario, target_id, sample) or a dataset case."""
    return cast(CaseItem, request.node).case


@pytest.fixture
def evalbench_record(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The judged result of this item: conversation, score row and usage (waits for the engine)."""
    from pytest_evalbench.plugin.session import plugin_of  # loaded with --benchmark, before any item runs

    return plugin_of(request.config).books.record_for(request.node)
