"""Every private or undocumented pytest/xdist attribute and behaviour the plugin relies on, behind
one named function each. Nothing else in the package touches them (tests/unit/test_compat.py
checks the AST), so a pytest or xdist release that moves one breaks here, in one place.

Each function says why it is needed and which versions it was checked on. Supported range (pyproject):
pytest >= 8.0 (latest checked: 9.2.0), pytest-xdist >= 3.5 (latest checked: 3.8.0, execnet 2.1).
"Checked" means run by the suite on 9.2.0/3.8.0 and read in the 8.0.0/3.5.0 sources.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol, cast

import pytest

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr, Traceback

    from pytest_evalbench.render.progress import LineWriter


# ---------------------------------------------------------------------- items (collection)
def fixture_info(node: pytest.Collector, func: Callable[..., Any]) -> Any:
    """The fixture closure of `func` seen from `node`, to hand to items of the node
    (`pytest.Function(fixtureinfo=...)`), as pytest's own parametrization hands one to every item
    of a function definition. Private: `Session._fixturemanager.getfixtureinfo` (keyword arguments
    node/func/cls in pytest 8.0 - 9.2)."""
    # typed for an Item (pytest passes a FunctionDefinition); it reads only the node's chain, markers
    # and node id, which a file's items share with the file
    return node.session._fixturemanager.getfixtureinfo(node=cast(pytest.Item, node), func=func, cls=None)


def add_k_keywords(item: pytest.Item, words: Mapping[str, Any]) -> None:
    """Make `-k` match the case's keywords: pytest 9.2 no longer matches `keywords=` given to
    `Function`, only `extra_keyword_matches` (a set on Node in pytest 8.0 - 9.2, undocumented)."""
    item.extra_keyword_matches.update(words)


def fix_structured_nodeid(item: pytest.Item) -> None:
    """pytest >= 9.2 keeps structured node ids (path, names, params) in the private `Node._id` and
    `--lf/--nf/--sw` compare them with stored ids parsed back; `Function` derives params only from a
    callspec, which only `Metafunc.parametrize` builds (CallSpec and Metafunc's constructor are
    private), and does not forward Node's `nodeid=`. Items made by pytest's own parametrization cost
    several times the collection time and more memory per item, so this one private attribute stays
    (tests: --lf, --nf, --sw in test_scenarios.py). The parsed id's path is the file's own string and
    its params (`t-s0`) one string per value, as pytest's ids share them, not a copy per item (the
    frozen id's fields are set as pytest sets its cache, `object.__setattr__`). pytest < 9.2 has a
    plain string `_id` without `parse` (pytest 8.0 - 9.1): nothing to do."""
    node_id = getattr(item, "_id", None)
    if node_id is not None and hasattr(type(node_id), "parse"):
        parsed = type(node_id).parse(str(node_id))
        if parsed.path == node_id.path:
            object.__setattr__(parsed, "path", node_id.path)
        if isinstance(parsed.params, str):
            object.__setattr__(parsed, "params", sys.intern(parsed.params))
        item._id = parsed


def message_repr(config: pytest.Config, excinfo: pytest.ExceptionInfo[BaseException]) -> TerminalRepr | None:
    """What pytest reports for a `pytest.fail(message, pytrace=False)` raised in a test's call (its
    `value` style: the message's lines, the crash line from the raising frame), built without the
    traceback filter pytest runs first: `Function._traceback_filter` cuts the whole traceback through
    pytest's runner and pluggy frames, a path lookup (`stat`) per frame, to print none of them
    (`Node._repr_failure_py`, pytest 8.0 - 9.2). The public `ExceptionInfo.getrepr` takes a callable
    filter (pytest >= 7.4); the value style prints the message whatever frame it is given, so the
    raising frame alone is enough. None for a failure raised with a traceback (the exception's
    undocumented `pytrace`, pytest 8.0 - 9.2) and under `--full-trace` (option dest `fulltrace`),
    which shows every frame."""
    if getattr(excinfo.value, "pytrace", True) or config.getoption("fulltrace", False):
        return None
    report = excinfo.getrepr(style="value", tbfilter=_raising_frame)
    if report.reprcrash is not None:
        # The short test summary and `--tb=line` quote the crash message; on a CI runner pytest prints
        # it whole, which for a case would repeat its transcript. They quote the headline alone.
        report.reprcrash.message = report.reprcrash.message.split("\n", 1)[0]
    return report


def _raising_frame(excinfo: pytest.ExceptionInfo[BaseException]) -> Traceback:
    return excinfo.traceback[-1:]


class ShortErrorTraceback(pytest.Function):
    """An item whose `EvalbenchError` (an unscored case, an exhausted budget, a failed call) pytest
    reports as its message from the raising frame alone. The plugin's report replaces that error's text
    with its one-line message anyway (`Bookkeeping.make_report`), but pytest would format a traceback
    first: through the fixture that waits for the engine, pytest's fixture and pluggy frames, parsing
    each frame's source file (or, cut to the raising frame, that frame's whole module) to find its
    statement, for every such case; a run whose endpoint is down errs in every case. Private:
    `Node._repr_failure_py`, which pytest calls for an error in setup or teardown and `repr_failure`
    for one in the call (pytest 8.0 - 9.2); `--full-trace` (option dest `fulltrace`) still shows
    every frame."""

    def _repr_failure_py(self, excinfo: pytest.ExceptionInfo[BaseException],
                         style: Any = None) -> TerminalRepr:
        from pytest_evalbench.base.errors import EvalbenchError  # a failure imports it; a plain run need not

        if isinstance(excinfo.value, EvalbenchError) and not self.config.getoption("fulltrace", False):
            return excinfo.getrepr(style="value", tbfilter=_raising_frame)
        return super()._repr_failure_py(excinfo, style)


# ---------------------------------------------------------------------- config and session
def initial_benchmark_path(early_config: pytest.Config) -> None:
    """With `--benchmark=NAME` and no path on the command line, the initial conftests are those of
    benchmarks/NAME/ (and its parents), not those of `testpaths`: a project's test-suite conftest is
    not imported to run a benchmark. pytest reads the paths for its initial conftests from
    `early_config.known_args_namespace.file_or_dir` (used by plugins, not documented; pytest 8.0 -
    9.2); the full parse later reads the command line again, and `default_args` takes over."""
    namespace = early_config.known_args_namespace
    name = getattr(namespace, "evalbench_benchmark", None)
    if name and not namespace.file_or_dir and "/" not in name and "\\" not in name and name not in (".", ".."):
        path = early_config.rootpath / "benchmarks" / name
        try:
            found = path.is_dir()
        except (OSError, ValueError):  # a name too long for the file system: the plugin's own check says so
            return
        if found:
            namespace.file_or_dir = [str(path)]


def thaw_after_pytests_cleanup(early_config: pytest.Config) -> None:
    """A benchmark session keeps the objects alive when its test loop starts out of the collector's
    way (`gc.freeze`, `session.EvalbenchPlugin.pytest_runtestloop`) until its config is cleaned up;
    a process that goes on (pytester, an IDE) then collects them again. The cleanup is added here,
    before pytest adds its own: cleanups run last-added first, so it runs after pytest's collection
    for unraisable exceptions (a cleanup `_pytest.unraisableexception` adds in its `pytest_configure`
    since pytest 8.4), which walks only what the session allocated instead of the whole heap. Checked
    on pytest 8.0 - 9.2 (before 8.4 there is no such collection, and the order changes nothing)."""
    if getattr(early_config.known_args_namespace, "evalbench_benchmark", None):
        early_config.add_cleanup(gc.unfreeze)


def default_args(config: pytest.Config, args: list[str]) -> None:
    """With no path on the command line (nor `testpaths`), collect the benchmark directory.
    `Config.args_source` is public (pytest >= 7.2); writing `config.args` is not documented, but it is
    what `Session.perform_collect` reads (pytest 8.0 - 9.2)."""
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args = args


def collect_only(config: pytest.Config) -> bool:
    """`--collect-only`: pytest's option dest `collectonly` (pytest 8.0 - 9.2; not in the docs)."""
    return bool(config.option.collectonly)


