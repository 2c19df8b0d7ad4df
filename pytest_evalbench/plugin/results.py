"""Results: the records this session received become result files, the gate's verdict, the exit
status and last_run.json (a role of the session; `session.py` keeps the hooks). Controller and
single process only: workers hand their records over on the reports.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from pytest_evalbench.completeness import Completeness
from pytest_evalbench.errors import ConfigError, EvalbenchError, InputError
from pytest_evalbench.kinds import AnyKind, JSONRecord, KindResults
from pytest_evalbench.llm.engine import EngineStats
from pytest_evalbench.plugin._compat import continues_on_collection_errors, set_exit_status
from pytest_evalbench.plugin.options import compare_path, gate_settings
from pytest_evalbench.plugin.outcomes import Outcomes
from pytest_evalbench.plugin.selection import Selection
from pytest_evalbench.render.terminal import LAST_RUN, MAX_LISTED, write_run_running, write_run_status
from pytest_evalbench.sanitize import terminal
from pytest_evalbench.settings import RunSettings
from pytest_evalbench.spool import Spool

if TYPE_CHECKING:  # the gate is imported where a controller finishes the run (workers never do)
    from pytest_evalbench.gate.baseline import Baseline
    from pytest_evalbench.gate.outcome import GateOutcome


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

    def __init__(self, config: pytest.Config, selection: Selection, outcomes: Outcomes, is_worker: bool) -> None:
        self.config = config
        self.selection = selection
        self.outcomes = outcomes
        self.settings = selection.settings
        self.bench_dir = selection.bench_dir
        self.is_worker = is_worker
        self.baseline = self._read_baseline()
        self.stats = EngineStats()
        self.outcome: GateOutcome | None = None
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
        from pytest_evalbench.gate.outcome import read_baseline
        from pytest_evalbench.safe_files import check_input_file

        try:
            return read_baseline(check_input_file(path, "the baseline to compare with"))
        except (InputError, ConfigError) as exc:
            raise pytest.UsageError(terminal(str(exc))) from None

    def start(self) -> None:
        """last_run.json says "running" until the final state replaces it, so a killed run never
        leaves an earlier "complete" behind."""
        self.status_started = True
        write_run_running(self.bench_dir / LAST_RUN, self.settings.benchmark, self.bench_dir)

    def run_end(self) -> RunEnd:
        o = self.outcomes
        return RunEnd(self.settings, self.bench_dir, o.tally, o.errors, o.records, self.dropped, self.stats,
                      self.finish_error, self.scope(), self.judge_lines)

    def scope(self) -> str:
        """`full` when every case of the configured benchmark was selected, else `selection`."""
        return self.selection.scope(len(self.outcomes.tally.selected))

    def _records(self) -> Collection[JSONRecord]:
        """This session's records in node-id order, read back from the spool on every pass."""
        return self.outcomes.records.values()

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
        tally = self.outcomes.tally
        if not tally.selected and not self.outcomes.records and not self.outcomes.errors:
            write_run_status(self.bench_dir / LAST_RUN, self.run_end(), None)  # collection error or nothing selected
            return None
        try:
            self.outcome = self._finish(status)
        except EvalbenchError as exc:
            self.finish_error = str(exc)
            write_run_status(self.bench_dir / LAST_RUN, self.run_end(), None)
            set_exit_status(session, pytest.ExitCode.USAGE_ERROR)
            return int(pytest.ExitCode.USAGE_ERROR)
        code = self.outcome.exit_code(status)
        set_exit_status(session, code)
        return int(code)

    def _finish(self, exitstatus: int) -> GateOutcome:
        from pytest_evalbench.gate.outcome import GateInputs, evaluate_gate, write_gate_files

        run = self.selection.run
        kind = self.selection.kind
        written = self.written = self._write(kind)
        self.dropped = written.dropped
        settings = gate_settings(self.config, self.bench_dir, run.spec.gate)
        inputs = GateInputs(
            results=written.rates, outcomes=written.outcomes, scores=written.eval_scores, rules=run.spec.thresholds,
            baseline=self.baseline, corrected=run.spec.judge.correct_rates,
            meta=run.meta(),
            incomplete=self.outcomes.tally.reasons(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED))
        outcome = evaluate_gate(inputs, settings)
        write_gate_files(settings, inputs, outcome, written, f"evalbench: {run.spec.name}")
        self.judge_lines = written.judge_lines
        write_run_status(run.output_dir / LAST_RUN, self.run_end(), outcome)
        hook = self.config.hook.pytest_evalbench_results
        if hook.get_hookimpls():  # the documented list, built only for someone who asked for it
            hook(config=self.config, benchmark=self.settings.benchmark, results=list(written.results),
                 records=list(self._records()))
        return outcome

    def _write(self, kind: AnyKind) -> KindResults:
        """The kind writes this session's records: as JSON to a kind that takes them so (`write_records`:
        they were valid when spooled, and are not validated again), else typed by `record_from_json`."""
        write_records = getattr(kind, "write_records", None)
        if write_records is not None:
            return cast(KindResults, write_records(self._records()))
        return kind.write_results(kind.record_from_json(data) for data in self._records())

    def notes(self) -> list[str]:
        """Completeness, dropped rows and judge reliability, for every report."""
        missing = self.outcomes.tally.missing()
        lines = []
        if missing:
            shown = ", ".join(missing[:MAX_LISTED]) + (f" and {len(missing) - MAX_LISTED} more"
                                                       if len(missing) > MAX_LISTED else "")
            lines.append(f"{len(missing)} selected item{'s' if len(missing) > 1 else ''} never reported: {shown}")
        if self.finish_error:
            lines.append(f"ERROR: {self.finish_error}")
        return lines + [f"dropped {d}" for d in self.dropped] + list(self.judge_lines)
