"""Writing the documented result files: merge this session's rows into what is on disk.

A subset run (node id, -k, --lf) replaces only the rows it produced; rows of cases that did not run
stay, unless their scenario, sample or target is no longer configured (those are dropped and reported
once). Rows are ordered by scenario order, then sample, so `-n 4` and `-n 0` write identical files.
Every file is validated against its model and written atomically, the whole read-merge-write under the
benchmark's result lock. This session's rows of each target are spooled to disk until the finish pass
writes its run files.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from pytest_evalbench.base.files import (
    FORMAT_VERSION,
    VERSION_KEY,
    StreamedDict,
    count_rows,
    dump_json,
    dump_json_object,
    dump_json_rows,
    read_rows,
    read_valid,
    read_valid_rows,
    results_lock,
    versioned,
    write_json,
)
from pytest_evalbench.base.safe_files import check_dir
from pytest_evalbench.base.spool import Spool
from pytest_evalbench.formats.agreement import JudgeAccuracy
from pytest_evalbench.formats.provenance import SessionStamp, unit_key, update_sessions
from pytest_evalbench.formats.results import PassFailUnit
from pytest_evalbench.kinds.scenarios.aggregate import aggregate, correct_results, label_rows, summarize_counts
from pytest_evalbench.kinds.scenarios.models import ConversationRow, ModelResult, ScenarioRecord, ScoreRow
from pytest_evalbench.kinds.scenarios.run_rows import (
    NOTHING_KNOWN,
    RUNS_DIR,
    Known,
    Normaliser,
    RunConversations,
    RunScores,
    StoredRows,
    UnitTable,
    normalise_conversation,
    normalise_score,
)
from pytest_evalbench.llm.costs import USAGE_FILE, phase_cost, read_usage
from pytest_evalbench.llm.types import Usage

__all__ = ["RUNS_DIR", "Known", "RunConversations", "RunScores", "StoredRows", "normalise_conversation", "normalise_score",
           "read_file_rows", "write_results", "write_target_run"]

M = TypeVar("M", bound=BaseModel)
PHASES = ("simulate", "evaluate")
RUN_FILES = ("conversations.json", "scores.json", "cost.json", USAGE_FILE)


def row_key(row: dict[str, Any]) -> tuple[str, int]:
    return str(row.get("id")), int(row.get("sample") or 0)


def raw_key(raw: dict[str, Any]) -> tuple[str, int] | None:
    """The `row_key` a row read from a file has once normalised (`_common`), when its id and sample
    are plainly spelled (else None: only the normalised, validated row tells)."""
    sample = raw["sample"] if "sample" in raw else raw.get("_sample", 0)
    found = raw.get("id")
    return (found, sample) if type(found) is str and type(sample) is int else None


def configured(row: dict[str, Any], order: dict[str, int], samples: int | None) -> bool:
    """Whether an earlier run's row still belongs to the benchmark: known scenario, sample in range."""
    return row.get("id") in order and (samples is None or row_key(row)[1] < samples)


def dropped_rows(rows: list[dict[str, Any]], order: dict[str, int], samples: int | None) -> list[str]:
    """What merging drops from an earlier run's rows, counted per reason."""
    unknown = sum(1 for r in rows if r.get("id") not in order)
    beyond = sum(1 for r in rows if r.get("id") in order and not configured(r, order, samples))
    return (count_rows(unknown, "scenarios no longer in scenarios.json")
            + count_rows(beyond, f"samples beyond num_samples={samples}"))


def replaces_all(new: TargetRows, order: dict[str, int], samples: int | None) -> bool:
    """Whether this session's rows of a target hold every configured row (each scenario's samples):
    no row of an earlier run can be kept."""
    spooled = new.spooled
    return (samples is not None and len(spooled) >= len(order) * samples
            and all((id, sample) in spooled for id in order for sample in range(samples)))


def usage_key(key: tuple[str, int]) -> str:
    return f"{key[0]}|{key[1]}"


