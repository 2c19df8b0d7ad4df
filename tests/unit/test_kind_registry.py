"""Kinds are named in the registry only: everything else asks the kind's class."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from syntax_trees import parse

import pytest_evalbench
from pytest_evalbench.formats.spec import BenchmarkSpec
from pytest_evalbench.kinds.protocol import SPEC_KINDS, SpecKind, spec_kind

PACKAGE = Path(pytest_evalbench.__file__).parent
KIND_NAMES = {"scenarios", "dataset", "calibration"}


def kind_comparisons(source: str) -> list[int]:
    """Lines of `x == "dataset"`, `kind != "scenarios"`, `k in ("dataset", ...)`: branches on a kind's name."""
    found = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            values = [v for o in operands for v in (o.elts if isinstance(o, ast.Tuple | ast.List | ast.Set) else [o])]
            if any(isinstance(v, ast.Constant) and v.value in KIND_NAMES for v in values):
                found.append(node.lineno)
    return found


def test_no_module_outside_the_registry_branches_on_a_kind_name() -> None:
    hits = [f"{path.relative_to(PACKAGE)}:{line}" for path in sorted(PACKAGE.rglob("*.py")) if path.name != "kinds.py"
            for line in kind_comparisons(path.read_text(encoding="utf-8"))]
    assert hits == []


def test_the_detector_finds_such_branches() -> None:
    source = 'if spec.kind != "scenarios":\n    pass\nok = k in ("dataset", "other")\nname = "dataset"\n'
    assert kind_comparisons(source) == [1, 3]


@pytest.mark.parametrize(("kind", "judged", "named_targets", "generated"), [
    ("scenarios", "metrics", True, True), ("dataset", "evals", False, False)])
def test_each_kind_states_what_the_rest_of_the_tree_asks(kind: str, judged: str, named_targets: bool,
                                                         generated: bool) -> None:
    spec = BenchmarkSpec.model_validate({"name": "b", "kind": kind})
    cls = spec_kind(spec)
    assert cls is spec_kinds()[kind]
    assert (cls.judged, cls.thresholds_name_targets, cls.generated_from_metrics) == (judged, named_targets, generated)


def test_the_registry_is_filled_from_above_once() -> None:
    """kinds.py starts empty (it imports no kind: test_layers); `register_shipped` fills it and may run again
    (pytest configures several sessions in one process); another class under a taken name is refused."""
    from pytest_evalbench.kinds import protocol as kinds

    assert sorted(kinds.SPEC_KINDS) == ["dataset", "scenarios"] and len(kinds._CALIBRATION) == 1
    with pytest.raises(ValueError, match="'dataset' is already registered"):
        kinds.register_kind("dataset", lambda: spec_kinds()["scenarios"])
    assert spec_kind(BenchmarkSpec.model_validate({"name": "b", "kind": "dataset"})).judged == "evals"


def test_an_unregistered_kind_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_evalbench.kinds import protocol as kinds

    monkeypatch.setattr(kinds, "SPEC_KINDS", {})
    with pytest.raises(LookupError, match="no benchmark kind 'scenarios' is registered"):
        spec_kind(BenchmarkSpec.model_validate({"name": "b"}))


def spec_kinds() -> dict[str, type[SpecKind]]:
    """benchmark.yaml `kind:` value -> the kind's class (imports every kind)."""
    return {name: load() for name, load in SPEC_KINDS.items()}
