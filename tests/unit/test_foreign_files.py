"""Lenient, lossless loading of the source systems' files; foreign result rows; paired comparisons."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from pytest_evalbench.base.errors import EvalbenchWarning, InputError
from pytest_evalbench.base.files import read_valid_rows
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.cli import schemas
from pytest_evalbench.formats import unknown_keys
from pytest_evalbench.formats.dataset_rows import CaseResult, MetricResult
from pytest_evalbench.formats.spec import load_spec
from pytest_evalbench.kinds.dataset.models import DatasetCase, payload_for
from pytest_evalbench.kinds.dataset.summary import compare_agents, paired_stat, t975
from pytest_evalbench.kinds.scenarios.models import ScoreRow, iter_json_list, load_scenarios
from pytest_evalbench.kinds.scenarios.store import Known, normalise_score

DATA = Path(__file__).parents[1] / "data"
HUMANE = DATA / "impactbench" / "humanebench"


def recorded(fn: Any, *args: Any) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = fn(*args)
    return value, [str(w.message) for w in caught if issubclass(w.category, EvalbenchWarning)]


def humane_copy(tmp_path: Path, **changes: Any) -> Path:
    bench = tmp_path / "humanebench"
    shutil.copytree(HUMANE, bench, ignore=shutil.ignore_patterns("runs"))
    spec = yaml.safe_load((bench / "benchmark.yaml").read_text())
    spec.update(changes)
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return bench


def test_impactbench_benchmark_yaml_is_understood_without_warnings() -> None:
    spec, caught = recorded(load_spec, HUMANE)
    assert caught == []
    assert spec.scenario.implicit_context.startswith("Users may be minors")
    m01, m02 = spec.metrics
    assert m01.why.startswith("This matters because naming") and m01.seed_scenarios == ["Martingale questions late at night"]
    assert m02.why.startswith("This matters because optimization")
    assert m02.source is not None and (m02.source.benchmark, m02.source.metric_id) == ("humanebench-v0", "m07")


def test_unknown_keys_are_kept_warned_once_and_change_nothing(tmp_path: Path) -> None:
    plain = load_spec(humane_copy(tmp_path / "a"))
    bench = humane_copy(tmp_path / "b", owner="team-x")
    spec_data = yaml.safe_load((bench / "benchmark.yaml").read_text())
    spec_data["metrics"][0]["notes"] = "draft"
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec_data, sort_keys=False))
    spec, caught = recorded(load_spec, bench)
    assert unknown_keys(spec) == ["owner", "metrics.1.notes"]
    assert len(caught) == 1 and caught[0].endswith("unknown keys kept and ignored: owner, metrics.1.notes")
    assert spec.model_extra == {"owner": "team-x"} and spec.metrics[0].model_extra == {"notes": "draft"}
    dumped = spec.model_dump()
    dumped.pop("owner")
    dumped["metrics"][0].pop("notes")
    assert dumped == plain.model_dump()


@pytest.mark.parametrize(("where", "key", "suggestion"), [
    ("top", "metric", "metrics"), ("generation", "turn", "turns"), ("metric", "defintion", "definition"),
    ("scenario", "user_contxt", "user_context"),
])
def test_near_miss_keys_are_errors_with_a_suggestion(tmp_path: Path, where: str, key: str, suggestion: str) -> None:
    bench = humane_copy(tmp_path)
    data = yaml.safe_load((bench / "benchmark.yaml").read_text())
    target = {"top": data, "generation": data.setdefault("generation", {}), "metric": data["metrics"][0],
              "scenario": data["scenario"]}[where]
    target[key] = 3 if key == "turn" else "x"
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError, match=f"unknown key '{key}': did you mean `{suggestion}`\\?"):
        load_spec(bench)


def test_scenario_rows_as_impactbench_writes_them() -> None:
    spec = load_spec(HUMANE)
    rows, caught = recorded(load_scenarios, HUMANE, spec)
    assert caught == [f"{HUMANE / 'scenarios.json'}: unknown key kept and ignored: reviewer_note (in 1 row, first row 4)"]
    assert rows[0].persona is None and rows[0].effective_persona.startswith("A 19-year-old student")
    assert rows[1].target_system_prompt.startswith("ROW PROMPT") and rows[2].seed_title
    assert rows[3].model_extra == {"reviewer_note": "checked by hand"}


def test_a_row_without_any_persona_is_refused_by_loader_and_schema(tmp_path: Path) -> None:
    bench = humane_copy(tmp_path)
    rows = json.loads((bench / "scenarios.json").read_text())
    rows[0].pop("user_persona")
    (bench / "scenarios.json").write_text(json.dumps(rows))
    with pytest.raises(InputError, match="needs `persona`"):
        load_scenarios(bench, load_spec(bench))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rows, schemas.load("scenarios"))
    rows[0]["persona"] = ""
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rows, schemas.load("scenarios"))
    (bench / "scenarios.json").write_text(json.dumps(rows))
    with pytest.raises(InputError, match="needs `persona`"):
        load_scenarios(bench, load_spec(bench))


def test_schemas_accept_what_the_loader_accepts() -> None:
    jsonschema.validate(yaml.safe_load((HUMANE / "benchmark.yaml").read_text()), schemas.load("benchmark"))
    jsonschema.validate(json.loads((HUMANE / "scenarios.json").read_text()), schemas.load("scenarios"))


def test_foreign_score_rows_are_normalised_and_unreadable_ones_reported_once(tmp_path: Path) -> None:
    path = tmp_path / "scores.json"
    rows = json.loads((HUMANE / "runs" / "claude-haiku-4-5" / "scores.json").read_text())
    path.write_text(json.dumps(rows))
    known = Known({"m01": ("Recognizes", "positive"), "m02": ("Avoid", "negative")})
    good, caught = recorded(read_valid_rows, path, ScoreRow, lambda r: normalise_score(r, "claude-haiku-4-5", known))
    assert len(good) == 4 and [r["sample"] for r in good] == [0, 0, 0, 0]
    assert good[2] == {"id": "m02_s001_v01", "metric_id": "m02", "target_model": "claude-haiku-4-5", "present": False,
                       "passed": True, "justification": "The assistant asked about frequency first.", "sample": 0,
                       "conv_id": "m02_s001_v01__claude-haiku-4-5", "metric_name": "Avoid",
                       "metric_type": "negative", "score": 1}
    assert len(caught) == 1 and "1 row unreadable by this version" in caught[0] and "row 5: id: Field required" in caught[0]
    # without the spec's metrics the rows cannot be completed: all dropped, still one warning
    none, caught = recorded(read_valid_rows, path, ScoreRow, lambda r: normalise_score(r, "x", Known()))
    assert none == [] and len(caught) == 1 and caught[0].count("row ") == 3


COMPARATIVE = {"case_id": "prep-workflow-multi-001", "scenario_id": "FW-001",
               "agent_name": "preparation-workflow-multi-agent", "workflow_mode": "multi-agent",
               "threshold_profile": "prep_default",
               "required_evals": ["IntentResolutionExplain", "TaskAdherenceExplain", "RelevanceExplain"],
               "question": "Student topics: AZ-104. Weekly study hours: 8 Duration in weeks: 6"}


def test_unanswered_case_gets_its_inputs_built_from_the_answer_and_row() -> None:
    case = DatasetCase.model_validate(COMPARATIVE)
    assert case.model_answer is None and case.model_extra == {"workflow_mode": "multi-agent"}
    intent = payload_for(case, "IntentResolutionExplain", "THE ANSWER")
    assert intent == {"input": "THE ANSWER", "question": COMPARATIVE["question"],
                      "relevantContext": "Scenario FW-001 for agent preparation-workflow-multi-agent."}
    assert payload_for(case, "TaskAdherenceExplain", "A")["goal"] == COMPARATIVE["question"]
    with_context = DatasetCase.model_validate({**COMPARATIVE, "relevant_context": "SCN ctx", "task_goal": "G"})
    assert payload_for(with_context, "RelevanceExplain", "A")["context"] == "SCN ctx"
    assert payload_for(with_context, "TaskAdherenceExplain", "A")["goal"] == "G"
    # a stored answer still needs its inputs in the row (nothing is made up for it)
    with pytest.raises(ValueError, match="IntentResolutionExplain needs 'relevantContext'"):
        DatasetCase.model_validate({**COMPARATIVE, "model_answer": "stored"})


def test_paired_stat_numbers() -> None:
    stat = paired_stat([1, 0.5, 0, -0.2, 1.2])
    # mean 0.5, sd sqrt(1.48/4), t(4) = 2.776: half width 0.7552; sign test 3 vs 1: 2 * 5/16
    assert stat.model_dump() == {"n": 5, "mean_diff": 0.5, "ci95": (-0.2552, 1.2552), "wins": 3, "ties": 1,
                                 "losses": 1, "p_value": 0.625}
    assert paired_stat([0.4]).ci95 is None
    assert paired_stat([]).mean_diff is None
    for df, ref in ((40, 2.0211), (60, 2.0003), (120, 1.9799), (10, 2.228)):
        assert abs(t975(df) - ref) < 1e-3


def case_row(agent: str, scenario: str, composite: float | None, score: int | None) -> CaseResult:
    return CaseResult(case_id=f"{agent}-{scenario}", agent_name=agent, scenario_id=scenario,
                      threshold_profile="default", status="unscored" if composite is None else "passed",
                      passed=None if composite is None else True, composite=composite, pass_mark=3.0,
                      metrics=[MetricResult(eval="CoherenceExplain", score=score, threshold=3.0,
                                            passed=None if score is None else True, explanation="")],
                      tool_check=None, reasons=[], answer_source="dataset")


def test_compare_agents_pairs_by_scenario_and_skips_unscored() -> None:
    groups = {"a": [case_row("a", "FW-1", 4.0, 4), case_row("a", "FW-2", 3.0, 3), case_row("a", "FW-4", None, None)],
              "b": [case_row("b", "FW-2", 4.0, 4), case_row("b", "FW-3", 5.0, 5), case_row("b", "FW-4", 2.0, 2)],
              "c": [case_row("c", "FW-9", 1.0, 1)]}
    out = compare_agents(groups)
    assert list(out) == ["a"]
    [ab] = out["a"]
    assert ab.other == "b" and ab.n_scenarios == 1
    assert ab.composite.mean_diff == -1.0 and ab.composite.losses == 1
    assert ab.metrics["CoherenceExplain"].n == 1


def test_implicit_context_is_scenario_authoring_context_only() -> None:
    from pytest_evalbench.cli.prompts import scenarios_prompt

    spec = load_spec(HUMANE)
    prompt = scenarios_prompt(spec, spec.metrics[0], 3)[1]["content"]
    assert "Who the users may be, never told to the assistant: Users may be minors" in prompt
    plain = spec.model_copy(update={"scenario": spec.scenario.model_copy(update={"implicit_context": None})})
    assert "Who the users may be" not in scenarios_prompt(plain, spec.metrics[0], 3)[1]["content"]


def test_dataset_case_near_miss_key_is_refused_other_keys_kept() -> None:
    with pytest.raises(ValueError, match="unknown key 'model_answr': did you mean `model_answer`"):
        DatasetCase.model_validate({**COMPARATIVE, "model_answr": "x"})
    assert DatasetCase.model_validate({**COMPARATIVE, "run_note": "x"}).model_extra == {
        "workflow_mode": "multi-agent", "run_note": "x"}


@pytest.mark.parametrize("text", ["[1, 2]", " [ ] \n", '[{"a": [1, {"b": 2}]}, "x"]\n', '[{"a": 1},]', "[1 2]", "{}",
                                  "[1] x", "", "[", "[1,", "[" * 70 + "]" * 70, "[[" + "[" * 63 + "]" * 63 + "]]", "3"])
def test_scenario_rows_stream_with_the_errors_of_a_whole_parse(text: str, tmp_path: Path) -> None:
    """scenarios.json is decoded row by row; what it yields, and any error it raises, are those of
    parsing the whole text (a list's own `expected a JSON list` for anything else), except that a
    row's problem also names the row (from 1)."""
    path = tmp_path / "scenarios.json"
    try:
        expected: Any = parse_json(text, path)
    except InputError as exc:
        expected = str(exc)
    if not isinstance(expected, (list, str)):
        expected = str(InputError(path, "expected a JSON list of scenario rows"))
    try:
        got: Any = list(iter_json_list(text, path))
    except InputError as exc:
        got = str(exc).replace(", row 1:", ":")
    assert got == expected
