"""The scoring policy of dataset benchmarks: thresholds, weighted composite profiles, hard fails.

A case passes only with no hard fail, every metric at or over its threshold, and the composite
(weights renormalised over the metrics that ran and are in the profile) at or over the profile's
pass mark. A metric that is unscored makes the case unscored, unless a scored metric already
fails it (a hard fail or a score below its threshold): that failure is certain whatever the
missing score would have been.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from pytest_evalbench.formats import Strict
from pytest_evalbench.kinds.explain import EvalName

EPS = 1e-9


class Profile(Strict):
    weights: dict[EvalName, float]
    pass_mark: float = Field(ge=1, le=5)

    @model_validator(mode="after")
    def _positive(self) -> Profile:
        bad = [k for k, w in self.weights.items() if w <= 0]
        if bad or not self.weights:
            raise ValueError(f"weights must be positive and non-empty (check {', '.join(bad) or 'weights'})")
        return self


class HardFail(Strict):
    metrics: list[EvalName] = Field(default_factory=list)
    below: float = Field(default=3.0, ge=1, le=5)


class PolicyError(ValueError):
    """A case names a profile the policy does not define."""


class ScoringPolicy(Strict):
    thresholds: dict[EvalName, float] = Field(default_factory=dict)
    profiles: dict[str, Profile]
    hard_fail: HardFail = Field(default_factory=HardFail)
    default_profile: str

    @model_validator(mode="after")
    def _consistent(self) -> ScoringPolicy:
        if self.default_profile not in self.profiles:
            raise ValueError(f"default_profile {self.default_profile!r} is not one of the profiles "
                             f"({', '.join(sorted(self.profiles))})")
        out = [k for k, v in self.thresholds.items() if not 1 <= v <= 5]
        if out:
            raise ValueError(f"thresholds must lie within 1..5 (check {', '.join(out)})")
        return self


class MetricLine(Strict):
    eval: str
    score: Optional[int]
    threshold: Optional[float]
    passed: Optional[bool]


class CaseOutcome(Strict):
    status: Literal["passed", "failed", "unscored"]
    composite: Optional[float]
    profile: str
    pass_mark: float
    hard_fails: list[str]
    lines: list[MetricLine]
    reasons: list[str]


DOCUMENTED_POLICY = ScoringPolicy.model_validate({
    "default_profile": "prep_default",
    "thresholds": {"RelevanceExplain": 3.6, "CoherenceExplain": 3.6, "PerceivedIntelligenceExplain": 3.5,
                   "FluencyExplain": 3.7, "EmpathyExplain": 3.2, "HelpfulnessExplain": 3.7,
                   "IntentResolutionExplain": 3.6, "ToolCallAccuracyExplain": 3.5, "TaskAdherenceExplain": 3.7},
    "profiles": {
        "prep_default": {"pass_mark": 3.65, "weights": {
            "TaskAdherenceExplain": .20, "IntentResolutionExplain": .15, "ToolCallAccuracyExplain": .10,
            "RelevanceExplain": .15, "CoherenceExplain": .10, "PerceivedIntelligenceExplain": .10,
            "FluencyExplain": .10, "EmpathyExplain": .05, "HelpfulnessExplain": .05}},
        "assessment_strict": {"pass_mark": 3.70, "weights": {
            "TaskAdherenceExplain": .22, "IntentResolutionExplain": .13, "ToolCallAccuracyExplain": .12,
            "RelevanceExplain": .14, "CoherenceExplain": .10, "PerceivedIntelligenceExplain": .12,
            "FluencyExplain": .08, "EmpathyExplain": .03, "HelpfulnessExplain": .06}},
    },
    "hard_fail": {"metrics": ["TaskAdherenceExplain", "IntentResolutionExplain", "ToolCallAccuracyExplain"],
                  "below": 3.0},
})
"""The policy of scoring-policy.md (1-5 scale), shipped as the example's policy."""


def judge_case(scores: dict[str, int | None], policy: ScoringPolicy, profile_name: str) -> CaseOutcome:
    """Apply the policy to one case's scores (None = unscored)."""
    profile = policy.profiles.get(profile_name)
    if profile is None:
        raise PolicyError(f"unknown threshold_profile {profile_name!r}; the policy defines "
                          f"{', '.join(sorted(policy.profiles))}")
    lines: list[MetricLine] = []
    hard: list[str] = []
    below: list[str] = []
    reasons: list[str] = []
    for name, score in scores.items():
        threshold = policy.thresholds.get(name)  # type: ignore[call-overload]
        ok = None if score is None else (threshold is None or score + EPS >= threshold)
        lines.append(MetricLine(eval=name, score=score, threshold=threshold, passed=ok))
        if score is not None and name in policy.hard_fail.metrics and score < policy.hard_fail.below - EPS:
            hard.append(name)
            reasons.append(f"hard fail: {name}={score} (< {policy.hard_fail.below:.2f})")
        elif ok is False:
            below.append(name)
            reasons.append(f"below threshold: {name}={score} (< {threshold:.2f})")
    weighted = [(score, profile.weights[name]) for name, score in scores.items()
                if score is not None and name in profile.weights]
    total = sum(w for _, w in weighted)
    composite = round(sum(s * w for s, w in weighted) / total, 6) if total else None  # no 5.000000000000001
    unscored = [name for name, score in scores.items() if score is None]
    if composite is not None and composite + EPS < profile.pass_mark:
        reasons.append(f"composite {composite:.2f} (< {profile.pass_mark:.2f}, profile {profile_name})")
    status: Literal["passed", "failed", "unscored"]
    if hard or below:  # a scored metric under its bar fails the case whatever the missing scores are
        status = "failed"
    elif unscored:
        status = "unscored"
        reasons.append(f"unscored: {', '.join(unscored)}")
    elif composite is None:
        status = "failed"
        reasons.append(f"no evaluated metric carries weight in profile {profile_name}")
    else:
        status = "passed" if not below and composite + EPS >= profile.pass_mark else "failed"
    return CaseOutcome(status=status, composite=composite, profile=profile_name, pass_mark=profile.pass_mark,
                         hard_fails=hard, lines=lines, reasons=reasons)


def failure_message(judgement: CaseOutcome, explanations: dict[str, str]) -> str:
    """A readable table: each metric's score, threshold and explanation, then composite and hard fails."""
    out = [f"case {judgement.status}: profile {judgement.profile}"]
    for line in judgement.lines:
        mark = "?" if line.passed is None else ("ok" if line.passed else "LOW")
        if line.eval in judgement.hard_fails:
            mark = "HARD FAIL"
        score = "-" if line.score is None else str(line.score)
        threshold = "-" if line.threshold is None else f"{line.threshold:.2f}"
        text = " ".join(explanations.get(line.eval, "").split())
        out.append(f"  {line.eval.removesuffix('Explain'):<22} score {score:>2}  threshold {threshold}  {mark:<9} "
                   f"{text[:200]}{'…' if len(text) > 200 else ''}")
    composite = "-" if judgement.composite is None else f"{judgement.composite:.2f}"
    out.append(f"  composite {composite} vs pass mark {judgement.pass_mark:.2f}")
    out += [f"  {reason}" for reason in judgement.reasons]
    return "\n".join(out)
