"""The benchmark-kind protocol and its registry (filled by `kinds/__init__.py`, which names the shipped kinds).

A kind (`scenarios/`, `dataset/`, `calibration/`) knows how to load its cases, run one case into
a typed record, decide a record's outcome, write its result files and summarise them. The pytest
layer calls this protocol and never branches on the kind; a third kind is a new subpackage (with the
same inner layout: the class in `<kind>/kind.py`, an `__init__` that imports nothing) plus one
`register_kind` line in `kinds/__init__.py`: this module imports no kind.
Records are the kind's own types; they become JSON only where they cross the worker -> controller
boundary and in the `pytest_evalbench_*` hook payloads (`record_to_json` / `record_from_json`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeAlias, TypeVar, Union

from pytest_evalbench.formats.results import EvalScore, Judged, ModelResult, PassFailUnit, Status

if TYPE_CHECKING:  # the run pulls the engine in
    from pytest_evalbench.formats.agreement import JudgeAccuracy
    from pytest_evalbench.formats.dataset_rows import AgentSummary, CaseResult
    from pytest_evalbench.formats.provenance import SessionStamp
    from pytest_evalbench.formats.scenario_rows import ConversationRow, ScoreRow
    from pytest_evalbench.formats.sequential import SequentialRule
    from pytest_evalbench.formats.spec import BenchmarkSpec
    from pytest_evalbench.kinds.estimate import Expectations, Plan
    from pytest_evalbench.kinds.run import BenchmarkRun

JSONValue: TypeAlias = Union[dict[str, "JSONValue"], list["JSONValue"], str, int, float, bool, None]
"""Any JSON value: what crosses the kind boundary as data (records, rows, hook payloads)."""
JSONObject: TypeAlias = dict[str, JSONValue]
JSONRecord: TypeAlias = JSONObject
"""A record as JSON: how it travels from an xdist worker to the controller, and what hooks see."""
JudgedRowHook = Callable[[JSONObject, JSONRecord], None]
"""Calls `pytest_evalbench_judged_row(row, record)`: the row (mutable) and the record, as JSON.
The session passes None when no plugin implements the hook (the JSON is then never built)."""


class ItemWork(Protocol):
    """One test item's work: its name inside the data file, its row id and its `-k` keywords."""

    @property
    def name(self) -> str: ...

    @property
    def row_id(self) -> str: ...

    @property
    def keywords(self) -> Mapping[str, object]: ...


R = TypeVar("R")
"""A kind's record: what running one case produces (`ScenarioRecord`, `DatasetRecord`, ...)."""
C = TypeVar("C", bound=ItemWork)
"""A kind's case: one item's work, as its `load_items` makes it (`ScenarioItem`, `DatasetItem`, ...)."""


@dataclass
class Outcome:
    """The one place pass/fail/unscored is decided for an item (after the judged-row hook)."""

    status: Status | Literal["not drawn"]
    """`not drawn`: a sample sequential sampling did not draw (its case was settled): no row, no call."""
    message: str = ""
    properties: list[tuple[str, object]] = field(default_factory=list)
    convicts: bool = True
    """False for a failure whose judge is unreliable (see calibration/): reported as xfailed."""
    decided_by: str | None = None
    """Who decided the judgment: `check` (a deterministic check) or `judge`; failures are counted by it."""


