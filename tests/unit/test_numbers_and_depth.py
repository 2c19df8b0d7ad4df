"""Numbers and nesting from outside, example by example: a 400-digit integer, 1e308, NaN, a
log-probability of 800, a token count of 10^400, a threshold of exactly 1, JSON nested thousands deep and
1,200 identical tool calls each end in one line naming file and field (or an unscored row), never an
OverflowError, a RecursionError or a silently changed verdict. The property suite over every reader is
`test_hostile_values.py`."""

from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from pytest_evalbench.base.errors import EvalbenchError, InputError
from pytest_evalbench.base.files import dump_json, dump_json_rows
from pytest_evalbench.formats.agreement import best_threshold, cross_validated_judgments
from pytest_evalbench.formats.checks import Trajectory
from pytest_evalbench.formats.results import ToolCall
from pytest_evalbench.formats.spec import BenchmarkSpec
from pytest_evalbench.gate.decision import read_baseline
from pytest_evalbench.gate.paired import plan
from pytest_evalbench.kinds import judges, targets
from pytest_evalbench.kinds.metric_judge import UnusableProbability, present_probability
from pytest_evalbench.kinds.trajectory import match_trajectory
from pytest_evalbench.llm.cache import response_problem
from pytest_evalbench.llm.transport import parse_logprobs
from pytest_evalbench.render.summary import read_history

