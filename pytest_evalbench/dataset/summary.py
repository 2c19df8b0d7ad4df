"""Result files of dataset-case benchmarks: per-case results and a per-agent summary.

`case_results.json` holds one row per case (file order); `agent_summary.json` the per-agent
metric means, composite mean and pass rate over scored cases. Unscored cases are counted apart
and never enter a mean or a pass rate.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricResult(_Strict):
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


class ToolCheckResult(_Strict):
    ok: bool
    matched: int
    expected: int
    summary: str


class CaseResult(_Strict):
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
    answer_source: Literal["dataset", "target"]


class AgentSummary(_Strict):
    """agent_summary.json entry."""

    agent_name: str
    n_cases: int
    n_scored: int
    n_passed: int
    n_unscored: int
    pass_rate: Optional[float]
    composite_mean: Optional[float]
    metric_means: dict[str, Optional[float]]


DATASET_TYPES: dict[str, Any] = {"case_results": list[CaseResult], "agent_summary": list[AgentSummary]}


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def summarize_agents(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-agent summary, sorted by agent name."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row["agent_name"]].append(row)
    out = []
    for agent in sorted(groups):
        cases = groups[agent]
        scored = [c for c in cases if c["status"] != "unscored"]
        scores: dict[str, list[float]] = defaultdict(list)
        for case in cases:
            for metric in case["metrics"]:
                if metric["score"] is not None:
                    scores[metric["eval"]].append(metric["score"])
        out.append({
            "agent_name": agent, "n_cases": len(cases), "n_scored": len(scored),
            "n_passed": sum(1 for c in scored if c["passed"]), "n_unscored": len(cases) - len(scored),
            "pass_rate": _mean([1.0 if c["passed"] else 0.0 for c in scored]),
            "composite_mean": _mean([c["composite"] for c in scored if c["composite"] is not None]),
            "metric_means": {name: _mean(values) for name, values in sorted(scores.items())},
        })
    return out


def as_target_results(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Agent summaries in results.json shape, so `thresholds:` gate dataset benchmarks too: each agent
    is a target and a passed case counts as a passed positive row."""
    return [{"target_model": a["agent_name"], "positive_pass_rate": a["pass_rate"], "negative_pass_rate": None,
             "n_positive": a["n_cases"], "n_negative": 0, "n_total": a["n_cases"], "by_metric": {}, "by_scenario": {}}
            for a in summary]


def agent_table(summary: list[dict[str, Any]]) -> list[str]:
    """Terminal lines: per agent pass rate, composite mean and metric means."""
    lines = []
    for agent in summary:
        rate = "-" if agent["pass_rate"] is None else f"{agent['pass_rate']:.3f}"
        comp = "-" if agent["composite_mean"] is None else f"{agent['composite_mean']:.2f}"
        means = ", ".join(f"{name.removesuffix('Explain')} {'-' if v is None else f'{v:.2f}'}"
                          for name, v in agent["metric_means"].items())
        lines.append(f"{agent['agent_name']}: pass rate {rate} ({agent['n_passed']}/{agent['n_scored']} scored, "
                     f"{agent['n_unscored']} unscored), composite mean {comp}; {means}")
    return lines
