"""Typed records and rows (issue 13): JSON only at the boundaries, and that JSON is exactly the
files' and the hooks' documented shape; kinds' stores read their records in one pass."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from helpers import scenario

from pytest_evalbench.base.files import versioned
from pytest_evalbench.formats.dataset_rows import CaseResult
from pytest_evalbench.formats.results import PassFailUnit
from pytest_evalbench.kinds.dataset.kind import write_dataset_results
from pytest_evalbench.kinds.dataset.runner import DatasetRecord
from pytest_evalbench.kinds.labels import CalibrationRecord
from pytest_evalbench.kinds.scenarios.models import UNSET_OPTIONAL, ConversationRow, JudgeVote, Scenario, ScenarioRecord, ScoreRow
from pytest_evalbench.kinds.scenarios.store import write_results
from pytest_evalbench.llm.types import Usage


def scenario_record(sid: str, *, panel: bool = False, **extra: Any) -> ScenarioRecord:
    """A record as `scenarios.runner.run_scenario` builds it."""
    row = Scenario.model_validate(scenario(sid, "m01", **extra))
    conversation = ConversationRow.model_validate({
        **row.model_dump(exclude={"user_persona", *UNSET_OPTIONAL - row.model_fields_set}),
        "persona": row.effective_persona, "conv_id": f"{sid}__tgt", "target": {"id": "tgt", "model": "m"},
        "transcript": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "sample": 0})
    score = ScoreRow(id=sid, metric_id="m01", metric_name="Asks", metric_type="positive", target_model="tgt",
                     conv_id=f"{sid}__tgt", present=True, passed=True, score=1, justification="yes", sample=0,
                     decided_by="judge")
    if panel:
        score.agreement = 0.5
        score.judges = [JudgeVote(judge="j1", sample=0, value=True, text="a"),
                        JudgeVote(judge="j2", sample=0, value=False, text="b")]
    return ScenarioRecord("demo", "tgt", conversation, score, {"evaluate": Usage(3, 4, 0.5)}, "passed")


def test_conversation_json_keeps_the_files_key_order_and_omissions() -> None:
    conv = scenario_record("m01_s001_v01", user_persona="rewritten", region="EU").conversation.to_json()
    keys = list(conv)
    # scenario fields, then the row's other keys, then the conversation; no user_persona, no unset optionals
    assert keys[:2] == ["id", "metric_id"] and keys[-5:] == ["region", "conv_id", "target", "transcript", "sample"]
    assert "user_persona" not in conv and not UNSET_OPTIONAL & set(conv)
    assert conv["persona"] == "rewritten"
    assert conv["transcript"] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    with_prompt = scenario_record("m01_s001_v01", target_system_prompt=None).conversation.to_json()
    assert "target_system_prompt" in with_prompt and with_prompt["target_system_prompt"] is None


def test_score_json_has_panel_fields_only_with_a_panel() -> None:
    plain = scenario_record("m01_s001_v01").score.to_json()
    assert list(plain) == ["id", "metric_id", "metric_name", "metric_type", "target_model", "conv_id", "present",
                           "passed", "score", "justification", "sample", "decided_by"]
    panel = scenario_record("m01_s001_v01", panel=True).score.to_json()
    assert panel["agreement"] == 0.5 and panel["judges"][1] == {"judge": "j2", "sample": 0, "value": False, "text": "b"}


def test_every_kinds_record_survives_the_xdist_boundary() -> None:
    scenario_rec = scenario_record("m01_s001_v01", panel=True, region="EU")
    data = json.loads(json.dumps(scenario_rec.to_json()))
    assert ScenarioRecord.from_json(data).to_json() == data
    case = CaseResult.model_validate({
        "case_id": "c1", "agent_name": "a", "scenario_id": None, "threshold_profile": "p", "status": "passed",
        "passed": True, "composite": 4.0, "pass_mark": 3.5, "reasons": [], "answer_source": "dataset",
        "tool_check": {"ok": True, "matched": 1, "expected": 1, "summary": "1/1"},
        "metrics": [{"eval": "RelevanceExplain", "score": 4, "threshold": 3.0, "passed": True, "explanation": "x"},
                    {"eval": "ToolCallAccuracyExplain", "score": None, "threshold": 3.0, "passed": None,
                     "explanation": "n/a", "not_applicable": True}]})
    dataset_rec = DatasetRecord("agents", {"evaluate": Usage(1, 2, 0.0)}, decided=case, message="ok")
    data = json.loads(json.dumps(dataset_rec.to_json()))
    assert DatasetRecord.from_json(data).to_json() == data
    # optional keys appear only where the row was made with them
    assert "not_applicable" not in data["case"]["metrics"][0] and data["case"]["metrics"][1]["not_applicable"]
    assert "extra" not in data["case"] and "agreement" not in data["case"]["metrics"][0]
    calibration = CalibrationRecord("demo", 3, "m01", True, None, "unusable", {}, "unscored")
    data = json.loads(json.dumps(calibration.to_json()))
    assert CalibrationRecord.from_json(data) == calibration


def test_gate_rows_of_each_kind() -> None:
    assert scenario_record("m01_s001_v01").score.unit_row() == PassFailUnit("tgt", "m01_s001_v01", "m01", 0, True,
                                                                              "Asks", "positive", "judge")
    case = CaseResult.model_validate({
        "case_id": "c1", "agent_name": "a", "scenario_id": None, "threshold_profile": "p", "status": "unscored",
        "passed": None, "composite": None, "pass_mark": 3.5, "reasons": [], "answer_source": "dataset",
        "tool_check": None,
        "metrics": [{"eval": "RelevanceExplain", "score": 4, "threshold": 3.0, "passed": True, "explanation": "x"},
                    {"eval": "CoherenceExplain", "score": None, "threshold": 3.0, "passed": None, "explanation": "?"}]})
    assert case.unit_row("pass_rate").key == "a|c1|pass_rate|0" and case.unit_row("pass_rate").passed is None
    assert [(s.key, s.score) for s in case.eval_scores()] == [("a|c1|RelevanceExplain", 4.0)]


class OnePass:
    """An iterable that refuses a second pass, like records streamed back from a spool file."""

    def __init__(self, items: list[Any]) -> None:
        self.items, self.used = items, False

    def __iter__(self) -> Iterator[Any]:
        assert not self.used, "records were iterated twice"
        self.used = True
        return iter(self.items)


def test_stores_read_their_records_in_one_pass(tmp_path: Path) -> None:
    records = [scenario_record("m01_s001_v01"), scenario_record("m01_s001_v02")]
    results, dropped, scores, outcomes = write_results(tmp_path / "s", OnePass(records),
                                                       {"m01_s001_v01": 0, "m01_s001_v02": 1})
    assert [r.id for r in scores] == ["m01_s001_v01", "m01_s001_v02"] and dropped == []
    assert [(r.id, r.passed) for r in outcomes["tgt"]] == [(r.id, r.passed) for r in scores]
    assert results[0].by_metric["m01"].n_passed == 2
    written = json.loads((tmp_path / "s" / "runs" / "tgt" / "scores.json").read_text())
    assert written == [versioned(r.score.to_json()) for r in records]
    case = {"case_id": "c1", "agent_name": "a", "scenario_id": None, "threshold_profile": "p", "status": "passed",
            "passed": True, "composite": 4.0, "pass_mark": 3.5, "reasons": [], "answer_source": "dataset",
            "tool_check": None, "metrics": []}
    record = DatasetRecord("agents", decided=CaseResult.model_validate(case))
    cases, summary, _ = write_dataset_results(tmp_path / "d", OnePass([record]), {"c1": 0})
    assert [c.case_id for c in cases] == ["c1"] and summary[0].pass_rate == 1.0
    assert json.loads((tmp_path / "d" / "case_results.json").read_text()) == [versioned(case)]


def test_a_records_json_is_written_as_it_is_not_dumped_again(monkeypatch: Any) -> None:
    """The finish pass writes a record as the JSON the spool holds, byte for byte what dumping its models
    writes (key order included), without dumping them."""
    from pytest_evalbench.kinds.scenarios.store import TargetRows

    record = scenario_record("m01_s001_v01", panel=True, region="EU")
    data = json.loads(json.dumps(record.to_json()))
    assert json.dumps(ScenarioRecord.from_json(data).to_json()) == json.dumps(data)  # what makes the reuse exact
    typed, read_back = TargetRows(), TargetRows()
    typed.add(record)

    def dumped(self: Any) -> Any:
        raise AssertionError("a record read back was dumped again")

    monkeypatch.setattr(ConversationRow, "to_json", dumped)
    monkeypatch.setattr(ScoreRow, "to_json", dumped)
    read_back.add(data)
    key = ("m01_s001_v01", 0)
    assert read_back.spooled.raw(key) == typed.spooled.raw(key)
    typed.close()
    read_back.close()


def test_a_record_whose_outcome_is_decided_is_written_from_its_models() -> None:
    """A record read from JSON changes when its outcome is decided (`passed`, `score`, status): the
    finish pass must then write what it became, not the JSON it was read from."""
    from types import SimpleNamespace

    from pytest_evalbench.kinds.scenarios.kind import ScenarioKind
    from pytest_evalbench.kinds.scenarios.store import TargetRows

    data = json.loads(json.dumps(scenario_record("m01_s001_v01").to_json()))
    data["score"].update(passed=None, score=None)  # as the chain leaves it: derived in `outcome`
    record = ScenarioRecord.from_json(data)
    kind = SimpleNamespace(run=SimpleNamespace(spec=SimpleNamespace(metric=lambda _id: None)), unreliable={},
                           judged_unreliably=lambda _score: False)
    ScenarioKind.outcome(kind, record, None)  # type: ignore[arg-type]
    assert record.score.passed is not None
    rows = TargetRows()
    rows.add(record)
    assert rows.score(("m01_s001_v01", 0))["passed"] is record.score.passed
    rows.close()
