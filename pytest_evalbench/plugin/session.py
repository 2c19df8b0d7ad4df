"""The per-process session object: collection, prefetch, recording, writing.

Registered as a plugin only with `--benchmark`. Data flow: the benchmark's kind (see
`kinds.py`) loads the cases; items are scheduled on the engine ahead of the test loop; each
test's `evalbench_record` fixture waits for its own pipeline and the kind decides its outcome;
the makereport wrapper attaches the record (JSON) to the teardown report, which xdist forwards
to the controller; the controller alone merges, writes, gates and sets the exit status.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ..context import BenchmarkRun
from ..errors import ConfigError, EvalbenchError, LLMError, TargetError
from ..gate.outcome import GateOutcome, evaluate_gate
from ..kinds import BenchmarkKind, Record, kind_of
from ..llm.engine import EngineStats
from ..loading import SPEC_FILE, load_spec, resolve_benchmark_dir
from ..render.terminal import LAST_RUN, incomplete_reasons, summary_lines, write_run_status
from ..settings import RunSettings
from .collect import CASE_KEY, OUTCOME_KEY, BrokenBenchmark, CaseFile, CaseItem
from .options import gate_settings

RECORD_KEY = pytest.StashKey[Record]()
RESULT_DIRS = ("runs", ".evalbench-cache", "shards")


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
        self._kind: BenchmarkKind | None = None
        self._cases: dict[Path, list[Any]] | None = None
        self.records: dict[str, Record] = {}
        self.errors: dict[str, str] = {}
        self.stats = EngineStats()
        self.outcome: GateOutcome | None = None
        self.finish_error: str | None = None
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

    @property
    def kind(self) -> BenchmarkKind:
        if self._kind is None:
            self._kind = kind_of(self.run)
        return self._kind

    def cases_for(self, path: Path) -> list[Any]:
        """The cases of one data file (every file is loaded once per process)."""
        if self._cases is None:
            self._cases = self.kind.load_cases()
        return self._cases.get(path, [])

    def header(self) -> str:
        s = self.settings
        return (f"evalbench: benchmark={s.benchmark} cache={s.cache_mode} concurrency={s.engine.concurrency}"
                + (f" provider={s.provider}" if s.provider else ""))

    # ------------------------------------------------------------------ collection hooks
    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """Never walk result and cache directories of the benchmark."""
        if collection_path.parent == self.bench_dir and collection_path.name in RESULT_DIRS:
            return True
        return None

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        """The data files of the selected benchmark; benchmark.yaml stands in when they cannot load."""
        if file_path.parent != self.bench_dir:
            return None
        try:
            files = self.kind.data_files()
        except EvalbenchError as exc:
            if file_path.name == SPEC_FILE:
                return BrokenBenchmark.from_parent(parent, path=file_path, message=str(exc))
            return None
        if file_path in files:
            return CaseFile.from_parent(parent, path=file_path)
        if file_path.name == SPEC_FILE:
            missing = [f for f in files if not f.is_file()]
            if missing:
                return BrokenBenchmark.from_parent(parent, path=file_path,
                                                   message=f"{missing[0]}: file not found{self._hint(missing[0])}")
        return None

    def _hint(self, missing: Path) -> str:
        if missing.name == "scenarios.json":
            return f"; generate it with `evalbench gen-scenarios {self.settings.benchmark}`"
        return ""

    # ------------------------------------------------------------------ scheduling
    def schedule(self, items: list[pytest.Item], first: int = 0) -> None:
        """Start the LLM work of these items, earlier positions first."""
        for position, item in enumerate(items, start=first):
            if isinstance(item, CaseItem):
                self._future(item, position)

    def _future(self, item: CaseItem, priority: int) -> Any:
        case = item.stash[CASE_KEY]
        kind = self.kind
        return self.run.engine.submit(item.nodeid, lambda: kind.run_case(case), priority)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Without xdist, start every selected item's LLM work before the first test runs."""
        if self.is_worker or self.config.pluginmanager.hasplugin("dsession"):
            return
        if session.testsfailed or self.config.option.collectonly:
            return
        self.schedule(session.items)

    def record_for(self, item: pytest.Item) -> Record:
        """Wait for the item's pipeline; let the kind decide its outcome; raise for rows that must ERROR."""
        assert isinstance(item, CaseItem)
        record = self._future(item, 0).result()  # usually prefetched: priority unused

        def judged_row(row: dict[str, Any], rec: Record) -> None:
            self.config.hook.pytest_evalbench_judged_row(config=self.config, row=row, record=rec)

        outcome = self.kind.outcome(record, judged_row)
        item.user_properties.extend(outcome.properties)
        item.stash[RECORD_KEY] = record
        item.stash[OUTCOME_KEY] = outcome
        if outcome.status == "unscored":
            raise Unscored(outcome.message or "unscored")
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

    def close_engine(self) -> dict[str, Any] | None:
        """Stop this process's engine; its counters, or None if it never started."""
        if self._run is None:
            return None
        self._run.engine.close()
        return self._run.engine.stats.to_json()

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """The controller merges, writes and decides the exit status (workers hand over counters
        through the xdist glue)."""
        if self.is_worker:
            return
        self.stats.merge(self.close_engine() or {})
        if not self.records and not self.errors:
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
        written = self.kind.write_results(records)
        gated = written.gate_results if written.gate_results is not None else written.results
        outcome = evaluate_gate(run.output_dir, run.spec.thresholds, gated,
                                gate_settings(self.config, self.bench_dir, run.spec.gate), run.meta(),
                                incomplete_reasons(self.errors, exitstatus))
        if written.table is not None:
            outcome.table = written.table
        write_run_status(run.output_dir / LAST_RUN, self, outcome)
        self.config.hook.pytest_evalbench_results(config=self.config, benchmark=self.settings.benchmark,
                                                  results=written.results, records=records)
        return outcome

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Pass rates with intervals, gate results and the LLM traffic of the run."""
        if self.is_worker:
            return
        terminalreporter.section("evalbench")
        for line in summary_lines(self):
            terminalreporter.write_line(line)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.close_engine()
