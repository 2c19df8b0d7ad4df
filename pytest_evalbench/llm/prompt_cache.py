"""Markers for a provider's prompt cache: Anthropic caches a prompt's prefix only up to a part marked
`cache_control: {"type": "ephemeral"}` (OpenAI caches every long prefix by itself and ignores them).

Every role's request puts what does not change first (system prompt, rubric, definitions, contrast
examples, tools) and what changes last (the transcript judged, the conversation's newest turn), so the
stable prefix is the request's messages but the last. With `cache_prompt: true` on a role, the system
message (shared by every request of the role) and the message before the last (the end of the prefix
shared with the role's next request: a conversation's earlier turns, a judge's last contrast example)
get the marker. Through an OpenAI-compatible gateway a marker sits on a content part, so a marked
message's text becomes a one-part list; messages without text (an assistant's tool calls only) are
left as they are.
"""

from __future__ import annotations

from typing import Any

EPHEMERAL = {"type": "ephemeral"}


def _marked(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str) and content:
        return {**message, "content": [{"type": "text", "text": content, "cache_control": EPHEMERAL}]}
    if isinstance(content, list) and content and isinstance(content[-1], dict):
        return {**message, "content": [*content[:-1], {**content[-1], "cache_control": EPHEMERAL}]}
    return message


def with_cache_markers(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of `messages` with the system message and the one before the last marked for the
    provider's prompt cache (at most two of Anthropic's four markers); a one-message request has no
    stable prefix and is sent as it is."""
    marks = {len(messages) - 2} if len(messages) >= 2 else set()
    if len(messages) >= 2 and messages[0].get("role") == "system":
        marks.add(0)
    return [_marked(m) if i in marks else m for i, m in enumerate(messages)]
