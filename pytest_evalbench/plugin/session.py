"""The per-process plugin object: one registered plugin that keeps every hook (so hook order, `tryfirst`
and wrappers are pytest's) and delegates each to a role:

- `selection.Selection`: which benchmark, its run and kind, which cases, collection;
- `scheduler.Scheduler`: the one place LLM work starts;
- `outcomes.Bookkeeping`: each item's record, status and error (the fixture and the reports);
- `finish.Results`: result files, gate, exit status, last_run.json;
- `finish.Reporting`: the summary, HTML/Markdown/history, JUnit properties, terminal section;
- `progress.Progress`: the live progress line and status letters.

Registered as a plugin only with `--benchmark`. Data flow: the benchmark's kind loads the cases; items
are scheduled on the engine ahead of the test loop; each test's `evalbench_record` fixture waits for its
own pipeline and the kind decides its outcome; the makereport wrapper attaches the record (JSON) to the
teardown report, which xdist forwards to the controller; the controller alone merges, writes, gates and
sets the exit status.

Two modes change what a session does. `--evalbench-estimate`: items are collected and selected as for a
run, then the test loop stops before the first item (as `--collect-only`) and the terminal summary
prints the estimate; nothing is called and nothing is written; under xdist it runs in the controller
alone, so it is printed once. `--evalbench-shard=K/N` runs a deterministic, balanced K-th of N parts of
the items: every case is ranked by the sha256 of its node id and dealt round-robin over the N shards, so
a case's shard depends only on the benchmark's cases, never on collection order or on what -k, --lf or
node ids select; each shard writes its result files under `benchmarks/NAME/shards/K-of-N/` with its raw
records (`records.json`), from which `evalbench merge NAME DIR...` writes exactly the files one unsharded
run would have written.
"""

from __future__ import annotations

import atexit
import functools
import gc
import hashlib
import os
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from pytest_evalbench.base.errors import ConfigError, EvalbenchError
from pytest_evalbench.base.safe_text import SECRETS, terminal
from pytest_evalbench.cli.merge import write_records
from pytest_evalbench.formats.spec import resolve_benchmark_dir
from pytest_evalbench.kinds.run import RunSettings
from pytest_evalbench.plugin._compat import (
    collect_only,
    collection_failed_count,
    default_args,
    detach,
    is_worker,
    is_xdist_controller,
)
from pytest_evalbench.plugin.bookkeeping import RECORD_ATTR, Bookkeeping
from pytest_evalbench.plugin.finish import Reporting, Results
from pytest_evalbench.plugin.memory_bound import QuietReports
from pytest_evalbench.plugin.nodes import PLUGIN_KEY, SOURCE_KEY, CaseItem
from pytest_evalbench.plugin.options import compare_path
from pytest_evalbench.plugin.progress import Progress
from pytest_evalbench.plugin.scheduler import Scheduler
from pytest_evalbench.plugin.selection import Selection


def shard_of(node_ids: Iterable[str], count: int) -> dict[str, int]:
    """Node id -> shard number 1..count (balanced; stable under reordering)."""
    ranked = sorted(node_ids, key=lambda node_id: (hashlib.sha256(node_id.encode()).hexdigest(), node_id))
    return {node_id: rank % count + 1 for rank, node_id in enumerate(ranked)}


