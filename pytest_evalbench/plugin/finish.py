"""The session's finish and what people see of it (roles of the session; `session.py` keeps the hooks).
Controller and single process only: workers hand their records over on the reports.

- `Results`: the records this session received become result files, the gate's decision, the exit
  status and last_run.json;
- `Reporting`: the run's summary, built once, and every surface people read from it: the HTML report,
  the history line, the Markdown summary, JUnit suite properties and the terminal section.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from pytest_evalbench.base.errors import ConfigError, EvalbenchError, InputError
from pytest_evalbench.base.files import NonFiniteNumber, atomic_write_text, keep_gitignore
from pytest_evalbench.base.safe_files import WriteFailed
from pytest_evalbench.base.safe_text import redact, terminal
from pytest_evalbench.base.spool import Spool
from pytest_evalbench.gate.completeness import Completeness
from pytest_evalbench.gate.decision import EXIT_INCOMPLETE
from pytest_evalbench.kinds.protocol import AnyKind, JSONRecord, KindResults
from pytest_evalbench.kinds.run import RunSettings
from pytest_evalbench.llm.engine import EngineStats
from pytest_evalbench.plugin._compat import (
    continues_on_collection_errors,
    junit_xml,
    set_exit_status,
    terminal_writer,
)
from pytest_evalbench.plugin.bookkeeping import Bookkeeping
from pytest_evalbench.plugin.options import compare_path, gate_settings
from pytest_evalbench.plugin.selection import Selection
from pytest_evalbench.render.terminal import (
    LAST_RUN,
    MAX_LISTED,
    summary_lines,
    verdict_line,
    write_run_running,
    write_run_status,
)

if TYPE_CHECKING:  # the gate is imported where a controller finishes the run (workers never do)
    from pytest_evalbench.gate.decision import GateDecision
    from pytest_evalbench.gate.paired import Baseline
    from pytest_evalbench.render.summary import RunSummary


@dataclass
class RunEnd:
    """What last_run.json is written from (`render.terminal.write_run_status` reads these names)."""

    settings: RunSettings
    bench_dir: Path
    tally: Completeness
    errors: dict[str, str]
    records: Spool[str]
    dropped: list[str]
    stats: EngineStats
    finish_error: str | None
    scope_name: str
    judge_lines: list[str]

    def scope(self) -> str:
        return self.scope_name


class Results:
    """Writing, gating and the exit status of this session's run."""

    def __init__(self, config: pytest.Config, selection: Selection, books: Bookkeeping, is_worker: bool) -> None:
        self.config = config
        self.selection = selection
        self.books = books
        self.settings = selection.settings
        self.bench_dir = selection.bench_dir
        self.is_worker = is_worker
        self.baseline_missing: Path | None = None
        """`--evalbench-plan` with a baseline path that holds no file yet: planned without one."""
        self.baseline = self._read_baseline()
        self.stats = EngineStats()
        self.decision: GateDecision | None = None
        self.finish_error: str | None = None
        self.judge_lines: list[str] = []
        self.written: KindResults | None = None
        self.dropped: list[str] = []
        self.status_started = False

    def _read_baseline(self) -> Baseline | None:
        """The baseline to compare with, read and validated before any LLM call (controller only)."""
        path = compare_path(self.config, self.bench_dir)
        if path is None or self.is_worker:
            return None
        if self.config.getoption("evalbench_plan", None) is not None and not os.path.lexists(path):
            self.baseline_missing = path  # a plan makes no call: it plans at an assumed rate and says so
            return None
        from pytest_evalbench.base.safe_files import check_input_file
        from pytest_evalbench.gate.decision import read_baseline

        try:
            return read_baseline(check_input_file(path, "the baseline to compare with"))
        except (InputError, ConfigError) as exc:
            raise pytest.UsageError(terminal(str(exc))) from None

    def start(self) -> None:
        """last_run.json says "running" until the final state replaces it, so a killed run never
        leaves an earlier "complete" behind."""
        try:
            keep_gitignore(self.bench_dir)  # before the first output file: `git status` never lists one
            write_run_running(self.bench_dir / LAST_RUN, self.settings.benchmark, self.bench_dir)
        except OSError as exc:  # a full disk or read-only checkout: nothing is spent before it is fixed
            problem = (str(exc) if isinstance(exc, WriteFailed)
                       else f"{self.bench_dir / LAST_RUN}: cannot be written ({_os_problem(exc)})")
            raise pytest.UsageError(terminal(f"{problem}; nothing was run")) from None
        self.status_started = True

    def run_end(self) -> RunEnd:
        o = self.books
        return RunEnd(self.settings, self.bench_dir, o.tally, o.errors, o.records, self.dropped, self.stats,
                      self.finish_error, self.scope(), self.judge_lines)

    def scope(self) -> str:
        """`full` when every case of the configured benchmark was selected, else `selection`."""
        return self.selection.scope(len(self.books.tally.selected))

    def _records(self) -> Collection[JSONRecord]:
        """This session's records in node-id order, read back from the spool on every pass."""
        return self.books.records.values()

    def finish(self, session: pytest.Session, exitstatus: int, engine_stats: dict[str, object] | None) -> int | None:
        """The controller merges, writes and decides the exit status; the exit code the reports
        show, or None when no report is written (nothing started, nothing selected)."""
        self.stats.merge(engine_stats or {})
        status = int(exitstatus)
        if (self.selection.collection_failed and status == pytest.ExitCode.TESTS_FAILED
                and not continues_on_collection_errors(self.config)):
            status = pytest.ExitCode.INTERRUPTED
            set_exit_status(session, status)
        if not self.status_started:
            return None
        tally = self.books.tally
        if not tally.selected and not self.books.records and not self.books.errors:
            self._final_status()  # collection error or nothing selected
            return None
        try:
            if self.books.write_failure is not None:  # the records are incomplete: no result file is replaced
                raise self.books.write_failure
            self.decision = self._finish(status)
        except (EvalbenchError, OSError) as exc:
            # a file problem is a usage error (4); a write that failed (a full disk) leaves the run's
            # results unwritten: incomplete (7). Either way last_run.json says "error" and why.
            code = pytest.ExitCode.USAGE_ERROR if isinstance(exc, EvalbenchError) else EXIT_INCOMPLETE
            self.finish_error = (str(exc) if isinstance(exc, (EvalbenchError, WriteFailed))
                                 else f"result files could not be written: {_os_problem(exc)}")
            self._final_status()
            set_exit_status(session, code)
            return int(code)
        code = self.decision.exit_code(status)
        set_exit_status(session, code)
        return int(code)

    def reports_failed(self, session: pytest.Session, exc: OSError) -> None:
        """A report or the history line could not be written: exit 7, last_run.json says why (the
        first file refused, when the finish met a full disk before)."""
        self.finish_error = self.finish_error or (str(exc) if isinstance(exc, WriteFailed)
                                                  else f"reports could not be written: {_os_problem(exc)}")
        self._final_status()
        set_exit_status(session, EXIT_INCOMPLETE)

    def _final_status(self) -> None:
        """last_run.json's final state without the gate's decision (nothing ran, or the finish or the
        reports failed); when even that cannot be written, the terminal says why."""
        path = self.bench_dir / LAST_RUN
        try:
            write_run_status(path, self.run_end(), None)
        except NonFiniteNumber as exc:
            self.finish_error = f"{self.finish_error}; {exc}" if self.finish_error else str(exc)
        except OSError as exc:
            problem = f"{path} could not be written ({_os_problem(exc)})"
            self.finish_error = f"{self.finish_error}; {problem}" if self.finish_error else problem

    def _finish(self, exitstatus: int) -> GateDecision:
        from pytest_evalbench.gate.decision import GateInputs, evaluate_gate, write_gate_files

        run = self.selection.run
        kind = self.selection.kind
        written = self.written = self._write(kind)
        self.dropped = written.dropped
        settings = gate_settings(self.config, self.bench_dir, run.spec.gate, selection=self.scope() == "selection")
        inputs = GateInputs(
            results=written.rates, units=written.units, scores=written.eval_scores, rules=run.spec.thresholds,
            baseline=self.baseline, corrected=run.spec.judge.correct_rates, identities=run.identities(),
            meta=run.meta(), unreliable=dict(written.unreliable),
            metric_types={m.id: m.type for m in run.spec.metrics}, sequential=written.sequential,
            incomplete=self.books.tally.reasons(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
            + self.stats.unwritten_lines())
        decision = evaluate_gate(inputs, settings)
        write_gate_files(settings, inputs, decision, written, f"evalbench: {run.spec.name}")
        self.judge_lines = written.judge_lines
        write_run_status(run.output_dir / LAST_RUN, self.run_end(), decision)  # OSError: see `finish`
        hook = self.config.hook.pytest_evalbench_results
        if hook.get_hookimpls():  # the documented list, built only for someone who asked for it
            hook(config=self.config, benchmark=self.settings.benchmark, results=list(written.results),
                 records=list(self._records()))
        return decision

    def _write(self, kind: AnyKind) -> KindResults:
        """The kind writes this session's records (valid when spooled: not validated again)."""
        return kind.write_results(self._records())

    def notes(self) -> list[str]:
        """Completeness, dropped rows and judge reliability, for every report."""
        missing = self.books.tally.missing()
        lines = []
        if missing:
            shown = ", ".join(missing[:MAX_LISTED]) + (f" and {len(missing) - MAX_LISTED} more"
                                                       if len(missing) > MAX_LISTED else "")
            lines.append(f"{len(missing)} selected item{'s' if len(missing) > 1 else ''} never reported: {shown}")
        if self.finish_error:
            lines.append(f"ERROR: {self.finish_error}")
        return lines + [f"dropped {d}" for d in self.dropped] + list(self.judge_lines)


class Reporting:
    """Builds the run's summary and writes it everywhere it is read."""

    def __init__(self, config: pytest.Config, selection: Selection, books: Bookkeeping, results: Results) -> None:
        self.config = config
        self.selection = selection
        self.books = books
        self.results = results
        self.settings = selection.settings
        self.bench_dir = selection.bench_dir
        self.summary: RunSummary | None = None
        self.store_import: threading.Thread | None = None
        self.shown = False
        """The evalbench section was shown: the verdict line follows it."""

    def import_store_early(self) -> None:
        """Import the store's modules (SQLAlchemy) in a background thread, once, where this process has
        a core to spare before the run's end: an xdist controller whose first worker is done while the
        others run their last items. `record` then finds them imported. A shard records nothing."""
        if self.store_import is None and self.settings.shard is None and not self._recording_off():
            self.store_import = threading.Thread(target=_import_store, name="evalbench-store-import", daemon=True)
            self.store_import.start()

    def _recording_off(self) -> bool:
        """`--evalbench-store=none` or `EVALBENCH_STORE=none`: no run is recorded."""
        from pytest_evalbench.store import store_setting

        return store_setting(self.config.getoption("evalbench_store", None), os.environ) is None

    def _report_path(self, option: str, default: Path | None) -> Path | None:
        """An output path option: unset -> `default`, `none` -> skipped, else the path given."""
        value = self.config.getoption(option)
        if value is None:
            return default
        return None if value.lower() == "none" else Path(value).resolve()

    def write_reports(self, exit_code: int) -> None:
        """Build the run's summary once; write the HTML report, the history line and the Markdown
        summary from it (the terminal summary renders the same object)."""
        from pytest_evalbench.formats.provenance import git_commit
        from pytest_evalbench.gate.decision import gate_verdict, node_ids_of
        from pytest_evalbench.render.html import render_html
        from pytest_evalbench.render.summary import HISTORY, append_history, build_summary, read_history
        from pytest_evalbench.render.terminal import session_commands

        results, books = self.results, self.books
        loaded = self.selection.loaded_run()
        files: list[tuple[str, str]] = []
        if results.written is not None:
            files += [(p.name, str(p)) for p in results.written.files]
        files.append(("status", str(self.bench_dir / LAST_RUN)))
        compared = results.decision is not None and results.decision.comparison is not None
        node_ids = node_ids_of(books.records) if compared else {}  # only flips name node ids: no pass over records
        failures = books.failures()
        gate = gate_verdict(results.decision, exit_code, failures, node_ids, results.finish_error)
        files += [("baseline", str(path)) for path in gate.decision.baseline_files]
        # a calibration run is its own run: the benchmark's report.html and history.jsonl stay the last
        # evaluation's (an explicit --evalbench-html is still written)
        evaluation = not self.settings.calibrate
        html_path = self._report_path("evalbench_html", self.bench_dir / "report.html" if evaluation else None)
        markdown_path = self._report_path("evalbench_markdown", None)
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        history_path = self.bench_dir / HISTORY
        record_history = results.written is not None and evaluation
        files += [("report", str(html_path))] if html_path else []
        files += [("history", str(history_path))] if record_history else []
        files += [("markdown", str(p)) for p in (markdown_path, Path(step_summary) if step_summary else None) if p]
        meta = loaded.meta() if loaded is not None else {"benchmark": self.settings.benchmark}
        stamp = self.selection.run.stamp if results.written is not None else None  # the session its rows record
        summary = build_summary(kind=loaded.spec.kind if loaded is not None else "", written=results.written,
                                gate=gate, meta=meta, stats=results.stats, errors=books.messages,
                                recorded=len(books.records), failed=failures.total,
                                commit=stamp.commit if stamp is not None else git_commit(self.config.rootpath),
                                files=files, notes=results.notes())
        summary.cases = books.case_statuses()  # after the transcripts' pass: one status per item (100,000)
        summary.scope = results.scope()
        summary.failures = failures
        summary.commands = session_commands(self.settings, flips=gate.flip_node_ids,
                                            failed=bool(books.failed or books.errors),
                                            errors=books.errors.values(),
                                            root=self.config.rootpath, cwd=self.config.invocation_params.dir)
        if stamp is not None:  # the session its rows record (`.sessions.json`), so labels match
            summary.created = stamp.time
        self.summary = summary
        self._junit_properties(summary)
        try:
            if record_history:
                append_history(history_path, summary)
            summary.history = read_history(history_path) if evaluation else []
            if html_path == self.bench_dir / "report.html":  # never through a link out of the benchmark
                atomic_write_text(html_path, redact(render_html(summary)), self.bench_dir)
            elif html_path is not None:  # the user's own path: checked at start (a regular file or new)
                atomic_write_text(html_path, redact(render_html(summary)), None)
            if markdown_path is None and not step_summary:
                return
            from pytest_evalbench.render.markdown import render_markdown, write_markdown  # only a run that writes Markdown

            markdown = redact(render_markdown(summary, str(html_path) if html_path else None))
            if markdown_path is not None:
                write_markdown(markdown_path, markdown, append=False)
            if step_summary:
                write_markdown(Path(step_summary), markdown, append=True)
        except WriteFailed:  # a full disk: the run ends incomplete, naming the file (`Results.reports_failed`)
            raise
        except (OSError, EvalbenchError) as exc:  # a report that cannot be written must not hide the run's outcome
            summary.errors.append(f"could not write a report: {exc}")

    def record(self, exit_code: int) -> None:
        """Record the run in the store, from the summary and the records the result files were written from.
        A shard records nothing (its merge is the run); a store that cannot take the run is one warning line
        below the summary, never another exit status."""
        summary = self.summary
        if summary is None or self.settings.shard is not None or self._recording_off():
            return  # when recording is off the store's modules (SQLAlchemy) are not even imported
        from pytest_evalbench.store.record import ItemRows, record_run, run_of, store_url

        root = self.config.rootpath
        given = self.config.getoption("evalbench_store", None)
        url = cast(str, store_url(root, given, os.environ))  # None only when off, returned above
        loaded = self.selection.loaded_run()
        cases = ItemRows(self.books.records, ((c.nodeid, c.status, c.reason) for c in summary.cases))
        run = run_of(summary, identities=loaded.identities() if loaded is not None else {}, cases=[],
                     exit_status=exit_code, root=root, env=os.environ)
        run_id, warning = record_run(url, run, root, cases)  # built and written a batch at a time
        summary.notes.append(warning if warning is not None else f"recorded as run {run_id}")

    def _junit_properties(self, summary: RunSummary) -> None:
        """With --junitxml: the run's rates, case counts and gate rules as the test suite's properties
        (each case carries its own `evalbench_status`), in the words every other surface uses."""
        xml = junit_xml(self.config)
        if xml is None:
            return
        xml.add_property("evalbench_gate", f"{summary.gate.verdict} (exit {summary.gate.exit_code}): "
                                                  f"{summary.gate.reason}")
        xml.add_property("evalbench_cases", summary.status_line())
        for rule in summary.gate.rule_lines:
            xml.add_property("evalbench_rule", rule)
        for row in summary.rates:
            xml.add_property(f"evalbench_rate {row.target} {row.metric}",
                                    f"{row.rate_text()} {row.interval_text()}")

    def terminal_summary(self, terminalreporter: Any) -> None:
        """One section rendered from the run's summary: rates, problems, cost, where results went and,
        last, the gate's verdict and why."""
        if self.summary is None:
            if self.results.finish_error:
                terminalreporter.section("evalbench")
                terminalreporter.write_line(terminal(f"ERROR: {self.results.finish_error}"))
            return
        terminalreporter.section("evalbench")
        base = self.bench_dir
        try:
            base = base.relative_to(Path.cwd())
        except ValueError:
            pass
        for line in summary_lines(self.summary, self.bench_dir, base):
            terminalreporter.write_line(terminal(line))  # errors and notes carry endpoint and model text
        self.shown = True

    def verdict_line(self, config: pytest.Config) -> None:
        """The verdict in one short line, once the section above it was shown."""
        writer = terminal_writer(config)
        if self.summary is None or not self.shown or writer is None:
            return
        gate = self.summary.gate
        color = {"passed": "yellow" if gate.tolerated else "green", "failed": "red", "regression": "red"}
        writer[0].write_line(terminal(verdict_line(gate)), **{color.get(gate.verdict, "yellow"): True, "bold": True})


def _os_problem(exc: OSError) -> str:
    """An OSError as one line: what failed and on which file (no traceback)."""
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or type(exc).__name__}{where}"


def _import_store() -> None:
    """The store's modules, imported ahead of `Reporting.record`; a failure here is raised again (and
    reported) by the import there."""
    with contextlib.suppress(Exception):
        importlib.import_module("pytest_evalbench.store.record")
