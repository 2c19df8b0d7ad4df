"""The fake server's service tiers and prompt cache, as OpenAI's API shows them: a `service_tier` asked
for is named in the answer; flex requests can be refused with the 429 "resource unavailable" a
provider gives at peak (`FlexRefusals`); and a prompt whose leading messages were sent before reports
them as read from the provider's cache (`PromptCache`, in `usage.prompt_tokens_details.cached_tokens`,
or Anthropic's `cache_read_input_tokens` / `cache_creation_input_tokens` as gateways pass them on)."""

from __future__ import annotations

import json
import math
import threading
from typing import Any

FLEX_REFUSAL = "Resource unavailable: flex processing capacity is temporarily exhausted; try again later"


class FlexRefusals:
    """Refuse the next `count` flex requests (then answer them), counting those refused."""

    def __init__(self, count: int = 0) -> None:
        self.remaining = count
        self.refused = 0
        self._lock = threading.Lock()

    def refuse(self, raw: bytes) -> bool:
        """Whether this request (its raw body) is a flex request to refuse now."""
        if self.remaining <= 0 or b"service_tier" not in raw:
            return False
        try:
            flex = json.loads(raw).get("service_tier") == "flex"
        except (ValueError, AttributeError):
            return False
        with self._lock:
            if not flex or self.remaining <= 0:
                return False
            self.remaining -= 1
            self.refused += 1
            return True


def _tokens(value: Any) -> int:
    """The fake server's token count of a JSON value (four characters a token, as its usage counts)."""
    return math.ceil(len(json.dumps(value)) / 4)


class PromptCache:
    """Leading messages seen before, per model: a request's longest such prefix is read from the cache,
    the rest of its messages (when `anthropic`: only those up to a `cache_control` marker) written to it.

    Whole messages are the unit (a provider caches by token blocks; messages keep the arithmetic exact
    for tests). `anthropic` reports Anthropic's field names instead of OpenAI's."""

    def __init__(self, *, anthropic: bool = False) -> None:
        self.anthropic = anthropic
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def usage(self, request: dict[str, Any]) -> dict[str, Any]:
        """The usage fields to add to this request's answer (and remember its prefixes)."""
        model, messages = str(request.get("model")), request.get("messages")
        if not isinstance(messages, list):
            return {}
        prefixes = [json.dumps(messages[:n], sort_keys=True) for n in range(1, len(messages) + 1)]
        with self._lock:
            hit = max((n for n, p in enumerate(prefixes, 1) if (model, p) in self._seen), default=0)
            self._seen.update((model, p) for p in prefixes)
        read = _tokens(messages[:hit]) if hit else 0
        if not self.anthropic:
            return {"prompt_tokens_details": {"cached_tokens": read}}
        marked = max((n for n, m in enumerate(messages, 1) if _marked(m)), default=0)
        written = _tokens(messages[:marked]) - read if marked > hit else 0
        return {"cache_read_input_tokens": read, "cache_creation_input_tokens": written}


def _marked(message: Any) -> bool:
    """A message with a `cache_control` marker on it or on one of its content parts."""
    if not isinstance(message, dict):
        return False
    parts = message.get("content")
    return "cache_control" in message or (isinstance(parts, list) and any(
        isinstance(p, dict) and "cache_control" in p for p in parts))
