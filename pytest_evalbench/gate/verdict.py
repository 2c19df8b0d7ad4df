"""The gate's outcome as people read it: the verdict word and the reason, beside the typed outcome.

gate/ decides (`GateOutcome`) and words its decision once, here; a `GateVerdict` holds that outcome
as it is (no copied fields), and render/ reads its typed fields and never parses a string back
(issue 26). The flip keys the comparison pairs on are read back
into typed `Flip`s in this module only, the one that knows the gate's key format (`OutcomeRow.key`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from pytest_evalbench.gate.outcome import GateOutcome
from pytest_evalbench.gate.paired import Comparison

EXIT_WORDS = {0: "passed", 1: "failed", 2: "interrupted", 3: "internal error", 4: "usage error",
              5: "no tests collected", 6: "regression", 7: "incomplete"}

MAX_RULES_IN_REASON = 3
"""Up to this many rules are named in the verdict's sentence; every rule is listed beside it on every surface."""


class FlipKey(NamedTuple):
    """What a flipped case and this session's record share: target, case id and sample."""

    target: str
    case: str
    sample: int


@dataclass(frozen=True)
class Flip:
    """A case that passed in the baseline and fails now, with its node id when this session ran it."""

    target: str
    case: str
    metric: str
    sample: int
    baseline_key: str
    """The unit's key in the baseline file, `target|id|metric|sample`."""
    node_id: str | None = None

    def text(self) -> str:
        """The pasteable node id where known, else the baseline's key."""
        return self.node_id or self.baseline_key


@dataclass
class GateVerdict:
    """What the gate decided, in words: the verdict, the exit code, the reason, beside the gate's own
    typed `GateOutcome` (rules, breaches, comparison...), which renderers read as it is."""

    verdict: str
    exit_code: int
    reason: str
    outcome: GateOutcome = field(default_factory=GateOutcome)
    """The gate's decision, typed; empty when no case was run."""
    flips: list[Flip] = field(default_factory=list)
    """Cases that passed in the baseline and fail now, with this session's node ids."""

    @property
    def rule_lines(self) -> list[str]:
        """Each rule in the same words everywhere: `min_negative_pass_rate 0.60 t: 1.00 held`."""
        return [r.text() for r in self.outcome.rules]

    @property
    def flip_node_ids(self) -> list[str]:
        """Node ids of the flipped cases this session ran (the ones a rerun command can name)."""
        return [f.node_id for f in self.flips if f.node_id]

    def to_json(self) -> dict[str, Any]:
        o = self.outcome
        return {"verdict": self.verdict, "exit_code": self.exit_code, "reason": self.reason, "mode": o.mode,
                "breaches": o.breaches, "regressions": o.regressions, "incomplete": o.incomplete,
                "notes": o.notes, "verdicts": o.verdicts, "flips": [f.text() for f in self.flips],
                "baseline_files": [str(p) for p in o.baseline_files],
                "comparison": o.comparison.to_dict() if o.comparison is not None else None,
                "rules": [asdict(r) for r in o.rules]}


def flips_of(comparison: Comparison, node_ids: Mapping[FlipKey, str]) -> list[Flip]:
    """The cases that flipped pass -> fail against the baseline (its `target|id|metric|sample` keys)."""
    out = []
    for test in comparison.tests:
        if test.kind != "pass/fail":
            continue
        for key in test.pass_to_fail:
            parts = key.split("|")
            if len(parts) != 4:  # an id with a `|` in it: shown by its key, no node id to find
                out.append(Flip(test.target, key, test.metric_id, 0, key))
                continue
            target, case, metric, sample = parts
            number = int(sample) if sample.isdigit() else 0
            out.append(Flip(target, case, metric, number, key, node_ids.get(FlipKey(target, case, number))))
    return out


def node_ids_of(records: Mapping[str, dict[str, Any]]) -> dict[FlipKey, str]:
    """`FlipKey` -> node id for the records of this session that are judged conversations or dataset cases."""
    out = {}
    for nodeid, record in records.items():
        score = record.get("score") or {}
        case = record.get("case") or {}  # a dataset case: the agent is its target, one sample
        if record.get("target_id") and score.get("id"):
            out[FlipKey(record["target_id"], score["id"], int(score.get("sample") or 0))] = nodeid
        elif case.get("agent_name") and case.get("case_id"):
            out[FlipKey(case["agent_name"], case["case_id"], 0)] = nodeid
    return out