@dataclass
class KindResults:
    """What a kind wrote and what the gate and the summary need from it."""

    results: Sequence[JSONObject]
    """The kind's summary file entries as written (results.json, agent_summary.json), without the
    file's `version`: the results hook's payload (JSON by contract; may be read from the file when
    first indexed)."""
    rates: list[ModelResult] = field(default_factory=list)
    """Per-target rate summaries the gate's min rules and rates table read (gated rows only)."""
    units: list[PassFailUnit] = field(default_factory=list)
    """Per-row pass/fail units the gate pairs against a baseline (and groups into per-case verdicts)."""
    eval_scores: list[EvalScore] = field(default_factory=list)
    """Per-case numeric scores (1..5) the gate pairs against a baseline (dataset evals), or empty."""
    scores: Iterable[ScoreRow] = field(default_factory=list)
    """scores.json rows (the HTML report's judgments); may be read from disk on each pass (iterate, don't index)."""
    conversations: Iterable[ConversationRow] = field(default_factory=list)
    """conversations.json rows for reports; may be read from disk on each pass (iterate, don't index)."""
    table: list[str] | None = None
    """Terminal lines replacing the gate's default table, if the kind has its own."""
    dropped: list[str] = field(default_factory=list)
    """Rows of earlier runs dropped because their case, sample or target is no longer configured."""
    judge_lines: list[str] = field(default_factory=list)
    """Terminal lines about the judge: panel agreement per metric, unreliable judges (see calibration/)."""
    cases: list[CaseResult] = field(default_factory=list)
    """Per-case result rows for reports (case_results.json rows), when the kind has them."""
    agents: list[AgentSummary] = field(default_factory=list)
    """Per-agent summaries for reports (agent_summary.json entries), when the kind has them."""
    view: Literal["rates", "cases", "none"] = "rates"
    """How reports show this kind: pass rates per target and metric, a per-case table, or neither."""
    files: list[Path] = field(default_factory=list)
    """The result files and directories written, for the summary line saying where results went."""
    unreliable: dict[str, str] = field(default_factory=dict)
    """Metric id / eval -> why its judge is unreliable: its judge-decided rows are outside the gate's numbers."""
    measured: set[str] | None = None
    """`provenance.unit_key`s of the rows this session measured: `rates`, `units`, `eval_scores`
    and `table` (what the gate reads) hold only these; None: every row counts as measured."""
    sessions: Mapping[str, SessionStamp] = field(default_factory=dict)
    """Row key -> the session that measured it (`.sessions.json`), for rates carried over."""
    accuracy: Mapping[str, JudgeAccuracy] = field(default_factory=dict)
    """Metric id -> the judge's calibration counts (calibration.json): rates shown corrected beside observed."""
    sequential: SequentialRule | None = None
    """`generation.sampling: sequential`: the rule that stopped each case's draws (the gate's per-case verdicts)."""
    summaries: Sequence[JSONObject] | None = None
    """`results` without their per-case breakdown (results.json's `by_scenario`, 100,000 entries at
    100,000 items), kept from the write when `results` is read from the file: what reports read
    (pass^k), so a run never parses its own results.json back. None: read `results`."""


class BenchmarkKind(Protocol[R, C]):
    """What the pytest layer asks of a benchmark kind whose cases are of type C and produce records of type R."""

    run: BenchmarkRun

    @property
    def roles(self) -> tuple[str, ...]:
        """The benchmark.yaml role keys every item needs ("user_model", "evaluator_model"): checked,
        with their credentials, before the first call (`BenchmarkRun.preflight`)."""

    def data_files(self) -> list[Path]:
        """The files whose rows become items (they are collected by pytest)."""

    def load_items(self) -> dict[Path, list[C]]:
        """Cases per data file, in file order; raises `InputError` naming file, row and field."""

    def order(self) -> dict[str, int]:
        """Row id -> position in the data files: result files keep this order."""

    def expect_cases(self, cases: Iterable[C]) -> None:
        """These cases will run in this process (before their pipelines start): a kind whose cases
        wait for each other (sequential samples) waits only for cases that will come."""

    async def run_item(self, case: C) -> R:
        """The LLM work of one item; LLM and app failures propagate (the item ERRORs)."""

    def outcome(self, record: R, judged_row: JudgedRowHook | None) -> Outcome:
        """Decide the record's status, the one place it is decided (after the judged-row hook);
        sets the record's derived fields."""

    def write_results(self, records: Iterable[JSONRecord]) -> KindResults:
        """Merge this session's records (as JSON, each valid: spooled as this session made them, or read
        back through `record_from_json`) into the result files on disk and summarise them. `records` come
        in node-id order and may be iterated only once (they can stream from disk)."""

    def plan_calls(self, case: C, expect: Expectations) -> Plan:
        """The calls `run_item` would make, planned without making them (`--evalbench-estimate`); a kind
        that cannot say raises `ConfigError`."""

    def record_to_json(self, record: R) -> JSONRecord:
        """The record as JSON, for the xdist report, shard files and hook payloads."""

    def record_from_json(self, data: JSONRecord) -> R:
        """The inverse of `record_to_json` (on the controller, and when merging shards)."""


