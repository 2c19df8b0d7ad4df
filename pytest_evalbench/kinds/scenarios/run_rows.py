"""Rows of the run files as this version reads them, whoever wrote them (an older version, another tool
such as impactbench): normalised to this version's spelling and validated, one row at a time on every
pass. Target runs this session's finish wrote itself are read without the normalising (their rows were
normalised and valid when written).

scores.json rows become compact pass/fail units (`PassFailUnit`), with repeated strings shared: what
results.json is computed from and what the gate pairs with the baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from pytest_evalbench.base.files import FORMAT_VERSION, VERSION_KEY, iter_json_rows, iter_valid
from pytest_evalbench.formats.results import PassFailUnit
from pytest_evalbench.kinds.scenarios.models import ConversationRow, ScoreRow, derive_pass


class UnitTable:
    """Units of one pass over rows: equal targets, metric ids, names and types share one string."""

    def __init__(self) -> None:
        self._shared: dict[Any, Any] = {}

    def unit(self, target: str, id: str, metric_id: str, sample: int, passed: bool | None,
            metric_name: str | None, metric_type: str | None, decided_by: str | None) -> PassFailUnit:
        shared = self._shared.setdefault
        return PassFailUnit(shared(target, target), id, shared(metric_id, metric_id), sample, passed,
                          shared(metric_name, metric_name), shared(metric_type, metric_type), decided_by)

    def of_json(self, row: dict[str, Any]) -> PassFailUnit:
        """The unit of a row as its model dumped it (this session's, before it is written)."""
        return self.unit(row["target_model"], row["id"], row["metric_id"], row["sample"], row["passed"],
                         row["metric_name"], row["metric_type"], row.get("decided_by"))

    def of(self, row: ScoreRow) -> PassFailUnit:
        """A validated row's unit."""
        return self.unit(row.target_model, row.id, row.metric_id, row.sample, row.passed, row.metric_name,
                        row.metric_type, row.decided_by)


M = TypeVar("M", bound=BaseModel)
_R = TypeVar("_R")
RUNS_DIR = "runs"


@dataclass(frozen=True)
class Known:
    """What rows written by other versions or tools are completed from: the spec's metrics
    (id -> (name, type)) and this benchmark's scenario rows (id -> row)."""

    metrics: dict[str, tuple[str, str]] = field(default_factory=dict)
    scenarios: Mapping[str, dict[str, Any]] = field(default_factory=dict)


NOTHING_KNOWN = Known()
"""Known of a caller that completes rows from nothing (the files' own fields only)."""


class StoredRows(Mapping[str, dict[str, Any]]):
    """Scenario id -> row dict, built on each lookup from a compact stored row (`runner.StoredScenario`):
    only rows of foreign result files are ever looked up, so nothing per row stays in memory."""

    def __init__(self, stored: Mapping[str, Any]) -> None:
        self._stored = stored

    def __getitem__(self, key: str) -> dict[str, Any]:
        return dict(self._stored[key].dump())

    def __iter__(self) -> Iterator[str]:
        return iter(self._stored)

    def __len__(self) -> int:
        return len(self._stored)


Normaliser = Callable[[dict[str, Any], str, Known], dict[str, Any]]


def _common(row: dict[str, Any], target_id: str) -> dict[str, Any]:
    """Spellings every writer of these files used: impactbench's `_sample`, no `conv_id`."""
    out = {k: v for k, v in row.items() if not k.startswith("_")}
    if "sample" not in out and isinstance(row.get("_sample"), int):
        out["sample"] = row["_sample"]
    out.setdefault("sample", 0)
    target = out.get("target_model") or (out.get("target") or {}).get("id") or target_id
    out.setdefault("conv_id", f"{out.get('id')}__{target}")
    return out


def normalise_conversation(row: dict[str, Any], target_id: str, known: Known) -> dict[str, Any]:
    """A conversations.json row in this version's shape: scenario fields from scenarios.json,
    `target` from impactbench's `target_model`."""
    out = {**known.scenarios.get(str(row.get("id")), {}), **_common(row, target_id)}
    if "target" not in out:
        out["target"] = {"id": out.pop("target_model", None) or target_id, "model": None}
    out.pop("target_model", None)
    out["persona"] = out.pop("user_persona", None) or out.get("persona")  # as Scenario.effective_persona
    return out


def normalise_score(row: dict[str, Any], target_id: str, known: Known) -> dict[str, Any]:
    """A scores.json row in this version's shape: metric name/type from benchmark.yaml, `score`
    and a missing `passed` derived from `present` (impactbench dropped `score`)."""
    out = _common(row, target_id)
    out.setdefault("target_model", target_id)
    name, mtype = known.metrics.get(str(out.get("metric_id")), (None, None))
    if name is not None:
        out.setdefault("metric_name", name)
        out.setdefault("metric_type", mtype)
    if "present" in out and "metric_type" in out and ("score" not in out or "passed" not in out):
        passed, score = derive_pass(out["present"], str(out["metric_type"]))
        out.setdefault("passed", passed)
        out.setdefault("score", score)
    return out


def _run_dirs(bench_dir: Path, filename: str) -> list[Path]:
    """`runs/<target>/` of every target that has that file, in target order."""
    runs = bench_dir / RUNS_DIR
    return [d for d in sorted(runs.iterdir()) if (d / filename).is_file()] if runs.is_dir() else []


class RunRows(Generic[M]):
    """Every target's rows of one run file (usable, normalised), read from disk one row at a time
    on every pass: what reports and the gate read, without the rows of a large run all in memory.
    Unusable rows are warned about on the first pass only. `fresh`: the target runs this session's
    finish wrote (their rows were normalised and valid when written: only validated again)."""

    def __init__(self, bench_dir: Path, known: Known, filename: str, model: type[M], normalise: Normaliser,
                 fresh: Collection[str] = ()) -> None:
        self.bench_dir, self.known = bench_dir, known
        self.filename, self.model, self.normalise = filename, model, normalise
        self.fresh = fresh
        self._warned = False

    def __iter__(self) -> Iterator[M]:
        return (row for _, row in self._rows() if row is not None)

    def _rows(self, skip: Collection[str] = ()) -> Iterator[tuple[str, M | None]]:
        """(target run directory, row) for every usable row, in target order; for a target in `skip`,
        one pair (target, None) instead of its rows."""
        warn, self._warned = not self._warned, True
        for run_dir in _run_dirs(self.bench_dir, self.filename):
            if run_dir.name in skip:
                yield run_dir.name, None
                continue
            rows = (self._fresh_rows(run_dir, warn, self._as_written) if run_dir.name in self.fresh else
                    self._usual_rows(run_dir, warn))
            for row in rows:
                yield run_dir.name, row

    def _usual_rows(self, run_dir: Path, warn: bool, start: int = 0) -> Iterator[M]:
        usual = iter_valid(run_dir / self.filename, self.model, self._normaliser(run_dir.name), warn)
        return (typed for _, typed in islice(usual, start, None))

    def _as_written(self, raw: dict[str, Any], target: str) -> M | None:
        """A row of a file this finish wrote, validated as it is (normalising is a no-op on what was written)."""
        try:
            return self.model.model_validate(raw)
        except ValidationError:
            return None

    def _fresh_rows(self, run_dir: Path, warn: bool, read: Callable[[dict[str, Any], str], _R | None],
                    keys: Collection[tuple[str, int]] | None = None) -> Iterator[M | _R]:
        """A file this finish wrote, each row `read` as it is (no version check, no normalising). From a
        row that is not as written (changed since: `read` gives None), the rest of the file goes the
        usual way. With `keys`, a row whose `conv_id` and `sample` as written are not among them is
        passed over unread (a row as written is read as it is: its key stays)."""
        target = run_dir.name
        for done, raw in enumerate(iter_json_rows(run_dir / self.filename)):
            if keys is not None and (raw.get("conv_id"), raw.get("sample")) not in keys:
                continue
            row = read(raw, target) if raw.pop(VERSION_KEY, None) == FORMAT_VERSION else None
            if row is None:
                yield from self._usual_rows(run_dir, warn, done)
                return
            yield row

    def _normaliser(self, target: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return lambda raw: self.normalise(raw, target, self.known)


class RunConversations(RunRows[ConversationRow]):
    """Every target's conversations.json rows."""

    def __init__(self, bench_dir: Path, known: Known = NOTHING_KNOWN, fresh: Collection[str] = ()) -> None:
        super().__init__(bench_dir, known, "conversations.json", ConversationRow, normalise_conversation, fresh)

    def as_written(self) -> Iterator[ConversationRow | WrittenConversation]:
        """The rows, those of target runs this finish wrote not validated (`WrittenConversation`): the
        reports' pass over every conversation, which shows a few thousand of them at most."""
        warn, self._warned = not self._warned, True
        for run_dir in _run_dirs(self.bench_dir, self.filename):
            yield from (self._fresh_rows(run_dir, warn, self._written) if run_dir.name in self.fresh else
                        self._usual_rows(run_dir, warn))

    def _written(self, raw: dict[str, Any], target: str) -> WrittenConversation | None:
        plain = (type(raw.get("id")) is str and type(raw.get("conv_id")) is str and type(raw.get("sample")) is int
                 and isinstance(raw.get("demographic"), dict))
        return WrittenConversation(raw, lambda: normalise_conversation(raw, target, self.known)) if plain else None


class WrittenConversation:
    """A conversations.json row as this finish wrote it (`render.rates.Deferred`): its key and
    demographic as written; the model built only for a row the report shows."""

    def __init__(self, raw: dict[str, Any], normalised: Callable[[], dict[str, Any]]) -> None:
        self._raw, self._normalised = raw, normalised

    @property
    def id(self) -> str:
        return str(self._raw["id"])

    @property
    def conv_id(self) -> str:
        return str(self._raw["conv_id"])

    @property
    def sample(self) -> int:
        return int(self._raw["sample"])

    @property
    def demographic(self) -> dict[str, str]:
        demographic: dict[str, str] = self._raw["demographic"]
        return demographic

    def validated(self) -> ConversationRow | None:
        """The row's model (normalised first if it is not valid as written); None when unusable."""
        for row in (self._raw, None):
            try:
                return ConversationRow.model_validate(self._normalised() if row is None else row)
            except ValidationError:
                continue
        return None


class RunScores(RunRows[ScoreRow]):
    """Every target's scores.json rows: 100,000 validated rows are never in memory at once."""

    def __init__(self, bench_dir: Path, known: Known = NOTHING_KNOWN, fresh: Collection[str] = ()) -> None:
        super().__init__(bench_dir, known, "scores.json", ScoreRow, normalise_score, fresh)

    def of_conversations(self, keys: Collection[tuple[str, int]]) -> Iterator[ScoreRow]:
        """The rows of these conversations ((conv_id, sample)), in the order of a pass over all of them:
        a row of a file this finish wrote is validated only when it is one of them (the reports' pass
        that collects the judgments of the transcripts they show, 2,000 at most)."""
        warn, self._warned = not self._warned, True
        for run_dir in _run_dirs(self.bench_dir, self.filename):
            rows = (self._fresh_rows(run_dir, warn, self._as_written, keys) if run_dir.name in self.fresh else
                    self._usual_rows(run_dir, warn))
            yield from (row for row in rows if (row.conv_id, row.sample) in keys)

    def unit_rows(self, keep: Callable[[ScoreRow], bool] | None = None,
                     written: Mapping[str, list[PassFailUnit]] | None = None) -> dict[str, list[PassFailUnit]]:
        """The rows as compact pass/fail units, in file order: all of them by target run directory
        (what results.json is computed from), or those `keep` accepts by their `target_model`
        (the gate's rows). Repeated strings are shared. `written`: the units of target runs whose
        scores.json was just written from them (`write_target_run`), taken instead of read back."""
        units = UnitTable()
        out: dict[str, list[PassFailUnit]] = {}
        for run_target, row in self._rows(skip=written or ()):
            if row is None:  # a target just written
                if written and written[run_target]:
                    out[run_target] = written[run_target]
            elif keep is None or keep(row):
                out.setdefault(run_target if keep is None else row.target_model, []).append(units.of(row))
        return out
