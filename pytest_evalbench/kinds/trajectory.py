"""Trajectory checks: the tool calls a target made, compared with the calls expected, without a judge.

Both kinds use it: a scenario metric's `trajectory` check rule (over the tool calls of every assistant
turn, in order) and a dataset case's `expected_trajectory` (over its invoked calls). The modes are
openevals' (agentevals `trajectory/match.py`):

- `strict`: the same calls in the same order;
- `unordered`: the same calls in any order (as multisets: a call made twice must be expected twice);
- `subset`: every call made was expected (the target may leave expected calls out);
- `superset`: every expected call was made (the target may make more).

An expected call and a made call fit when the tool names are equal and the tool's argument matcher
accepts the arguments: `exact` (the same keys, JSON-equal values: 1 == 1.0, true is not 1, strings
compared as they are, lists in order), `subset` (every expected key present with a JSON-equal value;
more keys are allowed), `ignore` (any arguments), or a callable the `pytest_evalbench_argument_matchers`
hook names, called as `matcher(expected_arguments, made_arguments) -> bool`. Unordered modes pair the
calls by a maximum bipartite matching, so the judgment never depends on the order pairs are tried in.

A result that does not hold says what differed, in one line every surface shows:
`trajectory strict: call 1: expected lookup_order(order_id='A1001'), got search_faq(query='...'); made: ...`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_evalbench.base.errors import ConfigError, UnusableAnswer
from pytest_evalbench.base.safe_text import cut
from pytest_evalbench.formats.checks import ARGUMENT_MATCHERS, Trajectory
from pytest_evalbench.formats.results import ToolCall

ArgumentMatcher = Callable[[dict[str, Any], dict[str, Any]], Any]
"""A named argument matcher: `matcher(expected_arguments, made_arguments)`, true when they fit."""
SHOWN_CALLS = 10
"""How many calls a message lists before `and N more`."""
VALUE_CHARS = 60
CALL_CHARS = 240


@dataclass(frozen=True)
class TrajectoryResult:
    """One trajectory check: whether it holds, and in words what matched or what differed."""

    ok: bool
    mode: str
    summary: str

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "mode": self.mode, "summary": self.summary}


def json_equal(want: Any, got: Any) -> bool:
    """Equality of two JSON values: numbers by value across int and float, booleans apart from
    numbers, objects by keys and values, lists in order."""
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(want, bool) and isinstance(got, bool) and want == got
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return float(want) == float(got)
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(json_equal(v, got[k]) for k, v in want.items())
    if isinstance(want, list) and isinstance(got, list):
        return len(want) == len(got) and all(json_equal(w, g) for w, g in zip(want, got))
    return type(want) is type(got) and want == got


def unknown_matchers(trajectory: Trajectory, named: Mapping[str, ArgumentMatcher]) -> list[str]:
    """The matchers the trajectory names that are neither built in nor supplied by the hook."""
    return sorted(m for m in trajectory.matchers() if m not in ARGUMENT_MATCHERS and m not in named)


def matcher_problem(trajectory: Trajectory, named: Mapping[str, ArgumentMatcher]) -> str | None:
    """Why a trajectory cannot be checked (an argument matcher nobody supplies), or None."""
    missing = unknown_matchers(trajectory, named)
    if not missing:
        return None
    supplied = ", ".join(sorted(named)) or "none"
    return (f"unknown argument matcher{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}: built in are "
            f"{', '.join(ARGUMENT_MATCHERS)}; the pytest_evalbench_argument_matchers hook supplies {supplied}")


class _Fit:
    """Whether an expected call fits a made one, under the trajectory's argument matchers."""

    def __init__(self, trajectory: Trajectory, named: Mapping[str, ArgumentMatcher]) -> None:
        self.trajectory = trajectory
        self.named = named

    def __call__(self, want: ToolCall, got: ToolCall) -> bool:
        if want.tool != got.tool:
            return False
        name = self.trajectory.per_tool.get(want.tool, self.trajectory.arguments)
        if name == "ignore":
            return True
        if name == "exact":
            return json_equal(want.arguments, got.arguments)
        if name == "subset":
            return all(k in got.arguments and json_equal(v, got.arguments[k]) for k, v in want.arguments.items())
        matcher = self.named.get(name)
        if matcher is None:
            raise ConfigError(matcher_problem(self.trajectory, self.named) or f"unknown argument matcher {name!r}")
        try:
            matched = matcher(dict(want.arguments), dict(got.arguments))
        except Exception as exc:
            raise ConfigError(f"argument matcher {name!r} (pytest_evalbench_argument_matchers) raised "
                              f"{type(exc).__name__}: {cut(str(exc), 200)}") from None
        if not isinstance(matched, bool):
            raise ConfigError(f"argument matcher {name!r} (pytest_evalbench_argument_matchers) returned "
                              f"{type(matched).__name__}; it must return True or False")
        return matched

    def differing(self, want: ToolCall, got: ToolCall) -> list[str]:
        """The expected argument names whose values the made call does not match (same tool)."""
        keys = sorted(set(want.arguments) | (set(got.arguments) if self.trajectory.per_tool.get(
            want.tool, self.trajectory.arguments) == "exact" else set()))
        return [k for k in keys if k not in want.arguments or k not in got.arguments
                or not json_equal(want.arguments[k], got.arguments[k])]


