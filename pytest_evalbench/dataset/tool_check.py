"""Deterministic ToolCallAccuracy check: did the agent call the expected tools with the expected
arguments? Reported beside the judge's score (it does not replace it)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


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


def _norm(value: Any) -> Any:
    return value.strip().casefold() if isinstance(value, str) else value


def check_tool_calls(expected: list[Any], invoked: list[Any]) -> ToolCheck:
    """Match expected calls to invoked ones by tool name (order-insensitive), then compare arguments:
    every expected argument must be present with an equal value (strings compared trimmed and
    case-folded); extra invoked arguments are allowed."""
    pool = [_as_dict(c) for c in invoked]
    missing, mismatches = [], []
    matched = 0
    for want in (_as_dict(c) for c in expected):
        candidates = [c for c in pool if c.get("tool") == want["tool"]]
        if not candidates:
            missing.append(want["tool"])
            continue
        args = want.get("arguments") or {}

        def fits(call: dict[str, Any]) -> bool:
            got = call.get("arguments") or {}
            return all(k in got and _norm(got[k]) == _norm(v) for k, v in args.items())

        exact = next((c for c in candidates if fits(c)), None)
        if exact is None:
            got = candidates[0].get("arguments") or {}
            diff = sorted(k for k, v in args.items() if k not in got or _norm(got[k]) != _norm(v))
            mismatches.append(f"{want['tool']}({', '.join(diff)})")
            pool.remove(candidates[0])
        else:
            matched += 1
            pool.remove(exact)
    unexpected = [c.get("tool", "?") for c in pool]
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
