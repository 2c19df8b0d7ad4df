"""What input files may hold (issue 25) and how inputs are checked against each other (issue 24):
numbers in range, no lone surrogates, ids matched in full, non-blank definitions, demographic values
of benchmark.yaml's axes, and every position in a message counted from 1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from pytest_evalbench.base.errors import ConfigError, InputError, field_path
from pytest_evalbench.base.inputs import parse_yaml
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.base.numbers import MAX_INT
from pytest_evalbench.formats import check_id
from pytest_evalbench.formats.spec import BenchmarkSpec, Metric, first_error, load_spec, resolve_benchmark_dir
from pytest_evalbench.kinds.dataset.models import DatasetError, load_cases
from pytest_evalbench.kinds.scenarios.models import Scenario, check_demographic, iter_json_list, load_scenarios, row_label
from pytest_evalbench.kinds.scenarios.runner import ScenarioItem

DATA = Path(__file__).parents[1] / "data"
HUMANE = DATA / "impactbench" / "humanebench"
AGENTS = DATA / "agentsleague"
HERE = Path("input.json")


def problem(fn: Any, *args: Any) -> str:
    with pytest.raises(InputError) as info:
        fn(*args)
    return str(info.value)


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(("text", "field", "message"), [
    ('{"a": [1, %s]}' % ("9" * 5000), "a.2", "number 99999999999999999999… (5000 digits) is out of range"),
    (f'{{"a": {MAX_INT + 1}}}', "a", f"number {MAX_INT + 1} is out of range"),
    (f'{{"a": -{MAX_INT + 1}}}', "a", "is out of range"),
    ('{"a": {"b": 1e999}}', "a.b", "number 1e999 is too large (numbers must be finite)"),
    ('{"a": -1.5e400}', "a", "is too large"),
    ('[{"x": NaN}]', "1.x", "NaN is not a number an input file may hold"),
    ('{"a": Infinity}', "a", "Infinity is not a number"),
    ('{"a": -Infinity}', "a", "-Infinity is not a number"),
], ids=["5000-digits", "2^63", "-2^63", "float-overflow", "negative-overflow", "nan", "infinity", "-infinity"])
def test_out_of_range_numbers_in_json_are_one_line(text: str, field: str, message: str) -> None:
    shown = problem(parse_json, text, HERE, 7)
    assert shown.startswith(f"input.json:7, field '{field}': ") and message in shown
    assert "\n" not in shown and len(shown) < 300


def test_duplicate_json_keys_are_one_line() -> None:
    """JSON keeps the last of two equal keys silently; an input file must not lose a value that way."""
    shown = problem(parse_json, '{"a": 1, "b": [{"c": 1}, {"c": 2, "d": 3, "c": 4}]}', HERE, 5)
    assert shown == "input.json:5, field 'b.2.c': duplicate key 'c' (JSON would keep only the last value silently)"
    with pytest.raises(InputError, match=r"row 2 \(id b\), field 'persona': duplicate key 'persona'"):
        list(iter_json_list('[{"id": "a"}, {"id": "b", "persona": "x", "persona": "y"}]', HERE))


def test_numbers_in_range_are_kept_exactly() -> None:
    assert parse_json(f'{{"a": {MAX_INT}, "b": -{MAX_INT}, "c": 1.5e300, "d": 0}}', HERE) == {
        "a": MAX_INT, "b": -MAX_INT, "c": 1.5e300, "d": 0}


@pytest.mark.parametrize(("text", "line", "field", "message"), [
    ("a: 1\nb:\n  - 2\n  - %s\n" % ("9" * 5000), 4, "b.2", "(5000 digits) is out of range"),
    ("a: {b: .inf}\n", 1, "a.b", ".inf is not a number"),
    ("a: -.Inf\n", 1, "a", "is not a number"),
    ("a: .nan\n", 1, "a", ".nan is not a number"),
    ("a: 1.0e+999\n", 1, "a", "is too large"),
    ("a: 0x1ffffffffffffffff\n", 1, "a", "is out of range"),
    ("a: 9_223_372_036_854_775_808\n", 1, "a", "is out of range"),
], ids=["5000-digits", "inf", "-inf", "nan", "float-overflow", "hex", "underscores"])
def test_out_of_range_numbers_in_yaml_are_one_line(text: str, line: int, field: str, message: str) -> None:
    shown = problem(parse_yaml, text, Path("b.yaml"))
    assert shown.startswith(f"b.yaml:{line}, field '{field}': ") and message in shown


def test_yaml_numbers_in_range_are_kept() -> None:
    assert parse_yaml("a: 0x7fffffffffffffff\nb: 1_000\nc: 2.5\n", Path("b.yaml")) == {
        "a": MAX_INT, "b": 1000, "c": 2.5}


def test_yaml_values_are_json_values() -> None:
    """A date is kept as its text (YAML 1.2, JSON); a value no request or result file can carry is refused."""
    assert parse_yaml("a: 2024-01-01\nb: [2001-12-14 21:59:43.10 -5]\n", Path("b.yaml")) == {
        "a": "2024-01-01", "b": ["2001-12-14 21:59:43.10 -5"]}
    for text, tag in (("a:\n  b: !!binary aGVsbG8=\n", "!!binary"), ("a: !!set {x, y}\n", "!!set"),
                      ("a: !!omap [{x: 1}]\n", "!!omap"), ("a: !!pairs [{x: 1}]\n", "!!pairs"), ("a: !mine 1\n", "!mine")):
        shown = problem(parse_yaml, text, Path("b.yaml"))
        assert f"YAML tag {tag} is not accepted" in shown and "field 'a" in shown


# --------------------------------------------------------------------------- lone surrogates


@pytest.mark.parametrize(("text", "field", "code"), [
    ('{"a": "x\\ud800y"}', "a", "\\ud800"),
    ('{"a": ["ok", "\\udfff"]}', "a.2", "\\udfff"),
    ('{"\\udc00": 1}', "\\udc00", "\\udc00"),
    ('{"a": "\\ude00\\ud83d"}', "a", "\\ude00"),  # a pair in the wrong order is two lone halves
], ids=["value", "list-item", "key", "reversed-pair"])
def test_lone_surrogates_in_json_are_refused(text: str, field: str, code: str) -> None:
    shown = problem(parse_json, text, HERE, 2)
    assert shown.startswith(f"input.json:2, field '{field}': ") and f"lone surrogate ({code})" in shown
    shown.encode("utf-8")  # the message itself can be printed and written


def test_surrogate_pairs_are_characters() -> None:
    assert parse_json('{"a": "\\ud83d\\ude00"}', HERE) == {"a": "\U0001f600"}
    assert parse_yaml('a: "\\ud83d\\ude00"\n', Path("b.yaml")) == {"a": "\U0001f600"}


def test_lone_surrogates_in_yaml_are_refused() -> None:
    shown = problem(parse_yaml, 'name: x\nmetrics:\n  - {id: m01, definition: "a \\ud800"}\n', Path("b.yaml"))
    assert shown.startswith("b.yaml:3, field 'metrics.1.definition': contains a lone surrogate (\\ud800)")
    shown = problem(parse_yaml, 'a:\n  "\\ud800": 1\n', Path("b.yaml"))
    assert "lone surrogate" in shown
    shown.encode("utf-8")


def test_scenario_rows_name_the_row_of_a_bad_value() -> None:
    rows = [{"id": "a"}, {"id": "b", "persona": "\ud800"}]
    with pytest.raises(InputError) as info:
        list(iter_json_list(json.dumps(rows), HERE))
    assert str(info.value).startswith("input.json, row 2 (id b), field 'persona': contains a lone surrogate")
    with pytest.raises(InputError, match=r"row 1, field 'n': number 9999"):
        list(iter_json_list('[{"n": %s}]' % ("9" * 5000), HERE))


def test_calibration_file_gets_the_same_checks(tmp_path: Path) -> None:
    from pytest_evalbench.kinds.labels import load_labels

    spec = BenchmarkSpec(name="b", metrics=[Metric(id="m01", name="n", type="positive", definition="d")])
    path = tmp_path / "calibration.jsonl"
    label = {"metric_id": "m01", "transcript": [{"role": "assistant", "content": "hi"}], "present": True}
    assert len(load_labels(_write(path, [label]), spec, "metrics")) == 1
    _write(path, [label, {**label, "note": "\ud800"}])
    assert problem(load_labels, path, spec, "metrics").endswith(
        "calibration.jsonl:2, field 'note': contains a lone surrogate (\\ud800): half of a UTF-16 pair, not a "
        "character, so it cannot be stored or sent as UTF-8; remove it or write the whole pair")


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# --------------------------------------------------------------------------- ids, names, definitions


@pytest.mark.parametrize("value", ["m01\n", "m01\r\n", "\nm01", "m 01", "x" * 101, ""])
def test_ids_must_match_in_full(value: str) -> None:
    with pytest.raises(ValueError, match="must be 1-100"):
        check_id(value, "metric id")


def test_names_of_env_variables_and_headers_match_in_full() -> None:
    from pytest_evalbench.formats.spec import ModelConfig

    with pytest.raises(ValidationError, match="not an environment variable name"):
        ModelConfig(model="m", api_key_env="KEY\n")
    with pytest.raises(ValidationError, match="not an HTTP header name"):
        ModelConfig(model="m", headers={"X-Key\n": "v"})


@pytest.mark.parametrize("name", ["b" * 300, "demo\n", "a/b", "..", ""])
def test_benchmark_names_are_checked_before_touching_the_disk(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match="is not a benchmark name") as info:
        resolve_benchmark_dir(tmp_path, name)
    assert len(str(info.value)) < 250


@pytest.mark.parametrize("definition", ["", " ", "\n\t "])
def test_blank_metric_definition_is_an_error(definition: str) -> None:
    data = {"name": "b", "metrics": [{"id": "m01", "name": "n", "type": "positive", "definition": "d"},
                                     {"id": "m02", "name": "n", "type": "positive", "definition": definition}]}
    with pytest.raises(ValidationError) as info:
        BenchmarkSpec.model_validate(data)
    assert first_error(info.value, data) == (
        "metrics[m02].definition", "is empty: the judge would have nothing to judge; write what the behaviour is")


# --------------------------------------------------------------------------- positions from 1


def test_field_paths_count_list_positions_from_1() -> None:
    data = {"targets": [{"id": "a"}, {"id": "b"}, {"id": "b"}, {"id": "not an id"}], "pricing": {1: {"x": 1}}}
    assert field_path(("targets", 1, "id"), data, by_id=False) == "targets.2.id"
    assert field_path(("targets", 0, "id"), data) == "targets[a].id"  # an entry with an id is named by it
    assert field_path(("targets", 2, "id"), data) == "targets.3.id"  # ... when it names one entry
    assert field_path(("targets", 3, "id"), data) == "targets.4.id"  # ... that a reader can find
    assert field_path(("pricing", 1, "x"), data) == "pricing.1.x"  # a mapping key that is a number stays
    assert field_path(("targets", 0, "headers", "X", "str"), data) == "targets[a].headers.X.str"
    assert field_path(("rows", 0, "a")) == "rows.1.a"


def test_dataset_errors_count_list_positions_from_1(tmp_path: Path) -> None:
    case = {"case_id": "c1", "agent_name": "a", "question": "q", "model_answer": "x",
            "required_evals": ["FluencyExplain", "Fluency"], "threshold_profile": "p"}
    path = tmp_path / "cases.jsonl"
    path.write_text("\n" + json.dumps(case) + "\n")
    with pytest.raises(DatasetError) as info:
        load_cases(path)
    assert (info.value.line, info.value.field) == (2, "required_evals.2")


def test_row_labels_escape_what_cannot_be_printed() -> None:
    assert row_label(0, {"id": "m01"}) == "1 (id m01)"
    assert row_label(4, {"id": "m01\n"}) == "5 (id 'm01\\n')"
    assert row_label(2, ["not", "a", "row"]) == "3"


# --------------------------------------------------------------------------- demographics


AXES = {"age": ["Child or teenager (6-17)", "Adult (18+)"], "gender": ["female", "male", "nonbinary"]}


def test_demographic_values_must_be_values_of_their_axis() -> None:
    check_demographic({"age": "Adult (18+)", "gender": "nonbinary"}, AXES, HERE, "1")
    check_demographic({}, AXES, HERE, "1")
    check_demographic({"anything": "goes"}, {}, HERE, "1")  # no axes declared: impactbench keeps them elsewhere
    shown = problem(check_demographic, {"age": "Adult (18+)", "gender": "non-binary"}, AXES, HERE, "4 (id x)")
    assert shown == ("input.json, row 4 (id x), field 'demographic.gender': demographic value 'non-binary' is not "
                     "one of axis 'gender''s values in benchmark.yaml ('female', 'male', 'nonbinary'); closest: "
                     "'nonbinary'")
    shown = problem(check_demographic, {"Age": "Adult (18+)"}, AXES, HERE, "1")
    assert "unknown demographic axis 'Age'" in shown and "closest: 'age'" in shown


def humane_copy(tmp_path: Path, **changes: Any) -> Path:
    bench = tmp_path / "humanebench"
    shutil.copytree(HUMANE, bench, ignore=shutil.ignore_patterns("runs"))
    spec = yaml.safe_load((bench / "benchmark.yaml").read_text())
    spec.update(changes)
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return bench


@pytest.mark.filterwarnings("ignore::pytest_evalbench.base.errors.EvalbenchWarning")  # the seed row's unknown key
def test_seed_scenarios_load_with_and_without_declared_demographics(tmp_path: Path) -> None:
    """impactbench's files declare no demographics in benchmark.yaml: rows are taken as they are; once
    the axes are declared, the same rows still load, and a typo in one is caught."""
    spec = load_spec(HUMANE)
    assert spec.demographics == {} and len(load_scenarios(HUMANE, spec)) == 4
    bench = humane_copy(tmp_path, demographics={"age": ["Child or teenager (6-17)", "Adult (18+)"]})
    assert len(load_scenarios(bench, load_spec(bench))) == 4
    rows = json.loads((bench / "scenarios.json").read_text())
    rows[3]["demographic"] = {"age": "adult (18+)"}
    (bench / "scenarios.json").write_text(json.dumps(rows))
    assert problem(load_scenarios, bench, load_spec(bench)).endswith(
        "closest: 'Adult (18+)'")


@pytest.mark.filterwarnings("ignore::pytest_evalbench.base.errors.EvalbenchWarning")  # the seed row's unknown key
@pytest.mark.parametrize(("raw", "expected"), [
    ('"note": "\\ud800"', "field 'note': contains a lone surrogate"),
    ('"weight": %s' % ("9" * 5000), "field 'weight': number 9999"),
], ids=["lone-surrogate", "5000-digits"])
def test_seed_scenarios_with_a_hostile_value_are_refused(tmp_path: Path, raw: str, expected: str) -> None:
    bench = humane_copy(tmp_path)
    text = (bench / "scenarios.json").read_text()
    last = text.rindex('"id"')
    (bench / "scenarios.json").write_text(text[:last] + raw + ", " + text[last:])
    shown = problem(load_scenarios, bench, load_spec(bench))
    assert "scenarios.json, row 4 (id m02_s001_v02), " + expected in shown


@pytest.mark.parametrize("name", ["learning-path-curator.explain.jsonl", "preparation-workflow.comparative.explain.jsonl"])
def test_seed_dataset_files_load_and_a_hostile_line_is_named(tmp_path: Path, name: str) -> None:
    cases = load_cases(AGENTS / name)
    assert cases
    lines = (AGENTS / name).read_bytes().splitlines()
    row = json.loads(lines[-1].decode("utf-8-sig"))
    row["case_id"] = "hostile-1"
    row["question"] = "half \ud83d of an emoji"
    path = tmp_path / name
    path.write_bytes(b"\n".join([*lines, json.dumps(row).encode()]) + b"\n")
    with pytest.raises(DatasetError) as info:
        load_cases(path)
    assert (info.value.line, info.value.field) == (len(lines) + 1, "question")
    assert "lone surrogate (\\ud83d)" in info.value.message


def test_k_keywords_carry_demographic_values() -> None:
    row = Scenario.model_validate({"id": "m01_s001_v01", "metric_id": "m01", "persona": "p", "user_goal": "g",
                                   "metric_type": "positive",
                                   "demographic": {"age": "Adult (18+)", "gender": "female"}})
    words = ScenarioItem(row, "tgt", 0, 0).keywords
    assert {"m01", "tgt", "positive", "Adult (18+)", "age:Adult (18+)", "female", "gender:female"} <= set(words)
    other = ScenarioItem(row, "tgt2", 1, 1)
    assert other.stored.demographic is ScenarioItem(row, "x", 0, 2).stored.demographic  # one tuple per combination


# --------------------------------------------------------------------------- all of a file's errors at once


def test_a_two_mistake_benchmark_yaml_shows_both_with_fields_and_near_miss_hints(tmp_path: Path) -> None:
    bench = tmp_path / "b"
    bench.mkdir()
    (bench / "benchmark.yaml").write_text(
        "name: b\ndescription: d\ngeneration: {turnz: 2}\nmetrics:\n"
        "  - {id: m01, name: n, type: negatve, definition: d, examples: []}\n")
    with pytest.raises(InputError) as caught:
        load_spec(bench)
    lines = str(caught.value).splitlines()
    assert lines[0] == "2 problems:"
    assert f"{bench / 'benchmark.yaml'}:3, field 'generation.turnz': unknown key 'turnz': did you mean `turns`?" in lines
    assert any(line.startswith(f"{bench / 'benchmark.yaml'}:5, field 'metrics[m01].type': Input should be") for line in lines)


def test_one_mistake_never_hides_another(tmp_path: Path) -> None:
    """A misspelt top-level key, a misspelt nested key and a bad list entry: all three at once, in the
    order of the file, each with its line and field, list entries named by their id."""
    bench = tmp_path / "b"
    bench.mkdir()
    (bench / "benchmark.yaml").write_text(
        "name: b\ndescription: d\nevaluator_modle: {model: j}\ngeneration:\n  turn: 2\nmetrics:\n"
        "  - id: m01\n    name: n\n    type: positive\n    definition: d\n"
        "  - id: m02\n    name: n\n    type: negatve\n    definition: d\n")
    with pytest.raises(InputError) as caught:
        load_spec(bench)
    path = bench / "benchmark.yaml"
    assert str(caught.value).splitlines() == [
        "3 problems:",
        f"{path}:3, field 'evaluator_modle': unknown key 'evaluator_modle': did you mean `evaluator_model`?",
        f"{path}:5, field 'generation.turn': unknown key 'turn': did you mean `turns`?",
        f"{path}:13, field 'metrics[m02].type': Input should be 'positive' or 'negative'"]


def test_every_near_miss_of_one_mapping_is_named() -> None:
    with pytest.raises(ValidationError) as caught:
        BenchmarkSpec.model_validate({"name": "b", "descripton": "d", "user_modle": {"model": "m"}})
    message = str(caught.value)
    assert "did you mean `description`?" in message and "did you mean `user_model`?" in message


def test_at_most_twenty_problems_are_shown_then_counted() -> None:
    error = InputError("f.json", "first", row=3, field="a", also=[(f"k{i}", "bad") for i in range(30)])
    lines = str(error).splitlines()
    assert lines[0] == "31 problems:" and lines[1] == "f.json:3, field 'a': first"
    assert len(lines) == 1 + 20 + 1 and lines[-1] == "and 11 more"


@pytest.mark.parametrize(("text", "words"), [
    ("name: x: y\n", "line 1, column 8: a ':' where a value goes"),
    ("name: x\n\tdescription: y\n", "line 2, column 1: a character that cannot start a value here (a tab"),
    ('name: "abc\n', "the file ends inside a quoted text"),
    ("metrics:\n  - id: m01\n   name: y\n", "line 3, column 4: a line indented differently"),
])
def test_yaml_syntax_errors_in_our_words_with_line_and_column(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_yaml(text, tmp_path / "benchmark.yaml")
    assert f"invalid YAML at {words}" in str(caught.value) or words in str(caught.value)
    assert "expected <block end>" not in str(caught.value) and "mapping values" not in str(caught.value)


def test_an_endpoint_address_names_scheme_host_and_port_never_credentials() -> None:
    from pytest_evalbench.llm.types import Endpoint

    assert Endpoint(model="m", base_url="http://user:secret@10.0.0.5/v1").address == "http://10.0.0.5:80"
    assert Endpoint(model="m", base_url="https://h.example:8443/x").address == "https://h.example:8443"
    assert Endpoint(model="m", base_url=None).address == "https://api.openai.com:443"


def test_every_bad_row_of_a_data_file_is_shown_at_once(tmp_path: Path) -> None:
    bench = tmp_path / "b"
    bench.mkdir()
    (bench / "benchmark.yaml").write_text(
        "name: b\ndescription: d\ngeneration: {turns: 2}\nmetrics:\n"
        "  - {id: m01, name: n, type: positive, definition: d, examples: []}\n")
    good = {"id": "m01_s001_v01", "metric_id": "m01", "persona": "p", "user_goal": "g",
            "latent_adversarial_goal": "h", "landmarks": [{"turn": 1, "instruction": "i"}]}
    rows = [good, {**good, "id": "m01_s002_v01", "metric_id": "m09"},
            {**good, "id": "m01_s003_v01", "landmarks": [{"turn": 5, "instruction": "i"}]}]
    (bench / "scenarios.json").write_text(json.dumps(rows))
    with pytest.raises(InputError) as caught:
        load_scenarios(bench, load_spec(bench))
    lines = str(caught.value).splitlines()
    assert lines[0] == "2 problems:"
    assert "row 2 (id m01_s002_v01), field 'metric_id': unknown metric id 'm09'" in lines[1]
    assert "row 3 (id m01_s003_v01), field 'landmarks.1.turn': landmark turn 5 is beyond" in lines[2]


def test_every_bad_line_of_a_dataset_is_shown_at_once(tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text('{"case_id": "c1"}\nnot json\n{"case_id": "c3", "agent_name": 5}\n')
    with pytest.raises(DatasetError) as caught:
        load_cases(path)
    text = str(caught.value)
    assert text.splitlines()[0].endswith("problems:")
    assert f"{path}:1: " in text and f"{path}:2: " in text and f"{path}:3: " in text