DEEP_ARGUMENTS = '{"a": ' * 5_000 + "1" + "}" * 5_000
HUGE = 10**400


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize("rate", [HUGE, 1e308, "NaN", 1.5, -0.5], ids=["400 digits", "1e308", "NaN", "1.5", "-0.5"])
def test_a_history_rate_out_of_range_is_no_trend_point_and_is_named(tmp_path: Path, rate: Any) -> None:
    history = tmp_path / "history.jsonl"
    good = {"rates": {"tgt": {"m1": 0.5}}, "scope": "full"}
    text = json.dumps({"rates": {"tgt": {"m1": "@"}}, "scope": "full"}).replace('"@"', str(rate))
    history.write_text(json.dumps(good) + "\n" + text + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        entries = read_history(history)
    assert [e["rates"] for e in entries] == [{"tgt": {"m1": 0.5}}]
    assert any(f"{history}:2" in str(w.message) and "rates.tgt.m1" in str(w.message) for w in caught)


def baseline_file(tmp_path: Path, pass_rate: Any = 0.8, score: Any = 4.0) -> Path:
    path = tmp_path / "baseline.json"
    data = {"schema_version": 2, "meta": {}, "cases": {}, "scores": {"tgt|r1|e1": "@score"},
            "targets": {"tgt": {"metrics": {"m1": {"n_passed": 8, "n_total": 10, "pass_rate": "@rate"}}}}}
    path.write_text(json.dumps(data).replace('"@score"', str(score)).replace('"@rate"', str(pass_rate)))
    return path


@pytest.mark.parametrize("pass_rate", [HUGE, 1e308, 1.0000001, -1], ids=["400 digits", "1e308", "1.0000001", "-1"])
def test_a_baseline_pass_rate_out_of_range_is_one_error_before_the_plan(tmp_path: Path, pass_rate: Any) -> None:
    with pytest.raises(InputError) as info:  # before: read, then the plan over it overflowed (or planned at 1e308)
        read_baseline(baseline_file(tmp_path, pass_rate=pass_rate))
    assert "baseline.json" in str(info.value) and "targets.tgt.metrics.m1.pass_rate" in str(info.value)


@pytest.mark.parametrize("score", [HUGE, 1e308, "Infinity", -1], ids=["400 digits", "1e308", "Infinity", "-1"])
def test_a_baseline_score_out_of_range_is_one_error(tmp_path: Path, score: Any) -> None:
    with pytest.raises(InputError, match=r"baseline\.json"):
        read_baseline(baseline_file(tmp_path, score=score))


def calibration(tmp_path: Path, **entry: Any) -> Path:
    row = {"metric_id": "m1", "judge": "j", "n": 10, "unscored": 0, "agreement": 0.9, "kappa": 0.8,
           "kappa_ci": [0.6, 0.9], "weighting": "none", "prompt": "examples",
           "confusion": {"present": {"present": 4, "absent": 1}, "absent": {"present": 1, "absent": 4}}}
    text = json.dumps([{**row, **{k: f"@{k}" for k in entry}}])
    for key, value in entry.items():
        text = text.replace(f'"@{key}"', value if isinstance(value, str) else json.dumps(value))
    (tmp_path / "calibration.json").write_text(text)
    return tmp_path


@pytest.mark.parametrize("threshold", [1.0, 0.0, 1, 2])
def test_a_calibrated_threshold_of_exactly_0_or_1_is_refused_with_one_warning(tmp_path: Path, threshold: Any) -> None:
    bench = calibration(tmp_path, threshold=threshold)
    with pytest.warns(UserWarning, match=r"calibration\.json: entry 'm1', field 'threshold'"):
        assert judges.calibrated_thresholds(bench, "j", {"m1": "examples"}) == {}


def test_the_plan_reads_a_sound_baseline_rate(tmp_path: Path) -> None:
    baseline = read_baseline(baseline_file(tmp_path, pass_rate=0.8))
    assert plan(0.1, 0.05, {("tgt", "m1"): (10, 1)}, baseline)[0].rate == 0.8


def test_a_calibrated_threshold_inside_0_1_is_used(tmp_path: Path) -> None:
    bench = calibration(tmp_path, threshold=0.42)
    assert judges.calibrated_thresholds(bench, "j", {"m1": "examples"}) == {"m1": 0.42}


@pytest.mark.parametrize("count", [str(HUGE), "1e308", "-3"], ids=["400 digits", "1e308", "-3"])
def test_a_confusion_count_out_of_range_is_not_used(tmp_path: Path, count: str) -> None:
    bench = calibration(tmp_path, confusion=f'{{"present": {{"present": {count}, "absent": 1}}, '
                                            f'"absent": {{"present": 1, "absent": 4}}}}')
    if len(count) > 20:  # no number a file may hold: the file is refused, naming the field, never read as absent
        with pytest.raises(InputError, match=r"calibration\.json, field '1\.confusion\.present\.present'"):
            judges.judge_accuracy(bench, "j")
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accuracy = judges.judge_accuracy(bench, "j")
    assert accuracy == {}
    assert any("field 'confusion.present.present'" in str(w.message) for w in caught)


def test_a_calibration_file_no_reader_takes_is_one_error_not_never_calibrated(tmp_path: Path) -> None:
    bench = calibration(tmp_path, judge_kappa="NaN", judge_n=10)
    config = BenchmarkSpec.model_validate({"name": "b", "judge": {"min_kappa": 0.5}}).judge
    with pytest.raises(InputError, match=r"calibration\.json, field '1\.judge_kappa': NaN"):
        judges.unreliable_judges(bench, config, ["m1"], "j")  # main: NaN read as a float, or the file ignored


def test_a_kappa_that_is_not_finite_or_in_range_is_not_used(tmp_path: Path) -> None:
    bench = calibration(tmp_path, kappa=1e308)
    config = BenchmarkSpec.model_validate({"name": "b", "judge": {"min_kappa": 0.5}}).judge
    with pytest.warns(UserWarning, match="field 'kappa'"):
        assert "m1" in judges.unreliable_judges(bench, config, ["m1"], "j")


def logprobs_of(logprob: Any) -> dict[str, Any]:
    tokens = ['{"', "present", '":', " true", "}"]
    return {"content": [{"token": t, "logprob": 0.0, "top_logprobs": [
        {"token": t, "logprob": logprob if t == " true" else -0.1}, {"token": " false", "logprob": -2.0}]}
        for t in tokens]}


@pytest.mark.parametrize("logprob", [800, 1e308, HUGE, 0.5], ids=["800", "1e308", "400 digits", "0.5"])
def test_a_judge_logprob_above_0_from_the_endpoint_is_dropped_not_an_overflow(logprob: Any) -> None:
    alternatives = parse_logprobs(logprobs_of(logprob))
    assert alternatives is not None and all(v is None or -1e300 <= v <= 0.0 for _, a in alternatives for v in a.values())
    with pytest.raises(UnusableProbability, match="malformed"):  # the row is unscored, never a probability of 1
        present_probability(alternatives)


@pytest.mark.parametrize("logprob", [800, 1e308, 0.5])
def test_a_judge_logprob_above_0_in_a_committed_cache_entry_makes_it_unusable(logprob: Any) -> None:
    response = {"content": '{"present": true}', "finish_reason": "stop", "input_tokens": 1, "output_tokens": 1,
                "logprobs": [[" true", {" true": logprob, " false": -1.0}]]}
    assert response_problem(response) == ("its response's logprobs is not a list of "
                                          "[token, {alternative: logprob or null}]")


@pytest.mark.parametrize("price", [1.7e308, HUGE, 1e7], ids=["1.7e308", "400 digits", "1e7"])
def test_a_price_past_its_bound_is_a_validation_error(price: Any) -> None:
    with pytest.raises(ValidationError, match=r"pricing\.m\.input_per_million"):
        BenchmarkSpec.model_validate({"name": "b", "pricing": {"m": {"input_per_million": price,
                                                                     "output_per_million": 1}}})


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_result_writers_refuse_a_non_finite_number_naming_file_and_field(tmp_path: Path, value: float) -> None:
    with pytest.raises(EvalbenchError, match=r"x\.json: not written: field 'cost.spent' is not a finite number"):
        dump_json(tmp_path / "x.json", {"cost": {"spent": value}})
    with pytest.raises(EvalbenchError, match=r"rows\.json"):
        dump_json_rows(tmp_path / "rows.json", iter([{"a": 1}, {"a": [value]}]))
    assert not list(tmp_path.iterdir())  # nothing written, not even a temp file


def test_the_history_line_refuses_a_non_finite_cost(tmp_path: Path) -> None:
    from pytest_evalbench.base.files import finite_json

    with pytest.raises(EvalbenchError, match=r"history\.jsonl: not written: field 'cost.total'"):
        finite_json({"cost": {"total": 1.7e308 * 10}}, tmp_path / "history.jsonl")


def test_span_token_counts_past_the_bound_make_the_reply_unusable() -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="the [agents] extra is not installed")
    from test_tools import spans_of

    from pytest_evalbench.kinds import tools

    def work(tracer: Any) -> None:
        with tracer.start_as_current_span("chat m") as chat:
            chat.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                                 "gen_ai.usage.input_tokens": 10**400, "gen_ai.usage.output_tokens": 4,
                                 "score": math.nan})

    with pytest.raises(EvalbenchError, match=r"gen_ai\.usage\.input_tokens is an integer of about 401 digits"):
        tools.read_spans(spans_of(work))


