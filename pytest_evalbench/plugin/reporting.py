"""Reporting: the run's summary, built once, and every surface people read from it: the HTML
report, the history line, the Markdown summary, JUnit suite properties and the terminal section
(a role of the session; `session.py` keeps the hooks). Controller and single process only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_evalbench.errors import EvalbenchError
from pytest_evalbench.plugin._compat import junit_xml
from pytest_evalbench.plugin.outcomes import Outcomes
from pytest_evalbench.plugin.results import Results
from pytest_evalbench.plugin.selection import Selection
from pytest_evalbench.redaction import redact
from pytest_evalbench.render.terminal import LAST_RUN, summary_lines
from pytest_evalbench.sanitize import terminal
from pytest_evalbench.store import atomic_write_text

if TYPE_CHECKING:  # the reports are imported where a controller finishes the run (workers never do)
    from pytest_evalbench.render.summary import RunSummary


class Reporting:
    """Builds the run's summary and writes it everywhere it is read."""

    def __init__(self, config: pytest.Config, selection: Selection, outcomes: Outcomes, results: Results) -> None:
        self.config = config
        self.selection = selection
        self.outcomes = outcomes
        self.results = results
        self.settings = selection.settings
        self.bench_dir = selection.bench_dir
        self.summary: RunSummary | None = None

    def _report_path(self, option: str, default: Path | None) -> Path | None:
        """An output path option: unset -> `default`, `none` -> skipped, else the path given."""
        value = self.config.getoption(option)
        if value is None:
            return default
        return None if value.lower() == "none" else Path(value).resolve()

    def write_reports(self, exit_code: int) -> None:
        """Build the run's summary once; write the HTML report, the history line and the Markdown
        summary from it (the terminal summary renders the same object)."""
        from pytest_evalbench.commands import session_commands
        from pytest_evalbench.gate.verdict import gate_verdict, node_ids_of
        from pytest_evalbench.render.history import HISTORY, append_history, read_history
        from pytest_evalbench.render.html import render_html
        from pytest_evalbench.render.summary import build_summary

        results, outcomes = self.results, self.outcomes
        loaded = self.selection.loaded_run()
        files: list[tuple[str, str]] = []
        if results.written is not None:
            files += [(p.name, str(p)) for p in results.written.files]
        files.append(("status", str(self.bench_dir / LAST_RUN)))
        compared = results.outcome is not None and results.outcome.comparison is not None
        node_ids = node_ids_of(outcomes.records) if compared else {}  # only flips name node ids: no pass over records
        gate = gate_verdict(results.outcome, exit_code, len(outcomes.failed), node_ids, results.finish_error)
        files += [("baseline", str(path)) for path in gate.outcome.baseline_files]
        html_path = self._report_path("evalbench_html", self.bench_dir / "report.html")
        markdown_path = self._report_path("evalbench_markdown", None)
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        history_path = self.bench_dir / HISTORY
        files += [("report", str(html_path))] if html_path else []
        files += [("history", str(history_path))] if results.written is not None else []
        files += [("markdown", str(p)) for p in (markdown_path, Path(step_summary) if step_summary else None) if p]
        meta = loaded.meta() if loaded is not None else {"benchmark": self.settings.benchmark}
        summary = build_summary(kind=loaded.spec.kind if loaded is not None else "", written=results.written,
                                gate=gate, meta=meta, stats=results.stats, errors=outcomes.messages,
                                recorded=len(outcomes.records), failed=len(outcomes.failed), root=self.config.rootpath,
                                files=files, notes=results.notes())
        summary.cases = outcomes.case_statuses()  # after the transcripts' pass: one status per item (100,000)
        summary.scope = results.scope()
        summary.commands = session_commands(self.settings, flips=gate.flip_node_ids,
                                            failed=bool(outcomes.failed or outcomes.errors),
                                            errors=outcomes.errors.values(),
                                            root=self.config.rootpath, cwd=self.config.invocation_params.dir)
        if results.written is not None:  # the session its rows record (`.sessions.json`), so labels match
            run = self.selection.run
            summary.created, summary.commit = run.stamp.time, run.stamp.commit
        self.summary = summary
        self._junit_properties(summary)
        try:
            if results.written is not None:
                append_history(history_path, summary)
            summary.history = read_history(history_path)
            html = redact(render_html(summary))
            if html_path == self.bench_dir / "report.html":  # never through a link out of the benchmark
                atomic_write_text(html_path, html, self.bench_dir)
            elif html_path is not None:  # the user's own path: checked at start (a regular file or new)
                atomic_write_text(html_path, html, None)
            if markdown_path is None and not step_summary:
                return
            from pytest_evalbench.render.markdown import render_markdown, write_markdown  # only a run that writes Markdown

            markdown = redact(render_markdown(summary, str(html_path) if html_path else None))
            if markdown_path is not None:
                write_markdown(markdown_path, markdown, append=False)
            if step_summary:
                write_markdown(Path(step_summary), markdown, append=True)
        except (OSError, EvalbenchError) as exc:  # a report that cannot be written must not hide the run's outcome
            summary.errors.append(f"could not write a report: {exc}")

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
