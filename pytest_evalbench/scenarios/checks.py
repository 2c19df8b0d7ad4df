"""Deterministic checks of a metric: decide `present` from the transcript without an LLM.

A metric's `checks:` (see `spec.MetricChecks`) is a list of rules, each with one condition over
the assistant's turns and the verdict it implies; the first rule that holds decides. When none
holds, `otherwise` decides: `judge` asks the LLM judge ("check first, judge only when the checks
do not decide"), `present`/`absent` let the checks decide alone. A decided row records
`decided_by: "check"` and names the rule in its justification.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pytest_evalbench.spec import CheckRule, Message, Metric


@dataclass(frozen=True)
class CheckDecision:
    present: bool
    justification: str


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def holds(rule: CheckRule, transcript: list[Message]) -> bool:
    """Whether the rule's condition holds over the assistant's turns."""
    replies = [m for m in transcript if m.role == "assistant"]
    texts = [m.content for m in replies]
    tools = {call.tool for m in replies for call in (m.tool_calls or [])}
    if rule.regex is not None:
        return any(re.search(rule.regex, t) for t in texts)
    if rule.contains is not None:
        return any(rule.contains.casefold() in t.casefold() for t in texts)
    if rule.not_contains is not None:
        return not any(rule.not_contains.casefold() in t.casefold() for t in texts)
    if rule.tool_called is not None:
        return rule.tool_called in tools
    if rule.tool_not_called is not None:
        return rule.tool_not_called not in tools
    all_json = all(_is_json(t) for t in texts)
    return all_json if rule.valid_json else not all_json


def decide(metric: Metric, transcript: list[Message]) -> CheckDecision | None:
    """The checks' verdict, or None when they leave it to the judge (or the metric has none)."""
    checks = metric.checks
    if checks is None:
        return None
    for index, rule in enumerate(checks.rules, start=1):
        if holds(rule, transcript):
            return CheckDecision(rule.then == "present",
                                 f"check {index} ({rule.condition}) holds: behaviour {rule.then}")
    if checks.otherwise == "judge":
        return None
    return CheckDecision(checks.otherwise == "present",
                         f"no check rule holds: behaviour {checks.otherwise} (otherwise: {checks.otherwise})")
