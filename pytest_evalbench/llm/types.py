"""Plain data passed between the engine, the cache and the transports."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from pytest_evalbench.base.numbers import is_cost, is_token_count
from pytest_evalbench.base.safe_text import strip_credentials

SURROGATE = re.compile("[\ud800-\udfff]")


def safe_text(text: str) -> str:
    """`text` with lone surrogates (a JSON `\\ud800` escape decodes to one) made U+FFFD: such a
    string cannot be written as UTF-8, so one in a model's answer crashed every file written after."""
    return SURROGATE.sub("\ufffd", text) if SURROGATE.search(text) else text


def safe_json(value: Any) -> Any:
    """A decoded JSON value with every string (keys too) passed through `safe_text`."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(k): safe_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [safe_json(v) for v in value]
    return value


@dataclass(frozen=True)
class Endpoint:
    """A resolved chat model: where to send requests and how to shape them.

    `api_key` and `headers` (resolved values, possibly secrets from the environment) are excluded
    from repr, comparison and cache keys; `identity` names the endpoint in cache keys without the
    random port of a local server. `missing_env` lists the environment variables the endpoint
    needs that are unset, `env_problems` those whose values cannot be sent (both checked once
    before the run, see `BenchmarkRun.preflight`).
    """

    model: str
    base_url: str | None
    provider: str = "openai"
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    api_key: str | None = field(default=None, repr=False, compare=False)
    key_source: str = "OPENAI_API_KEY"
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False, compare=False)
    missing_env: tuple[str, ...] = ()
    batch: bool = field(default=False, compare=False)
    """`batch: true` on the role: its calls go through the provider's Batch API (llm/batch.py)."""
    env_problems: tuple[str, ...] = ()
    """Environment values the endpoint would send that cannot be sent (a key with a line break,
    an OPENAI_BASE_URL without a scheme), in words that never quote a key or header value."""
    cache_prompt: bool = False
    """Mark each request's stable prefix for the provider's prompt cache (`llm/prompt_cache.py`)."""

    @cached_property
    def identity(self) -> str:
        """Names the endpoint in cache keys and entries: never with URL credentials."""
        if self.provider == "local":
            return "local:llama.cpp"
        return strip_credentials(self.base_url or "https://api.openai.com/v1").rstrip("/")

    @property
    def address(self) -> str:
        """`scheme://host:port` of the endpoint (its port spelled out, never credentials or a path):
        what a connection error names."""
        if self.provider == "local":
            return "the embedded model"
        parts = urlsplit(self.base_url or "https://api.openai.com/v1")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            port = None
        host = f"[{parts.hostname}]" if parts.hostname and ":" in parts.hostname else parts.hostname or "?"
        return f"{parts.scheme}://{host}" + (f":{port}" if port else "")

    def __repr__(self) -> str:
        base = strip_credentials(self.base_url) if self.base_url else None
        return (f"Endpoint(model={self.model!r}, base_url={base!r}, provider={self.provider!r}, "
                f"key_source={self.key_source!r}, params={{{', '.join(map(repr, self.params))}}})")


@dataclass(frozen=True)
class Completion:
    """One chat completion, as replayed from the cache or received from the network."""

    content: str | None
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached: bool = False
    key: str | None = None
    """The cache key it was stored or found under."""
    logprobs: list[list[Any]] | None = None
    """When asked for (`logprobs: true`) and given: per answer token, [token, {alternative: logprob}]."""
    cached_tokens: int = 0
    """Of `input_tokens`, those read from the provider's prompt cache (priced at its cache-read rate)."""
    cache_write_tokens: int = 0
    """Of `input_tokens`, those written to the provider's prompt cache (priced at its cache-write rate)."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"content": self.content, "tool_calls": self.tool_calls,
                                "finish_reason": self.finish_reason, "input_tokens": self.input_tokens,
                                "output_tokens": self.output_tokens}
        if self.cached_tokens:  # only when there are: entries without them are written as before
            data["cached_tokens"] = self.cached_tokens
        if self.cache_write_tokens:
            data["cache_write_tokens"] = self.cache_write_tokens
        return data if self.logprobs is None else {**data, "logprobs": self.logprobs}

    @classmethod
    def from_json(cls, data: dict[str, Any], *, cached: bool, key: str | None = None) -> Completion:
        return cls(content=data.get("content"), tool_calls=data.get("tool_calls"),
                   finish_reason=data.get("finish_reason"), input_tokens=int(data.get("input_tokens") or 0),
                   output_tokens=int(data.get("output_tokens") or 0), cached=cached, key=key,
                   logprobs=data.get("logprobs"), cached_tokens=_count(data.get("cached_tokens")),
                   cache_write_tokens=_count(data.get("cache_write_tokens")))


def _count(value: Any) -> int:
    """A recorded token count, or 0 when it is none (absent, negative, not an integer, absurd)."""
    return int(value) if value and is_token_count(value) else 0


@dataclass
class Usage:
    """Tokens and dollars, summed per phase and role; `cached_tokens` of the input tokens were read from
    the provider's prompt cache, which saved `saved` dollars against the input price."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    cached_tokens: int = 0
    saved: float = 0.0

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost += other.cost
        self.cached_tokens += other.cached_tokens
        self.saved += other.saved

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                                "cost": self.cost}
        if self.cached_tokens:  # only when the provider's cache was read: files without it are unchanged
            data.update(cached_tokens=self.cached_tokens, saved=self.saved)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Usage:
        """Usage as a result file holds it; a count or cost that cannot be believed (negative, not a
        number, absurd: a hand-edited or planted file) counts as 0, so totals never go negative."""
        if not isinstance(data, dict):
            return cls()
        tokens = [value if is_token_count(value := data.get(name, 0)) else 0
                  for name in ("input_tokens", "output_tokens", "cached_tokens")]
        cost, saved = data.get("cost", 0.0), data.get("saved", 0.0)
        return cls(tokens[0], tokens[1], float(cost) if is_cost(cost) else 0.0, min(tokens[2], tokens[0]),
                   float(saved) if is_cost(saved) else 0.0)


