"""What a run records, built from what the session (or `evalbench merge`) holds in memory: the run's
summary and its records, the same objects the result files are written from; and where it is recorded.

The store is `--evalbench-store=URL`, else `EVALBENCH_STORE`, else the SQLite file
`.evalbench/runs.sqlite` under pytest's rootdir (that directory keeps a `.gitignore` of `*`, so git never
lists it); `none` records nothing. Recording never fails a run: a store that cannot be written is one
warning line (`record_run`).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from pytest_evalbench.base import __version__
from pytest_evalbench.base.files import atomic_write_text
from pytest_evalbench.store import store_setting
from pytest_evalbench.store.db import ItemData, RunData, StoreError, masked_url, open_store, sqlite_url

if TYPE_CHECKING:
    from pytest_evalbench.render.summary import RunSummary

STORE_DIR = ".evalbench"
STORE_FILE = "runs.sqlite"
MAX_REF = 1_000
"""Characters of a branch name kept (git allows longer)."""


def store_url(root: Path, given: str | None, env: Mapping[str, str]) -> str | None:
    """The store a run records in and the commands read: the option, else `EVALBENCH_STORE`, else the
    default SQLite file under `root`; None when the value is `none` (recording off)."""
    value = store_setting(given, env)
    if value is None:
        return None
    return value or sqlite_url(root / STORE_DIR / STORE_FILE)


def is_default(url: str, root: Path) -> bool:
    return url == sqlite_url(root / STORE_DIR / STORE_FILE)


def keep_store_dir(root: Path) -> None:
    """Make `.evalbench/` with a `.gitignore` of `*` (kept as it is when present): the default store stays
    out of git."""
    directory = root / STORE_DIR
    directory.mkdir(exist_ok=True)
    ignore = directory / ".gitignore"
    if not ignore.exists():
        atomic_write_text(ignore, "*\n", directory)


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip()
    return text if out.returncode == 0 and text and text != "HEAD" else None


def branches(root: Path, env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(branch, base branch). On GitHub Actions the branch is GITHUB_HEAD_REF (a pull request) or
    GITHUB_REF_NAME, the base GITHUB_BASE_REF; elsewhere the branch is git's checked-out branch."""
    github = env.get("GITHUB_ACTIONS") == "true"
    branch = (env.get("GITHUB_HEAD_REF") or env.get("GITHUB_REF_NAME")) if github else None
    branch = branch or _git(root, "rev-parse", "--abbrev-ref", "HEAD")
    base = env.get("GITHUB_BASE_REF") if github else None
    return (branch[:MAX_REF] if branch else None), (base[:MAX_REF] if base else None)