def continues_on_collection_errors(config: pytest.Config) -> bool:
    """`--continue-on-collection-errors`: dest `continue_on_collection_errors` (pytest 8.0 - 9.2)."""
    return bool(config.option.continue_on_collection_errors)


def collection_failed_count(session: pytest.Session) -> int:
    """How many collection errors or failed tests so far: `Session.testsfailed`, which pytest's own
    main loop reads to skip running after collection errors (pytest 8.0 - 9.2; undocumented)."""
    return int(session.testsfailed)


def set_exit_status(session: pytest.Session, code: int) -> None:
    """Change the session's exit status in `pytest_sessionfinish`: pytest returns `session.exitstatus`
    after the hook (pytest 8.0 - 9.2; undocumented, syrupy does the same)."""
    session.exitstatus = code


# ---------------------------------------------------------------------- reports
def attach(report: pytest.TestReport, name: str, value: Any) -> None:
    """Put our data on a report as an extra attribute. xdist ships it to the controller because
    `_report_to_json` copies the report's `__dict__` (pytest 8.0 - 9.2, xdist 3.5 - 3.8; undocumented)."""
    setattr(report, name, value)


def read(report: pytest.TestReport, name: str) -> Any:
    """An attribute `attach` put on the report (here or on a worker, pytest 8.0 - 9.2), or None."""
    return getattr(report, name, None)


