"""Deterministic ToolCallAccuracy check: did the agent call the expected tools with the expected
arguments? Reported beside the judge's score (it does not replace it).

Matching: an expected call and an invoked call *fit* when the tool names are equal and every
expected argument is present in the invoked call with an equal value (extra invoked arguments
are allowed). Expected calls are paired with invoked ones by a maximum bipartite matching, so the
report counts the most pairs any assignment can make (a greedy pass can pair `s(q=y)` with the
wrong expected call and report 0 of 2 where 1 of 2 is right). Expected calls left over are then
paired, by tool name, with invoked calls left over and reported as argument mismatches; the rest
are missing.

Type policy of `values_equal` (JSON values):
- strings: equal after trimming and case-folding;
- numbers: equal by value across int and float (JSON has one number type: 1 == 1.0);
- booleans are not numbers: True never equals 1, False never equals 0;
- null equals only null; objects: same keys, values equal by this policy;
- lists: compared WITHOUT order (as multisets) - tool arguments that are lists are in practice sets
  of ids, filters, tags or keywords - except for arguments named in `ORDERED_ARGUMENTS`
  (steps, sequences, paths, rankings, messages), whose order carries meaning and is compared.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

ORDERED_ARGUMENTS = frozenset({"steps", "sequence", "order", "path", "route", "ranking", "messages", "history"})
"""Argument names whose list value is compared in order (every other list is compared without order)."""


class ToolCheck(BaseModel):
    matched: int
    expected: int
    missing: list[str]
    unexpected: list[str]
    argument_mismatches: list[str]
    ok: bool
    summary: str


def _as_dict(call: Any) -> dict[str, Any]:
    return call.model_dump() if hasattr(call, "model_dump") else dict(call)


def values_equal(want: Any, got: Any, *, ordered: bool = False) -> bool:
    """Equality under the documented type policy (see the module docstring)."""
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(want, bool) and isinstance(got, bool) and want == got
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return float(want) == float(got)
    if isinstance(want, str) and isinstance(got, str):
        return want.strip().casefold() == got.strip().casefold()
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(values_equal(v, got[k], ordered=k in ORDERED_ARGUMENTS)
                                                 for k, v in want.items())
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return False
        if ordered:
            return all(values_equal(w, g) for w, g in zip(want, got))
        return _max_matching([[values_equal(w, g) for g in got] for w in want])[0] == len(want)
    return want is None and got is None


def _fits(want: dict[str, Any], got: dict[str, Any]) -> bool:
    args = got.get("arguments") or {}
    return want.get("tool") == got.get("tool") and all(
        k in args and values_equal(v, args[k], ordered=k in ORDERED_ARGUMENTS)
        for k, v in (want.get("arguments") or {}).items())


def _max_matching(fits: list[list[bool]]) -> tuple[int, dict[int, int]]:
    """Maximum bipartite matching (augmenting paths): rows -> columns where fits[row][col]."""
    owner: dict[int, int] = {}  # column -> row

    def augment(row: int, seen: set[int]) -> bool:
        for col, ok in enumerate(fits[row]):
            if ok and col not in seen:
                seen.add(col)
                if col not in owner or augment(owner[col], seen):
                    owner[col] = row
                    return True
        return False

    size = sum(1 for row in range(len(fits)) if augment(row, set()))
    return size, {row: col for col, row in owner.items()}


def check_tool_calls(expected: list[Any], invoked: list[Any]) -> ToolCheck:
    """Pair expected calls with invoked ones (most pairs possible), then report what is left."""
    wants = [_as_dict(c) for c in expected]
    gots = [_as_dict(c) for c in invoked]
    matched, pairs = _max_matching([[_fits(w, g) for g in gots] for w in wants])
    free = [i for i in range(len(gots)) if i not in pairs.values()]
    missing, mismatches = [], []
    for i, want in enumerate(wants):
        if i in pairs:
            continue
        same_tool = next((j for j in free if gots[j].get("tool") == want["tool"]), None)
        if same_tool is None:
            missing.append(want["tool"])
            continue
        free.remove(same_tool)
        args = gots[same_tool].get("arguments") or {}
        diff = sorted(k for k, v in (want.get("arguments") or {}).items()
                      if k not in args or not values_equal(v, args[k], ordered=k in ORDERED_ARGUMENTS))
        mismatches.append(f"{want['tool']}({', '.join(diff)})")
    unexpected = [gots[j].get("tool", "?") for j in free]
    ok = not missing and not mismatches
    parts = [f"{matched}/{len(expected)} expected calls matched"]
    if missing:
        parts.append("missing " + ", ".join(missing))
    if mismatches:
        parts.append("argument mismatch " + ", ".join(mismatches))
    if unexpected:
        parts.append("also called " + ", ".join(unexpected))
    return ToolCheck(matched=matched, expected=len(expected), missing=missing, unexpected=unexpected,
                     argument_mismatches=mismatches, ok=ok, summary="; ".join(parts))