def _present(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def case_of(node_id: str, record: Mapping[str, Any], status: str) -> ItemData:
    """One record (as it crossed from the worker: `ScenarioRecord`/`DatasetRecord`/calibration JSON) as a case."""
    score = record.get("score")
    if isinstance(score, dict):  # a scenario row: one metric of one conversation
        conversation = record.get("conversation") or {}
        return ItemData(node_id=node_id, target=str(record.get("target_id") or score.get("target_model") or ""),
                        metric=str(score.get("metric_id") or ""), unit=str(score.get("id") or ""),
                        sample=int(score.get("sample") or 0), status=status, passed=_present(score.get("passed")),
                        present=_present(score.get("present")), probability=_number(score.get("probability")),
                        agreement=_number(score.get("agreement")),
                        decided_by=score.get("decided_by"), justification=str(score.get("justification") or ""),
                        transcript=conversation.get("transcript"))
    case = record.get("case")
    if isinstance(case, dict):  # a dataset case: the agent is the target, the case one unit
        from pytest_evalbench.kinds.dataset.kind import CASE_METRIC

        reasons = [str(r) for r in case.get("reasons") or []]
        explanations = [f"{m.get('eval')}: {m.get('explanation')}" for m in case.get("metrics") or []
                        if isinstance(m, dict) and m.get("explanation")]
        return ItemData(node_id=node_id, target=str(case.get("agent_name") or ""), metric=CASE_METRIC,
                        unit=str(case.get("case_id") or ""), sample=0, status=status,
                        passed=_present(case.get("passed")), justification="\n".join(reasons + explanations),
                        transcript=[{k: v for k, v in case.items() if k not in ("metrics", "reasons")}])
    return ItemData(node_id=node_id, target="", metric="", unit=str(record.get("key") or ""), sample=0,
                    status=status, justification=str(record.get("justification") or ""),
                    decided_by=record.get("decided_by"))


class ItemRows(Sequence[ItemData]):
    """Every selected item as a case, in node-id order, each built when it is read: (node id, status,
    reason) from the summary, and the record of each item that has one (read from the session's record
    spool, which keeps them on disk); an item that errored or did not run keeps its reason."""

    def __init__(self, records: Mapping[str, Mapping[str, Any]], statuses: Iterable[tuple[str, str, str]]) -> None:
        self.records = records
        self.statuses = list(statuses)

    def __len__(self) -> int:
        return len(self.statuses)

    @overload
    def __getitem__(self, index: int) -> ItemData: ...

    @overload
    def __getitem__(self, index: slice) -> list[ItemData]: ...

    def __getitem__(self, index: int | slice) -> ItemData | list[ItemData]:
        if isinstance(index, slice):
            return [self._case(*entry) for entry in self.statuses[index]]
        return self._case(*self.statuses[index])

    def _case(self, node_id: str, status: str, reason: str) -> ItemData:
        record = self.records.get(node_id)
        if record is None:
            return ItemData(node_id=node_id, target="", metric="", unit="", sample=0, status=status,
                            justification=reason)
        return case_of(node_id, record, status)


def cases_of(records: Mapping[str, Mapping[str, Any]], statuses: Iterable[tuple[str, str, str]]) -> list[ItemData]:
    """Every selected item as a case (`ItemRows`), all built now."""
    return list(ItemRows(records, statuses))


def run_from_parts(*, benchmark: str, kind: str, created: str, commit: str | None, root: Path,
                   env: Mapping[str, str], targets: dict[str, Any], judge: str | None, identities: Mapping[str, Any],
                   verdict: str, exit_status: int, reason: str, cost: float, scope: str,
                   cases: list[ItemData]) -> RunData:
    """A run from its parts (`evalbench merge` has no session summary); branches from git or the CI."""
    branch, base = branches(root, env)
    return RunData(benchmark=benchmark, kind=kind, created=created, commit=commit, branch=branch, base_branch=base,
                   plugin_version=__version__, targets=targets, judge=judge, identities=dict(identities),
                   verdict=verdict, exit_status=exit_status, reason=reason, cost=cost, scope=scope, cases=cases)


def run_of(summary: RunSummary, *, identities: Mapping[str, Any], cases: list[ItemData], exit_status: int,
           root: Path, env: Mapping[str, str]) -> RunData:
    """The run as the store keeps it, from the summary every surface renders."""
    branch, base = branches(root, env)
    judge = summary.models.get("judge")
    targets = {}
    for entry in summary.models.get("target", []):
        tid, _, model = entry.partition("=")
        targets[tid] = model or tid
    return RunData(benchmark=summary.benchmark, kind=summary.kind or "", created=summary.created,
                   commit=summary.commit, branch=branch, base_branch=base, plugin_version=summary.plugin_version,
                   targets=targets, judge=", ".join(judge) if judge else None, identities=dict(identities),
                   verdict=summary.gate.verdict, exit_status=exit_status, reason=summary.gate.reason,
                   cost=float(summary.cost.total), scope=summary.scope, cases=cases)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def record_run(url: str, run: RunData, root: Path,
               cases: Sequence[ItemData] | None = None) -> tuple[int | None, str | None]:
    """Record the run; (its id, None), or (None, one warning line) when the store cannot take it: the run's
    files are written either way and its exit status is the same. `cases` are the run's cases when they
    are not `run.cases` (a `ItemRows`, read a batch at a time)."""
    try:
        if is_default(url, root):
            keep_store_dir(root)
        with open_store(url) as store:
            return store.record(run, cases), None
    except StoreError as exc:
        return None, f"evalbench: the run was not recorded: {exc} (its files are written)"
    except OSError as exc:
        return None, (f"evalbench: the run was not recorded: the run store {masked_url(url)}: "
                      f"{exc.strerror or type(exc).__name__} (its files are written)")

