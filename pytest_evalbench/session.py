"""The per-process session object: collection, prefetch, recording, writing.

Registered as a plugin only with `--benchmark`. Data flow: items are scheduled on the engine
ahead of the test loop; each test's `evalbench_record` fixture waits for its own pipeline;
the makereport wrapper attaches the record (a JSON dict) to the teardown report, which xdist
forwards to the controller; the controller alone merges and writes the result files.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from .collect import CASE_KEY, BrokenBenchmark, CaseFile, CaseItem, check_dataset, check_scenario
from .errors import ConfigError, EvalbenchError, LLMError, TargetError
from .llm.engine import EngineStats
from .loading import SCENARIOS_FILE, SPEC_FILE, load_scenarios, load_spec, resolve_benchmark_dir
from .models import derive_pass
from .runner import BenchmarkRun, RunSettings
from .gate import GateOutcome, evaluate_gate
from .options import gate_settings
from .report import LAST_RUN, incomplete_reasons, summary_lines, write_run_status
from .store import RUNS_DIR, write_results

SESSION_KEY = pytest.StashKey["EvalbenchSession"]()
RECORD_KEY = pytest.StashKey[dict[str, Any]]()
STATS_OUTPUT = "evalbench_stats"


class Unscored(EvalbenchError):
    """The judge could not be parsed: the row is recorded with nulls and the item is an ERROR."""


class EvalbenchSession:
    """State of one pytest process for the selected benchmark."""

    def __init__(self, config: pytest.Config, settings: RunSettings) -> None:
        self.config = config
        self.settings = settings
        self.is_worker = hasattr(config, "workerinput")
        try:
            self.bench_dir = resolve_benchmark_dir(config.rootpath / "benchmarks", settings.benchmark)
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None
        self._run: BenchmarkRun | None = None
        self._cases: dict[Path, tuple[list[Any], Callable[..., None]]] = {}
        self.order: dict[str, int] = {}
        """Row id (scenario id or case_id) -> position in the data files; result files keep this order."""
        self.records: dict[str, dict[str, Any]] = {}
        self.errors: dict[str, str] = {}
        self.stats = EngineStats()
        self.outcome: GateOutcome | None = None
        self.finish_error: str | None = None
        self._positions: dict[pytest.Item, int] | None = None
        if config.args_source != pytest.Config.ArgsSource.ARGS:
            config.args = [str(self.bench_dir)]

    # ------------------------------------------------------------------ loading
    @property
    def run(self) -> BenchmarkRun:
        if self._run is None:
            spec = load_spec(self.bench_dir)

            def make_app(target: Any) -> Any:
                return self.config.hook.pytest_evalbench_make_target(config=self.config, target=target)

            self._run = BenchmarkRun(self.bench_dir, spec, self.settings, make_app)
        return self._run

    def cases_for(self, path: Path) -> tuple[list[Any], Callable[..., None]]:
        """The cases of one data file (loaded once per process)."""
        if path not in self._cases:
            if self.run.spec.kind == "dataset":
                from .dataset.benchmark import check_unique, dataset_files, load_items

                policy = self.run.policy
                items: dict[Path, list[Any]] = {}
                for file in dataset_files(self.bench_dir, self.run.dataset):
                    items[file] = load_items(file, policy, start=sum(len(v) for v in items.values()))
                check_unique(items)
                self.order = {item.name: item.index for file_items in items.values() for item in file_items}
                for file, file_items in items.items():
                    self._cases[file] = (file_items, check_dataset)
            else:
                scenarios = load_scenarios(self.bench_dir, self.run.spec)
                self.order = {s.id: i for i, s in enumerate(scenarios)}
                self._cases[path] = (self.run.scenario_cases(scenarios), check_scenario)
        return self._cases[path]

    def data_files(self) -> list[Path]:
        """The files whose rows become items: scenarios.json, or the dataset's JSONL files."""
        if self.run.spec.kind == "dataset":
            from .dataset.benchmark import dataset_files

            return dataset_files(self.bench_dir, self.run.dataset)
        return [self.bench_dir / SCENARIOS_FILE]

    def header(self) -> str:
        s = self.settings
        return (f"evalbench: benchmark={s.benchmark} cache={s.cache_mode} concurrency={s.engine.concurrency}"
                + (f" provider={s.provider}" if s.provider else ""))

    # ------------------------------------------------------------------ collection hooks
    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """Never walk result and cache directories of the benchmark."""
        if collection_path.parent == self.bench_dir and collection_path.name == RUNS_DIR:
            return True
        return None

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        """The data files of the selected benchmark; benchmark.yaml stands in when they cannot load."""
        if file_path.parent != self.bench_dir:
            return None
        try:
            files = self.data_files()
        except EvalbenchError as exc:
            if file_path.name == SPEC_FILE:
                return BrokenBenchmark.from_parent(parent, path=file_path, message=str(exc))
            return None
        if file_path in files:
            return CaseFile.from_parent(parent, path=file_path)
        if file_path.name == SPEC_FILE:
            missing = [f for f in files if not f.is_file()]
            if missing:
                hint = (f"; generate it with `evalbench gen-scenarios {self.settings.benchmark}`"
                        if missing[0].name == SCENARIOS_FILE else "")
                return BrokenBenchmark.from_parent(parent, path=file_path,
                                                   message=f"{missing[0]}: file not found{hint}")
        return None

    # ------------------------------------------------------------------ scheduling
    def _schedule(self, items: list[pytest.Item], positions: dict[pytest.Item, int] | None = None) -> None:
        for position, item in enumerate(items):
            if isinstance(item, CaseItem):
                self._future(item, positions.get(item, position) if positions else position)

    def _future(self, item: CaseItem, priority: int) -> Any:
        case = item.stash[CASE_KEY]
        run = self.run
        return run.engine.submit(item.nodeid, lambda: run.run_case(case), priority)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Without xdist, start every selected item's LLM work before the first test runs."""
        if self.is_worker or self.config.pluginmanager.get_plugin("dsession") is not None:
            return
        if session.testsfailed or self.config.option.collectonly:
            return
        self._schedule(session.items)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """On an xdist worker, start this item and everything already queued for this worker."""
        if not self.is_worker:
            return
        items = item.session.items
        if self._positions is None:
            self._positions = {it: i for i, it in enumerate(items)}
        pending = [item] + ([nextitem] if nextitem else []) + [items[i] for i in _worker_queue(self.config)]
        self._schedule(pending, self._positions)

    def record_for(self, item: pytest.Item) -> dict[str, Any]:
        """Wait for the item's pipeline; record the row; raise for rows that must be ERROR."""
        assert isinstance(item, CaseItem)
        record = self._future(item, 0).result().to_json()  # usually prefetched: priority unused
        score = record.get("score")
        if score is not None:
            self.config.hook.pytest_evalbench_judged_row(config=self.config, row=score, record=record)
            score["passed"], score["score"] = derive_pass(score["present"], score["metric_type"])
            record["status"] = "unscored" if score["passed"] is None else (
                "passed" if score["passed"] else "failed")
            item.user_properties.extend([("evalbench_present", score["present"]),
                                         ("evalbench_passed", score["passed"]),
                                         ("evalbench_score", score["score"]),
                                         ("evalbench_justification", score["justification"])])
        case = record.get("case")
        if case is not None:
            item.user_properties.extend([("evalbench_status", case["status"]),
                                         ("evalbench_composite", case["composite"])])
        item.stash[RECORD_KEY] = record
        if record["status"] == "unscored":
            raise Unscored(score["justification"] if score else record.get("message", "unscored"))
        return record

    # ------------------------------------------------------------------ reporting
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Short one-line reprs for our errors; attach the item's record to its teardown report."""
        report = yield
        exc = call.excinfo.value if call.excinfo else None
        if isinstance(exc, EvalbenchError):
            kind = "unscored" if isinstance(exc, Unscored) else (
                "target error" if isinstance(exc, TargetError) else
                exc.kind if isinstance(exc, LLMError) else "error")
            report.longrepr = f"evalbench {kind}: {exc}"
            report.evalbench_error = kind  # type: ignore[attr-defined]
        if call.when == "teardown" and RECORD_KEY in item.stash:
            report.evalbench = item.stash[RECORD_KEY]  # type: ignore[attr-defined]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Controller side (and no-xdist runs): keep the last record and error of every item."""
        if self.is_worker:
            return
        error = getattr(report, "evalbench_error", None)
        if error:
            self.errors[report.nodeid] = error
        record = getattr(report, "evalbench", None)
        if record is not None:
            self.records[report.nodeid] = record

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist: add a finished worker's LLM counters to the controller's."""
        self.stats.merge(getattr(node, "workeroutput", {}).get(STATS_OUTPUT, {}))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Workers hand over counters; the controller merges, writes and decides the exit status."""
        if self._run is not None:
            self._run.engine.close()
            if self.is_worker:
                self.config.workeroutput[STATS_OUTPUT] = self._run.engine.stats.to_json()  # type: ignore[attr-defined]
            else:
                self.stats.merge(self._run.engine.stats.to_json())
        if self.is_worker or (not self.records and not self.errors):
            return
        try:
            self.outcome = self._finish(int(exitstatus))
        except EvalbenchError as exc:
            self.finish_error = str(exc)
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        session.exitstatus = self.outcome.exit_code(int(exitstatus))

    def _finish(self, exitstatus: int) -> GateOutcome:
        records = [self.records[k] for k in sorted(self.records)]
        run = self.run
        if not self.order:  # the controller under xdist collects nothing itself
            self.cases_for(self.data_files()[0])
        table: list[str] | None = None
        if run.spec.kind == "dataset":
            from .dataset.report import agent_table, as_target_results
            from .dataset.store import write_dataset_results

            results = write_dataset_results(self.bench_dir, records, self.order)
            gated, table = as_target_results(results), agent_table(results)
        else:
            results = gated = write_results(self.bench_dir, records, self.order)
        outcome = evaluate_gate(self.bench_dir, run.spec.thresholds, gated,
                                gate_settings(self.config, self.bench_dir, run.spec.gate), run.meta(),
                                incomplete_reasons(self.errors, exitstatus))
        if table is not None:
            outcome.table = table
        write_run_status(self.bench_dir / LAST_RUN, self, outcome)
        self.config.hook.pytest_evalbench_results(config=self.config, benchmark=self.settings.benchmark,
                                                  results=results, records=records)
        return outcome

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Pass rates with intervals, gate results and the LLM traffic of the run."""
        if self.is_worker:
            return
        terminalreporter.section("evalbench")
        for line in summary_lines(self):
            terminalreporter.write_line(line)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._run is not None:
            self._run.engine.close()


def _worker_queue(config: pytest.Config) -> list[int]:
    """Indices xdist has already assigned to this worker but not yet run (best effort, read-only)."""
    for plugin in config.pluginmanager.get_plugins():
        queue = getattr(plugin, "torun", None)
        if queue is not None and hasattr(queue, "lock"):
            with queue.lock() as pending:
                return [i for i in pending if isinstance(i, int)]
    return []
