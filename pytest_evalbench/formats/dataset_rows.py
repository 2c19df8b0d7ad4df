"""What a dataset benchmark's result files say: case_results.json rows (`CaseResult`) and
agent_summary.json entries (`AgentSummary`). Computing them is the dataset kind's
(`kinds/dataset/summary.py`); the rows are here, below the kinds, because the protocol's results and
the reports read them too.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from pytest_evalbench.formats import Strict
from pytest_evalbench.formats.results import EvalScore, PassFailUnit

__all__ = ["AgentComparison", "AgentSummary", "CaseResult", "MetricResult", "PairedStat", "ToolCheckResult",
           "TrajectoryCheck"]


class MetricResult(Strict):
    eval: str
    score: Optional[int]
    threshold: Optional[float]
    passed: Optional[bool]
    explanation: str
    not_applicable: bool = False
    """True when the eval had nothing to judge (ToolCallAccuracy with no tool expected and none invoked):
    excluded from the composite and the hard-fail rule."""
    agreement: Optional[float] = None
    """With a judge panel or judge samples: the share of usable votes equal to the (median) score."""
    votes: Optional[list[Optional[int]]] = None
    """With a judge panel or judge samples: every vote (null when that answer was unusable)."""


class ToolCheckResult(Strict):
    ok: bool
    matched: int
    expected: int
    summary: str


class TrajectoryCheck(Strict):
    """A case's `expected_trajectory` checked against the calls invoked (`kinds/trajectory.py`)."""

    ok: bool
    mode: Literal["strict", "unordered", "subset", "superset"]
    summary: str
    """What matched, or what differed: `trajectory strict: call 1: expected ..., got ...; made: ...`."""


class CaseResult(Strict):
    """case_results.json row."""

    case_id: str
    agent_name: str
    scenario_id: Optional[str]
    threshold_profile: str
    status: Literal["passed", "failed", "unscored"]
    passed: Optional[bool]
    composite: Optional[float]
    pass_mark: Optional[float]
    metrics: list[MetricResult]
    tool_check: Optional[ToolCheckResult]
    reasons: list[str]
    answer_source: Literal["dataset", "target", "stored"]
    """`stored`: a live target's earlier answer, from answers/<agent>.jsonl."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """The case's fields this version does not model (e.g. `workflow_mode`), kept as they were."""
    trajectory: Optional[TrajectoryCheck] = None
    """With the case's `expected_trajectory`: the check's result; a check that does not hold fails the case."""

    def to_json(self) -> dict[str, Any]:
        """The file's row: optional keys (`extra`, a metric's `not_applicable`, `agreement`, `votes`)
        only when the row was made with them."""
        return self.model_dump(mode="json", exclude_unset=True)

    def unit_row(self, metric: str) -> PassFailUnit:
        """The case as one pass/fail unit for the gate: the agent is the target, `metric` names it."""
        return PassFailUnit(self.agent_name, self.case_id, metric, 0, self.passed)

    def eval_scores(self) -> list[EvalScore]:
        """Every scored eval of the case, paired with the baseline by agent, case_id and eval."""
        return [EvalScore(self.agent_name, self.case_id, m.eval, float(m.score)) for m in self.metrics
                if m.score is not None]


class PairedStat(Strict):
    """One paired comparison of two agents on one score, over the scenarios both have scored."""

    n: int
    mean_diff: Optional[float]
    ci95: Optional[tuple[float, float]]
    """t interval of the mean difference; null below two pairs."""
    wins: int
    ties: int
    losses: int
    p_value: float
    """Exact two-sided sign test of wins against losses (ties dropped)."""


class AgentComparison(Strict):
    """The agent of this summary entry against `other`, paired by `scenario_id`."""

    other: str
    n_scenarios: int
    composite: PairedStat
    metrics: dict[str, PairedStat]


class AgentSummary(Strict):
    """agent_summary.json entry."""

    agent_name: str
    n_cases: int
    n_scored: int
    n_passed: int
    n_unscored: int
    pass_rate: Optional[float]
    composite_mean: Optional[float]
    metric_means: dict[str, Optional[float]]
    comparisons: list[AgentComparison] = Field(default_factory=list)
    """Only on comparative datasets: this agent against each later agent (by name) sharing scenarios."""

    def to_json(self) -> dict[str, Any]:
        """The file's entry: `comparisons` only when there are some."""
        return self.model_dump(mode="json", exclude={"comparisons"} if not self.comparisons else None)