def write_target_run(run_dir: Path, new: TargetRows, order: dict[str, int], samples: int | None = None,
                     known: Known = NOTHING_KNOWN, *, root: Path, units: list[PassFailUnit] | None = None) -> list[str]:
    """Merge one target's rows into its conversations.json, scores.json and cost.json; what was
    dropped. Conversations and the usage file are written row by row from the spool. `root` is
    the benchmark directory no write may leave (`runs/<target>/` a link out of it is refused).
    `units` (when given) receives the written scores.json's rows as pass/fail units, in file
    order, as reading the file back (`RunScores.unit_rows`) would give them."""
    check_dir(run_dir, root)

    def replaced(raw: dict[str, Any]) -> bool:  # this session's row replaces it: not validated, never kept
        return raw_key(raw) in new.spooled  # (a key of this session's is configured: never dropped either)

    old_scores = read_valid(run_dir / "scores.json", ScoreRow, lambda row: normalise_score(row, run_dir.name, known),
                            stacklevel=2, skip=replaced)
    unit_table = UnitTable()  # a kept row's unit from its validated model (what reading it back gives), not the model
    kept_scores = {row_key(r): (r, unit_table.of(typed)) for r, typed in old_scores
                   if configured(r, order, samples) and row_key(r) not in new.spooled}
    dropped = dropped_rows([r for r, _ in old_scores], order, samples)
    del old_scores
    # when this session replaced every configured row, no earlier conversation or usage row is kept:
    # the earlier files are not read (scores.json is, for what merging drops)
    every = replaces_all(new, order, samples)
    old = {} if every else {row_key(r): r for r in read_file_rows(run_dir, "conversations.json", known, skip=replaced)
                            if configured(r, order, samples)}

    def in_order(keys: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        return sorted(keys, key=lambda k: (order.get(k[0], len(order)), k[1]))

    live = in_order(set(old) | set(new.spooled))

    def scores() -> Iterator[dict[str, Any]]:  # new rows replace old ones by (id, sample), one row in memory at a time
        for key in in_order(set(kept_scores) | set(new.spooled)):
            if key in new.spooled:  # this session's row: valid, as its model dumped it
                row = new.score(key)
                unit = unit_table.of_json(row)
                row.pop(VERSION_KEY, None)  # a fresh dict of its own: versioned in place, as `versioned` orders it
                row[VERSION_KEY] = FORMAT_VERSION
            else:
                row, unit = kept_scores[key]
                row = versioned(row)
            if units is not None:
                units.append(unit)
            yield row

    def conversations() -> Iterator[dict[str, Any]]:
        for key in live:
            yield new.conversation(key) if key in new.spooled else versioned(old[key])

    usage_path = run_dir / USAGE_FILE
    old_usage = {} if every else read_usage(usage_path)
    totals: dict[str, Usage] = defaultdict(Usage)

    def usage_rows() -> Iterator[tuple[str, Any]]:
        for key in sorted(live, key=usage_key):
            name = usage_key(key)
            usage = new.usage(key) if key in new.spooled else old_usage.get(name)
            if usage is None:
                continue
            for phase, value in usage.items():
                totals[phase].add(Usage.from_json(value))
            yield name, usage
        yield VERSION_KEY, FORMAT_VERSION

    dump_json_rows(run_dir / "conversations.json", conversations(), root)
    dump_json_rows(run_dir / "scores.json", label_rows(scores()), root)
    dump_json_object(usage_path, usage_rows(), root)
    dump_json(run_dir / "cost.json", versioned({phase: phase_cost(phase, totals[phase]) for phase in PHASES}), root)
    return [f"{d} from {RUNS_DIR}/{run_dir.name}/" for d in dropped]


def drop_target_run(run_dir: Path, root: Path) -> str:
    """Remove the result files of a target that is no longer configured (and its directory if empty;
    never through a link out of `root`)."""
    check_dir(run_dir, root)
    rows = len(read_rows(run_dir / "scores.json"))
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    try:
        run_dir.rmdir()
    except OSError:
        pass  # the user keeps other files there
    return f"{rows} row{'s' if rows != 1 else ''} of {RUNS_DIR}/{run_dir.name}/: target '{run_dir.name}' is no longer configured"


READERS: dict[str, tuple[type[BaseModel], Normaliser]] = {
    "conversations.json": (ConversationRow, normalise_conversation),
    "scores.json": (ScoreRow, normalise_score),
}


def read_file_rows(run_dir: Path, filename: str, known: Known = NOTHING_KNOWN,
                   skip: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
    """The usable rows of one target's conversations.json or scores.json, whoever wrote them (but
    those `skip` accepts as read: see `store.read_valid`)."""
    model, normalise = READERS[filename]
    return read_valid_rows(run_dir / filename, model, lambda row: normalise(row, run_dir.name, known), skip=skip)


def write_results(bench_dir: Path, records: Iterable[ScenarioRecord | dict[str, Any]], order: dict[str, int], *,
                  targets: set[str] | None = None, samples: int | None = None, known: Known = NOTHING_KNOWN,
                  stamp: SessionStamp | None = None, root: Path | None = None, measured: set[str] | None = None,
                  accuracy: Mapping[str, JudgeAccuracy] | None = None,
                  ) -> tuple[list[ModelResult], list[str], RunScores, dict[str, list[PassFailUnit]]]:
    """Under the result lock: write every touched target's run files, drop rows (and target runs)
    no longer configured, then results.json over all runs on disk. Returns its per-target rates
    (`by_scenario` left empty: it is in the file, the gate reads rates per target and metric), what
    was dropped, the scores.json rows it was aggregated from (every target's, in target order,
    read from disk on each pass) and those rows as compact pass/fail units by target run (read
    once here). `records` is read once; `stamp` is recorded for their rows in `.sessions.json`. No
    write leaves `root` (default `bench_dir`; a shard's directory has the benchmark directory as its
    root). `measured` (when given) receives the unit keys of `records`: the caller's one copy of them
    (100,000 strings at 100,000 items). With `accuracy` (the judge's calibration), results.json
    carries corrected rates too."""
    with results_lock(bench_dir, root=root):
        return _write_results(bench_dir, records, order, targets, samples, known, root or bench_dir, stamp,
                              set() if measured is None else measured, accuracy)


def _write_results(bench_dir: Path, records: Iterable[ScenarioRecord | dict[str, Any]], order: dict[str, int],
                   targets: set[str] | None, samples: int | None, known: Known, root: Path,
                   stamp: SessionStamp | None, measured: set[str],
                   accuracy: Mapping[str, JudgeAccuracy] | None = None,
                   ) -> tuple[list[ModelResult], list[str], RunScores, dict[str, list[PassFailUnit]]]:
    by_target: dict[str, TargetRows] = {}
    written: dict[str, list[PassFailUnit]] = {}
    try:
        for record in records:
            data = record if isinstance(record, dict) else record.to_json()
            target_id, conversation = data["target_id"], data["conversation"]
            measured.add(unit_key(target_id, conversation["id"], conversation["sample"]))
            target = by_target.get(target_id)
            if target is None:
                target = by_target[target_id] = TargetRows(bench_dir)
            target.add(data)
        dropped = _write_runs(bench_dir, by_target, order, targets, samples, known, root, written)
    finally:
        for target in by_target.values():
            target.close()
        by_target.clear()  # this session's rows: the files on disk hold them now
    scores = RunScores(bench_dir, known, fresh=set(written))  # what this finish wrote is not normalised again
    rows_by_model = scores.unit_rows(written=written)  # the targets just written: not read back
    results = aggregate(rows_by_model, by_scenario=False)
    if accuracy:
        correct_results(results, rows_by_model, accuracy)
    if rows_by_model:
        dump_results(bench_dir / "results.json", results, rows_by_model, root)
    update_sessions(bench_dir, measured, {unit_key(r.target, r.id, r.sample) for rows in rows_by_model.values()
                                          for r in rows}, stamp, root)
    return results, dropped, scores, rows_by_model


def dump_results(path: Path, results: list[ModelResult], rows_by_model: dict[str, list[PassFailUnit]],
                 root: Path | None = None) -> None:
    """results.json, byte for byte what `dump_json(path, [versioned(r.model_dump(mode="json",
    exclude_unset=True)) ...])` writes for the full summaries (corrected rates only where
    `correct_results` set them), with each target's `by_scenario` (one entry per scenario) written as it is counted
    instead of built as models first."""
    entries = []
    for result in results:
        entry = result.model_dump(mode="json", exclude_unset=True)  # corrected rates only when set
        entry["by_scenario"] = StreamedDict(summarize_counts(rows_by_model[result.target_model], "id"))
        entries.append(versioned(entry))
    write_json(path, entries, root or path.parent)


def _write_runs(bench_dir: Path, by_target: dict[str, TargetRows], order: dict[str, int], targets: set[str] | None,
                samples: int | None, known: Known, root: Path, written: dict[str, list[PassFailUnit]]) -> list[str]:
    """Every touched target's run files, one target at a time; stale rows and target runs dropped.
    `written` receives each written target's scores.json rows as pass/fail units."""
    runs = check_dir(bench_dir / RUNS_DIR, root)
    on_disk = {d.name for d in runs.iterdir() if (d / "scores.json").is_file()} if runs.is_dir() else set()
    dropped: list[str] = []
    for target_id in sorted(on_disk | set(by_target)):
        if target_id not in by_target:
            if targets is not None and target_id not in targets:
                dropped.append(drop_target_run(runs / target_id, root))
                continue
            if not dropped_rows(read_file_rows(runs / target_id, "scores.json", known), order, samples):
                continue  # untouched and nothing stale: its files stay as written (e.g. another tool's run)
        dropped += write_target_run(runs / target_id, by_target.get(target_id) or TargetRows(), order, samples,
                                    known, root=root, units=written.setdefault(target_id, []))
    return dropped


class TargetRows:
    """One target's rows from this session's records, spooled to disk as they come (only their
    keys stay in memory): the files are written from the spool, and what is aggregated and
    reported is read back from the files."""

    def __init__(self, directory: Path | None = None) -> None:
        self.spooled: Spool[tuple[str, int]] = Spool(directory)
        """(id, sample) -> its usage by phase, its scores.json row and its conversations.json row
        (version included), a compact JSON line each (the usage file's pass parses the first only)."""
    def add(self, record: ScenarioRecord | dict[str, Any]) -> None:
        """A record, or its JSON (`record_to_json`'s: this session's spooled records are not validated again)."""
        source = record if isinstance(record, dict) else record.to_json()
        conversation = source["conversation"]
        self.spooled.add_parts((conversation["id"], conversation["sample"]),
                               (source["usage"], source["score"], versioned(conversation)))

    def conversation(self, key: tuple[str, int]) -> dict[str, Any]:
        conversation: dict[str, Any] = self.spooled.part(key, 2)
        return conversation

    def score(self, key: tuple[str, int]) -> dict[str, Any]:
        score: dict[str, Any] = self.spooled.part(key, 1)
        return score

    def usage(self, key: tuple[str, int]) -> dict[str, Any]:
        usage: dict[str, Any] = self.spooled.part(key, 0)
        return usage

    def close(self) -> None:
        self.spooled.close()