MAX_RESPONSE_BYTES = 4 << 20
"""Default cap on an answer's body, as received and as decompressed (a chat completion is a few
kilobytes; one of 100,000 tokens of text is well under 2 MiB)."""


@dataclass
class EngineSettings:
    concurrency: int = 16
    timeout: float = 60.0
    max_attempts: int = 5
    max_retry_seconds: float = 120.0
    backoff_base: float = 0.5
    backoff_cap: float = 20.0
    max_cost: float | None = None
    """Dollars the whole session may spend (all xdist workers together, see `limits.Budget`)."""
    budget_ledger: str | None = None
    """The session's shared ledger file under xdist (made by the controller); None: in memory."""
    rate_limit: float | None = None
    """Requests per minute, shared across processes through a file in the cache directory."""
    max_reply_chars: int = 50_000
    """Longer target replies are cut (with a note in the transcript): bounded files and judge input."""
    token_limit: float | None = None
    """Tokens per minute (prompt + completion) in this process (xdist workers split it)."""
    max_response_bytes: int = MAX_RESPONSE_BYTES
    """Cap on every answer's body, as received and as decompressed, for every role."""
    transport: str = "aiohttp"
    """"aiohttp" (raw JSON on one aiohttp session) or "openai" (the official SDK)."""
    batch_roles: frozenset[str] = frozenset()
    """Roles whose calls go through the provider's Batch API (`--evalbench-batch`, llm/batch.py)."""
    batch_poll: float = 30.0
    """Longest wait between two polls of a submitted batch, in seconds (the first polls come sooner)."""


@dataclass
class EngineStats:
    """Counters of this process, reported in the terminal summary and merged across workers."""

    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    rate_limited: int = 0
    """Answers 429 (asked again, never counted as failures or retries)."""
    failures: Counter[str] = field(default_factory=Counter)
    spent: float = 0.0
    peak_in_flight: int = 0
    usage: dict[str, Usage] = field(default_factory=lambda: defaultdict(Usage))
    unpriced: set[str] = field(default_factory=set)
    """Models that had no price: counted as $0 and named in the summary (merged across workers)."""
    tool_calls: int = 0
    """MCP tool calls run on a server in this session (`kinds/tools.py`; tool lists are not counted)."""
    tool_replays: int = 0
    """MCP tool results replayed from the cache (no server involved)."""
    batch_lines: int = 0
    """Calls submitted in provider batches (never counted in `requests`, which are synchronous)."""
    unwritten: Counter[str] = field(default_factory=Counter)
    """Files the disk refused during the run (cache entries), by the one line that says so: the run is
    incomplete (`gate.decision`), whatever its rows say."""

    def to_json(self) -> dict[str, Any]:
        out = {"requests": self.requests, "cache_hits": self.cache_hits, "retries": self.retries,
               "tool_calls": self.tool_calls, "tool_replays": self.tool_replays,
               "rate_limited": self.rate_limited, "failures": dict(self.failures), "spent": self.spent,
               "peak_in_flight": self.peak_in_flight,
               "usage": {k: v.to_json() for k, v in self.usage.items()}, "unpriced": sorted(self.unpriced)}
        if self.unwritten:
            out["unwritten"] = dict(self.unwritten)
        if self.batch_lines:
            out["batch_lines"] = self.batch_lines
        return out

    def unwritten_lines(self) -> list[str]:
        """What the disk refused, one line per cause (`N cache entries ...`)."""
        return [f"{n} cache entr{'y' if n == 1 else 'ies'} not written: {line}" for line, n in
                sorted(self.unwritten.items())]

    def merge(self, data: dict[str, Any]) -> None:
        self.requests += int(data.get("requests", 0))
        self.cache_hits += int(data.get("cache_hits", 0))
        self.retries += int(data.get("retries", 0))
        self.tool_calls += int(data.get("tool_calls", 0))
        self.tool_replays += int(data.get("tool_replays", 0))
        self.rate_limited += int(data.get("rate_limited", 0))
        self.failures.update(data.get("failures", {}))
        self.spent += float(data.get("spent", 0.0))
        self.peak_in_flight = max(self.peak_in_flight, int(data.get("peak_in_flight", 0)))
        for key, value in data.get("usage", {}).items():
            self.usage[key].add(Usage.from_json(value))
        self.unpriced.update(data.get("unpriced", []))
        self.unwritten.update(data.get("unwritten", {}))
        self.batch_lines += int(data.get("batch_lines", 0))
