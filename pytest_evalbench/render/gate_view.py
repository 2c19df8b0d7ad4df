"""The one adapter between the gate's outcome object and everything render/ shows.

gate/ decides; render/ only reads. Every attribute of the gate's outcome that reports use is read
here (and only here), so a change to gate/ touches this module and nothing else in render/.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

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
    comparison: dict[str, Any] | None = None

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


def _table(outcome: Any, comparison: Any) -> list[str]:
    """The gate's rate table, then its baseline comparison table (raw and adjusted p per test)."""
    from ..gate.compare import comparison_table

    return list(getattr(outcome, "table", [])) + (comparison_table(comparison) if comparison is not None else [])


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
                    written=list(getattr(outcome, "written", [])), table=_table(outcome, comparison),
                    comparison=comparison.to_dict() if comparison is not None else None)
    view.verdict, view.reason = _verdict(view, exit_code, failed, int(getattr(outcome, "held", 0)))
    return view


def _verdict(view: GateView, exit_code: int, failed: int, rules: int) -> tuple[str, str]:
    """The verdict word and one plain sentence saying why the build passed or failed."""
    cases = f"{failed} case{'s' if failed != 1 else ''} failed"
    if exit_code == 7 or view.incomplete:
        return "incomplete", ("the run is incomplete (" + "; ".join(view.incomplete)
                              + "): its numbers cannot pass or fail the build")
    if exit_code == 6 or view.breaches or view.regressions:
        what = [f"{len(view.breaches)} threshold breach{'es' if len(view.breaches) != 1 else ''}"] if view.breaches else []
        what += [f"{len(view.regressions)} regression{'s' if len(view.regressions) != 1 else ''} vs baseline"
                 ] if view.regressions else []
        return "regression", ", ".join(what) or "regression"
    if exit_code not in (0, 1):
        return EXIT_WORDS.get(exit_code, f"exit {exit_code}"), f"pytest ended with exit status {exit_code}"
    if view.mode == "thresholds":
        held = (f"{rules} threshold/baseline rule{'s' if rules != 1 else ''} held" if rules or view.notes
                else "no threshold rules are configured")
        if view.notes:
            held += f", {len(view.notes)} not evaluated"
        why = f"gate: thresholds in benchmark.yaml: {held}"
        if failed:
            why += f"; {cases}, which is reported but does not fail the build"
        return "passed", why
    if view.verdicts:  # num_samples > 1: the per-case verdicts decide, not single samples
        tally = {v: sum(1 for line in view.verdicts if line.endswith(f"-> {v}")) for v in ("pass", "inconclusive", "fail")}
        counts = ", ".join(f"{n} {v}" for v, n in tally.items())
        if exit_code == 1:
            return "failed", f"per-case verdicts {counts} (gate: cases fails the build on a failed case)"
        return "passed", f"per-case verdicts {counts}; single failed samples do not fail the build"
    if exit_code == 1:
        return "failed", f"{cases} (gate: cases fails the build on any failed case)"
    return "passed", "every case passed (gate: cases)"