def gate_verdict(outcome: GateOutcome | None, exit_code: int, failed: int, node_ids: Mapping[FlipKey, str],
                 finish_error: str | None = None) -> GateVerdict:
    """The gate's outcome (or its absence) in words.

    `failed` counts items that FAILED (case failures), `node_ids` maps flipped cases to node ids.
    """
    if outcome is None:
        reason = f"results could not be written: {finish_error}" if finish_error else "no case was run"
        return GateVerdict(verdict=EXIT_WORDS.get(exit_code, f"exit {exit_code}"), exit_code=exit_code, reason=reason)
    comparison = outcome.comparison
    flips = flips_of(comparison, node_ids) if comparison is not None else []
    verdict, reason = _verdict(outcome, exit_code, failed)
    return GateVerdict(verdict=verdict, exit_code=exit_code, reason=reason, outcome=outcome, flips=flips)


def _rules_said(view: GateOutcome) -> str:
    """`min_negative_pass_rate 0.50 t: 1.00 held` for a few rules, else counts by status."""
    if not view.rules:  # configured rules that could not be evaluated say so in the notes
        return "; ".join(view.notes) if view.notes else "no threshold rules are configured"
    if len(view.rules) <= MAX_RULES_IN_REASON:
        return "; ".join(r.text() for r in view.rules)
    counts = {s: sum(1 for r in view.rules if r.status == s) for s in ("held", "breached", "not evaluated")}
    return ", ".join(f"{n} rule{'s' if n != 1 and s == 'held' else ''} {s}" if s == "held" else f"{n} {s}"
                     for s, n in counts.items() if n) + " (each rule is listed)"


def _verdict(view: GateOutcome, exit_code: int, failed: int) -> tuple[str, str]:
    """The verdict word and one plain sentence saying why the build passed or failed."""
    cases = f"{failed} case{'s' if failed != 1 else ''} failed"
    if exit_code == 7 or view.incomplete:
        return "incomplete", ("the run is incomplete (" + "; ".join(view.incomplete)
                              + "): its numbers cannot pass or fail the build")
    if exit_code == 6 or view.breaches or view.regressions:
        breached = [r.text() for r in view.rules if r.status == "breached"]
        if breached and len(breached) <= MAX_RULES_IN_REASON:
            return "regression", "; ".join(breached)
        what = [f"{len(view.breaches)} threshold breach{'es' if len(view.breaches) != 1 else ''}"] if view.breaches else []
        what += [f"{len(view.regressions)} regression{'s' if len(view.regressions) != 1 else ''} vs baseline"
                 ] if view.regressions else []
        return "regression", ", ".join(what) or "regression"
    if exit_code not in (0, 1):
        return EXIT_WORDS.get(exit_code, f"exit {exit_code}"), f"pytest ended with exit status {exit_code}"
    if view.mode == "thresholds":
        why = f"gate: thresholds in benchmark.yaml: {_rules_said(view)}"
        if failed:
            why += f"; {cases}, which is reported but does not fail the build"
        return "passed", why
    rules = f"; {_rules_said(view)}" if view.rules else ""
    if view.verdicts:  # num_samples > 1: the per-case verdicts decide, not single samples
        tally = {v: sum(1 for line in view.verdicts if line.endswith(f"-> {v}")) for v in ("pass", "inconclusive", "fail")}
        counts = ", ".join(f"{n} {v}" for v, n in tally.items())
        if exit_code == 1:
            return "failed", f"per-case verdicts {counts} (gate: cases fails the build on a failed case){rules}"
        return "passed", f"per-case verdicts {counts}; single failed samples do not fail the build{rules}"
    if exit_code == 1:
        return "failed", f"{cases} (gate: cases fails the build on any failed case){rules}"
    return "passed", f"every case passed (gate: cases){rules}"
