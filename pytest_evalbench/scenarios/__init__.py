"""Scenario benchmarks: scenarios.json rows × targets × samples, simulated then judged.

Inside: `models` (rows of every file), `loading` (scenarios.json), `simulate` (the user model
talks to the target), `judge` (present/absent), `runner` (one item), `aggregate` and `store`
(results.json and runs/<target>/). May import the shared core (spec, loading, llm, targets,
context, store); never pytest, never another kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..context import BenchmarkRun
from ..errors import ConfigError
from ..kinds import JudgedRowHook, KindResults, Outcome, Record
from ..loading import SPEC_FILE
from .loading import SCENARIOS_FILE, load_scenarios
from .models import derive_pass
from .runner import ScenarioCase, run_scenario
from .store import read_run_rows, write_results

TAIL_MESSAGES = 4
TAIL_CHARS = 400


class ScenarioKind:
    """The scenario kind of the protocol in `kinds.py`."""

    def __init__(self, run: BenchmarkRun) -> None:
        self.run = run
        self._order: dict[str, int] = {}

    def data_files(self) -> list[Path]:
        return [self.run.bench_dir / SCENARIOS_FILE]

    def load_cases(self) -> dict[Path, list[Any]]:
        """Items in a fixed order: scenario row, then target, then sample."""
        run = self.run
        if not run.target_configs:
            raise ConfigError(f"{run.bench_dir / SPEC_FILE}: no targets; add a `targets:` list or pass "
                              "--evalbench-target=MODEL")
        scenarios = load_scenarios(run.bench_dir, run.spec)
        self._order = {s.id: i for i, s in enumerate(scenarios)}
        cases: list[ScenarioCase] = []
        for scenario in scenarios:
            for cfg in run.target_configs:
                for sample in range(run.spec.generation.num_samples):
                    cases.append(ScenarioCase(scenario, cfg.id, sample, len(cases)))
        return {self.data_files()[0]: cases}

    def order(self) -> dict[str, int]:
        if not self._order:
            self.load_cases()
        return self._order

    async def run_case(self, case: Any) -> Record:
        return (await run_scenario(self.run, case)).to_json()

    def outcome(self, record: Record, judged_row: JudgedRowHook) -> Outcome:
        score = record["score"]
        judged_row(score, record)
        score["passed"], score["score"] = derive_pass(score["present"], score["metric_type"])
        status = "unscored" if score["passed"] is None else ("passed" if score["passed"] else "failed")
        record["status"] = status
        properties = [("evalbench_present", score["present"]), ("evalbench_passed", score["passed"]),
                      ("evalbench_score", score["score"]), ("evalbench_justification", score["justification"])]
        message = {"failed": failure_message(record), "unscored": score["justification"]}.get(status, "")
        return Outcome(status, message, properties)

    def write_results(self, records: list[Record]) -> KindResults:
        bench_dir = self.run.output_dir
        results = write_results(bench_dir, records, self.order())
        return KindResults(results=results, scores=_rows(bench_dir, "scores.json"),
                           conversations=_rows(bench_dir, "conversations.json"))


def _rows(bench_dir: Path, filename: str) -> list[dict[str, Any]]:
    return [row for rows in read_run_rows(bench_dir, filename).values() for row in rows]


def failure_message(record: Record) -> str:
    """The judge's verdict against the metric's polarity, its reasons and the transcript's tail."""
    score = record["score"]
    seen = "present" if score["present"] else "absent"
    want = "present" if score["metric_type"] == "positive" else "absent"
    lines = [f"{score['metric_id']} {score['metric_name']!r} ({score['metric_type']}): behaviour {seen}, "
             f"expected {want}", f"judge: {score['justification']}", "transcript tail:"]
    for message in record["conversation"]["transcript"][-TAIL_MESSAGES:]:
        text = " ".join(message["content"].split())
        lines.append(f"  {message['role'].upper()}: {text[:TAIL_CHARS]}{'…' if len(text) > TAIL_CHARS else ''}")
    return "\n".join(lines)
