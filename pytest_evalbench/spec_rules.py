"""Pydantic models of benchmark.yaml's rules for the gate: `thresholds:` (per target and per
metric), `gate:` (how the exit status is decided) and `judge:` (how far the judge is trusted).

The JSON Schema of benchmark.yaml (`pytest_evalbench/schemas/`) is generated from these models too.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from pytest_evalbench._models import Input, Int, Num, Strict

Rate = Optional[Num]  # a YAML `true` is not a rate


class MetricRule(Strict):
    """`thresholds.per_metric.<id>`: rules for one metric on every target."""

    min_pass_rate: Rate = Field(default=None, ge=0, le=1)
    max_drop: Rate = Field(default=None, ge=0, le=1)
    """Fail when the metric's paired drop vs the baseline exceeds this AND is significant after the
    run's multiplicity correction (wins over the target's and the global max_drop)."""


class TargetRule(Strict):
    min_positive_pass_rate: Rate = Field(default=None, ge=0, le=1)
    min_negative_pass_rate: Rate = Field(default=None, ge=0, le=1)
    max_drop: Rate = Field(default=None, ge=0, le=1)
    """Per metric (and for the pooled per-target test): observed drop > max_drop AND significant."""


class ThresholdRules(TargetRule):
    """`thresholds:` of benchmark.yaml. Top-level rules apply to every target; a `per_target`
    entry overrides them field by field; `per_metric` rules apply to that metric on every target
    (its max_drop wins over the target's and the global one). Unknown keys are rejected, so a typo
    fails before any LLM call."""

    per_target: dict[str, TargetRule] = Field(default_factory=dict)
    per_metric: dict[str, MetricRule] = Field(default_factory=dict)

    def for_target(self, target: str) -> TargetRule:
        own = self.per_target.get(target)
        merged = {name: getattr(self, name) for name in TargetRule.model_fields}
        if own is not None:
            merged.update(own.model_dump(exclude_none=True))
        return TargetRule(**merged)

    def count(self) -> int:
        """How many rule values are set."""
        data = self.model_dump(exclude_none=True)
        nested = [v for group in ("per_target", "per_metric") for entry in data.pop(group, {}).values()
                  for v in entry.values()]
        return len(data) + len(nested)


class GateConfig(Input):
    """How the session's exit status is decided (see gate/outcome.py)."""

    mode: Literal["cases", "thresholds"] = "cases"
    """cases: a failed case fails the build (with num_samples > 1: a case whose per-case verdict is
    "fail"). thresholds: failed cases are reported, but only threshold/baseline regressions and
    incomplete runs fail the build."""
    case_pass_rate: Num = Field(default=0.5, ge=0, le=1)
    """With num_samples > 1: the pass rate a case must reach (by its Wilson bound) to pass."""
    fail_inconclusive: bool = False
    """With num_samples > 1 and mode cases: an inconclusive case fails the build too."""
    correction: Literal["holm", "bh"] = "holm"
    """Multiplicity correction over all baseline comparisons of a run: Holm (family-wise error
    rate) or Benjamini-Hochberg (false discovery rate)."""
    alpha: Num = Field(default=0.05, gt=0, lt=1)
    """Significance level of the adjusted p-values."""


class JudgeConfig(Input):
    """How far the judge is trusted: self-consistency samples and the calibration bar."""

    samples: Int = Field(default=1, ge=1, le=25)
    """Judge every row this many times per judge model (self-consistency); the majority decides
    (the median for 1-5 scores). Useful with temperature > 0: identical requests give identical answers."""
    min_kappa: Optional[Num] = Field(default=None, ge=-1, le=1)
    """A metric whose judge reached a lower Cohen's kappa in calibration.json is "judge unreliable":
    shown as such in the summary, and its failures cannot fail the build."""
    require_calibration: bool = False
    """With min_kappa: a metric never calibrated counts as unreliable too."""
    correct_rates: bool = False
    """The gate's min pass-rate rules read the rates corrected for the judge's errors (calibration.json's
    sensitivity and specificity) instead of the observed ones; an undefined correction leaves the rule
    not evaluated, with the reason."""
