"""The one adapter between the gate's outcome object and everything render/ shows.

gate/ decides; render/ only reads. Every attribute of the gate's outcome that reports use is read
here (and only here), so a change to gate/ touches this module and nothing else in render/.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..gate.compare import RuleResult

EXIT_WORDS = {0: "passed", 1: "failed", 2: "interrupted", 3: "internal error", 4: "usage error",
              5: "no tests collected", 6: "regression", 7: "incomplete"}


@dataclass
class GateView:
    """What the gate decided, in words people read: verdict, exit code and the reason."""

    verdict: str
    exit_code: int
    reason: str
    mode: str = "cases"
    breaches: list[str] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    flips: list[str] = field(default_factory=list)
    """Cases that passed in the baseline and fail now, as pasteable node ids where known."""
    written: list[str] = field(default_factory=list)
    table: list[str] = field(default_factory=list)
    """The baseline comparison's table (per paired test: n, change, raw and adjusted p)."""
    comparison: dict[str, Any] | None = None
    rules: list[RuleResult] = field(default_factory=list)
    """Every rule the gate read, typed (held, breached, not evaluated and why), shown on every surface."""

    @property
    def rule_lines(self) -> list[str]:
        """Each rule in the same words everywhere: `min_negative_pass_rate 0.60 t: 1.00 held`."""
        return [r.text() for r in self.rules]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def baseline_files(self) -> list[str]:
        """Paths of baseline files the gate wrote (its `written` entries read "baseline <path>")."""
        return [w.split(" ", 1)[1] for w in self.written if w.startswith("baseline ")]


def flip_keys(comparison: Any) -> list[str]:
    """The `target|id|metric|sample` keys of cases that flipped pass -> fail against the baseline."""
    keys: list[str] = []
    for test in getattr(comparison, "tests", None) or []:
        if test.kind == "pass/fail":
            keys += list(test.pass_to_fail)
    return keys


def node_key(target: str, row_id: str, sample: int) -> str:
    """The key `node_ids` maps to a node id: matches a flipped case's `target|id|metric|sample`."""
    return f"{target}|{row_id}|{sample}"


def node_ids_of(records: Mapping[str, dict[str, Any]]) -> dict[str, str]:
    """`node_key` -> node id for the records of this session that are judged conversations."""
    out = {}
    for nodeid, record in records.items():
        score = record.get("score") or {}
        case = record.get("case") or {}  # a dataset case: the agent is its target, one sample
        if record.get("target_id") and score.get("id"):
            out[node_key(record["target_id"], score["id"], int(score.get("sample") or 0))] = nodeid
        elif case.get("agent_name") and case.get("case_id"):
            out[node_key(case["agent_name"], case["case_id"], 0)] = nodeid
    return out


def _flip_node_id(key: str, node_ids: dict[str, str]) -> str:
    parts = key.split("|")
    if len(parts) == 4:
        found = node_ids.get(node_key(parts[0], parts[1], int(parts[3]) if parts[3].isdigit() else 0))
        if found:
            return found
    return key


def _table(comparison: Any) -> list[str]:
    """The baseline comparison table (raw and adjusted p per test); the rates themselves are
    rendered from the summary's rate rows, never from the gate's own table."""
    from ..gate.compare import comparison_table

    return comparison_table(comparison) if comparison is not None else []


def gate_view(outcome: Any, exit_code: int, failed: int, node_ids: dict[str, str],
              finish_error: str | None = None) -> GateView:
    """Read the gate's outcome (or its absence) into a `GateView`.

    `failed` counts items that FAILED (case failures), `node_ids` maps `node_key(...)` to node ids.
    """
    if outcome is None:
        reason = f"results could not be written: {finish_error}" if finish_error else "no case was run"
        return GateView(verdict=EXIT_WORDS.get(exit_code, f"exit {exit_code}"), exit_code=exit_code, reason=reason)
    comparison = getattr(outcome, "comparison", None)
    flips = ([_flip_node_id(k, node_ids) for k in flip_keys(comparison)] if comparison is not None
             else list(getattr(outcome, "flips", [])))
    view = GateView(verdict="", exit_code=exit_code, reason="", mode=getattr(outcome, "mode", "cases"),
                    breaches=list(outcome.breaches), regressions=list(outcome.regressions),
                    incomplete=list(outcome.incomplete), notes=list(getattr(outcome, "notes", [])),
                    verdicts=list(getattr(outcome, "verdicts", [])), flips=flips,
                    written=list(getattr(outcome, "written", [])), table=_table(comparison),
                    comparison=comparison.to_dict() if comparison is not None else None,
                    rules=list(getattr(outcome, "rules", [])))
    view.verdict, view.reason = _verdict(view, exit_code, failed)
    return view


MAX_RULES_IN_REASON = 3
"""Up to this many rules are named in the verdict's sentence; every rule is listed beside it on every surface."""


def _rules_said(view: GateView) -> str:
    """`min_negative_pass_rate 0.50 t: 1.00 held` for a few rules, else counts by status."""
    if not view.rules:
        return "no threshold rules are configured"
    if len(view.rules) <= MAX_RULES_IN_REASON:
        return "; ".join(view.rule_lines)
    counts = {s: sum(1 for r in view.rules if r.status == s) for s in ("held", "breached", "not evaluated")}
    return ", ".join(f"{n} rule{'s' if n != 1 and s == 'held' else ''} {s}" if s == "held" else f"{n} {s}"
                     for s, n in counts.items() if n) + " (each rule is listed)"


def _verdict(view: GateView, exit_code: int, failed: int) -> tuple[str, str]:
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
