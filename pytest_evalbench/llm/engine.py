"""The LLM engine, a facade over four layers (inspect_ai's order: model API, provider, cache, retry and
concurrency): `complete` asks the cache layer (`cache.CachedCalls`), which on a miss fetches with bounded
retries (retry.py), each attempt admitted by the limits (limits.py) and sent by the transport
(transport.py); every pipeline runs on the engine's private event loop (pipelines.py). The engine builds
them, makes each call's cache material and key (`cache.completion_material`, `cache.cache_key`) and
counts usage and cost per phase and role.

Structured output with a bounded re-ask (`ask`) is the one loop every JSON-answering role goes through:
the judge, the Explain evaluators and the authoring commands ask for a JSON object through
`response_format` (a strict JSON Schema from a pydantic model), parse it leniently (fences and <think>
blocks stripped, control characters tolerated) but validate it strictly, and re-ask up to MAX_ATTEMPTS
times with the problem shown. Each attempt is its own cache entry; a chain that ends unusable is dropped
from the cache, so a rerun asks afresh instead of replaying useless answers, while every usable answer
stays cached and replays for free.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from pytest_evalbench.base.errors import BudgetExhausted, InputError, field_path
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.llm.batch import Batches
from pytest_evalbench.llm.cache import CachedCalls, ResponseCache, cache_key, canonical_bytes, completion_material
from pytest_evalbench.llm.costs import PriceTable, Tier, call_tier
from pytest_evalbench.llm.limits import Limits, worst_case_tokens
from pytest_evalbench.llm.pipelines import PRIORITY, Pipelines, hand_off
from pytest_evalbench.llm.prompt_cache import with_cache_markers
from pytest_evalbench.llm.retry import Retrier
from pytest_evalbench.llm.transport import Transport, make_transport, wire_json
from pytest_evalbench.llm.types import Completion, Endpoint, EngineSettings, EngineStats, Usage, safe_json

__all__ = ["PRIORITY", "Engine", "EngineSettings", "EngineStats", "bounded_strings"]
"""`PRIORITY` lives in pipelines.py; authoring imports it from here (it sets its pipelines' order)."""

T = TypeVar("T")

def bounded_strings(schema: dict[str, Any], limit: int = 400) -> dict[str, Any]:
    """A copy of a JSON schema with `maxLength` on every string property that has none."""
    out = dict(schema)
    if out.get("type") == "string" and "maxLength" not in out:
        out["maxLength"] = limit
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: bounded_strings(v, limit) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = bounded_strings(out["items"], limit)
    return out


class Engine:
    """Runs LLM pipelines concurrently for a synchronous caller (pytest)."""

    def __init__(self, settings: EngineSettings, cache: ResponseCache, prices: PriceTable,
                 transport: Transport | None = None) -> None:
        self.settings = settings
        self.cache = cache
        self.prices = prices
        self.stats = EngineStats()
        self._transport = transport
        self.limits = Limits(settings, self.stats, prices, cache.directory / ".rate-limit")
        self.budget = self.limits.budget
        self.retrier = Retrier(settings, self.stats, self.limits, lambda: self.transport)
        self.cached = CachedCalls(cache, self.stats)
        self.batches = Batches(settings, self.stats, cache.directory, self.cached.store)
        if settings.batch_roles and cache.mode != "replay":
            self.batches.prepare()
        self.pipelines = Pipelines(max(256, 4 * settings.concurrency), self.limits.open_slots,
                                   alternate=cache.mode == "replay")
        self.closers: list[Callable[[], Awaitable[None]]] = []
        """Closed on the engine's loop when it stops (the MCP servers a run started, `kinds/tools.py`)."""

    @property
    def transport(self) -> Transport:
        """Built at the first cache miss: a fully replayed run never loads an HTTP client."""
        if self._transport is None:
            self._transport = make_transport(self.settings.transport, self.settings.timeout,
                                             self.settings.max_response_bytes)
        return self._transport

    @property
    def in_flight(self) -> int:
        """Requests on the network right now (read by the progress line)."""
        return self.limits.in_flight

    # ------------------------------------------------------------------ pipelines (see pipelines.py)
    def prefetch(self, key: Any, factory: Any, priority: int) -> None:
        """Queue `factory()` (a coroutine factory) once per key, to start when the window has room."""
        self.pipelines.prefetch(key, factory, priority)

    def submit(self, key: Any, factory: Any, priority: int) -> concurrent.futures.Future[Any]:
        """The future of `key`'s pipeline, started now unless it already was."""
        return self.pipelines.submit(key, factory, priority)

    def awaited(self, future: concurrent.futures.Future[Any]) -> list[concurrent.futures.Future[Any]]:
        """What a caller who needs `future` waits for (a replay: also the pipelines its wait starts; `Pipelines.awaited`)."""
        return self.pipelines.awaited(future)

    def result(self, key: Any, factory: Any, priority: int) -> Any:
        """Block until the pipeline for `key` is done (starting it if it was not prefetched)."""
        return self.pipelines.result(key, factory, priority)

    def release(self, key: Any) -> None:
        """The caller is done with `key`'s result: its window slot goes to the next queued pipeline."""
        self.pipelines.release(key)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one coroutine on the engine loop and wait for it (used by the authoring commands)."""
        return self.pipelines.run(coro)

    def close(self) -> None:
        """Cancel pending work, close the transport and stop the loop, then let the cache writes finish;
        safe to call twice."""
        self.pipelines.close(self._shutdown)
        self.cached.close()  # every answer received is on disk before the run ends

    async def _shutdown(self) -> None:
        await asyncio.gather(*(close() for close in self.closers), return_exceptions=True)
        await self.batches.aclose()
        if self._transport is not None:
            await self._transport.aclose()

    def count_usage(self, model: str, input_tokens: int, output_tokens: int, *, phase: str, role: str,
                    usage_by_phase: dict[str, Usage] | None, local: bool = False, tier: Tier = "standard",
                    cached_tokens: int = 0, cache_write_tokens: int = 0) -> Usage:
        """Tokens of one model call, priced at its tier (and its prompt-cache reads and writes at theirs),
        added to the session's usage of `phase:role` and to the item's `usage_by_phase`; a model without
        a price is named in the stats."""
        cost = self.prices.cost(model, input_tokens, output_tokens, local=local, tier=tier,
                                cached_tokens=cached_tokens, cache_write_tokens=cache_write_tokens)
        saved = self.prices.saved(model, input_tokens, cached_tokens, local=local, tier=tier) if cached_tokens else 0.0
        usage = Usage(input_tokens, output_tokens, cost, min(cached_tokens, input_tokens), saved)
        self.stats.usage[f"{phase}:{role}"].add(usage)
        if self.prices.unpriced:
            self.stats.unpriced.update(self.prices.unpriced)
        if usage_by_phase is not None:
            phase_usage = usage_by_phase.get(phase)
            if phase_usage is None:
                usage_by_phase[phase] = phase_usage = Usage()
            phase_usage.add(usage)
        return usage

    # ------------------------------------------------------------------ one call
    def request_body(self, endpoint: Endpoint, messages: list[dict[str, Any]],
                     schema: tuple[str, dict[str, Any]] | None, tools: list[dict[str, Any]] | None,
                     top_logprobs: int = 0) -> dict[str, Any]:
        if endpoint.cache_prompt:
            messages = with_cache_markers(messages)
        body: dict[str, Any] = {"model": endpoint.model, "messages": messages, **endpoint.params}
        if top_logprobs:  # only when asked: the body is the cache key, so other calls keep theirs
            body.update(logprobs=True, top_logprobs=top_logprobs)
        if schema is not None:
            name, json_schema = schema
            if endpoint.provider == "local":
                # llama.cpp's server rejects OpenAI's json_schema shape; it takes json_object + schema,
                # and unbounded strings let a small model ramble until max_tokens cuts the JSON.
                body["response_format"] = {"type": "json_object", "schema": bounded_strings(json_schema)}
            else:
                body["response_format"] = {"type": "json_schema",
                                           "json_schema": {"name": name, "schema": json_schema, "strict": True}}
        if tools:
            body["tools"] = tools
        return body

    async def complete(self, endpoint: Endpoint, messages: list[dict[str, Any]], *, role: str, phase: str,
                       sample: int, attempt: int = 0, schema: tuple[str, dict[str, Any]] | None = None,
                       tools: list[dict[str, Any]] | None = None, usage_by_phase: dict[str, Usage] | None = None,
                       top_logprobs: int = 0) -> Completion:
        """One chat completion: replayed from the cache or fetched with bounded retries."""
        body = self.request_body(endpoint, messages, schema, tools, top_logprobs)
        material = completion_material(endpoint.identity, body, sample, attempt)
        material_text = canonical_bytes(material)  # encoded once for the key and the cache's check
        key = cache_key(material, material_text)
        batched = self.batched(endpoint, role)
        completion = await self.cached.answer(
            key, material, role, endpoint.model,
            (lambda: self.batch_fetch(endpoint, body, role, key, material)) if batched else
            (lambda: self.retrier.fetch(endpoint, body, role, wire_json(body))), material_text)
        usage = self.count_usage(endpoint.model, completion.input_tokens, completion.output_tokens, phase=phase,
                                 role=role, usage_by_phase=usage_by_phase, local=endpoint.provider == "local",
                                 tier=call_tier(endpoint, batched=batched), cached_tokens=completion.cached_tokens,
                                 cache_write_tokens=completion.cache_write_tokens)
        if not completion.cached:
            self.stats.spent += usage.cost
            await hand_off()  # counted: the chain goes on once the waiting calls are sent
        return completion

    async def batch_fetch(self, endpoint: Endpoint, body: dict[str, Any], role: str, key: str,
                          material: dict[str, Any]) -> Completion:
        """One call through the provider's Batch API, its worst-case price at the batch rate reserved
        against `--evalbench-max-cost` before it goes into a batch, settled at its real price."""
        budget, reserved, actual = self.limits.budget, 0.0, 0.0
        if budget is not None:
            worst = self.prices.quote(endpoint.model, *worst_case_tokens(body, wire_json(body)),
                                      tier="batch")
            if not await budget.reserve(worst):
                raise BudgetExhausted(budget.spent(), budget.limit, role, endpoint.model, worst)
            reserved = worst
        try:
            completion = await self.batches.fetch(endpoint, body, role, key, material)
            actual = self.prices.quote(endpoint.model, completion.input_tokens, completion.output_tokens, tier="batch",
                                       cached_tokens=completion.cached_tokens,
                                       cache_write_tokens=completion.cache_write_tokens)
            return completion
        finally:
            if budget is not None:
                budget.settle(reserved, actual)

    def batched(self, endpoint: Endpoint, role: str) -> bool:
        """Whether the role's calls go through the provider's Batch API (never the embedded model's)."""
        return endpoint.provider != "local" and (endpoint.batch or role in self.settings.batch_roles)

    async def forget(self, keys: list[str]) -> None:
        """Drop cache entries, after any of their writes still queued."""
        await self.cached.forget(keys)


MAX_ATTEMPTS = 3
M = TypeVar("M", bound=BaseModel)
_FENCE_RE = re.compile(r"^\s*```(?:json)?\s*|\s*```\s*$", re.IGNORECASE)
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_UNSUPPORTED_IN_STRICT = {"title", "default", "minLength", "maxLength", "minItems", "maxItems", "minimum",
                          "maximum"}


def strict_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A JSON Schema in the subset every strict structured-output provider accepts: every object
    closed and fully required; no titles, defaults, length or range keywords (some providers reject
    them with HTTP 400; pydantic still enforces them, and a violation is re-asked)."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _UNSUPPORTED_IN_STRICT:
                continue
            if key in ("properties", "$defs"):
                out[key] = {name: walk(sub) for name, sub in value.items()}
            else:
                out[key] = walk(value)
        if out.get("type") == "object" and "properties" in out:
            out["additionalProperties"] = False
            out["required"] = list(out["properties"])
        return out

    return walk(model.model_json_schema())


def load_json(text: str | None) -> Any:
    """The JSON value in a model's answer; ValueError with a short reason."""
    text = text or ""
    if "<" in text:  # a <think> block (checked first: the regexes scan the whole answer)
        text = _THINK_RE.sub("", text)
    cleaned = (_FENCE_RE.sub("", text) if "`" in text else text).strip()
    if not cleaned:
        raise ValueError("the answer was empty")
    try:  # the one reader of JSON from outside: depth, numbers, duplicate keys; raw control characters kept
        value = parse_json(cleaned, _ANSWER, surrogates=True, control_characters=True)
    except InputError as exc:
        raise ValueError(answer_problem(exc)) from None
    return safe_json(value) if "\\" in cleaned else value  # only an escape makes a lone surrogate


_ANSWER = Path("answer")


def answer_problem(exc: InputError) -> str:
    """Why a model's JSON answer was refused, in one line for the re-ask (no file: it is the answer)."""
    message = exc.message
    if message.startswith("invalid JSON: "):
        reason = re.sub(r" \(column (\d+)\)$", rf" at line {exc.row}, column \1", message.removeprefix("invalid JSON: "))
        return f"not valid JSON ({reason})"
    return f"{exc.field}: {message}" if exc.field else message


def parse_as(text: str | None, model: type[M], check: Callable[[M], None] | None = None) -> M:
    """Parse and validate one JSON answer; ValueError with a one-line reason to show the model."""
    data = load_json(text)
    try:
        answer = model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = field_path(err.get("loc", ()), data, by_id=False) or "answer"
        raise ValueError(f"{where}: {err.get('msg', 'invalid')}") from None
    if check is not None:
        check(answer)
    return answer


async def ask(engine: Engine, endpoint: Endpoint, messages: list[dict[str, Any]], parse: Callable[[str | None], T],
              *, schema: tuple[str, dict[str, Any]], role: str, phase: str, sample: int, usage_by_phase: dict[str, Usage],
              shape: str, top_logprobs: int = 0, used: Callable[[Completion], None] | None = None
              ) -> tuple[T | None, str]:
    """(answer, "") or (None, last problem) after MAX_ATTEMPTS unusable answers.

    `shape` describes the expected JSON in the re-ask message, e.g. '{"present": true or false}'.
    `top_logprobs` > 0 asks for log-probabilities; `used` gets the completion whose answer was used.
    """
    reason = ""
    keys: list[str] = []
    for attempt in range(MAX_ATTEMPTS):
        completion = await engine.complete(endpoint, messages, role=role, phase=phase, sample=sample,
                                           attempt=attempt, schema=schema, usage_by_phase=usage_by_phase,
                                           top_logprobs=top_logprobs)
        keys += [completion.key] if completion.key else []
        limit = engine.settings.max_reply_chars
        try:
            if limit and len(completion.content or "") > limit:  # bounded report and result files
                raise ValueError(f"the answer is {len(completion.content or '')} characters, over the limit of "
                                 f"{limit} (--evalbench-max-reply-chars)")
            answer = parse(completion.content)
        except ValueError as exc:
            reason = str(exc)
            messages = [*messages, {"role": "assistant", "content": (completion.content or "")[:limit or None]},
                        {"role": "user", "content": f"That answer cannot be used: {reason}. Reply again with only "
                         f"the corrected JSON object {shape}."}]
        else:
            if used is not None:
                used(completion)
            return answer, ""
    await engine.forget(keys)
    return None, reason
