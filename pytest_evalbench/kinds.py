"""The benchmark-kind protocol and its registry: the only module that names the kinds.

A kind (`scenarios/`, `dataset/`) knows how to load its cases, run one case into a record,
decide a record's outcome, write its result files and summarise them. The pytest layer calls
this protocol and never branches on the kind; a third kind is a new subpackage plus one line in
`KINDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from .context import BenchmarkRun

Status = Literal["passed", "failed", "unscored"]
Record = dict[str, Any]
"""What one item produced, as JSON: it travels from an xdist worker to the controller."""
JudgedRowHook = Callable[[dict[str, Any], Record], None]


class Case(Protocol):
    """One test item's work: its name inside the data file, its row id and its `-k` keywords."""

    @property
    def name(self) -> str: ...

    @property
    def row_id(self) -> str: ...

    @property
    def keywords(self) -> dict[str, Any]: ...


@dataclass
class Outcome:
    """The one place pass/fail/unscored is decided for an item (after the judged-row hook)."""

    status: Status
    message: str = ""
    properties: list[tuple[str, Any]] = field(default_factory=list)
    convicts: bool = True
    """False for a failure whose judge is unreliable (see calibration/): reported as xfailed."""


@dataclass
class KindResults:
    """What a kind wrote and what the gate and the summary need from it."""

    results: list[dict[str, Any]]
    """The kind's summary file entries (results.json, agent_summary.json): the results hook's payload."""
    gate_results: list[dict[str, Any]] | None = None
    """results.json-shaped per-target summaries for the gate, when `results` has another shape."""
    scores: list[dict[str, Any]] = field(default_factory=list)
    """scores.json rows (the HTML report's judgments)."""
    outcomes: list[dict[str, Any]] | None = None
    """Per-row pass/fail units the gate pairs against a baseline, in scores.json shape
    (`target_model`, `id`, `metric_id`, `sample`, `passed`; passed None = unscored); None: `scores`."""
    eval_scores: list[dict[str, Any]] = field(default_factory=list)
    """Per-case numeric scores the gate pairs against a baseline (`target_model`, `id`,
    `metric_id`, `score` on 1..5; dataset evals), or empty."""
    conversations: Iterable[dict[str, Any]] = field(default_factory=list)
    """conversations.json rows for reports; may be read from disk on each pass (iterate, don't index)."""
    table: list[str] | None = None
    """Terminal lines replacing the gate's default table, if the kind has its own."""
    dropped: list[str] = field(default_factory=list)
    """Rows of earlier runs dropped because their case, sample or target is no longer configured."""
    judge_lines: list[str] = field(default_factory=list)
    """Terminal lines about the judge: panel agreement per metric, unreliable judges (see calibration/)."""
    cases: list[dict[str, Any]] = field(default_factory=list)
    """Per-case result rows for reports (case_results.json rows), when the kind has them."""
    view: Literal["rates", "cases", "none"] = "rates"
    """How reports show this kind: pass rates per target and metric, a per-case table, or neither."""
    files: list[Path] = field(default_factory=list)
    """The result files and directories written, for the summary line saying where results went."""


class BenchmarkKind(Protocol):
    """What the pytest layer asks of a benchmark kind."""

    run: BenchmarkRun
    @property
    def roles(self) -> tuple[str, ...]:
        """The model roles (`user_model`, `evaluator_model`) a run of this kind needs; checked up front."""
    """The benchmark.yaml role keys every item needs ("user_model", "evaluator_model"): checked,
    with their credentials, before the first call (`BenchmarkRun.preflight`)."""

    def data_files(self) -> list[Path]:
        """The files whose rows become items (they are collected by pytest)."""

    def load_cases(self) -> dict[Path, list[Any]]:
        """Cases per data file, in file order; raises `InputError` naming file, row and field."""

    def order(self) -> dict[str, int]:
        """Row id -> position in the data files: result files keep this order."""

    async def run_case(self, case: Any) -> Record:
        """The LLM work of one item; LLM and app failures propagate (the item ERRORs)."""

    def outcome(self, record: Record, judged_row: JudgedRowHook) -> Outcome:
        """Decide the record's status once (may update the record's derived fields)."""

    def write_results(self, records: Collection[Record]) -> KindResults:
        """Merge this session's records into the result files on disk and summarise them.

        `records` come in node-id order, streamed from disk on every pass (a session's records
        are never all in memory): iterate, don't index, and keep only what the result needs."""


def kind_of(run: BenchmarkRun) -> BenchmarkKind:
    """The kind named by benchmark.yaml's `kind:`, or judge calibration with `--evalbench-calibrate`."""
    from .calibration import CalibrationKind
    from .dataset import DatasetKind
    from .scenarios import ScenarioKind

    kinds: dict[str, Callable[[BenchmarkRun], BenchmarkKind]] = {"scenarios": ScenarioKind, "dataset": DatasetKind,
                                                                  "calibration": CalibrationKind}
    return kinds["calibration" if run.settings.calibrate else run.spec.kind](run)
