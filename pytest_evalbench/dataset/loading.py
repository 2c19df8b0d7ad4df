"""The `dataset:` block of a dataset benchmark's benchmark.yaml, and its items.

```yaml
kind: dataset
dataset:
  files: [cases.jsonl]        # JSONL files beside benchmark.yaml; one test item per case_id
  policy: {...}               # scoring policy (thresholds, profiles, hard_fail); default: the documented one
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from pydantic import Field, field_validator

from pytest_evalbench._models import Strict
from pytest_evalbench.dataset.models import DatasetError, DatasetItem, load_cases
from pytest_evalbench.dataset.policy import DOCUMENTED_POLICY, ScoringPolicy
from pytest_evalbench.errors import InputError
from pytest_evalbench.loading import NAME_RE, SPEC_FILE, validate_as
from pytest_evalbench.spec import BenchmarkSpec


class DatasetSettings(Strict):
    files: list[str] = Field(min_length=1)
    policy: Optional[ScoringPolicy] = None

    @field_validator("files")
    @classmethod
    def _plain_names(cls, files: list[str]) -> list[str]:
        for name in files:
            if not NAME_RE.fullmatch(name) or not name.endswith(".jsonl"):
                raise ValueError(f"{name[:100]!r} must be a .jsonl file name beside benchmark.yaml (no paths)")
        return files


def dataset_settings(bench_dir: Path, spec: BenchmarkSpec) -> DatasetSettings:
    if spec.dataset is None:
        raise InputError(bench_dir / SPEC_FILE, "kind: dataset needs a `dataset:` block with `files:`",
                         field="dataset")
    settings: DatasetSettings = validate_as(DatasetSettings, spec.dataset, bench_dir / SPEC_FILE, row="dataset")
    return settings


def policy_of(settings: DatasetSettings) -> ScoringPolicy:
    return settings.policy or DOCUMENTED_POLICY


def dataset_files(bench_dir: Path, settings: DatasetSettings) -> list[Path]:
    return [bench_dir / name for name in settings.files]


def load_items(path: Path, policy: ScoringPolicy, start: int = 0) -> list[DatasetItem]:
    """Items of one JSONL file; a case naming an unknown profile is an error of that line."""
    try:
        cases = load_cases(path)
    except DatasetError as exc:
        raise InputError(path, exc.message, row=exc.line, field=exc.field) from None
    items: list[DatasetItem] = []
    for line, case in cases:
        if case.threshold_profile not in policy.profiles:
            raise InputError(path, f"unknown threshold_profile {case.threshold_profile!r}; the policy defines "
                             f"{', '.join(sorted(policy.profiles))}", row=line, field="threshold_profile")
        items.append(DatasetItem(case, path, line, start + len(items)))
    return items


def check_unique(items_by_file: dict[Path, list[DatasetItem]]) -> None:
    seen: dict[str, Any] = {}
    for path, items in items_by_file.items():
        for item in items:
            if item.name in seen:
                raise InputError(path, f"duplicate case_id {item.name!r} (also in {seen[item.name]})",
                                 row=item.line, field="case_id")
            seen[item.name] = f"{path.name}:{item.line}"


def check_answerable(items_by_file: dict[Path, list[DatasetItem]], targets: set[str]) -> None:
    """A case without a stored answer needs a target named like its agent to answer it (or the
    answer of an earlier run in answers/<agent>.jsonl, see answers.py)."""
    for path, items in items_by_file.items():
        for item in items:
            case = item.case
            if case.model_answer is None and case.agent_name not in targets and item.stored is None:
                raise InputError(path, f"case {case.case_id!r} has no model_answer and no target answers for agent "
                                 f"{case.agent_name!r}: pass --evalbench-target={case.agent_name}=MODEL or add a "
                                 f"target with id {case.agent_name!r} (a model, or an app from the "
                                 "pytest_evalbench_make_target hook)", row=item.line, field="model_answer")
