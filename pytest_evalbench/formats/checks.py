"""A metric's deterministic checks in benchmark.yaml: rules over the assistant's turns (regex, text,
tools called, valid JSON, an expected trajectory of tool calls) tried before the judge."""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal, Optional

from pydantic import Field, model_validator

from pytest_evalbench.formats import MAX_ID_LENGTH, Input, OneLine, PlainText
from pytest_evalbench.formats.results import ToolCall

CONDITIONS = ("regex", "contains", "not_contains", "tool_called", "tool_not_called", "valid_json", "trajectory")
ARGUMENT_MATCHERS = ("exact", "ignore", "subset")
"""Built-in argument matchers; any other name is a callable from `pytest_evalbench_argument_matchers`."""


class Trajectory(Input):
    """Tool calls expected of the target, compared with the calls it made (`kinds/trajectory.py`)."""

    mode: Literal["strict", "unordered", "subset", "superset"] = "strict"
    """strict: the same calls in the same order; unordered: the same calls in any order; subset:
    every call made was expected; superset: every expected call was made."""
    calls: Optional[list[ToolCall]] = None
    """The expected calls (dataset cases default to their `expected_tool_calls`)."""
    arguments: Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH)] = "exact"
    """How arguments are compared: exact, ignore, subset (the expected keys, equal; more are allowed),
    or the name of a callable from the `pytest_evalbench_argument_matchers` hook."""
    per_tool: dict[str, Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH)]] = Field(default_factory=dict)
    """Tool name -> its argument matcher, overriding `arguments`."""

    def matchers(self) -> set[str]:
        """Every argument matcher named (built-in or not)."""
        return {self.arguments, *self.per_tool.values()}


@functools.lru_cache(maxsize=256)
def check_regex(pattern: str) -> Any:
    """A user's pattern compiled by RE2, which matches in time linear in the text (Python's `re`
    backtracks: `(a|aa)+$` against 60 "a" and "!" would never end). ValueError for a pattern RE2
    cannot run (backreferences such as \\1, lookaround such as (?=...)), naming what it refused."""
    import re2  # its C++ library loads only for benchmarks with a regex

    options = re2.Options()
    options.log_errors = False  # the error is raised, not also logged to stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(f"regex {pattern[:200]!r} is not supported: {reason} (checks use RE2 syntax, which runs "
                         "in linear time: no backreferences or lookaround)") from None


class CheckRule(Input):
    """One deterministic rule over the assistant's turns: when its single condition holds, it decides
    the verdict (`then`) without asking the judge."""

    regex: Optional[OneLine] = None
    """Holds when some assistant turn matches (searched with RE2, in time linear in the text: no
    backreferences or lookaround; add (?i) for case-insensitive)."""
    contains: Optional[PlainText] = None
    """Holds when some assistant turn contains the text (case-insensitive)."""
    not_contains: Optional[PlainText] = None
    """Holds when no assistant turn contains the text (case-insensitive)."""
    tool_called: Optional[OneLine] = None
    """Holds when the assistant called this tool."""
    tool_not_called: Optional[OneLine] = None
    """Holds when the assistant never called this tool."""
    valid_json: Optional[bool] = None
    """true: holds when every assistant reply is valid JSON; false: when some reply is not."""
    trajectory: Optional[Trajectory] = None
    """Holds when the tool calls of the assistant's turns match the expected calls by its mode."""
    then: Literal["present", "absent"]

    @model_validator(mode="after")
    def _one_condition(self) -> CheckRule:
        given = [name for name in CONDITIONS if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"a check rule needs exactly one of {', '.join(CONDITIONS)} (got "
                             f"{', '.join(given) or 'none'})")
        if self.regex is not None:
            check_regex(self.regex)
        if self.trajectory is not None and self.trajectory.calls is None:
            raise ValueError("a trajectory check needs `calls`: the tool calls expected")
        return self

    @property
    def condition(self) -> str:
        name = next(n for n in CONDITIONS if getattr(self, n) is not None)
        if self.trajectory is not None:
            count = len(self.trajectory.calls or [])
            return f"trajectory {self.trajectory.mode} of {count} call{'s' if count != 1 else ''}"
        return f"{name}: {getattr(self, name)!r}"


class MetricChecks(Input):
    """Deterministic checks of a metric: the first rule that holds decides; when none holds,
    `otherwise` decides (`judge`: ask the judge; `present`/`absent`: the checks alone decide)."""

    rules: list[CheckRule] = Field(min_length=1)
    otherwise: Literal["judge", "present", "absent"] = "judge"