def detach(report: pytest.TestReport, name: str) -> None:
    """Remove an attached attribute (the terminal reporter keeps reports for the whole session; pytest 8.0 - 9.2)."""
    if hasattr(report, name):
        delattr(report, name)


def xfail_reason(report: pytest.TestReport) -> str | None:
    """The xfail reason of an xfailed report: the `wasxfail` attribute pytest's skipping plugin sets
    (pytest 8.0 - 9.2; undocumented, its presence is how pytest itself tells xfailed reports apart)."""
    return getattr(report, "wasxfail", None)


def has_teardown_output(report: pytest.TestReport) -> bool:
    """Whether the report carries captured teardown output: pytest names those sections
    "Captured ... teardown" (pytest 8.0 - 9.2; naming undocumented)."""
    return any("teardown" in name for name, _ in getattr(report, "sections", ()))


def passed_phase_reports(config: pytest.Config) -> list[Any] | None:
    """The terminal reporter's list of passed setup/teardown reports, kept for the whole session:
    `stats[""]` of `TerminalReporter` (a public attribute, undocumented; the reporter appends each
    report in its own `pytest_runtest_logreport`; pytest 8.0 - 9.2). None with -p no:terminal."""
    stats = getattr(config.pluginmanager.get_plugin("terminalreporter"), "stats", None)
    return stats.setdefault("", []) if isinstance(stats, dict) else None


class JUnitSuite:
    """The test suite of pytest's JUnit XML file: `LogXML.add_global_property`, what the public
    `record_testsuite_property` fixture calls (pytest 8.0 - 9.2)."""

    def __init__(self, xml: Any) -> None:
        self._xml = xml

    def add_property(self, name: str, value: object) -> None:
        self._xml.add_global_property(name, value)


def junit_path(config: pytest.Config) -> str | None:
    """The `--junitxml` path, also on an xdist worker (which has no `LogXML`: the controller writes
    the file from the reports): pytest's option dest "xmlpath" (pytest 8.0 - 9.2; absent with -p no:junitxml)."""
    value = config.getoption("xmlpath", None)
    return str(value) if value else None


def junit_requested(config: pytest.Config) -> bool:
    """Whether `--junitxml` was given (pytest 8.0 - 9.2)."""
    return junit_path(config) is not None


def junit_xml(config: pytest.Config) -> JUnitSuite | None:
    """pytest's JUnit XML writer when `--junitxml` is given, else None. Its stash key lives in the
    private `_pytest.junitxml` (`xml_key`, pytest 8.0 - 9.2): the object behind the public
    `record_testsuite_property` fixture, which a session-end hook cannot request."""
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pragma: no cover - pytest internals moved
        return None
    xml = config.stash.get(xml_key, None)
    return JUnitSuite(xml) if xml is not None else None