class ShardPlugin:
    """Deselects the other shards' items; on the controller, keeps this shard's records for the merge."""

    def __init__(self, config: pytest.Config, shard: tuple[int, int]) -> None:
        self.config = config
        self.index, self.count = shard

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Deal every case of the benchmark, not just the ones collected: an item's shard does not
        depend on -k, --lf or node ids, so a printed rerun command with the shard runs its items."""
        every = set(plugin_of(config).selection.case_node_ids())
        shards = shard_of(every | {item.nodeid for item in items}, self.count)
        keep = [item for item in items if shards[item.nodeid] == self.index]
        dropped = [item for item in items if shards[item.nodeid] != self.index]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep

    def pytest_evalbench_results(self, config: pytest.Config, benchmark: str, results: list[dict[str, Any]],
                                 records: list[dict[str, Any]]) -> None:
        plugin = plugin_of(config)
        write_records(plugin.selection.run.output_dir, plugin.books.records, plugin.bench_dir)


def plugin_of(config: pytest.Config) -> EvalbenchPlugin:
    """The plugin object registered for this run, typed (its stash key names only the `CaseSource` protocol)."""
    return cast(EvalbenchPlugin, config.stash[PLUGIN_KEY])  # no isinstance: pytester may re-import this module


@functools.cache
def exit_without_collecting() -> None:
    """At interpreter exit (after the atexit handlers registered earlier), move every object to the
    collector's permanent generation, so the interpreter's shutdown does not walk the whole heap again
    in its collections. Only finalizers of objects in reference cycles still alive at exit are not
    run then, which CPython does not promise either. Registered once per process, and only where a
    benchmark runs; why it stays is in docs/performance.md."""
    atexit.register(gc.freeze)


class EvalbenchPlugin:
    """State of one pytest process for the selected benchmark: the roles, and the hooks that call them."""

    def __init__(self, config: pytest.Config, settings: RunSettings) -> None:
        self.config = config
        self.settings = settings
        self.is_worker = is_worker(config)
        exit_without_collecting()
        SECRETS.add_environment(os.environ)  # known before anything can print (the roles add theirs)
        SECRETS.add_url(settings.base_url)
        try:
            self.bench_dir = resolve_benchmark_dir(config.rootpath / "benchmarks", settings.benchmark)
        except ConfigError as exc:
            raise pytest.UsageError(terminal(str(exc))) from None
        self.selection = Selection(config, settings, self.bench_dir)
        self.scheduler = Scheduler(self.selection)
        self.books = Bookkeeping(config, self.selection, self.scheduler, self.bench_dir)
        self.results = Results(config, self.selection, self.books, self.is_worker)
        self.reporting = Reporting(config, self.selection, self.books, self.results)
        self.progress = Progress(config, self.selection, self.books)
        self.scheduler.heartbeat = self.progress.redraw
        self.estimate = (EstimateMode(self.selection, self.results.baseline, self.results.baseline_missing)
                         if wanted(config) else None)
        """`--evalbench-estimate` or `--evalbench-plan`: plan and print, run nothing, write nothing."""
        self.quiet_reports = QuietReports(config)
        config.stash[SOURCE_KEY] = self.selection
        default_args(config, [str(self.bench_dir)])

    def header(self) -> str:
        s = self.settings
        return (f"evalbench: benchmark={s.benchmark} cache={s.cache_mode} concurrency={s.engine.concurrency}"
                + (f" provider={s.provider}" if s.provider else ""))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Preflight, once per run (controller or single process, before xdist starts workers): what
        would otherwise fail after money is spent is a usage error (exit 4) before the first call.
        Then last_run.json says "running" until the final state replaces it, so a killed run never
        leaves an earlier "complete" behind (`--collect-only` leaves it alone)."""
        if self.is_worker or collect_only(self.config) or self.estimate is not None:
            return
        self.selection.preflight()
        self.results.start()

    # ------------------------------------------------------------------ collection hooks
    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """Never walk result and cache directories of the benchmark."""
        return self.selection.ignore_collect(collection_path)

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        """The data files of the selected benchmark; benchmark.yaml stands in when they cannot load."""
        return self.selection.collect_file(file_path, parent)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Remember a collection error: xdist forwards workers' failed collection reports to the
        controller through this hook, so the exit status can be 2 there too (xdist alone gives 1)."""
        if report.failed:
            self.selection.collection_failed = True

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Start the progress line once the number of items is known (controller only)."""
        if not self.is_worker:
            self.progress.collection_finish(session)

    # ------------------------------------------------------------------ running
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        """Without xdist, start every selected item's LLM work before the first test runs. With
        `--evalbench-estimate` the loop ends here, before the first item (as `--collect-only`)."""
        if collection_failed_count(session) or collect_only(self.config):
            return None
        if self.estimate is not None:
            return self.estimate.run(session)
        # What is alive now (modules, the kinds' models, price data, the items) lives until the session
        # ends: out of the collector's way, the collections during the loop and at its end walk only what
        # the run allocates. The config's last cleanup gives it back (`_compat.thaw_after_pytests_cleanup`,
        # docs/performance.md).
        gc.freeze()
        if self.is_worker or is_xdist_controller(self.config):
            return None
        self.books.selected([item.nodeid for item in session.items if isinstance(item, CaseItem)])
        self.scheduler.start(session.items)
        return None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Short one-line reprs for our errors; attach the item's record to its teardown report."""
        report = yield
        self.books.make_report(item, call, report)
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        """No letters next to the live progress line; `XFAIL (judge unreliable)` with -v."""
        return self.progress.teststatus(report)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, None, None]:
        """Consume the report first (our notes on it must be seen by the terminal reporter); once
        every plugin has seen it (xdist's worker has sent it), take the record off it: pytest's
        terminal reporter keeps every report until the end of the session (our quiet setup and
        teardown reports it does not keep: `memory_bound`)."""
        case = self.selection.is_case(report.nodeid)
        if case and not self.is_worker:
            self.books.consume(report)
            self.progress.track(report)
        try:
            return (yield)
        finally:
            if report.when != "call":  # a record rides on a teardown report only (`Bookkeeping._release`)
                detach(report, RECORD_ATTR)
                if case:
                    self.quiet_reports.drop(report)

    # ------------------------------------------------------------------ end of the session
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """The controller merges, writes and decides the exit status (workers hand over counters
        through the xdist glue). First among the session's finishers: every worker has sent its last
        report and its counters by now, so an xdist controller does its end while its workers shut
        down (xdist's own finisher waits for them to exit) instead of after."""
        if self.is_worker or self.estimate is not None:
            return  # an estimate writes nothing
        code = self.results.finish(session, exitstatus, self.scheduler.close())
        if code is not None:
            try:
                self.reporting.write_reports(code)
                self.reporting.record(code)
            except OSError as exc:  # a full disk: the reports are missing, the run is not complete
                self.reporting.summary = None
                self.results.reports_failed(session, exc)

    @pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_sessionfinish")
    def pytest_sessionfinish_verdict_last(self, session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
        """The verdict is the last line of the session, after pytest's own `2 failed, 6 passed`: the
        outermost wrapper ends after the terminal reporter's, which prints those counts."""
        try:
            return (yield)
        finally:
            if not self.is_worker and self.estimate is None:
                self.reporting.verdict_line(self.config)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """One section rendered from the run's summary: rates, problems, cost, where results went and,
        last, the gate's verdict and why."""
        if self.is_worker:
            return
        if self.estimate is not None:
            self.estimate.summary(terminalreporter)
            return
        self.progress.finish()
        self.reporting.terminal_summary(terminalreporter)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.scheduler.close()
        self.books.records.close()


if TYPE_CHECKING:
    from pytest_evalbench.gate.paired import Baseline
    from pytest_evalbench.kinds.estimate import Estimate


def wanted(config: pytest.Config) -> bool:
    return bool(config.getoption("evalbench_estimate", False)) or config.getoption("evalbench_plan", None) is not None


class EstimateMode:
    """Plans the selected items' calls and prints the estimate (controller or single process)."""

    def __init__(self, selection: Selection, baseline: Baseline | None = None, missing: Path | None = None) -> None:
        self.selection = selection
        self.baseline = baseline
        self.missing = missing
        """The baseline path `--evalbench-compare` named, where no file is yet."""
        self.lines: list[str] = []
        self.plan_lines: list[str] = []

    def run(self, session: pytest.Session) -> bool:
        """Plan every selected item; the loop stops here (True), so no item runs."""
        drop = self.selection.config.getoption("evalbench_plan")
        cases = [item.case for item in session.items if isinstance(item, CaseItem)]
        if drop is not None:
            self.plan_lines = self._plan(drop, cases)
        if self.selection.config.getoption("evalbench_estimate"):
            self._estimate(cases)
        return True

    def _plan(self, drop: float, cases: list[Any]) -> list[str]:
        """`--evalbench-plan`: per target x metric of the selected cases, the rows a drop needs."""
        from pytest_evalbench.gate.paired import plan

        units: dict[tuple[str, str], tuple[set[str], set[int]]] = {}
        for case in cases:
            key, case_id, sample = plan_unit(case)
            ids, samples = units.setdefault(key, (set(), set()))
            ids.add(case_id)
            samples.add(sample)
        alpha = self.selection.run.spec.gate.alpha
        path = compare_path(self.selection.config, self.selection.bench_dir)
        name = path.name if path is not None and self.baseline is not None else "baseline"
        lines = plan(drop, alpha, {k: (len(ids), len(samples)) for k, (ids, samples) in units.items()},
                     self.baseline, name)
        note = ("samples of one case count as independent rows (they are not: more cases beat more samples); "
                "no call was made")
        absent = ([f"no baseline at {self.missing} yet: planned at an assumed pass rate of 0.5; save one with "
                   f"`pytest --benchmark={self.selection.settings.benchmark} --evalbench-save-baseline`"]
                  if self.missing is not None else [])
        return [line.text(drop, alpha) for line in lines] + absent + [note]

    def _estimate(self, cases: list[Any]) -> None:
        from pytest_evalbench.kinds.estimate import Expectations, estimate, render  # only with --evalbench-estimate

        selection = self.selection
        kind = selection.kind
        run = selection.run
        expect = Expectations(run.engine.cache.directory if run.settings.cache_mode != "off" else None, run.engine)
        try:
            result: Estimate = estimate(kind.plan_calls(case, expect) for case in cases)
        except EvalbenchError as exc:
            raise pytest.UsageError(terminal(str(exc))) from None
        spec = run.spec
        batched = set(run.settings.engine.batch_roles)  # --evalbench-batch, and `batch: true` on a role
        batched |= {"judge"} if any(m.batch for m in [spec.evaluator_model, *spec.evaluator_models] if m) else set()
        batched |= {"user"} if spec.user_model is not None and spec.user_model.batch else set()
        batched |= {"target"} if any(t.batch for t in spec.targets) else set()
        self.lines = render(result, run.engine.prices, run.settings.engine, expect.entries, batched=frozenset(batched))

    def summary(self, terminalreporter: Any) -> None:
        """Collection failed, or --collect-only: nothing was planned, nothing is printed."""
        for title, lines in (("evalbench plan", self.plan_lines), ("evalbench estimate", self.lines)):
            if lines:
                terminalreporter.section(title)
                for line in lines:
                    terminalreporter.write_line(terminal(line))


def plan_unit(case: Any) -> tuple[tuple[str, str], str, int]:
    """((target, metric), case id, sample) of a selected case: a scenario row x target x sample, or a
    dataset case (its agent is the target, `pass_rate` its metric, one sample)."""
    if hasattr(case, "target_id"):
        return (case.target_id, case.scenario.metric_id), case.stored.id, case.sample
    return (case.agent_name, "pass_rate"), case.case_id, 0
