"""Trajectory checks: every mode and argument matcher, repeated calls, calls out of order, and the
failure message that says what differed."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_evalbench.base.errors import ConfigError
from pytest_evalbench.formats.checks import CheckRule, Trajectory
from pytest_evalbench.formats.results import Message, ToolCall
from pytest_evalbench.formats.spec import Metric
from pytest_evalbench.kinds.metric_judge import decide
from pytest_evalbench.kinds.trajectory import match_trajectory, matcher_problem


def call(tool: str, **arguments: Any) -> ToolCall:
    return ToolCall(tool=tool, arguments=arguments)


LOOKUP = call("lookup_order", order_id="A1001")
REFUND = call("refund", order_id="A1001", amount=20)
FAQ = call("search_faq", q="returns")


def check(mode: str, expected: list[ToolCall], made: list[ToolCall], named: dict[str, Any] | None = None,
          **options: Any) -> tuple[bool, str]:
    result = match_trajectory(Trajectory(mode=mode, calls=expected, **options), made, named or {})
    return result.ok, result.summary


@pytest.mark.parametrize(("mode", "made", "ok"), [
    ("strict", [LOOKUP, REFUND], True),
    ("strict", [REFUND, LOOKUP], False),          # out of order
    ("strict", [LOOKUP], False),                  # one missing
    ("strict", [LOOKUP, REFUND, FAQ], False),     # one extra
    ("unordered", [REFUND, LOOKUP], True),
    ("unordered", [LOOKUP], False),
    ("unordered", [LOOKUP, REFUND, FAQ], False),
    ("subset", [LOOKUP], True),                   # every call made was expected
    ("subset", [], True),
    ("subset", [LOOKUP, FAQ], False),
    ("superset", [FAQ, REFUND, LOOKUP], True),    # every expected call was made, in any order
    ("superset", [LOOKUP], False),
])
def test_each_mode(mode: str, made: list[ToolCall], ok: bool) -> None:
    assert check(mode, [LOOKUP, REFUND], made)[0] is ok


def test_repeated_calls_count_as_a_multiset() -> None:
    twice = [LOOKUP, LOOKUP]
    assert check("unordered", twice, [LOOKUP])[0] is False
    assert check("unordered", twice, [LOOKUP, LOOKUP])[0] is True
    assert check("superset", twice, [LOOKUP, FAQ])[0] is False
    assert check("subset", [LOOKUP], twice)[0] is False  # the second call was not expected
    assert check("strict", twice, [LOOKUP, LOOKUP])[0] is True


def test_unordered_pairing_does_not_depend_on_the_order_pairs_are_tried() -> None:
    """A greedy pairing would give the `ignore`d call to the first expected one and fail."""
    loose = call("lookup_order", order_id="anything")
    wants = [loose, LOOKUP]
    made = [LOOKUP, call("lookup_order", order_id="B2")]
    assert check("unordered", wants, made, per_tool={"lookup_order": "exact"})[0] is False
    assert check("unordered", wants, made, per_tool={"lookup_order": "ignore"})[0] is True
    pinned = [call("lookup_order"), LOOKUP]
    assert check("unordered", pinned, made, arguments="subset")[0] is True


def test_argument_matchers() -> None:
    made = [call("lookup_order", order_id="A1001", verbose=True)]
    assert check("strict", [LOOKUP], made)[0] is False                       # exact: an extra key differs
    assert check("strict", [LOOKUP], made, arguments="subset")[0] is True    # subset: the expected keys
    assert check("strict", [call("lookup_order", order_id="B2")], made, arguments="subset")[0] is False
    assert check("strict", [call("lookup_order")], made, arguments="ignore")[0] is True
    assert check("strict", [call("search_faq")], made, arguments="ignore")[0] is False  # the tool still counts
    assert check("strict", [LOOKUP], made, per_tool={"lookup_order": "subset"})[0] is True


def test_exact_compares_json_values() -> None:
    assert check("strict", [call("t", n=1)], [call("t", n=1.0)])[0] is True
    assert check("strict", [call("t", n=1)], [call("t", n=True)])[0] is False
    assert check("strict", [call("t", n="1")], [call("t", n=1)])[0] is False
    assert check("strict", [call("t", xs=[1, 2])], [call("t", xs=[2, 1])])[0] is False
    assert check("strict", [call("t", d={"a": 1})], [call("t", d={"a": 1, "b": 2})])[0] is False


def test_a_named_matcher_from_the_hook() -> None:
    def same_order(want: dict[str, Any], got: dict[str, Any]) -> bool:
        return str(got.get("order_id", "")).upper() == want["order_id"]

    named = {"same_order": same_order}
    made = [call("lookup_order", order_id="a1001", extra=1)]
    assert check("strict", [LOOKUP], made, named, per_tool={"lookup_order": "same_order"})[0] is True
    assert check("strict", [LOOKUP], [call("lookup_order", order_id="b")], named,
                 per_tool={"lookup_order": "same_order"})[0] is False


def test_a_named_matcher_that_is_missing_raises_or_answers_no_bool_is_a_config_error() -> None:
    trajectory = Trajectory(calls=[LOOKUP], arguments="fuzzy")
    assert "unknown argument matcher 'fuzzy'" in (matcher_problem(trajectory, {}) or "")
    assert matcher_problem(trajectory, {"fuzzy": lambda w, g: True}) is None
    with pytest.raises(ConfigError, match="unknown argument matcher 'fuzzy'"):
        match_trajectory(trajectory, [LOOKUP], {})

    def broken(want: dict[str, Any], got: dict[str, Any]) -> bool:
        raise KeyError("order_id")

    with pytest.raises(ConfigError, match=r"'fuzzy'.*raised KeyError"):
        match_trajectory(trajectory, [LOOKUP], {"fuzzy": broken})
    with pytest.raises(ConfigError, match="returned str; it must return True or False"):
        match_trajectory(trajectory, [LOOKUP], {"fuzzy": lambda w, g: "yes"})


def test_a_failure_says_what_differed() -> None:
    ok, text = check("strict", [LOOKUP, REFUND], [FAQ, REFUND])
    assert not ok
    assert text.startswith("trajectory strict: call 1: expected lookup_order(order_id='A1001'), "
                           "got search_faq(q='returns')")
    assert "made: search_faq(q='returns'), refund(order_id='A1001', amount=20)" in text
    _, text = check("strict", [LOOKUP], [call("lookup_order", order_id="B7")])
    assert "(arguments differ: order_id)" in text
    _, text = check("strict", [LOOKUP, REFUND], [LOOKUP])
    assert "call 2: expected refund(order_id='A1001', amount=20), got no call 2 (1 made, 2 expected)" in text
    _, text = check("unordered", [LOOKUP, REFUND], [REFUND, FAQ])
    assert "expected but not made: lookup_order(order_id='A1001')" in text
    assert "made but not expected: search_faq(q='returns')" in text
    _, text = check("superset", [LOOKUP], [FAQ])
    assert "made but not expected" not in text  # superset allows more calls
    ok, text = check("subset", [LOOKUP, REFUND], [LOOKUP])
    assert ok and text == "trajectory subset: holds (1 call made, 2 expected)"


def test_a_message_is_bounded() -> None:
    made = [call("t", blob="x" * 10_000) for _ in range(50)]
    _, text = check("strict", [], made)
    assert len(text) < 4_000
    assert "and 40 more" in text


def test_a_scenario_check_rule_decides_and_explains() -> None:
    rule = {"trajectory": {"mode": "strict", "calls": [{"tool": "lookup_order", "arguments": {"order_id": "A1001"}}]},
            "then": "present"}
    metric = Metric(id="m01", name="Looks up", type="positive", definition="Looks up the order first.",
                    checks={"rules": [rule], "otherwise": "absent"})
    good = [Message(role="user", content="where is A1001?"),
            Message(role="assistant", content="on its way", tool_calls=[LOOKUP])]
    bad = [good[0], Message(role="assistant", content="see the FAQ", tool_calls=[FAQ])]
    decision = decide(metric, good)
    assert decision is not None and decision.present is True
    assert "check 1 (trajectory strict of 1 call) holds" in decision.justification
    decision = decide(metric, bad)
    assert decision is not None and decision.present is False
    assert ("check 1 does not hold: trajectory strict: call 1: expected lookup_order(order_id='A1001'), "
            "got search_faq(q='returns')") in decision.justification


def test_a_trajectory_rule_needs_calls() -> None:
    with pytest.raises(ValueError, match="needs `calls`"):
        CheckRule.model_validate({"trajectory": {"mode": "strict"}, "then": "present"})


def test_what_a_trajectory_check_found_is_carried_typed_not_read_back_from_text() -> None:
    """The decision carries what the trajectory rules that did not hold found; the failure's first line
    repeats that field, never a phrase of the justification that only looks like it (a contains rule
    quoting trajectory words)."""
    from dataclasses import replace

    from pytest_evalbench.kinds.scenarios.kind import failure_message
    from tests.unit.test_records import scenario_record

    lookup = {"trajectory": {"mode": "strict", "calls": [{"tool": "lookup_order", "arguments": {"order_id": "A1001"}}]},
              "then": "present"}
    faq = {"trajectory": {"mode": "subset", "calls": [{"tool": "refund"}]}, "then": "present"}
    metric = Metric(id="m01", name="Looks up", type="positive", definition="Looks up the order first.",
                    checks={"rules": [lookup, faq], "otherwise": "absent"})
    bad = [Message(role="user", content="where is A1001?"),
           Message(role="assistant", content="see the FAQ", tool_calls=[FAQ])]
    decision = decide(metric, bad)
    assert decision is not None and decision.present is False
    assert decision.differed == ("trajectory strict: call 1: expected lookup_order(order_id='A1001'), got "
                                 "search_faq(q='returns'); made: search_faq(q='returns'); check 2 does not hold: "
                                 "trajectory subset: made but not expected: search_faq(q='returns'); made: "
                                 "search_faq(q='returns')")
    assert decision.justification.endswith(decision.differed)
    held = decide(metric, [bad[0], Message(role="assistant", content="ok", tool_calls=[LOOKUP])])
    assert held is not None and held.differed is None

    record = scenario_record("m01_s001_v01")
    record.score.present, record.score.decided_by = False, "check"
    record.score.justification = "check 1 (contains 'trajectory strict: call 9') holds: behaviour absent"
    assert failure_message(record).splitlines()[0] == "m01 'Asks' (positive): behaviour absent, expected present"
    found = replace(record, trajectory_detail="trajectory strict: call 1: expected a(), got b()")
    assert failure_message(found).splitlines()[0].endswith("; trajectory strict: call 1: expected a(), got b()")
    assert type(found).from_json(found.to_json()) == found
    assert "trajectory_detail" not in record.to_json()
