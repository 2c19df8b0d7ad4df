"""gate/verdict.py: the gate's decision reaches the renderers typed (flips with node ids, baseline paths)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from pytest_evalbench.formats.results import PassFailUnit
from pytest_evalbench.gate.decision import Flip, FlipKey, GateDecision, GateVerdict, gate_verdict
from pytest_evalbench.gate.paired import compare_with_baseline, make_baseline


def rows(outcomes: list[bool]) -> list[PassFailUnit]:
    return [PassFailUnit("t", f"c{i}", "m01", 0, passed, "M01", "positive") for i, passed in enumerate(outcomes)]


def test_flips_are_typed_and_carry_the_node_id_this_session_ran() -> None:
    comparison = compare_with_baseline(make_baseline([], rows([True, True, True]), {}), rows([False, True, False]))
    node_ids = {FlipKey("t", "c0", 0): "benchmarks/d/scenarios.json::c0[t-s0]"}
    decision = GateDecision(comparison=comparison, baseline_files=[Path("base.json")])
    verdict = gate_verdict(decision, 0, 2, node_ids)
    assert verdict.flips == [Flip("t", "c0", "m01", 0, "t|c0|m01|0", "benchmarks/d/scenarios.json::c0[t-s0]"),
                             Flip("t", "c2", "m01", 0, "t|c2|m01|0")]
    assert [f.text() for f in verdict.flips] == ["benchmarks/d/scenarios.json::c0[t-s0]", "t|c2|m01|0"]
    assert verdict.flip_node_ids == ["benchmarks/d/scenarios.json::c0[t-s0]"]
    assert verdict.decision is decision and verdict.decision.comparison is comparison
    assert verdict.to_json()["baseline_files"] == ["base.json"]


def test_the_verdict_holds_the_gates_outcome_and_copies_none_of_it() -> None:
    """Renderers read the gate's typed `GateDecision`; the verdict adds only its words and the flips' node ids."""
    assert {f.name for f in fields(GateVerdict)} == {"verdict", "exit_code", "reason", "decision", "flips",
                                                  "tolerated"}
    assert {f.name for f in fields(GateDecision)} & {f.name for f in fields(GateVerdict)} == set()
    assert gate_verdict(None, 4, 0, {}).decision == GateDecision()
