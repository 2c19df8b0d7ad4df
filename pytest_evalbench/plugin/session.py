"""The per-process session object: collection, prefetch, recording, writing.

Registered as a plugin only with `--benchmark`. Data flow: the benchmark's kind (see
`kinds.py`) loads the cases; items are scheduled on the engine ahead of the test loop; each
test's `evalbench_record` fixture waits for its own pipeline and the kind decides its outcome;
the makereport wrapper attaches the record (JSON) to the teardown report, which xdist forwards
to the controller; the controller alone merges, writes, gates and sets the exit status.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ..context import BenchmarkRun, resolve_endpoint, role_endpoint, select_targets
from ..errors import ConfigError, EvalbenchError, LLMError, TargetError
from ..gate.outcome import GateOutcome, evaluate_gate
from ..kinds import BenchmarkKind, KindResults, Record, kind_of
from ..llm.cache import atomic_write_text
from ..llm.engine import EngineStats
from ..loading import SPEC_FILE, load_spec, resolve_benchmark_dir
from ..render.gate_view import gate_view, node_ids_of
from ..render.history import HISTORY, append_history, read_history
from ..render.html import render_html
from ..render.markdown import render_markdown, write_markdown
from ..render.progress import Counts, ProgressReporter
from ..render.summary import RunSummary, build_summary
from ..render.terminal import (
    LAST_RUN,
    incomplete_reasons,
    summary_lines,
    transcript_text,
    write_run_status,
)
from ..settings import RunSettings
from .collect import CASE_KEY, OUTCOME_KEY, BrokenBenchmark, CaseFile, CaseItem
from .options import gate_settings

SESSION_KEY = pytest.StashKey["EvalbenchSession"]()
RECORD_KEY = pytest.StashKey[Record]()
RESULT_DIRS = ("runs", ".evalbench-cache")


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
        self.written: KindResults | None = None
        self.summary: RunSummary | None = None
        self.messages: dict[str, str] = {}
        """Node id -> the one-line error of an item that ERRORed (collapsed in the summary)."""
        self.failed: set[str] = set()
        self.finished: set[str] = set()
        self.total = 0
        self.progress: ProgressReporter | None = None
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
        if call.when == "call" and report.failed and RECORD_KEY in item.stash and self.config.getoption("verbose") > 0:
            full = transcript_text(item.stash[RECORD_KEY])
            if full:
                report.longrepr = f"{report.longrepr}\n{full}"
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
            self._collapse_repeated(report, error)
        record = getattr(report, "evalbench", None)
        if record is not None:
            self.records[report.nodeid] = record
        self._track_progress(report)

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
            self.write_reports(int(session.exitstatus))
            return
        session.exitstatus = self.outcome.exit_code(int(exitstatus))
        self.write_reports(int(session.exitstatus))

    def _finish(self, exitstatus: int) -> GateOutcome:
        records = [self.records[k] for k in sorted(self.records)]
        run = self.run
        written = self.written = self.kind.write_results(records)
        gated = written.gate_results if written.gate_results is not None else written.results
        outcome = evaluate_gate(self.bench_dir, run.spec.thresholds, gated,
                                gate_settings(self.config, self.bench_dir, run.spec.gate), run.meta(),
                                incomplete_reasons(self.errors, exitstatus))
        if written.table is not None:
            outcome.table = written.table
        write_run_status(self.bench_dir / LAST_RUN, self, outcome)
        self.config.hook.pytest_evalbench_results(config=self.config, benchmark=self.settings.benchmark,
                                                  results=written.results, records=records)
        return outcome

    # ------------------------------------------------------------------ reports people read
    def _report_path(self, option: str, default: Path | None) -> Path | None:
        """An output path option: unset -> `default`, `none` -> skipped, else the path given."""
        value = self.config.getoption(option)
        if value is None:
            return default
        return None if value.lower() == "none" else Path(value).resolve()

    def write_reports(self, exit_code: int) -> None:
        """Build the run's summary once; write the HTML report, the history line and the Markdown
        summary from it (the terminal summary renders the same object)."""
        files: list[tuple[str, str]] = []
        if self.written is not None:
            files += [(p.name, str(p)) for p in self.written.files]
        files.append(("status", str(self.bench_dir / LAST_RUN)))
        gate = gate_view(self.outcome, exit_code, len(self.failed), node_ids_of(self.records), self.finish_error)
        files += [("baseline", path) for path in gate.baseline_files]
        html_path = self._report_path("evalbench_html", self.bench_dir / "report.html")
        markdown_path = self._report_path("evalbench_markdown", None)
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        history_path = self.bench_dir / HISTORY
        files += [("report", str(html_path))] if html_path else []
        files += [("history", str(history_path))] if self.written is not None else []
        files += [("markdown", str(p)) for p in (markdown_path, Path(step_summary) if step_summary else None) if p]
        meta = self.run.meta() if self._run is not None else {"benchmark": self.settings.benchmark}
        summary = build_summary(kind=self.run.spec.kind if self._run is not None else "", written=self.written,
                                gate=gate, meta=meta, stats=self.stats, errors=self.messages,
                                recorded=len(self.records), failed=len(self.failed), root=self.config.rootpath,
                                files=files)
        self.summary = summary
        try:
            if self.written is not None:
                append_history(history_path, summary)
            summary.history = read_history(history_path)
            if html_path is not None:
                atomic_write_text(html_path, render_html(summary))
            markdown = render_markdown(summary, str(html_path) if html_path else None)
            if markdown_path is not None:
                write_markdown(markdown_path, markdown, append=False)
            if step_summary:
                write_markdown(Path(step_summary), markdown, append=True)
        except OSError as exc:  # a report that cannot be written must not hide the run's outcome
            summary.errors.append(f"could not write a report: {exc}")

    def missing_keys(self) -> list[str]:
        """Roles that would need the network on every call (cache off/refresh) but have no API key:
        a configuration problem known before the run, so it is reported once instead of per item."""
        if self.settings.cache_mode not in ("off", "refresh"):
            return []  # with a cache, hits need no key: only a miss can tell
        spec, settings = load_spec(self.bench_dir), self.settings
        roles = [("user", role_endpoint(spec.user_model, settings.user_model, settings, os.environ)),
                 ("judge", role_endpoint(spec.evaluator_model, settings.judge_model, settings, os.environ))]
        roles += [(f"target '{t.id}'", resolve_endpoint(t.as_model(), settings, os.environ))
                  for t in select_targets(spec, settings.targets) if t.model]
        return [f"{role} model '{ep.model}': no API key; set {ep.key_source} (or api_key_env in benchmark.yaml)"
                for role, ep in roles
                if ep is not None and ep.provider != "local" and not ep.api_key and ep.base_url is None]

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Report a missing API key once, before the run (the controller, also under xdist)."""
        if self.is_worker or self.config.option.collectonly:
            return
        try:
            missing = self.missing_keys()
        except (EvalbenchError, ValueError):
            return  # a broken benchmark is reported by collection
        if missing:
            raise pytest.UsageError("evalbench: every item would fail: " + "; ".join(missing))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Start the progress line once the number of items is known (controller only)."""
        if self.is_worker:
            return
        self.total = sum(1 for item in session.items if isinstance(item, CaseItem)) or len(session.items)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        every = self.config.getoption("evalbench_progress_every")
        if reporter is None or self.config.option.collectonly or every < 0:
            return
        live = bool(reporter.isatty) and self.config.getoption("verbose") <= 0 and every > 0
        self.progress = ProgressReporter(reporter, live=live, every=every)

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        """With the live progress line, our items print no letters (the line counts them instead)."""
        if self.progress is None or not self.progress.live or report.when != "call" or not self._ours(report):
            return None
        return report.outcome, "", ""

    def _ours(self, report: pytest.TestReport) -> bool:
        try:
            return (self.config.rootpath / report.location[0]).parent == self.bench_dir
        except (TypeError, IndexError):
            return False

    def _collapse_repeated(self, report: pytest.TestReport, kind: str) -> None:
        """A configuration problem that hits every item is shown in full once: later items with the
        same message point at the first one (the summary counts them: "500 items: <message>")."""
        message = str(report.longrepr).splitlines()[0] if report.longrepr else kind
        first = next((node for node, seen in self.messages.items() if seen == message), None)
        self.messages[report.nodeid] = message
        if first is not None:
            report.longrepr = f"evalbench {kind}: same error as {first} (see the evalbench summary)"

    def _track_progress(self, report: pytest.TestReport) -> None:
        if report.failed and report.when == "call":
            self.failed.add(report.nodeid)
        if report.when != "teardown" or self.progress is None or not self._ours(report):
            return
        self.finished.add(report.nodeid)
        counts = Counts(done=len(self.finished), total=max(self.total, len(self.finished)), failed=len(self.failed),
                        errored=len(self.errors))
        if self._run is not None and not self.config.pluginmanager.hasplugin("dsession"):
            engine = self._run.engine
            counts.in_flight, counts.requests, counts.cache_hits = (engine.in_flight, engine.stats.requests,
                                                                    engine.stats.cache_hits)
            counts.tokens = sum(u.input_tokens + u.output_tokens for u in engine.stats.usage.values())
            counts.cost = engine.stats.spent
        self.progress.update(counts)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """One section rendered from the run's summary: rates, problems, cost, where results went and,
        last, the gate's verdict and why."""
        if self.is_worker:
            return
        if self.progress is not None:
            self.progress.finish()
        if self.summary is None:
            if self.finish_error:
                terminalreporter.section("evalbench")
                terminalreporter.write_line(f"ERROR: {self.finish_error}")
            return
        terminalreporter.section("evalbench")
        base = self.bench_dir
        try:
            base = base.relative_to(Path.cwd())
        except ValueError:
            pass
        for line in summary_lines(self.summary, self.bench_dir, base):
            terminalreporter.write_line(line)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.close_engine()
