"""The per-process session object: collection, prefetch, recording, writing.

Registered as a plugin only with `--benchmark`. Data flow: the benchmark's kind (see
`kinds.py`) loads the cases; items are scheduled on the engine ahead of the test loop; each
test's `evalbench_record` fixture waits for its own pipeline and the kind decides its outcome;
the makereport wrapper attaches the record (JSON) to the teardown report, which xdist forwards
to the controller; the controller alone merges, writes, gates and sets the exit status.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Collection, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..completeness import WORKER_DIED, Completeness, crash_reason
from ..context import BenchmarkRun
from ..errors import ConfigError, EvalbenchError, InputError, LLMError, TargetError
from ..kinds import BenchmarkKind, JSONRecord, KindResults, kind_of
from ..llm.cache import atomic_write_text
from ..llm.engine import EngineStats
from ..loading import SPEC_FILE, load_spec, resolve_benchmark_dir
from ..redaction import SECRETS, redact
from ..render.progress import Counts, ProgressReporter
from ..render.status import ERROR, JUDGE_UNRELIABLE, NOT_RUN, UNSCORED, case_status
from ..render.terminal import LAST_RUN, MAX_LISTED, summary_lines, transcript_text, write_run_running, write_run_status
from ..safe_files import atomic_write_text as write_text
from ..sanitize import terminal
from ..settings import RunSettings
from ..spool import Spool
from . import gc_tuning
from .collect import CASE_KEY, OUTCOME_KEY, BrokenBenchmark, CaseFile, CaseItem
from .options import check_files, compare_path, gate_settings

if TYPE_CHECKING:  # the gate and the reports are imported where a controller finishes the run (workers never do)
    from ..gate.baseline import Baseline
    from ..gate.outcome import GateOutcome
    from ..render.summary import CaseStatus, RunSummary

RECORD_KEY = pytest.StashKey[JSONRecord]()
RESULT_DIRS = ("runs", ".evalbench-cache", "shards")
PYTEST_OUTCOMES = (pytest.fail.Exception, pytest.skip.Exception, pytest.xfail.Exception, pytest.exit.Exception)


class Unscored(EvalbenchError):
    """The judge could not be parsed: the row is recorded with nulls and the item is an ERROR."""


class EvalbenchSession:
    """State of one pytest process for the selected benchmark."""

    def __init__(self, config: pytest.Config, settings: RunSettings) -> None:
        self.config = config
        self.settings = settings
        self.is_worker = hasattr(config, "workerinput")
        SECRETS.add_environment(os.environ)  # known before anything can print (the roles add theirs)
        SECRETS.add_url(settings.base_url)
        try:
            self.bench_dir = resolve_benchmark_dir(config.rootpath / "benchmarks", settings.benchmark)
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.baseline = self._read_baseline()
        self._run: BenchmarkRun | None = None
        self._kind: BenchmarkKind[Any] | None = None
        self._cases: dict[Path, list[Any]] | None = None
        self._load_warnings: list[warnings.WarningMessage] = []
        self.records: Spool[str] = Spool(self.bench_dir)
        """Node id -> record (JSON), spooled to disk as reports arrive (controller and single process)."""
        self.tally = Completeness()
        self.errors = self.tally.errors
        self.dropped: list[str] = []
        self._case_prefix = self._nodeid_prefix(config, self.bench_dir)
        self._status_started = False
        self.stats = EngineStats()
        self.outcome: GateOutcome | None = None
        self.finish_error: str | None = None
        self.collection_failed = False
        self.judge_lines: list[str] = []
        self.written: KindResults | None = None
        self.summary: RunSummary | None = None
        self.messages: dict[str, str] = {}
        """Node id -> the one-line error of an item that ERRORed (collapsed in the summary)."""
        self._first_with: dict[str, str] = {}
        """One-line error -> the first item that had it (a dict: 10,000 failing items stay linear)."""
        self.failed: set[str] = set()
        self.unreliable: set[str] = set()
        """Items whose failure rests on an unreliable judge (reported as xfailed)."""
        self.reasons: dict[str, str] = {}
        """Node id -> the first line of a failed (or judge-unreliable) item's message."""
        self.finished: set[str] = set()
        self.total = 0
        self.progress: ProgressReporter | None = None
        self._quiet_reports: list[Any] | None = None
        """The terminal reporter's list of setup/teardown reports (`stats[""]`), once looked up."""
        if config.args_source != pytest.Config.ArgsSource.ARGS:
            config.args = [str(self.bench_dir)]

    def _read_baseline(self) -> Baseline | None:
        """The baseline to compare with, read and validated before any LLM call (controller only)."""
        path = compare_path(self.config, self.bench_dir)
        if path is None or self.is_worker:
            return None
        from ..gate.outcome import read_baseline
        from ..safe_files import check_input_file

        try:
            return read_baseline(check_input_file(path, "the baseline to compare with"))
        except (InputError, ConfigError) as exc:
            raise pytest.UsageError(str(exc)) from None

    @staticmethod
    def _nodeid_prefix(config: pytest.Config, bench_dir: Path) -> str:
        """Node ids of the benchmark's items start with this (everything collected there is a case)."""
        try:
            return bench_dir.relative_to(config.rootpath).as_posix() + "/"
        except ValueError:
            return ""

    def is_case(self, nodeid: str) -> bool:
        return nodeid.startswith(self._case_prefix) and "::" in nodeid

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
    def kind(self) -> BenchmarkKind[Any]:
        if self._kind is None:
            self._kind = kind_of(self.run)
        return self._kind

    def cases_for(self, path: Path) -> list[Any]:
        """The cases of one data file (every file is loaded once per process)."""
        if self._cases is None:
            self._cases = self.kind.load_cases()
        for caught in self._load_warnings:
            warnings.warn_explicit(caught.message, caught.category, caught.filename, caught.lineno)
        self._load_warnings = []
        return self._cases.get(path, [])

    def case_node_ids(self) -> list[str]:
        """The node id of every case of the benchmark, selected or not (CI shards are dealt from them)."""
        out = []
        try:
            for path in self.kind.data_files():
                try:
                    prefix = path.relative_to(self.config.rootpath).as_posix()
                except ValueError:
                    continue
                out += [f"{prefix}::{case.name}" for case in self.cases_for(path)]
        except EvalbenchError:
            return []  # a benchmark that does not load is reported by collection (exit 2)
        return out

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
        if self.is_worker or self.config.option.collectonly:
            return
        try:
            check_files(self.config, self.settings, self.bench_dir)
        except EvalbenchError as exc:
            raise pytest.UsageError(str(exc)) from None  # nothing written, nothing called
        try:
            run, kind = self.run, self.kind
            with warnings.catch_warnings(record=True) as caught:  # shown in collection, where pytest reports them
                warnings.simplefilter("always")
                self._cases = kind.load_cases()
            self._load_warnings = list(caught)
        except EvalbenchError:
            run = None  # a benchmark or data file that does not load is reported by collection (exit 2)
        if run is not None:
            gate = gate_settings(self.config, self.bench_dir, run.spec.gate)
            try:
                run.preflight(kind.roles, [gate.save_baseline] if gate.save_baseline else [])
            except EvalbenchError as exc:
                raise pytest.UsageError(str(exc)) from None  # nothing ran: last_run.json stays as it was
        self._status_started = True
        write_run_running(self.bench_dir / LAST_RUN, self.settings.benchmark, self.bench_dir)

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
            import shlex

            root = self.config.rootpath
            where = [] if root == self.config.invocation_params.dir else ["--root", str(root)]
            return f"; generate it with `{shlex.join(['evalbench', 'gen-scenarios', self.settings.benchmark, *where])}`"
        return ""

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Remember a collection error: xdist forwards workers' failed collection reports to the
        controller through this hook, so the exit status can be 2 there too (xdist alone gives 1)."""
        if report.failed:
            self.collection_failed = True

    # ------------------------------------------------------------------ scheduling
    def schedule(self, items: list[pytest.Item], first: int = 0) -> None:
        """Start the LLM work of these items, earlier positions first."""
        for position, item in enumerate(items, start=first):
            if isinstance(item, CaseItem):
                self.run.engine.prefetch(item.nodeid, self._pipeline(item), position)

    def _pipeline(self, item: CaseItem) -> Any:
        case = item.stash[CASE_KEY]
        kind = self.kind
        return lambda: kind.run_case(case)

    def _future(self, item: CaseItem, priority: int) -> Any:
        return self.run.engine.submit(item.nodeid, self._pipeline(item), priority)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Without xdist, start every selected item's LLM work before the first test runs."""
        if session.testsfailed or self.config.option.collectonly:
            return
        gc_tuning.tune_for_run()  # every process that runs items (workers too), until unconfigure
        if self.is_worker or self.config.pluginmanager.hasplugin("dsession"):
            return
        self.selected([item.nodeid for item in session.items if isinstance(item, CaseItem)])
        self.schedule(session.items)

    def selected(self, ids: list[str]) -> None:
        """Controller side: these items must each end scored or counted."""
        self.tally.select([i for i in ids if self.is_case(i)])

    def worker_died(self, report: pytest.TestReport) -> None:
        """xdist lost the worker running this item: it is counted, never silently dropped."""
        report.evalbench_error = WORKER_DIED  # type: ignore[attr-defined]

    def record_for(self, item: pytest.Item) -> JSONRecord:
        """Wait for the item's pipeline; let the kind decide its outcome; raise for rows that must ERROR.
        The typed record becomes JSON here, once: the fixture's value and the teardown report's payload."""
        assert isinstance(item, CaseItem)
        record = self._future(item, 0).result()  # usually prefetched: priority unused

        hook = self.config.hook.pytest_evalbench_judged_row

        def judged_row(row: dict[str, Any], rec: JSONRecord) -> None:
            hook(config=self.config, row=row, record=rec)

        outcome = self.kind.outcome(record, judged_row if hook.get_hookimpls() else None)
        data = self.kind.record_to_json(record)
        item.user_properties.extend((name, redact(value) if isinstance(value, str) else value)
                                    for name, value in outcome.properties)  # JUnit XML
        item.user_properties.append(("evalbench_status", case_status(outcome.status, outcome.convicts)))
        item.stash[RECORD_KEY] = data
        item.stash[OUTCOME_KEY] = outcome
        if outcome.status == "unscored":
            raise Unscored(outcome.message or "unscored")
        return data

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
            report.longrepr = terminal(f"evalbench {kind}: {exc}")
            report.evalbench_error = kind  # type: ignore[attr-defined]
        elif exc is not None and isinstance(item, CaseItem) and not isinstance(exc, PYTEST_OUTCOMES):
            report.evalbench_error = crash_reason(exc)  # type: ignore[attr-defined]
            report.longrepr = terminal(str(report.longrepr))  # its message may quote model or endpoint text
        if getattr(report, "evalbench_error", None) and not any(k == "evalbench_status" for k, _ in item.user_properties):
            item.user_properties.append(("evalbench_status", ERROR))  # JUnit: the documented status
        if OUTCOME_KEY in item.stash:
            report.evalbench_status = item.stash[OUTCOME_KEY].status  # type: ignore[attr-defined]
        if call.when == "call" and report.failed and RECORD_KEY in item.stash and self.config.getoption("verbose") > 0:
            full = transcript_text(item.stash[RECORD_KEY])
            if full:
                report.longrepr = f"{report.longrepr}\n{terminal(full)}"
        if call.when == "teardown":
            self._release(item, report)
        return report

    def _release(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """The item is done: its record moves to the teardown report (which the controller, or xdist
        on the way there, consumes) and nothing of it stays on the item or in the engine."""
        if RECORD_KEY in item.stash:
            report.evalbench = item.stash[RECORD_KEY]  # type: ignore[attr-defined]
            del item.stash[RECORD_KEY]
        if OUTCOME_KEY in item.stash:
            del item.stash[OUTCOME_KEY]
        if self._run is not None:
            self._run.engine.release(item.nodeid)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, None, None]:
        """Consume the report first (our notes on it must be seen by the terminal reporter); once
        every plugin has seen it (xdist's worker has sent it), take the record off it: pytest's
        terminal reporter keeps every report until the end of the session."""
        if not self.is_worker and self.is_case(report.nodeid):
            self._consume(report)
        try:
            return (yield)
        finally:
            if hasattr(report, "evalbench"):
                del report.evalbench
            if report.when != "call" and self.is_case(report.nodeid):
                self._drop_if_quiet(report)

    def _drop_if_quiet(self, report: pytest.TestReport) -> None:
        """Every plugin has seen this setup/teardown report: if it is a quiet pass (no teardown
        output), the terminal reporter need not keep it, so it is dropped as it arrives (it was the
        last one added) instead of at the end: two of an item's three reports (~2 KB each item,
        ~200 MB at N = 100,000) never pile up."""
        quiet = self._quiet_reports
        if quiet is None:
            stats = getattr(self.config.pluginmanager.get_plugin("terminalreporter"), "stats", None)
            quiet = self._quiet_reports = stats.setdefault("", []) if isinstance(stats, dict) else []
        if quiet and quiet[-1] is report and report.passed and not self._has_teardown_output(report):
            quiet.pop()

    @staticmethod
    def _has_teardown_output(report: pytest.TestReport) -> bool:
        return any("teardown" in name for name, _ in getattr(report, "sections", ()))

    def _consume(self, report: pytest.TestReport) -> None:
        """Controller side (and no-xdist runs): keep every item's record, status and first error;
        any failure other than the kind's own `failed` verdict, and any skip, is an error."""
        nodeid = report.nodeid
        status = getattr(report, "evalbench_status", None)
        error = getattr(report, "evalbench_error", None)
        if error is None and report.failed and not (report.when == "call" and status == "failed"):
            error = "crashed"
        if error is None and report.skipped and not (report.when == "call" and status == "failed"
                                                     and hasattr(report, "wasxfail")):
            error = "skipped"  # an xfailed verdict (judge unreliable: cannot convict) is still a scored row
        if error:
            self.tally.error(nodeid, error)
            self._collapse_repeated(report, error)
        if status is not None and report.when == "teardown":
            self.tally.status(nodeid, status)
        if report.when == "call" and status == "failed" and (report.failed or hasattr(report, "wasxfail")):
            if hasattr(report, "wasxfail"):
                self.unreliable.add(nodeid)
            text = str(getattr(report, "wasxfail", "") or report.longrepr or "")
            self.reasons[nodeid] = text.removeprefix("reason: ").splitlines()[0] if text.strip() else ""
        record = getattr(report, "evalbench", None)
        if record is not None:
            self._keep(nodeid, record)
        self._track_progress(report)

    def _keep(self, nodeid: str, record: JSONRecord) -> None:
        """The one place a record arriving on the controller is stored: spooled as its JSON form."""
        self.records.add(nodeid, record)

    def _records(self) -> Collection[JSONRecord]:
        """This session's records in node-id order, read back from the spool on every pass."""
        return self.records.values()

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
        self._drop_quiet_phase_reports()
        self.stats.merge(self.close_engine() or {})
        status = int(exitstatus)
        if (self.collection_failed and status == pytest.ExitCode.TESTS_FAILED
                and not self.config.option.continue_on_collection_errors):
            status = session.exitstatus = pytest.ExitCode.INTERRUPTED
        if not self._status_started:
            return
        if not self.tally.selected and not self.records and not self.errors:
            write_run_status(self.bench_dir / LAST_RUN, self, None)  # collection error or nothing selected
            return
        try:
            self.outcome = self._finish(status)
        except EvalbenchError as exc:
            self.finish_error = str(exc)
            write_run_status(self.bench_dir / LAST_RUN, self, None)
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            self.write_reports(int(session.exitstatus))
            return
        session.exitstatus = self.outcome.exit_code(status)
        self.write_reports(int(session.exitstatus))

    def _drop_quiet_phase_reports(self) -> None:
        """Keep pytest's failure summary linear: for every failed item it scans all passed
        setup/teardown reports for teardown output (quadratic: minutes at 10,000 failing items).
        Our items' passed setup/teardown reports without teardown output print nothing there, so
        the terminal reporter need not keep them (nor the records attached to them)."""
        stats = getattr(self.config.pluginmanager.get_plugin("terminalreporter"), "stats", None)
        if isinstance(stats, dict) and stats.get(""):
            stats[""][:] = [r for r in stats[""] if not self.is_case(getattr(r, "nodeid", ""))
                            or self._has_teardown_output(r)]

    def _finish(self, exitstatus: int) -> GateOutcome:
        from ..gate.outcome import GateInputs, evaluate_gate, write_gate_files

        run = self.run
        kind = self.kind
        written = self.written = kind.write_results(kind.record_from_json(data) for data in self._records())
        self.dropped = written.dropped
        settings = gate_settings(self.config, self.bench_dir, run.spec.gate)
        inputs = GateInputs(
            results=written.rates, outcomes=written.outcomes, scores=written.eval_scores, rules=run.spec.thresholds,
            baseline=self.baseline,
            meta=run.meta(), table=written.table,
            incomplete=self.tally.reasons(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED))
        outcome = evaluate_gate(inputs, settings)
        write_gate_files(settings, inputs, outcome, written, f"evalbench: {run.spec.name}")
        self.judge_lines = written.judge_lines
        write_run_status(run.output_dir / LAST_RUN, self, outcome)
        hook = self.config.hook.pytest_evalbench_results
        if hook.get_hookimpls():  # the documented list, built only for someone who asked for it
            hook(config=self.config, benchmark=self.settings.benchmark, results=list(written.results),
                 records=list(self._records()))
        return outcome

    # ------------------------------------------------------------------ reports people read
    def _report_path(self, option: str, default: Path | None) -> Path | None:
        """An output path option: unset -> `default`, `none` -> skipped, else the path given."""
        value = self.config.getoption(option)
        if value is None:
            return default
        return None if value.lower() == "none" else Path(value).resolve()

    def scope(self) -> str:
        """`full` when every case of the configured benchmark was selected, else `selection`
        (a node id, -k, -m, --lf, a shard, or --evalbench-target naming fewer targets than benchmark.yaml)."""
        run = self._run
        narrowed = run is not None and bool({t.id for t in run.spec.targets} - {t.id for t in run.target_configs})
        total = sum(len(cases) for cases in (self._cases or {}).values())
        return "selection" if narrowed or len(self.tally.selected) < total else "full"

    def _notes(self) -> list[str]:
        """Completeness, dropped rows and judge reliability, for every report."""
        missing = self.tally.missing()
        lines = []
        if missing:
            shown = ", ".join(missing[:MAX_LISTED]) + (f" and {len(missing) - MAX_LISTED} more"
                                                       if len(missing) > MAX_LISTED else "")
            lines.append(f"{len(missing)} selected item{'s' if len(missing) > 1 else ''} never reported: {shown}")
        if self.finish_error:
            lines.append(f"ERROR: {self.finish_error}")
        return lines + [f"dropped {d}" for d in self.dropped] + list(self.judge_lines)

    def write_reports(self, exit_code: int) -> None:
        """Build the run's summary once; write the HTML report, the history line and the Markdown
        summary from it (the terminal summary renders the same object)."""
        from ..commands import session_commands
        from ..gate.verdict import gate_verdict, node_ids_of
        from ..render.history import HISTORY, append_history, read_history
        from ..render.html import render_html
        from ..render.markdown import render_markdown, write_markdown
        from ..render.summary import build_summary

        files: list[tuple[str, str]] = []
        if self.written is not None:
            files += [(p.name, str(p)) for p in self.written.files]
        files.append(("status", str(self.bench_dir / LAST_RUN)))
        gate = gate_verdict(self.outcome, exit_code, len(self.failed), node_ids_of(self.records), self.finish_error)
        files += [("baseline", str(path)) for path in gate.baseline_files]
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
                                files=files, notes=self._notes(), cases=self._case_statuses())
        summary.scope = self.scope()
        summary.commands = session_commands(self.settings, flips=gate.flip_node_ids,
                                            failed=bool(self.failed or self.errors), errors=self.errors.values(),
                                            root=self.config.rootpath, cwd=self.config.invocation_params.dir)
        if self.written is not None:  # the session its rows record (`.sessions.json`), so labels match
            summary.created, summary.commit = self.run.stamp.time, self.run.stamp.commit
        self.summary = summary
        self._junit_properties(summary)
        try:
            if self.written is not None:
                append_history(history_path, summary)
            summary.history = read_history(history_path)
            html = redact(render_html(summary))
            if html_path == self.bench_dir / "report.html":  # never through a link out of the benchmark
                write_text(html_path, html, self.bench_dir)
            elif html_path is not None:  # the user's own path: checked at start (a regular file or new)
                atomic_write_text(html_path, html)
            markdown = redact(render_markdown(summary, str(html_path) if html_path else None))
            if markdown_path is not None:
                write_markdown(markdown_path, markdown, append=False)
            if step_summary:
                write_markdown(Path(step_summary), markdown, append=True)
        except (OSError, EvalbenchError) as exc:  # a report that cannot be written must not hide the run's outcome
            summary.errors.append(f"could not write a report: {exc}")

    def _case_statuses(self) -> list[CaseStatus]:
        """Every selected item of this session with its documented status (`render.summary.CASE_STATUSES`)."""
        from ..render.summary import CaseStatus

        tally = self.tally
        out = []
        for nodeid in sorted(tally.selected | set(tally.scored) | set(tally.errors)):
            if nodeid in tally.errors:
                status = UNSCORED if tally.errors[nodeid] == UNSCORED else ERROR
                reason = self.messages.get(nodeid, tally.errors[nodeid])
            elif nodeid in tally.scored:
                status = case_status(tally.scored[nodeid], nodeid not in self.unreliable)
                reason = self.reasons.get(nodeid, "") if status != UNSCORED else ""
            else:
                status, reason = NOT_RUN, "never reported"
            out.append(CaseStatus(nodeid, status, reason))
        return out

    def _junit_properties(self, summary: RunSummary) -> None:
        """With --junitxml: the run's rates, case counts and gate rules as the test suite's properties
        (each case carries its own `evalbench_status`), in the words every other surface uses."""
        try:
            from _pytest.junitxml import xml_key  # the plugin behind record_testsuite_property
        except ImportError:  # pragma: no cover - pytest internals moved
            return
        xml = self.config.stash.get(xml_key, None)
        if xml is None:
            return
        xml.add_global_property("evalbench_gate", f"{summary.gate.verdict} (exit {summary.gate.exit_code}): "
                                                  f"{summary.gate.reason}")
        xml.add_global_property("evalbench_cases", summary.status_line())
        for rule in summary.gate.rule_lines:
            xml.add_global_property("evalbench_rule", rule)
        for row in summary.rates:
            xml.add_global_property(f"evalbench_rate {row.target} {row.metric}",
                                    f"{row.rate_text()} {row.interval_text()}")

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
        """With the live progress line, our items print no letters (the line counts them instead);
        with -v a failure of an unreliable judge reads `XFAIL (judge unreliable)`, its documented status."""
        if report.when != "call" or not self.is_case(report.nodeid):
            return None
        if self.progress is not None and self.progress.live:
            return report.outcome, "", ""
        if hasattr(report, "wasxfail") and getattr(report, "evalbench_status", None) == "failed":
            return "xfailed", "x", f"XFAIL ({JUDGE_UNRELIABLE})"
        return None

    def _collapse_repeated(self, report: pytest.TestReport, kind: str) -> None:
        """A configuration problem that hits every item is shown in full once: later items with the
        same message point at the first one (the summary counts them: "500 items: <message>")."""
        message = str(report.longrepr).splitlines()[0] if report.longrepr else kind
        first = self._first_with.setdefault(message, report.nodeid)
        self.messages[report.nodeid] = message
        if first != report.nodeid:
            report.longrepr = f"evalbench {kind}: same error as {first} (see the evalbench summary)"

    def _track_progress(self, report: pytest.TestReport) -> None:
        if report.failed and report.when == "call":
            self.failed.add(report.nodeid)
        if report.when != "teardown" or self.progress is None or not self.is_case(report.nodeid):
            return
        self.finished.add(report.nodeid)
        if not self.progress.due(len(self.finished), max(self.total, len(self.finished))):
            return  # most items: the line is redrawn at most every 0.2 s (every `every` s in CI logs)
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
                terminalreporter.write_line(terminal(f"ERROR: {self.finish_error}"))
            return
        terminalreporter.section("evalbench")
        base = self.bench_dir
        try:
            base = base.relative_to(Path.cwd())
        except ValueError:
            pass
        for line in summary_lines(self.summary, self.bench_dir, base):
            terminalreporter.write_line(terminal(line))  # errors and notes carry endpoint and model text

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.close_engine()
        gc_tuning.restore()
        self.records.close()