# ---------------------------------------------------------------------- terminal
def terminal_writer(config: pytest.Config) -> tuple[LineWriter, bool] | None:
    """pytest's terminal reporter as a `LineWriter` and whether it writes to a TTY, or None (-p
    no:terminal). `rewrite`, `ensure_newline` and `isatty` are undocumented TerminalReporter members
    (pytest 8.0 - 9.2)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return None
    return reporter, bool(reporter.isatty)


# ---------------------------------------------------------------------- xdist
def is_xdist_controller(config: pytest.Config) -> bool:
    """Whether xdist's controller plugin runs this session: it registers as "dsession"
    (xdist 3.5 - 3.8; internal name)."""
    return bool(config.pluginmanager.hasplugin("dsession"))


def single_process(config: pytest.Config) -> None:
    """Run this session without xdist workers (`-n`/`--dist` ignored): xdist reads `numprocesses`,
    `dist` and `tx` in its `pytest_cmdline_main` and `pytest_configure` (xdist 3.5 - 3.8; set before
    either, or after its cmdline_main: both orders end with no distribution)."""
    option = config.option
    if hasattr(option, "numprocesses"):
        option.numprocesses = 0
    if hasattr(option, "dist"):
        option.dist = "no"
    if hasattr(option, "tx"):
        option.tx = []


def worker_input(config: pytest.Config) -> MutableMapping[str, Any] | None:
    """On an xdist worker, the dict the controller sent (`config.workerinput`, documented by xdist);
    None in a controller or a single process (xdist 3.5 - 3.8)."""
    return getattr(config, "workerinput", None)


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is an xdist worker (xdist 3.5 - 3.8: it has `workerinput`)."""
    return worker_input(config) is not None


def node_input(node: Any) -> MutableMapping[str, Any]:
    """Controller side: the `workerinput` dict of a worker being configured or scheduled (xdist 3.5 - 3.8)."""
    return node.workerinput


def worker_count(workerinput: Mapping[str, Any], default: int = 0) -> int:
    """How many workers xdist started: the "workercount" key (xdist 3.5 - 3.8; undocumented)."""
    return int(workerinput.get("workercount", default))


def worker_number(workerinput: Mapping[str, Any]) -> int | None:
    """The N of this worker's id "gwN" (xdist 3.5 - 3.8; the format is undocumented; replacements of
    crashed workers get numbers past the initial count); None if it is not of that form."""
    workerid = str(workerinput.get("workerid", ""))
    try:
        return int(workerid.removeprefix("gw"))
    except ValueError:
        return None


def put_worker_output(config: pytest.Config, key: str, value: Any) -> None:
    """Worker side: hand a value to the controller (`config.workeroutput`, documented by xdist 3.5 - 3.8)."""
    config.workeroutput[key] = value  # type: ignore[attr-defined]


def worker_output(node: Any) -> Mapping[str, Any]:
    """Controller side: what a finished worker handed over (`node.workeroutput`, set when the worker
    finished, absent if it died; xdist 3.5 - 3.8)."""
    return getattr(node, "workeroutput", {})


def scheduler_log(log: Any) -> Callable[..., None]:
    """A sub-log of the `log` xdist passes to `pytest_xdist_make_scheduler`: its py.log-style
    Producer creates one per attribute (xdist 3.5 - 3.8; undocumented)."""
    return log.sharesched if log is not None else (lambda *args: None)


def node_name(node: Any) -> str:
    """A worker's id ("gw0"): `node.gateway.id`, the execnet gateway of xdist's WorkerController
    (xdist 3.5 - 3.8, execnet 2.x; undocumented)."""
    return str(node.gateway.id)


class WorkerNode(Protocol):
    """xdist's WorkerController as a scheduler uses it (untyped in xdist; the methods its own
    schedulers call, xdist 3.5 - 3.8). xdist runs an item only once the next one (or the shutdown)
    has arrived, and `remove_node` must return the item a crashed worker was running: the share
    scheduler relies on both (tests/unit/test_share_scheduler.py)."""

    shutting_down: bool

    def shutdown(self) -> None: ...

    def send_runtest_some(self, indices: list[int]) -> None: ...


def is_shutting_down(node: WorkerNode) -> bool:
    """Whether the controller already told this worker to stop (xdist 3.5 - 3.8 WorkerController property)."""
    return bool(node.shutting_down)


def shut_down(node: WorkerNode) -> None:
    """Tell a worker to stop once it ran what it holds (xdist 3.5 - 3.8 WorkerController)."""
    node.shutdown()


def send_items(node: WorkerNode, indices: list[int]) -> None:
    """Send a worker these collection indices to run (xdist 3.5 - 3.8 WorkerController)."""
    node.send_runtest_some(indices)


def xdist_mode(config: pytest.Config) -> tuple[str, bool]:
    """xdist's `--dist` mode and whether `--tx` nodes are set (`-n N` sets them): xdist's option
    dests "dist" and "tx" (xdist 3.5 - 3.8; undocumented)."""
    return str(config.getoption("dist", "no")), bool(config.getoption("tx", None))