AnyKind: TypeAlias = "BenchmarkKind[Any, Any]"
"""A kind whose record and case types the caller does not know (the registry, the pytest layer):
each kind object keeps its own pair consistent (its records come from its own cases)."""


class SpecKind(BenchmarkKind[Any, Any], Protocol):
    """A kind benchmark.yaml's `kind:` names, with what code outside the kind asks of it before (or
    without) a run, as class attributes: a new kind states them instead of edits across the tree."""

    judged: ClassVar[Judged]
    """What the judge decides per item: binary metrics (present/absent) or evals scored 1..5.
    Calibration labels and their agreement statistics follow it."""
    thresholds_name_targets: ClassVar[bool]
    """Whether `thresholds.per_target` keys are benchmark.yaml target ids (checked before any call)
    rather than names the data brings (dataset agents)."""
    generated_from_metrics: ClassVar[bool]
    """Whether `evalbench gen-scenarios` writes this kind's data file from its metrics."""
    record_ids: ClassVar[tuple[tuple[str, ...], ...]]
    """Where a record (as JSON) holds ids that name files, directories and node ids: `evalbench
    merge` checks each with the loaders' rule before writing a shard's records."""
    record_same_ids: ClassVar[tuple[tuple[tuple[str, ...], ...], ...]]
    """Groups of those places that must hold the same id (the first names the files)."""

    def __init__(self, run: BenchmarkRun) -> None: ...


KindFactory = Callable[["BenchmarkRun"], AnyKind]
"""What makes a run's kind object from the run (a kind's class)."""

SPEC_KINDS: dict[str, Callable[[], type[SpecKind]]] = {}
"""benchmark.yaml `kind:` value -> a loader of the kind's class, filled from above (`kinds/__init__.py` registers
the kinds this package ships; the plugin and the command line call it first): a run imports its own
kind's `<kind>/kind.py` only (a scenario run never imports `dataset/`; tests/unit/test_import_cost.py)."""
_CALIBRATION: list[Callable[[], KindFactory]] = []
"""The loader of judge calibration's kind (`--evalbench-calibrate`), once registered."""


def _where(loader: Callable[..., Any]) -> tuple[str, str]:
    """A loader's defining module and name: pytest's in-process runs may import the registering module anew."""
    return getattr(loader, "__module__", ""), getattr(loader, "__qualname__", "")


def register_kind(name: str, loader: Callable[[], type[SpecKind]]) -> None:
    """Make benchmark.yaml's `kind: <name>` load its class with `loader` (called on first use). Registering
    the same loader again is a no-op (pytest may configure several sessions in one process); another
    loader for a registered name is a programming error."""
    known = SPEC_KINDS.setdefault(name, loader)
    if known is not loader and _where(known) != _where(loader):  # a re-imported module's loader is the same one
        raise ValueError(f"benchmark kind {name!r} is already registered")


def register_calibration(loader: Callable[[], KindFactory]) -> None:
    """The kind `--evalbench-calibrate` runs (idempotent, as `register_kind`)."""
    if not _CALIBRATION:
        _CALIBRATION.append(loader)
    elif _CALIBRATION[0] is not loader and _where(_CALIBRATION[0]) != _where(loader):
        raise ValueError("the calibration kind is already registered")


def spec_kind(spec: BenchmarkSpec) -> type[SpecKind]:
    """The class of the kind benchmark.yaml names (importing that kind only)."""
    try:
        load = SPEC_KINDS[spec.kind]
    except KeyError:
        raise LookupError(f"no benchmark kind {spec.kind!r} is registered") from None
    return load()


def kind_of(run: BenchmarkRun) -> AnyKind:
    """The kind named by benchmark.yaml's `kind:`, or judge calibration with `--evalbench-calibrate`."""
    if run.settings.calibrate:
        if not _CALIBRATION:
            raise LookupError("no calibration kind is registered")
        make: KindFactory = _CALIBRATION[0]()
    else:
        make = spec_kind(run.spec)
    return make(run)
