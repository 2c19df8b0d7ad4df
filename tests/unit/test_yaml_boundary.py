"""benchmark.yaml as a hostile pull request would write it: deep brackets cost no more than their
text, a syntax error is named with its file and line whatever else is wrong, and every key given
twice is named with its line (PyYAML keeps the last value silently)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pytest_evalbench.base.errors import InputError
from pytest_evalbench.base.inputs import parse_yaml
from pytest_evalbench.formats.spec import load_spec

SPEC = Path("benchmark.yaml")

VALID = """name: demo
targets:
  - id: tgt
    model: target-model
judge:
  model: judge-model
metrics:
  - id: m01
    definition: The reply is kind.
    threshold: 0.8
"""


def problem(text: str) -> str:
    with pytest.raises(InputError) as info:
        parse_yaml(text, SPEC)
    return str(info.value)


@pytest.mark.parametrize("opening", ["[", "{a: "], ids=["lists", "mappings"])
def test_deep_brackets_are_refused_at_the_first_too_deep_one(opening: str) -> None:
    # PyYAML's scanner works in proportion to the open brackets at every token: 20,000 of them took
    # seconds before the depth check could refuse them
    closing = "]" if opening == "[" else "}"
    text = "name: demo\ndescription: " + opening * 20_000 + "1" + closing * 20_000 + "\n"
    started = time.perf_counter()
    shown = problem(text)
    elapsed = time.perf_counter() - started
    assert shown == "benchmark.yaml:2: nested deeper than 64 levels"
    assert elapsed < 2, elapsed  # milliseconds; half a minute when every bracket was scanned


def test_brackets_just_within_the_depth_limit_are_read() -> None:
    # the scanner's bound refuses nothing the node check would accept: 63 levels below `a` are read
    value = parse_yaml("a: " + "[" * 63 + "]" * 63 + "\n", SPEC)["a"]
    depth = 0
    while value:
        value, depth = value[0], depth + 1
    assert value == [] and depth == 62
    assert "nested deeper than 64 levels" in problem("a: " + "[" * 64 + "]" * 64 + "\n")


def test_every_duplicate_key_is_named_with_its_line() -> None:
    text = VALID.replace("    threshold: 0.8\n", "    threshold: 0.8\n    threshold: 0.2\n") + "name: other\n"
    shown = problem(text)
    lines = shown.splitlines()
    assert lines[0] == "2 problems:"
    assert lines[1] == ("benchmark.yaml:11, field 'metrics.1.threshold': duplicate key 'threshold' (first on line "
                        "10; YAML would keep only the last value silently)")
    assert lines[2].startswith("benchmark.yaml:12, field 'name': duplicate key 'name' (first on line 1;")


def test_a_key_given_three_times_is_named_at_each_repeat() -> None:
    shown = problem("a: 1\na: 2\na: 3\n")
    assert "benchmark.yaml:2, field 'a': duplicate key 'a' (first on line 1;" in shown
    assert "benchmark.yaml:3, field 'a': duplicate key 'a' (first on line 1;" in shown


def test_a_syntax_error_is_named_with_file_and_line_whatever_else_is_wrong(tmp_path: Path) -> None:
    # a duplicate key, a schema mistake (threshold 7) and a list on line 12 that is not closed: parsing
    # stops at the syntax error, which is the one line shown, with where the list begins
    text = VALID.replace("0.8", "7") + "name: again\nmetrics_extra: [1, 2\nmore: x\n"
    (tmp_path / "benchmark.yaml").write_text(text)
    with pytest.raises(InputError) as info:
        load_spec(tmp_path)
    shown = str(info.value)
    assert shown == (f"{tmp_path / 'benchmark.yaml'}:13: invalid YAML at line 13, column 5: a [list] that is not "
                     "closed with ']' (or a missing ',') (what is not closed begins at line 12)")
    assert "\n" not in shown and "Traceback" not in shown


def test_duplicates_and_a_schema_mistake_name_the_duplicates(tmp_path: Path) -> None:
    # duplicate keys are found before the schema is checked: a file with both names its duplicates
    (tmp_path / "benchmark.yaml").write_text(VALID.replace("0.8", "7") + "judge:\n  model: other\n")
    with pytest.raises(InputError) as info:
        load_spec(tmp_path)
    assert f"{tmp_path / 'benchmark.yaml'}:11, field 'judge': duplicate key 'judge' (first on line 5;" in str(info.value)