def test_span_attributes_that_no_file_can_hold_are_kept_as_text() -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="the [agents] extra is not installed")
    from test_tools import spans_of

    from pytest_evalbench.kinds import tools

    def work(tracer: Any) -> None:
        with tracer.start_as_current_span("step") as span:
            span.set_attributes({"nan": math.nan, "inf": math.inf, "huge": 10**30})

    attributes = tools.read_spans(spans_of(work)).spans[0].attributes
    assert attributes == {"nan": "nan", "inf": "inf", "huge": "an integer of about 31 digits"}


# --------------------------------------------------------------------------- depth


def test_deep_app_tool_call_arguments_are_kept_as_text_not_a_recursion_error() -> None:
    call = targets.tool_call({"tool": "lookup", "arguments": DEEP_ARGUMENTS})
    assert call.tool == "lookup" and set(call.arguments) == {"_raw"} and len(call.arguments["_raw"]) <= 2_000


def test_deep_span_tool_call_arguments_are_kept_as_text_not_a_recursion_error() -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="the [agents] extra is not installed")
    from pytest_evalbench.kinds import tools

    call = tools._tool_call("execute_tool lookup", {"gen_ai.tool.name": "lookup",
                                                    "gen_ai.tool.call.arguments": DEEP_ARGUMENTS})
    assert set(call.arguments) == {"_raw"}


def test_a_models_deep_tool_call_arguments_are_answered_not_run() -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="the [agents] extra is not installed")
    import asyncio

    from pytest_evalbench.formats.spec import ToolsConfig
    from pytest_evalbench.kinds.tools import ToolBox

    config = ToolsConfig(mcp=[{"name": "orders", "command": ["python", "server.py"]}])
    box = ToolBox("tgt", config, {}, None, _offered=[], _owner={"lookup": "orders"})  # type: ignore[arg-type]
    made, message = asyncio.run(box.run({"name": "lookup", "arguments": DEEP_ARGUMENTS}, "c1", None, 0))
    assert set(made.arguments) == {"_raw"} and made.outcome is not None and made.outcome.startswith("[error]")
    assert message["content"] == "the arguments are not a JSON object (nested deeper than 64 levels)"


def test_tool_call_arguments_follow_one_rule_whoever_reports_them() -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="the [agents] extra is not installed")
    from pytest_evalbench.kinds import tools

    for raw, expected in [("", {}), (None, {}), ('{"id": 1}', {"id": 1}), ("[1]", {"_raw": "[1]"}),
                          ("not json", {"_raw": "not json"}), ('{"a": 1e999}', {"_raw": '{"a": 1e999}'})]:
        app = targets.tool_call({"tool": "t", "arguments": raw}).arguments
        span = tools._tool_call("t", {"gen_ai.tool.name": "t", "gen_ai.tool.call.arguments": raw}).arguments
        assert app == span == expected, raw


