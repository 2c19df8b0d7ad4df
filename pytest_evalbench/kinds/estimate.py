"""`--evalbench-estimate`: what a run would cost before it is run (no LLM call, no file written).

The kinds plan each selected item's calls from the benchmark's shape and the real prompt builders
(`BenchmarkKind.plan_calls`); this module counts tokens, refines the expected sizes from the
response cache's recorded usage (read only), prices the calls and estimates the wall time.

Token counting is a documented approximation: the characters of the JSON-encoded request messages
(and of an answer's text) divided by 4, rounded up (`CHARS_PER_TOKEN`); where the cache holds
answers recorded from the same model, input counts are scaled by the ratio the cache recorded
(real usage / this approximation). Every number it prints is an estimate, never a measurement.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_evalbench.base.errors import InputError
from pytest_evalbench.base.files import read_bounded
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.llm.cache import CorruptEntry, cache_key, completion_material
from pytest_evalbench.llm.costs import PriceTable, Tier, call_tier
from pytest_evalbench.llm.engine import Engine
from pytest_evalbench.llm.types import Endpoint, EngineSettings

if TYPE_CHECKING:
    from pytest_evalbench.kinds.run import BenchmarkRun

CHARS_PER_TOKEN = 4
"""The approximation: about four characters of English text (and of its JSON) per token."""
MAX_CACHE_SCAN = 5000
"""At most this many cache entries are read to learn answer sizes (a bounded look, not a full scan)."""
MAX_ENTRY_BYTES = 1 << 20
PREFIX = 60
"""Answers are grouped by model and the first characters of the request's system message (one
role's prompt: the simulated user, a target's system prompt, the judge, one Explain eval)."""
ASSUMED_SECONDS = 0.5
ASSUMED_TOKENS_PER_SECOND = 50.0
"""The latency assumed per call for the time estimate: 0.5 s plus the expected output at 50
tokens/s (an assumption, not measured; the limits given on the command line bound it too)."""


def approx_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def message_tokens(messages: Sequence[dict[str, Any]]) -> int:
    """The approximation over the request's messages as JSON (what the test suite's fake server counts too)."""
    return approx_tokens(json.dumps(list(messages)))


def filler(tokens: int) -> str:
    """Stand-in text of about `tokens` tokens for an answer not known before the run."""
    return "x" * (max(0, tokens) * CHARS_PER_TOKEN)


def _form(structured: bool) -> str:
    """The group of every answer of one model in one form (no system prompt starts with NUL)."""
    return "\0json" if structured else "\0text"


def _system_prefix(messages: Sequence[Any]) -> str:
    first = messages[0] if messages else None
    if isinstance(first, dict) and first.get("role") == "system" and isinstance(first.get("content"), str):
        return first["content"][:PREFIX]
    return ""


@dataclass
class _Seen:
    """Recorded answers of one (model, system prefix): their output tokens and texts."""

    output_tokens: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Expected:
    """An expected answer: its size in tokens, a stand-in text and where the size came from."""

    tokens: int
    text: str
    source: str
    """"cached" (this very request's recorded answer: the run replays it), "cache" (mean of the
    answers recorded for the role) or "max_tokens" (the role's limit: an upper bound)."""


class Expectations:
    """Expected answer sizes: the cache's recorded usage where it has answers of the same model and
    role prompt, else the role's `max_tokens` (an upper bound). The cache is only read."""

    def __init__(self, cache_dir: Path | None, engine: Engine | None = None, limit: int = MAX_CACHE_SCAN) -> None:
        self.engine = engine
        """Looks up requests known exactly (read only; None, or a cache mode that does not read: no lookup)."""
        self.seen: dict[tuple[str, str], _Seen] = {}
        self.ratio: dict[str, tuple[int, int]] = {}
        """model -> (recorded input tokens, approximated input tokens) over the entries read."""
        self.entries = 0
        if cache_dir is not None and cache_dir.is_dir():
            self._scan(cache_dir, limit)

    def _scan(self, cache_dir: Path, limit: int) -> None:
        for path in sorted(cache_dir.glob("??/*.json")):
            if self.entries >= limit:
                break
            try:
                if path.is_symlink():
                    continue
                entry = parse_json(read_bounded(path, MAX_ENTRY_BYTES).decode("utf-8"), path)
                body, response = entry["request"]["body"], entry["response"]
                model, messages = body["model"], body["messages"]
                out, given = int(response.get("output_tokens") or 0), int(response.get("input_tokens") or 0)
                text = response.get("content") or ""
            except (OSError, ValueError, KeyError, TypeError, AttributeError, InputError):
                continue  # a corrupt entry teaches nothing (the run itself names it)
            if not isinstance(model, str) or not isinstance(messages, list) or not isinstance(text, str) or out <= 0:
                continue
            self.entries += 1
            seen = self.seen.setdefault((model, _system_prefix(messages)), _Seen())
            seen.output_tokens.append(out)
            if len(seen.texts) < 50:
                seen.texts.append(text)
            self.seen.setdefault((model, _form("response_format" in body)), _Seen()).output_tokens.append(out)
            if given > 0:
                recorded, approx = self.ratio.get(model, (0, 0))
                self.ratio[model] = (recorded + given, approx + message_tokens(messages))

    def call(self, role: str, endpoint: Endpoint, messages: list[dict[str, Any]], *, sample: int,
             schema: tuple[str, dict[str, Any]] | None = None, possible: bool = False,
             top_logprobs: int = 0) -> PlannedCall:
        """The call as planned: replayed from the cache when this exact request is recorded there,
        else estimated from the messages and the expected answer."""
        recorded = self.recorded(endpoint, messages, sample, schema, top_logprobs)
        if recorded is not None:
            tokens, out, text = recorded
            return PlannedCall(role, endpoint, tokens, Expected(out, text, "cached"), possible, cached=True)
        tokens, scaled = self.input(endpoint, messages)
        return PlannedCall(role, endpoint, tokens, self.output(endpoint, messages, schema is not None), possible, scaled)

    def recorded(self, endpoint: Endpoint, messages: list[dict[str, Any]], sample: int,
                 schema: tuple[str, dict[str, Any]] | None, top_logprobs: int = 0) -> tuple[int, int, str] | None:
        """(input tokens, output tokens, text) the cache recorded for exactly this first attempt, if
        the run would replay it."""
        engine = self.engine
        if engine is None or not engine.cache.reads:
            return None
        body = engine.request_body(endpoint, messages, schema, None, top_logprobs)
        try:
            found = engine.cache.get(cache_key(completion_material(endpoint.identity, body, sample, 0)))
        except CorruptEntry:
            return None  # the run refetches it
        if found is None:
            return None
        text = found.get("content") if isinstance(found.get("content"), str) else ""
        return int(found.get("input_tokens") or 0), int(found.get("output_tokens") or 0), text or ""

    def output(self, endpoint: Endpoint, messages: Sequence[dict[str, Any]], structured: bool = False) -> Expected:
        """The mean of the answers recorded for this model and role prompt, else for this model's
        answers of the same form (JSON or free text), at most max_tokens; else max_tokens."""
        limit = int(endpoint.params.get("max_tokens") or 0)
        for key in (_system_prefix(messages), _form(structured)):
            seen = self.seen.get((endpoint.model, key))
            if seen is not None and seen.output_tokens:
                tokens = round(sum(seen.output_tokens) / len(seen.output_tokens))
                tokens = min(tokens, limit) if limit else tokens
                return Expected(tokens, filler(tokens), "cache")
        return Expected(limit, filler(limit), "max_tokens")

    def recorded_texts(self, endpoint: Endpoint, messages: Sequence[dict[str, Any]]) -> list[str]:
        """Answers the cache recorded for this model and role prompt (a sample), e.g. to learn how
        much of the simulated user's answer reaches the conversation."""
        seen = self.seen.get((endpoint.model, _system_prefix(messages)))
        return list(seen.texts) if seen else []

    def input(self, endpoint: Endpoint, messages: Sequence[dict[str, Any]]) -> tuple[int, bool]:
        """(input tokens, whether the cache's recorded ratio scaled them)."""
        approx = message_tokens(messages)
        recorded, counted = self.ratio.get(endpoint.model, (0, 0))
        if recorded and counted:
            return round(approx * recorded / counted), True
        return approx, False


@dataclass(frozen=True)
class PlannedCall:
    """One LLM call a selected item would make."""

    role: str
    """Who calls: `target ID`, `simulated user`, `judge`, `judge MODEL` (panels)."""
    endpoint: Endpoint
    input_tokens: int
    output: Expected
    possible: bool = False
    """True when a deterministic check may decide first (the call is counted: an upper bound)."""
    scaled: bool = False
    """The input count was scaled by the cache's recorded ratio."""
    cached: bool = False
    """The cache holds this exact request's answer: the run replays it (no request, no cost)."""


@dataclass
class Plan:
    """One item's calls, in order (a chain: each waits for the one before, except judge votes)."""

    calls: list[PlannedCall] = field(default_factory=list)
    chain: int = 0
    """Calls made one after the other (turns × 2 + one judge round)."""
    notes: list[str] = field(default_factory=list)
    """Things the estimate cannot see (an app target's own calls), once per kind of note."""


class HasRun(Protocol):
    """A kind, as its planner sees it: its run (benchmark, roles, targets)."""

    @property
    def run(self) -> BenchmarkRun: ...


def role_class(role: str) -> str:
    """The role a planned call's label belongs to, as `--evalbench-batch` names roles: "judge" (every
    judge of a panel), "target" or "user" (the simulated user)."""
    return "user" if role == "simulated user" else role.split(" ", 1)[0]


@dataclass
class RoleTotal:
    role: str
    model: str
    local: bool
    flex: bool = False
    """The role's calls ask for the flex service tier (priced at its rate)."""
    calls: int = 0
    possible: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    from_cache: int = 0
    scaled: int = 0
    cached: int = 0
    cached_input: int = 0
    cached_output: int = 0


@dataclass
class Estimate:
    """The plans of every selected item, summed per role."""

    items: int = 0
    roles: dict[tuple[str, str], RoleTotal] = field(default_factory=dict)
    seconds_sequential: float = 0.0
    longest_chain: float = 0.0
    notes: list[str] = field(default_factory=list)

    def add(self, plan: Plan) -> None:
        self.items += 1
        chain = 0.0
        for call in plan.calls:
            total = self.roles.setdefault((call.role, call.endpoint.model), RoleTotal(
                call.role, call.endpoint.model, call.endpoint.provider == "local",
                call_tier(call.endpoint) == "flex"))
            total.calls += 1
            total.possible += call.possible
            total.input_tokens += call.input_tokens
            total.output_tokens += call.output.tokens
            total.from_cache += call.output.source in ("cache", "cached")
            total.scaled += call.scaled
            if call.cached:
                total.cached += 1
                total.cached_input += call.input_tokens
                total.cached_output += call.output.tokens
                continue  # replayed: no wait
            seconds = latency(call.output.tokens)
            self.seconds_sequential += seconds
            chain += seconds
        # the item's calls one after the other: `chain` of them, each as long as their mean
        self.longest_chain = max(self.longest_chain, chain * plan.chain / max(1, len(plan.calls)))
        for note in plan.notes:
            if note not in self.notes:
                self.notes.append(note)

    @property
    def calls(self) -> int:
        return sum(t.calls for t in self.roles.values())

    @property
    def tokens(self) -> int:
        return sum(t.input_tokens + t.output_tokens for t in self.roles.values())


def latency(output_tokens: int) -> float:
    return ASSUMED_SECONDS + output_tokens / ASSUMED_TOKENS_PER_SECOND


def estimate(plans: Iterable[Plan]) -> Estimate:
    result = Estimate()
    for plan in plans:
        result.add(plan)
    return result


def wall_time(est: Estimate, settings: EngineSettings) -> tuple[float, str]:
    """(seconds, what bounds them): the largest of the concurrency bound (assumed latencies over
    `--evalbench-concurrency` slots), the longest item's chain, and the configured request and token
    rates (`--evalbench-rate-limit`, `--evalbench-token-limit`)."""
    bounds = [(est.seconds_sequential / max(1, settings.concurrency), f"concurrency {settings.concurrency}"),
              (est.longest_chain, "the longest item's chain of calls")]
    if settings.rate_limit:
        bounds.append((est.calls * 60.0 / settings.rate_limit, f"rate limit {settings.rate_limit:g} requests/min"))
    if settings.token_limit:
        bounds.append((est.tokens * 60.0 / settings.token_limit, f"token limit {settings.token_limit:g} tokens/min"))
    return max(bounds)


def render(est: Estimate, prices: PriceTable, settings: EngineSettings, cache_entries: int,
           batched: frozenset[str] = frozenset()) -> list[str]:
    """The terminal lines: per role calls, tokens and cost, then totals, time and what is assumed.
    Each role is priced at its tier: the batch rate for the role classes in `batched` ("judge",
    "target", "user": `--evalbench-batch`), the flex rate for a role asking for it, else standard."""
    possible = sum(t.possible for t in est.roles.values())
    cached = sum(t.cached for t in est.roles.values())
    lines = [f"estimate, not measured (no LLM call was made): {est.items} items, {est.calls} calls"
             + (f", {cached} of them replayed from the cache (no request, no cost)" if cached else "")
             + (f" (an upper bound: {possible} judge calls happen only if no deterministic check decides)"
                if possible else "")]
    header = ("role", "model", "calls", "input tokens", "output tokens", "cost")
    rows: list[tuple[str, ...]] = []
    cost_total, unpriced = 0.0, []
    for total in est.roles.values():
        sent_in, sent_out = total.input_tokens - total.cached_input, total.output_tokens - total.cached_output
        if total.local:
            cost = "$0 (local model)"
        elif total.cached == total.calls:
            cost = "$0 (all cached)"
        elif prices.known(total.model):
            tier: Tier = "batch" if role_class(total.role) in batched else "flex" if total.flex else "standard"
            value = prices.quote(total.model, sent_in, sent_out, tier=tier)
            cost_total += value
            cost = f"~${value:.4f}" + (f" ({tier})" if tier != "standard" else "")
        else:
            cost = "no price"
            unpriced.append(total.model)
        calls = (f"{total.calls}" + (f" ({total.cached} cached)" if total.cached else "")
                 + (f" (≤: {total.possible} only if judged)" if total.possible else ""))
        source = ("cached" if total.cached == total.calls else "cache" if total.from_cache == total.calls
                  else "max_tokens" if not total.from_cache else "cache/max_tokens")
        rows.append((total.role, total.model, calls, f"~{total.input_tokens}", f"~{total.output_tokens} ({source})",
                     cost))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    seconds, bound = wall_time(est, settings)
    names = ", ".join(sorted(set(unpriced)))
    priced = any(not t.local and t.model not in unpriced for t in est.roles.values())
    cost_text = (f"~${cost_total:.4f}" if not unpriced else
                 f"~${cost_total:.4f} for the priced models, plus" if priced else "unknown:")
    lines.append(f"total: ~{est.tokens} tokens, {cost_text}"
                 + (f" models without a price: {names} (not counted as $0; add them under `pricing:` in "
                    "benchmark.yaml)" if unpriced else ""))
    lines.append(f"time: ~{_duration(seconds)}, bound by {bound} (assumed {ASSUMED_SECONDS:g} s + "
                 f"{ASSUMED_TOKENS_PER_SECOND:g} output tokens/s per call)")
    lines.append(f"tokens: characters of the request messages / {CHARS_PER_TOKEN}"
                 + (" (scaled by the cache's recorded ratio where it has the model)"
                    if any(t.scaled for t in est.roles.values()) else "")
                 + "; output tokens: the answer the cache recorded for that very request (cached: its "
                   "recorded usage), else the mean of the answers it recorded for the role (cache), else the "
                   f"role's max_tokens (an upper bound); {cache_entries} cache entries read. Costs count the "
                   "calls that would be sent; re-asks of unusable answers are not counted")
    lines += est.notes
    return lines


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
