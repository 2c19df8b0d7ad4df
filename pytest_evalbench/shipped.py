"""The kinds this package ships, registered from above: `kinds.py` (the protocol, in the run layer)
imports no kind, so the kinds' modules can use it without a cycle. Every entry point calls
`register_shipped()` before it asks for a kind: the plugin (`pytest_addhooks`), `python -m
pytest_evalbench`, the authoring commands and `evalbench merge`.

Each loader imports its kind's module when first called, so a run imports its own kind only
(tests/unit/test_import_cost.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_evalbench.kinds import AnyKind, SpecKind, register_calibration, register_kind

if TYPE_CHECKING:
    from pytest_evalbench.run import BenchmarkRun


def _scenarios() -> type[SpecKind]:
    from pytest_evalbench.scenarios.kind import ScenarioKind

    return ScenarioKind


def _dataset() -> type[SpecKind]:
    from pytest_evalbench.dataset.kind import DatasetKind

    return DatasetKind


def _calibration() -> Callable[[BenchmarkRun], AnyKind]:
    from pytest_evalbench.calibration.kind import CalibrationKind

    return CalibrationKind


def register_shipped() -> None:
    """Register the shipped kinds (idempotent: cheap to call from every entry point)."""
    register_kind("scenarios", _scenarios)
    register_kind("dataset", _dataset)
    register_calibration(_calibration)