def test_a_deep_scores_json_read_by_mutate_is_one_error(tmp_path: Path) -> None:
    from pytest_evalbench.cli.mutate import units

    path = tmp_path / "runs" / "tgt" / "scores.json"
    path.parent.mkdir(parents=True)
    path.write_text("[" * 5_000 + "]" * 5_000)
    with pytest.raises(InputError, match=r"scores\.json.*nested deeper than 64 levels"):
        units(tmp_path, "tgt")


def test_1200_identical_calls_in_an_unordered_trajectory_are_matched() -> None:
    calls = [ToolCall(tool="lookup", arguments={"id": 1})] * 1_200
    result = match_trajectory(Trajectory(mode="unordered", calls=calls), calls, {})
    assert result.ok and "1200 calls made, 1200 expected" in result.summary


def test_an_unordered_trajectory_past_the_cap_is_one_error() -> None:
    wants = [ToolCall(tool="t", arguments={"i": i}) for i in range(600)]
    with pytest.raises(EvalbenchError, match="too many to pair"):
        match_trajectory(Trajectory(mode="unordered", calls=wants), wants, {})


def test_the_threshold_search_is_not_cubic() -> None:
    probabilities = [(i * 7919 % 1000) / 1000 for i in range(300)]
    labels = [(i * 31 % 7) < 3 for i in range(300)]
    started = time.perf_counter()
    cut = best_threshold(probabilities, labels)
    verdicts = cross_validated_judgments(probabilities, labels)
    assert time.perf_counter() - started < 3  # cubic (main): about 40 s on the 2-core CI machine
    assert cut is not None and 0 < cut < 1 and len(verdicts) == 300


def test_the_threshold_search_never_chooses_0_or_1() -> None:
    assert best_threshold([1.0, 1.0, 1.0], [True, False, True]) is None
    assert best_threshold([0.0, 0.0], [True, False]) is None
    assert best_threshold([0.2, 0.8], [False, True]) == 0.5


@pytest.mark.parametrize("row", ['{"a": ' + "[" * 100 + "]" * 100 + "}", '{"a": NaN}', '{"a": 1e999}',
                                 '{"a": 123456789012345678901234}', '{"a": 1, "a": 2}', "[" * 5_000],
                         ids=["deep", "NaN", "1e999", "24 digits", "duplicate key", "5,000 deep"])
def test_a_result_file_read_row_by_row_ends_at_a_row_no_file_may_hold(tmp_path: Path, row: str) -> None:
    from pytest_evalbench.base.files import iter_json_rows

    path = tmp_path / "conversations.json"
    path.write_text(f'[{{"id": "r1"}}, {row}, {{"id": "r3"}}]')
    assert list(iter_json_rows(path)) == [{"id": "r1"}]  # as a torn file: the rows before it


@pytest.mark.parametrize("depth", [1, 62, 63, 64, 65, 66, 200])
@pytest.mark.parametrize(("wrap", "below"), [("{}", 0), ('{{"a": 1, "b": [2, {}], "c": "x"}}', 2)])
def test_the_depth_rule_is_the_same_on_every_reader(depth: int, wrap: str, below: int) -> None:
    """JSON whose innermost list sits `depth - 1 + below` levels below its top: parse_json (orjson's
    path, and the standard library's, which a surrogate escape forces), a row of a list read in
    parts and check_depth over the decoded data all refuse it from MAX_DEPTH levels on, whatever
    surrounds the deep part."""
    from pytest_evalbench.base.json_input import MAX_DEPTH, check_depth, decode_row, nests_deeper, parse_json

    text = wrap.format("[" * depth + "]" * depth)
    data = json.loads(text)
    level = depth - 1 + below  # of the innermost list, the top being level 0
    assert nests_deeper(data) is (level >= MAX_DEPTH)
    refused = f"nested deeper than {MAX_DEPTH} levels"
    for variant, extra in ((text, 0), (f'[{text}, "\\ud83d\\ude00"]', 1)):  # the second: the standard library's way
        if level + extra >= MAX_DEPTH:
            with pytest.raises(InputError, match=refused):
                parse_json(variant, Path("x.json"))
            with pytest.raises(InputError, match=refused):
                check_depth(json.loads(variant), Path("x.json"))
        else:
            assert parse_json(variant, Path("x.json")) == check_depth(json.loads(variant), Path("x.json"))
    if level + 1 >= MAX_DEPTH:  # a row sits in its list, one level down
        with pytest.raises(ValueError, match="nests too deep"):
            decode_row(f"[{text}]", 1)
    else:
        assert decode_row(f"[{text}]", 1)[0] == data
