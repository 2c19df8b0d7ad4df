"""Every reader of outside data against the one strategy of hostile values (`tests/hostile_values.py`):
each either takes the value as a bounded, finite one of its own types, or refuses it with our one
input error (or one warning, or an unscored row) naming file and field. Never a traceback, a
RecursionError, an OverflowError, and never a NaN or an infinity written to a file.

Readers: the JSON reader itself, benchmark.yaml (pricing, thresholds, judge settings), scenarios.json,
dataset files, calibration.jsonl labels, calibration.json, history.jsonl, baselines (and the plan over
them), cache entries, an endpoint's answer body and its log-probabilities, tool-call arguments from
every source, a trajectory's calls, the threshold search, recorded usage, an answer's rate-limit
headers (and the pace a process learns from them), and the result writers.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hostile_values import JSON_TEXTS, LEAVES, NUMBERS, TEXTS, VALUES, json_text, nested, placed, unwrap
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_evalbench.base.errors import InputError
from pytest_evalbench.base.files import NonFiniteNumber, dump_json, finite_json
from pytest_evalbench.base.inputs import parse_yaml
from pytest_evalbench.base.json_input import MAX_DEPTH, parse_json
from pytest_evalbench.base.numbers import MAX_INT, is_json_number
from pytest_evalbench.formats.agreement import best_threshold
from pytest_evalbench.formats.checks import Trajectory
from pytest_evalbench.formats.results import ToolCall, tool_arguments
from pytest_evalbench.formats.spec import BenchmarkSpec, validate_as
from pytest_evalbench.gate.decision import read_baseline
from pytest_evalbench.gate.paired import plan
from pytest_evalbench.kinds import judges, targets
from pytest_evalbench.kinds.dataset.models import DatasetError, load_cases
from pytest_evalbench.kinds.labels import load_labels
from pytest_evalbench.kinds.metric_judge import UnusableProbability, present_probability
from pytest_evalbench.kinds.scenarios.models import load_scenarios
from pytest_evalbench.kinds.trajectory import match_trajectory
from pytest_evalbench.llm.cache import CorruptEntry, ResponseCache, cache_key
from pytest_evalbench.llm.transport import body_json, classify, parse_completion, parse_logprobs
from pytest_evalbench.llm.types import Usage
from pytest_evalbench.render.summary import read_history

T = TypeVar("T")
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
"""Every property here runs this many examples: the file stays well under 20 s."""


def attempt(call: Callable[[], T], *errors: type[BaseException]) -> tuple[T | None, BaseException | None]:
    """(result, None), or (None, the error) when `call` raises one of `errors` (anything else propagates)."""
    try:
        return call(), None
    except errors as exc:
        return None, exc


def depth_of(value: Any) -> int:
    """Nesting depth of lists and mappings, without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth + 1)
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def sound(value: Any) -> bool:
    """Shallow enough for every reader and every number one a file can hold, checked without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool) and not is_json_number(item):
            return False
    return depth_of(value) <= MAX_DEPTH


# --------------------------------------------------------------------------- the JSON reader


@FEW
@given(JSON_TEXTS)
def test_the_json_reader_returns_sound_data_or_one_input_error(text: str) -> None:
    data, error = attempt(lambda: parse_json(text, Path("x.json")), InputError)
    if error is not None:
        assert str(error).startswith("x.json") and "\n" not in str(error)
        return
    assert sound(data)
    json.dumps(data, allow_nan=False)  # what it returns, any writer can write


@FEW
@given(VALUES)
def test_the_json_reader_agrees_with_the_standard_library_on_sound_json(value: Any) -> None:
    text = json_text(value)
    value = unwrap(value)
    try:
        expected = json.loads(text)
    except (ValueError, RecursionError):
        return
    constants: list[str] = []
    json.loads(text, parse_constant=constants.append)
    if not sound(expected) or constants:
        with pytest.raises(InputError):
            parse_json(text, Path("x.json"))
        return
    data, error = attempt(lambda: parse_json(text, Path("x.json")), InputError)
    if error is not None:  # a lone surrogate or a key given twice: refused by rule
        assert "surrogate" in str(error) or "duplicate key" in str(error)
    else:
        assert data == expected


# --------------------------------------------------------------------------- tool-call arguments


@FEW
@given(st.one_of(VALUES, JSON_TEXTS))
def test_tool_call_arguments_from_any_source_are_a_sound_object(raw: Any) -> None:
    raw = unwrap(raw)
    arguments, problem = tool_arguments(raw)
    assert isinstance(arguments, dict) and sound(arguments)
    assert (problem is None) or set(arguments) == {"_raw"}
    app = targets.tool_call({"tool": "t", "arguments": raw})
    assert app.arguments == arguments
    json.dumps(app.arguments, allow_nan=False)


@FEW
@given(st.lists(st.builds(lambda tool, args: ToolCall(tool=tool, arguments=tool_arguments(unwrap(args))[0]),
                          st.sampled_from(["a", "b"]), VALUES), max_size=6),
       st.sampled_from(["strict", "unordered", "subset", "superset"]))
def test_a_trajectory_over_hostile_calls_is_a_result(calls: list[ToolCall], mode: str) -> None:
    result = match_trajectory(Trajectory(mode=mode, calls=calls[:3]), calls, {})
    assert isinstance(result.ok, bool) and "\n" not in result.summary


# --------------------------------------------------------------------------- benchmark.yaml and data files


def yaml_scalar(value: Any) -> str:
    """A hostile value as YAML writes it (NaN as .nan, big integers in full, deep nesting as flow)."""
    if isinstance(value, float) and math.isnan(value):
        return ".nan"
    if isinstance(value, float) and math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        return str(value)
    if depth_of(value) > 50:
        return json_text(value)  # JSON is YAML's flow style
    return json.dumps(value, default=str)


@FEW
@given(st.sampled_from([("pricing", "m", "input_per_million"), ("judge", "min_kappa"), ("judge", "samples"),
                        ("generation", "turns"), ("thresholds", "default", "min_pass_rate"), ("name",),
                        ("gate", "alpha"), ("scenario", "max_turns")]), LEAVES)
def test_benchmark_yaml_takes_a_bounded_value_or_names_the_field(path: tuple[str, ...], value: Any) -> None:
    lines = ["name: b"] if path != ("name",) else []
    indent = ""
    for part in path[:-1]:
        lines.append(f"{indent}{part}:")
        indent += "  "
    lines.append(f"{indent}{path[-1]}: {yaml_scalar(value)}")
    if path[0] == "pricing":
        lines.append(f"{indent}output_per_million: 1")
    where = Path("benchmark.yaml")
    spec, error = attempt(lambda: validate_as(BenchmarkSpec, parse_yaml("\n".join(lines) + "\n", where), where),
                          InputError)
    if error is not None:
        assert str(error).startswith("benchmark.yaml")
        return
    price = spec.pricing.get("m")
    assert price is None or (math.isfinite(price.input_per_million) and price.input_per_million <= 1e6)
    json.dumps(spec.model_dump(mode="json"), allow_nan=False)


def bench_dir(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir(exist_ok=True)
    return path


SPEC = BenchmarkSpec.model_validate({"name": "b", "metrics": [{"id": "m1", "name": "M", "type": "positive",
                                                               "definition": "d"}]})
SCENARIO = {"id": "s1", "metric_id": "m1", "first_message": "hi", "persona": "p", "goal": "g"}
DATASET_CASE = {"case_id": "c1", "agent_name": "a", "question": "q", "required_evals": ["FluencyExplain"],
                "threshold_profile": "default"}
LABEL = {"metric_id": "m1", "reply": "r", "present": True}


@FEW
@given(st.sampled_from(["id", "first_message", "demographic", "landmarks", "metric_id", "version"]), VALUES)
def test_a_scenario_row_is_read_or_one_input_error(tmp_path: Path, field: str, value: Any) -> None:
    bench = bench_dir(tmp_path, "scenarios")
    (bench / "scenarios.json").write_text("[" + json_text(placed(SCENARIO, (field,), None)).replace(
        "null", json_text(value), 1) + "]")
    rows, error = attempt(lambda: load_scenarios(bench, SPEC), InputError)
    if error is not None:
        assert "scenarios.json" in str(error)
        return
    assert all(sound(row.model_dump(mode="json")) for row in rows)


@FEW
@given(st.sampled_from(["case_id", "user_input", "expected_tool_calls", "invoked_tool_calls", "metadata"]), VALUES)
def test_a_dataset_line_is_read_or_one_error_naming_its_line(tmp_path: Path, field: str, value: Any) -> None:
    path = bench_dir(tmp_path, "dataset") / "cases.jsonl"
    path.write_text(json_text(placed(DATASET_CASE, (field,), None)).replace("null", json_text(value), 1) + "\n")
    cases, error = attempt(lambda: load_cases(path), DatasetError)
    if error is not None:
        assert f"{path}:1" in str(error) or str(error).startswith(str(path))
        return
    assert all(sound(case.model_dump(mode="json")) for _, case in cases)


@FEW
@given(st.sampled_from(["metric_id", "reply", "present", "conversation"]), VALUES)
def test_a_calibration_label_is_read_or_one_input_error(tmp_path: Path, field: str, value: Any) -> None:
    path = bench_dir(tmp_path, "labels") / "calibration.jsonl"
    path.write_text(json_text(placed(LABEL, (field,), None)).replace("null", json_text(value), 1) + "\n")
    _, error = attempt(lambda: load_labels(path, SPEC, "metrics"), InputError)
    assert error is None or "calibration.jsonl" in str(error)


# --------------------------------------------------------------------------- files of earlier runs


ENTRY = {"metric_id": "m1", "judge": "j", "n": 10, "unscored": 0, "agreement": 0.9, "kappa": 0.8,
         "kappa_ci": [0.6, 0.9], "weighting": "none", "prompt": "examples", "threshold": 0.5,
         "threshold_kappa": 0.7, "judge_n": 10, "judge_kappa": 0.8,
         "confusion": {"present": {"present": 4, "absent": 1}, "absent": {"present": 1, "absent": 4}}}


@FEW
@given(st.sampled_from([("threshold",), ("kappa",), ("judge_kappa",), ("threshold_kappa",), ("n",),
                        ("confusion", "present", "present"), ("confusion", "absent"), ("confusion",)]),
       st.one_of(NUMBERS, LEAVES, st.builds(nested, st.just(3_000))))
def test_calibration_json_gives_bounded_numbers_or_a_warning(tmp_path: Path, path: tuple[str, ...], value: Any) -> None:
    bench = bench_dir(tmp_path, "calibration")
    (bench / "calibration.json").write_text("[" + json_text(placed(ENTRY, path, None)).replace(
        "null", json_text(value), 1) + "]")
    config = BenchmarkSpec.model_validate({"name": "b", "judge": {"min_kappa": 0.5, "probability": True}}).judge
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        thresholds, error = attempt(lambda: judges.calibrated_thresholds(bench, "j", {"m1": "examples"}), InputError)
        if error is not None:  # a number or nesting no file may hold: the file is refused, naming the field
            assert str(error).startswith(str(bench / "calibration.json"))
            return
        judges.unreliable_judges(bench, config, ["m1"], "j")
        accuracy = judges.judge_accuracy(bench, "j")
    assert thresholds is not None and all(0 < t < 1 for t in thresholds.values())
    for found in accuracy.values():
        for rate in (found.sensitivity, found.specificity):
            assert rate is None or 0 <= rate <= 1


@FEW
@given(st.one_of(NUMBERS, LEAVES), st.sampled_from(["rates", "rate", "line"]))
def test_history_lines_give_probabilities_or_are_skipped(tmp_path: Path, value: Any, where: str) -> None:
    history = bench_dir(tmp_path, "history") / "history.jsonl"
    good = json.dumps({"rates": {"t": {"m": 0.5}}, "scope": "full"})
    bad = {"rates": json_text({"t": {"m": "@"}}).replace('"@"', json_text(value)),
           "rate": json_text({"rates": {"t": {"m": "@"}}}).replace('"@"', json_text(value)),
           "line": json_text(value)}[where]
    history.write_text(good + "\n" + (bad.replace("\n", " ") if where == "line" else bad) + "\n" + good + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        entries = read_history(history)
    for entry in entries:
        for metrics in entry["rates"].values():
            assert all(r is None or (isinstance(r, (int, float)) and 0 <= r <= 1) for r in metrics.values())


BASELINE = {"schema_version": 2, "meta": {}, "cases": {"t|r1|m|0": True}, "scores": {"t|r1|e": 4.0},
            "targets": {"t": {"positive_pass_rate": 0.5, "metrics": {"m": {"n_passed": 8, "n_total": 10,
                                                                           "pass_rate": 0.8}}}}}


@FEW
@given(st.sampled_from([("scores", "t|r1|e"), ("targets", "t", "metrics", "m", "pass_rate"),
                        ("targets", "t", "metrics", "m", "n_total"), ("targets", "t", "positive_pass_rate"),
                        ("cases", "t|r1|m|0"), ("meta",)]), st.one_of(NUMBERS, LEAVES))
def test_a_baseline_is_bounded_or_one_input_error_and_the_plan_never_overflows(
        tmp_path: Path, path: tuple[str, ...], value: Any) -> None:
    file = bench_dir(tmp_path, "baseline") / "baseline.json"
    file.write_text(json_text(placed(BASELINE, path, None)).replace("null", json_text(value), 1))
    baseline, error = attempt(lambda: read_baseline(file), InputError)
    if error is not None:
        assert str(error).startswith(str(file))
        return
    for line in plan(0.1, 0.05, {("t", "m"): (10, 2)}, baseline):
        assert 0 <= line.rate <= 1


@FEW
@given(JSON_TEXTS)
def test_a_planted_cache_entry_is_an_answer_or_one_corrupt_entry(tmp_path: Path, text: str) -> None:
    cache = ResponseCache(bench_dir(tmp_path, "cache"), "on")
    key = cache_key({"body": {"model": "m"}, "endpoint": "e", "sample": 0, "attempt": 0})
    cache.path_for(key).parent.mkdir(parents=True, exist_ok=True)
    cache.path_for(key).write_text(text)
    _, error = attempt(lambda: cache.get(key), CorruptEntry)
    assert error is None or (str(error).startswith(str(cache.path_for(key))) and "\n" not in str(error))


# --------------------------------------------------------------------------- endpoints


def completion_body(content: Any = "hi", usage: Any = None, logprob: Any = -0.5) -> str:
    body = {"choices": [{"message": {"role": "assistant", "content": "@content"}, "finish_reason": "stop",
                         "logprobs": {"content": [{"token": "x", "logprob": "@lp",
                                                   "top_logprobs": [{"token": "x", "logprob": "@lp"}]}]}}],
            "usage": "@usage"}
    return (json.dumps(body).replace('"@content"', json_text(content)).replace('"@usage"', json_text(usage))
            .replace('"@lp"', json_text(logprob)))


@FEW
@given(st.one_of(JSON_TEXTS, st.builds(completion_body, VALUES), st.builds(completion_body, st.just("hi"), VALUES),
                 st.builds(completion_body, st.just("hi"), st.none(), NUMBERS)))
def test_an_answer_body_is_a_completion_or_a_bad_response(text: str) -> None:
    completion, error = attempt(lambda: parse_completion(body_json(text.encode("utf-8", "surrogatepass"))),
                                ValueError, TypeError, KeyError, IndexError, AttributeError)
    if error is not None:
        assert classify(error).category == "bad response"  # one line; retried like any bad answer
        return
    json.dumps(completion.to_json() if hasattr(completion, "to_json") else {}, allow_nan=False)
    for _token, alternatives in completion.logprobs or []:
        assert all(v is None or (math.isfinite(v) and v <= 0) for v in alternatives.values())
    try:
        probability = present_probability(completion.logprobs)
    except UnusableProbability:
        return  # the row is unscored with the reason
    assert probability is None or 0 <= probability <= 1


RATE_HEADERS = [f"x-ratelimit-{part}-{kind}" for part in ("limit", "remaining", "reset") for kind in ("requests", "tokens")]
HEADER_TEXTS = st.one_of(st.builds(str, NUMBERS), st.builds(str, st.integers(0, 10**7)),
                         st.builds(lambda n, u: f"{n}{u}", NUMBERS, st.sampled_from(["ms", "s", "m", "h", "m0s", "h2m3.5s"])),
                         st.sampled_from(["Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT"]), TEXTS)
"""What a header may say: numbers of every range as text, durations, HTTP dates and hostile text."""


@FEW
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from([*RATE_HEADERS, "retry-after", "retry-after-ms"]), HEADER_TEXTS,
                                          min_size=3),
                          st.booleans(), st.one_of(st.integers(-10, 10**6), st.just(10**400))), max_size=6))
@example([({"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "1e300"}, False, 1),
          ({"x-ratelimit-remaining-tokens": "1", "x-ratelimit-reset-tokens": "99999h", "retry-after": "1e999"}, True, 10**400)])
def test_rate_limit_headers_give_a_finite_bounded_pace(answers: list[tuple[dict[str, str], bool, int]]) -> None:
    """Whatever an endpoint's headers say, the pace learned from them is finite, within the waits any
    header may ask for, and one every other process accepts when it reads the shared file."""
    from pytest_evalbench.llm.shared_limits import _GAPS, MAX_WAIT, EndpointState, parse

    now, state = 1_000_000.0, EndpointState()
    for headers, limited, tokens in answers:
        info = parse(headers)
        for window in (info.requests, info.tokens):
            assert all(v is None or (math.isfinite(v) and v >= 0) for v in (window.limit, window.remaining, window.reset))
        assert info.retry_after is None or 0 <= info.retry_after <= MAX_WAIT
        state.learn(now, info, limited, min(tokens, 10**9))
        values = vars(state)
        assert all(math.isfinite(v) and v >= 0 for v in values.values()), values
        assert all(values[gap] <= MAX_WAIT for gap in _GAPS), values
        assert state.plausible(now) and EndpointState.of(values) == state, values
        now += 0.5


@FEW
@given(VALUES)
def test_logprobs_in_any_shape_give_a_probability_none_or_unscored(data: Any) -> None:
    try:
        probability = present_probability(parse_logprobs(unwrap(data)))
    except UnusableProbability:
        return  # given but unreadable: the row is unscored with the reason
    assert probability is None or 0 <= probability <= 1


@FEW
@given(st.dictionaries(st.sampled_from(["input_tokens", "output_tokens", "cost"]), LEAVES))
def test_recorded_usage_is_bounded(data: dict[str, Any]) -> None:
    usage = Usage.from_json(data)
    assert 0 <= usage.input_tokens <= 10**9 and 0 <= usage.output_tokens <= 10**9 and math.isfinite(usage.cost)


@FEW
@given(st.lists(st.one_of(NUMBERS, st.floats(0, 1)), min_size=2, max_size=30), st.data())
def test_the_threshold_search_gives_a_cut_inside_0_1(values: list[Any], data: st.DataObject) -> None:
    probabilities = [min(1.0, max(0.0, float(v))) if isinstance(v, float) and math.isfinite(v) else 0.5
                     for v in values]
    labels = data.draw(st.lists(st.booleans(), min_size=len(values), max_size=len(values)))
    cut = best_threshold(probabilities, labels)
    assert cut is None or 0 < cut < 1


# --------------------------------------------------------------------------- writers


@FEW
@given(VALUES)
def test_writers_write_json_any_parser_reads_or_refuse(tmp_path: Path, value: Any) -> None:
    path = bench_dir(tmp_path, "out") / "x.json"
    path.unlink(missing_ok=True)  # tmp_path is shared by the examples
    value = unwrap(value)
    if depth_of(value) > 200:
        value = nested(60, 1)  # a writer is handed what readers produced: at most MAX_DEPTH deep
    _, error = attempt(lambda: dump_json(path, {"row": value}), NonFiniteNumber, TypeError, OverflowError, ValueError)
    if error is not None:  # NaN or infinity (NonFiniteNumber), or an integer no JSON reader holds: nothing written
        assert not path.exists()
        assert not isinstance(error, NonFiniteNumber) or (
            str(error).startswith(str(path)) and "not a finite number" in str(error))
    else:
        text = path.read_text()
        json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} written"))
        assert "Infinity" not in text.replace('"Infinity"', "") and "NaN" not in text.replace('"NaN"', "")
    try:
        line = finite_json({"row": value}, path)
    except (NonFiniteNumber, ValueError, RecursionError):
        return
    json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} written"))


def test_the_strategy_builds_deep_values_without_recursion() -> None:
    assert depth_of(nested(5_000)) == 5_000 and len(json_text(nested(5_000))) > 10_000
    with pytest.raises(InputError, match="nested deeper than 64 levels"):
        parse_json(json_text(nested(5_000, as_dict=True)), Path("x.json"))


def test_a_name_with_a_line_break_is_quoted_in_the_trajectory_line() -> None:
    calls = [ToolCall(tool="a\x1b[2J", arguments={"\n": -1})]
    result = match_trajectory(Trajectory(mode="strict", calls=[ToolCall(tool="b", arguments={})]), calls, {})
    assert "\n" not in result.summary and "\x1b" not in result.summary
    assert "'\\n'=-1" in result.summary
