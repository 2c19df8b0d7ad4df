"""One scenario item: scenario row × target × sample, simulated then judged into a record."""

from __future__ import annotations

import sys
from typing import Any, Literal

from pytest_evalbench.llm.types import Endpoint, Usage
from pytest_evalbench.panel import PanelVerdict, majority, poll
from pytest_evalbench.run import BenchmarkRun
from pytest_evalbench.scenarios.audit import audit
from pytest_evalbench.scenarios.checks import decide
from pytest_evalbench.scenarios.judge import judge
from pytest_evalbench.scenarios.models import UNSET_OPTIONAL, ConversationRow, JudgeVote, Scenario, ScenarioRecord, ScoreRow
from pytest_evalbench.scenarios.simulate import simulate
from pytest_evalbench.targets import ModelTarget, Target


class StoredScenario:
    """A scenarios.json row kept as its compact JSON, rebuilt into the model whenever an item needs
    it: a validated `Scenario` weighs about 2 KB, its JSON a fraction of that, and a benchmark of
    100,000 items holds every row from collection to the end of the session."""

    def __init__(self, scenario: Scenario) -> None:
        self.id = scenario.id
        self.metric_id, self.metric_type = sys.intern(scenario.metric_id), scenario.metric_type  # one per metric
        self.demographic = _demographic_keywords(scenario.demographic)
        self._json = scenario.model_dump_json(exclude_unset=True).encode("utf-8")  # set fields: lossless

    def load(self) -> Scenario:
        return Scenario.model_validate_json(self._json)

    def dump(self) -> dict[str, Any]:
        """The row as the result files' readers complete foreign rows from it (`Known.scenarios`)."""
        return self.load().model_dump(mode="json", exclude_none=True)


_KEYWORD_SETS: dict[tuple[tuple[str, str], ...], tuple[str, ...]] = {}
"""One keyword tuple per demographic combination (a benchmark has a handful), shared by its rows."""


def _demographic_keywords(demographic: dict[str, str]) -> tuple[str, ...]:
    """What `-k` matches of a row's demographic: each value (`-k Adult`), and `axis:value` for a value
    two axes share (`-k "age:Adult"`; pytest matches substrings, case-insensitively)."""
    key = tuple(demographic.items())
    found = _KEYWORD_SETS.get(key)
    if found is None:
        found = _KEYWORD_SETS[key] = tuple(sys.intern(k) for pair in key for k in (pair[1], ":".join(pair)))
    return found


class ScenarioCase:
    """One test item of a scenario benchmark: scenario row × target × sample."""

    def __init__(self, scenario: Scenario | StoredScenario, target_id: str, sample: int, index: int) -> None:
        self.stored = scenario if isinstance(scenario, StoredScenario) else StoredScenario(scenario)
        self.target_id, self.sample, self.index = target_id, sample, index

    @property
    def scenario(self) -> Scenario:
        """The scenario row (a fresh model on every access)."""
        return self.stored.load()

    @property
    def name(self) -> str:
        return f"{self.stored.id}[{self.target_id}-s{self.sample}]"

    @property
    def conv_id(self) -> str:
        return f"{self.stored.id}__{self.target_id}"

    @property
    def row_id(self) -> str:
        return self.stored.id

    @property
    def keywords(self) -> dict[str, Any]:
        """`-k` selects by metric id, metric type, target and demographic values (`axis:value` too)."""
        words = {self.stored.metric_id: True, self.target_id: True, str(self.stored.metric_type): True}
        words.update(dict.fromkeys(self.stored.demographic, True))
        return words

    def __repr__(self) -> str:
        return f"ScenarioCase({self.name!r}, index={self.index})"


def row_target(target: Target, scenario: Scenario) -> Target:
    """The target for this row: a model target speaks under the row's own `target_system_prompt`
    when it has one (impactbench's per-scenario override); an app keeps its own prompt."""
    if scenario.target_system_prompt and isinstance(target, ModelTarget):
        return ModelTarget(target.id, target.endpoint, scenario.target_system_prompt, target.engine)
    return target


async def run_scenario(run: BenchmarkRun, case: ScenarioCase) -> ScenarioRecord:
    """Simulate the conversation and judge it; LLM failures propagate (item ERROR). Pass/fail is
    left to `ScenarioKind.outcome`, after the judged-row hook."""
    scenario = case.scenario
    metric = run.spec.metric(scenario.metric_id)
    assert metric is not None  # loading checked it
    target = row_target(run.targets[case.target_id], scenario)
    ledger: dict[str, Usage] = {}
    transcript = await simulate(scenario, metric, run.spec.generation,
                                user=run.require(run.user, "user_model"), target=target,
                                engine=run.engine, sample=case.sample, ledger=ledger)
    decided_by: Literal["check", "judge"] | None = None
    turn: int | None = None
    panel: PanelVerdict[bool] | None = None
    if not any(m.role == "assistant" for m in transcript.messages):
        verdict_present, justification = None, ("unscored: the simulated user ended the conversation "
                                                "before the target replied")
    elif (decision := decide(metric, transcript.messages)) is not None:
        verdict_present, justification, decided_by = decision.present, decision.justification, "check"
    else:
        turns: list[int] = []  # the turns named by votes saying "present"

        async def ask_one(endpoint: Endpoint, sample: int) -> tuple[bool | None, str]:
            verdict = await judge(metric, transcript.messages, evaluator=endpoint, engine=run.engine,
                                  sample=sample, ledger=ledger)
            turns.extend([verdict.turn] if verdict.turn is not None else [])
            return verdict.present, verdict.justification

        votes = await poll(run.judges(), run.spec.judge.samples, case.sample, ask_one)
        panel = majority(votes)
        verdict_present, justification, decided_by = panel.value, panel.justification, "judge"
        turn = min(turns) if panel.value is True and turns else None  # the earliest a "present" vote named
    conversation = ConversationRow.model_validate({
        **scenario.model_dump(exclude={"user_persona", *UNSET_OPTIONAL - scenario.model_fields_set}),
        "persona": scenario.effective_persona,
        "conv_id": case.conv_id,
        "target": {"id": case.target_id, "model": target.model},
        "transcript": transcript.messages,
        "sample": case.sample,
        "user_audit": audit([m.content for m in transcript.messages if m.role == "user"],
                            planned_turns=run.spec.generation.turns, ended_by_user=transcript.ended_by_user,
                            hidden=[scenario.latent_adversarial_goal, metric.behaviour]),
    })
    score_row = ScoreRow(id=scenario.id, metric_id=metric.id, metric_name=metric.name, metric_type=metric.type,
                         target_model=case.target_id, conv_id=case.conv_id, present=verdict_present, passed=None,
                         score=None, justification=justification, sample=case.sample, decided_by=decided_by,
                         turn=turn)
    if panel is not None and len(panel.votes) > 1:
        score_row.agreement = panel.agreement
        score_row.judges = [JudgeVote(judge=v.judge, sample=v.sample, value=v.value, text=v.text) for v in panel.votes]
    return ScenarioRecord(run.spec.name, case.target_id, conversation, score_row, ledger)
