"""Benchmark kinds: the protocol and registry (`protocol.py`), the run context every kind shares
(`run.py`, `targets.py`, `judges.py`, `estimate.py`) and the shipped kinds (`scenarios/`, `dataset/`,
`calibration/`).

Importing any module of this package registers the shipped kinds here, so the registry is full before
anyone asks it for a kind. Each loader imports its kind's module when first called: a run imports its
own kind only. `protocol.py` imports no kind, so the kinds' modules use it without a cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_evalbench.kinds.protocol import AnyKind, SpecKind, register_calibration, register_kind

if TYPE_CHECKING:
    from pytest_evalbench.kinds.run import BenchmarkRun


def _scenarios() -> type[SpecKind]:
    from pytest_evalbench.kinds.scenarios.kind import ScenarioKind

    return ScenarioKind


def _dataset() -> type[SpecKind]:
    from pytest_evalbench.kinds.dataset.kind import DatasetKind

    return DatasetKind


def _calibration() -> Callable[[BenchmarkRun], AnyKind]:
    from pytest_evalbench.kinds.calibration.kind import CalibrationKind

    return CalibrationKind


register_kind("scenarios", _scenarios)
register_kind("dataset", _dataset)
register_calibration(_calibration)