def describe(call: ToolCall) -> str:
    """`lookup_order(order_id='A1001')`: the call in one bounded line, arguments as JSON values."""
    args = ", ".join(f"{_name(k)}={_value(v)}" for k, v in call.arguments.items())
    return cut(f"{_name(call.tool)}({args})", CALL_CHARS)


def _name(name: str) -> str:
    """A tool or argument name as written, or quoted with its escapes where it holds a line break or
    another character that does not print."""
    return name if name.isprintable() else repr(name)


def _value(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return cut(text, VALUE_CHARS)


def listed(calls: Sequence[ToolCall]) -> str:
    """The calls in one line (`(none)` when there are none), at most `SHOWN_CALLS` of them."""
    if not calls:
        return "(none)"
    shown = ", ".join(describe(c) for c in calls[:SHOWN_CALLS])
    return shown + (f" and {len(calls) - SHOWN_CALLS} more" if len(calls) > SHOWN_CALLS else "")


def max_matching(fits: list[list[bool]]) -> tuple[int, dict[int, int]]:
    """Maximum bipartite matching, rows -> columns where fits[row][col] (Hopcroft-Karp, without
    recursion: O(E sqrt(V)), and a greedy first pass pairs identical calls at once)."""
    edges = [[col for col, ok in enumerate(row) if ok] for row in fits]
    match_row: dict[int, int] = {}  # row -> col
    match_col: dict[int, int] = {}  # col -> row
    for row, cols in enumerate(edges):
        col = next((c for c in cols if c not in match_col), None)
        if col is not None:
            match_row[row], match_col[col] = col, row
    while True:
        layer = _layers(edges, match_row, match_col)
        if layer is None:
            break
        tried: dict[int, int] = {}
        for row in range(len(edges)):
            if row not in match_row:
                _augment(row, edges, layer, tried, match_row, match_col)
    return len(match_row), dict(match_row)


def _layers(edges: list[list[int]], match_row: dict[int, int], match_col: dict[int, int]) -> dict[int, int] | None:
    """Breadth-first layers of rows from the free rows along alternating paths; None when no free
    column is reachable (the matching is maximum)."""
    layer = {row: 0 for row in range(len(edges)) if row not in match_row}
    queue, found = list(layer), False
    for row in queue:
        for col in edges[row]:
            owner = match_col.get(col)
            if owner is None:
                found = True
            elif owner not in layer:
                layer[owner] = layer[row] + 1
                queue.append(owner)
    return layer if found else None


def _augment(start: int, edges: list[list[int]], layer: dict[int, int], tried: dict[int, int],
             match_row: dict[int, int], match_col: dict[int, int]) -> None:
    """One augmenting path from a free row along the layers, by an explicit stack (no recursion,
    however many calls); `tried` keeps each row's next edge for the phase, and a row that leads
    nowhere leaves the layers, so a phase tries every edge at most once."""
    stack, via = [start], list[int]()  # the path's rows, and the column that left each row but the last
    while stack:
        row = stack[-1]
        index = tried.get(row, 0)
        if index == len(edges[row]):
            layer[row] = -1  # a dead end for this phase
            stack.pop()
            if via:
                via.pop()
            continue
        col = edges[row][index]
        tried[row] = index + 1
        owner = match_col.get(col)
        if owner is None:
            for r, c in zip(stack, [*via, col]):
                match_row[r], match_col[c] = c, r
            return
        if layer.get(owner, -1) == layer[row] + 1:
            via.append(col)
            stack.append(owner)


MAX_PAIRS = 4_000_000
"""Most (expected, made) pairs an unordered trajectory check compares: 2,000 calls on each side."""
MAX_DISTINCT_PAIRS = 250_000
"""Most pairs of different calls whose arguments an unordered check compares (identical calls are
compared once): the argument matchers' work stays bounded."""


def fit_matrix(wants: list[ToolCall], made: list[ToolCall], fit: Callable[[ToolCall, ToolCall], bool]
               ) -> list[list[bool]]:
    """fits[i][j]: expected call i fits made call j. Identical calls (tool and arguments) are
    compared once; past MAX_PAIRS or MAX_DISTINCT_PAIRS the check is refused in one line
    (UnusableAnswer: the row is not scored) rather than run for minutes."""
    want_ids, want_calls = _distinct(wants)
    made_ids, made_calls = _distinct(made)
    if len(wants) * len(made) > MAX_PAIRS or len(want_calls) * len(made_calls) > MAX_DISTINCT_PAIRS:
        raise UnusableAnswer(f"trajectory check not run: {len(made)} calls made and {len(wants)} expected are "
                             f"too many to pair (at most {MAX_PAIRS:,} pairs, {MAX_DISTINCT_PAIRS:,} of different "
                             "calls)")
    fits = [[fit(w, g) for g in made_calls] for w in want_calls]
    return [[fits[i][j] for j in made_ids] for i in want_ids]


def _distinct(calls: list[ToolCall]) -> tuple[list[int], list[ToolCall]]:
    """Each call's index among the distinct calls, and the distinct calls in first-seen order."""
    index: dict[str, int] = {}
    ids: list[int] = []
    distinct: list[ToolCall] = []
    for call in calls:
        key = json.dumps([call.tool, call.arguments], sort_keys=True, default=str)
        if key not in index:
            index[key] = len(distinct)
            distinct.append(call)
        ids.append(index[key])
    return ids, distinct


def match_trajectory(trajectory: Trajectory, made: Sequence[ToolCall], named: Mapping[str, ArgumentMatcher],
                     expected: Sequence[ToolCall] | None = None) -> TrajectoryResult:
    """Compare the calls made with the expected ones (`expected`, else the trajectory's `calls`) by the
    trajectory's mode. ConfigError when an argument matcher is unknown, raises or answers no bool."""
    wants = list(expected if expected is not None else trajectory.calls or [])
    fit = _Fit(trajectory, named)
    mode = trajectory.mode
    head = f"trajectory {mode}"
    if mode == "strict":
        problem = _strict_problem(wants, list(made), fit)
    else:
        pairs = max_matching(fit_matrix(wants, list(made), fit))[1]
        missing = [w for i, w in enumerate(wants) if i not in pairs]
        extra = [g for j, g in enumerate(made) if j not in pairs.values()]
        parts = []
        if missing and mode in ("unordered", "superset"):
            parts.append(f"expected but not made: {listed(missing)}")
        if extra and mode in ("unordered", "subset"):
            parts.append(f"made but not expected: {listed(extra)}")
        problem = "; ".join(parts) or None
    if problem is None:
        return TrajectoryResult(True, mode, f"{head}: holds ({len(made)} call{'s' if len(made) != 1 else ''} made, "
                                f"{len(wants)} expected)")
    return TrajectoryResult(False, mode, f"{head}: {problem}; made: {listed(made)}")


def _strict_problem(wants: list[ToolCall], made: list[ToolCall], fit: _Fit) -> str | None:
    """The first position where the calls made leave the expected sequence, in words; None when equal."""
    for index, (want, got) in enumerate(zip(wants, made), start=1):
        if not fit(want, got):
            detail = ""
            if want.tool == got.tool:
                differing = fit.differing(want, got)
                detail = f" (arguments differ: {', '.join(differing)})" if differing else " (arguments differ)"
            return f"call {index}: expected {describe(want)}, got {describe(got)}{detail}"
    if len(made) < len(wants):
        index = len(made) + 1
        return (f"call {index}: expected {describe(wants[len(made)])}, got no call {index} "
                f"({len(made)} made, {len(wants)} expected)")
    if len(made) > len(wants):
        index = len(wants) + 1
        return f"call {index}: got {describe(made[len(wants)])}, not expected ({len(made)} made, {len(wants)} expected)"
    return None
