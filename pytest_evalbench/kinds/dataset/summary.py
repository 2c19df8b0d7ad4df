"""Result files of dataset-case benchmarks: per-case results and a per-agent summary.

`case_results.json` holds one row per case (file order); `agent_summary.json` the per-agent
metric means, composite mean and pass rate over scored cases. Unscored cases are counted apart
and never enter a mean or a pass rate.

Comparative datasets (cases of several agents sharing a `scenario_id`, like AgentsLeague's
multi-agent vs single-agent file) also get a paired comparison per pair of agents: per scenario
the difference of scores (agent minus other), its mean with a 95% t interval, win/tie/loss counts
and an exact two-sided sign test (ties dropped). Pairing removes the scenario's own difficulty
from the comparison, so a small run can still answer "is A better than B?".
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from itertools import combinations
from typing import Any

from pytest_evalbench.formats.dataset_rows import AgentComparison, AgentSummary, CaseResult, PairedStat
from pytest_evalbench.formats.results import ModelResult
from pytest_evalbench.formats.stats import Z95, mcnemar_exact_p

DATASET_TYPES: dict[str, Any] = {"case_results": list[CaseResult], "agent_summary": list[AgentSummary]}


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045,
        2.042)
"""Student's t 97.5% quantiles for 1..30 degrees of freedom (standard tables)."""


def t975(df: int) -> float:
    """Student's t 97.5% quantile: the table up to 30 df, then the Cornish-Fisher expansion around
    the normal quantile (error below 1e-4 there)."""
    if df <= len(T975):
        return T975[df - 1]
    z = Z95
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def paired_stat(diffs: list[float]) -> PairedStat:
    """Mean difference, its 95% t interval, win/tie/loss counts and the sign test's p-value."""
    n = len(diffs)
    wins, losses = sum(1 for d in diffs if d > 0), sum(1 for d in diffs if d < 0)
    mean = statistics.fmean(diffs) if diffs else None
    ci = None
    if mean is not None and n >= 2:
        half = t975(n - 1) * statistics.stdev(diffs) / math.sqrt(n)
        ci = (round(mean - half, 4), round(mean + half, 4))
    return PairedStat(n=n, mean_diff=None if mean is None else round(mean, 4), ci95=ci, wins=wins,
                      ties=n - wins - losses, losses=losses, p_value=round(mcnemar_exact_p(wins, losses), 4))


def _scenario_scores(cases: list[CaseResult]) -> dict[str, dict[str, float]]:
    """scenario_id -> {"composite" | eval name: mean score of this agent's scored cases there}."""
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for case in cases:
        if not case.scenario_id or case.status == "unscored":
            continue
        if case.composite is not None:
            values[case.scenario_id]["composite"].append(case.composite)
        for metric in case.metrics:
            if metric.score is not None:
                values[case.scenario_id][metric.eval].append(metric.score)
    return {scn: {key: statistics.fmean(v) for key, v in by_key.items()} for scn, by_key in values.items()}


def compare_agents(groups: dict[str, list[CaseResult]]) -> dict[str, list[AgentComparison]]:
    """Paired comparisons for every pair of agents (alphabetical: first minus second) that share at
    least one scenario_id; keyed by the first agent."""
    scores = {agent: _scenario_scores(cases) for agent, cases in groups.items()}
    out: dict[str, list[AgentComparison]] = defaultdict(list)
    for first, second in combinations(sorted(groups), 2):
        shared = sorted(set(scores[first]) & set(scores[second]))
        if not shared:
            continue
        keys = sorted({k for scn in shared for k in scores[first][scn]} & {k for scn in shared for k in scores[second][scn]})

        def diffs(key: str, shared: list[str] = shared, first: str = first, second: str = second) -> list[float]:
            return [scores[first][scn][key] - scores[second][scn][key] for scn in shared
                    if key in scores[first][scn] and key in scores[second][scn]]

        out[first].append(AgentComparison(other=second, n_scenarios=len(shared), composite=paired_stat(diffs("composite")),
                                          metrics={k: paired_stat(diffs(k)) for k in keys if k != "composite"}))
    return out


def summarize_agents(rows: list[CaseResult]) -> list[AgentSummary]:
    """Per-agent summary, sorted by agent name (with paired comparisons on comparative datasets)."""
    groups: dict[str, list[CaseResult]] = defaultdict(list)
    for row in rows:
        groups[row.agent_name].append(row)
    comparisons = compare_agents(groups)
    out: list[AgentSummary] = []
    for agent in sorted(groups):
        cases = groups[agent]
        scored = [c for c in cases if c.status != "unscored"]
        scores: dict[str, list[float]] = defaultdict(list)
        for case in cases:
            for metric in case.metrics:
                if metric.score is not None:
                    scores[metric.eval].append(metric.score)
        entry = AgentSummary(
            agent_name=agent, n_cases=len(cases), n_scored=len(scored),
            n_passed=sum(1 for c in scored if c.passed), n_unscored=len(cases) - len(scored),
            pass_rate=_mean([1.0 if c.passed else 0.0 for c in scored]),
            composite_mean=_mean([c.composite for c in scored if c.composite is not None]),
            metric_means={name: _mean(values) for name, values in sorted(scores.items())})
        if comparisons.get(agent):
            entry.comparisons = comparisons[agent]
        out.append(entry)
    return out


def as_target_results(summary: list[AgentSummary]) -> list[ModelResult]:
    """Agent summaries as per-target rates, so `thresholds:` gate dataset benchmarks too: each agent
    is a target and a passed case counts as a passed positive row."""
    return [ModelResult(target_model=a.agent_name, positive_pass_rate=a.pass_rate, negative_pass_rate=None,
                        n_positive=a.n_cases, n_negative=0, n_total=a.n_cases, by_metric={}, by_scenario={})
            for a in summary]


def agent_table(summary: list[AgentSummary]) -> list[str]:
    """Terminal lines: per agent pass rate, composite mean and metric means."""
    lines = []
    for agent in summary:
        rate = "-" if agent.pass_rate is None else f"{agent.pass_rate:.3f}"
        comp = "-" if agent.composite_mean is None else f"{agent.composite_mean:.2f}"
        means = ", ".join(f"{name.removesuffix('Explain')} {'-' if v is None else f'{v:.2f}'}"
                          for name, v in agent.metric_means.items())
        lines.append(f"{agent.agent_name}: pass rate {rate} ({agent.n_passed}/{agent.n_scored} scored, "
                     f"{agent.n_unscored} unscored), composite mean {comp}; {means}")
    for agent in summary:
        for comparison in agent.comparisons:
            lines += comparison_lines(agent.agent_name, comparison)
    return lines


def _stat_text(stat: PairedStat) -> str:
    if stat.mean_diff is None:
        return "no scored pairs"
    ci = "" if stat.ci95 is None else f" [{stat.ci95[0]:+.2f}, {stat.ci95[1]:+.2f}]"
    return (f"{stat.mean_diff:+.2f}{ci}, {stat.wins}/{stat.ties}/{stat.losses} win/tie/loss, "
            f"sign test p={stat.p_value:.3f}")


def comparison_lines(agent: str, comparison: AgentComparison) -> list[str]:
    """Terminal lines of one paired comparison: composite first, then each eval."""
    lines = [f"paired {agent} - {comparison.other} over {comparison.n_scenarios} shared scenarios "
             f"(mean difference, 95% CI):", f"  composite: {_stat_text(comparison.composite)}"]
    lines += [f"  {name.removesuffix('Explain')}: {_stat_text(stat)}" for name, stat in comparison.metrics.items()]
    return lines
