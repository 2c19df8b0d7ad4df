"""Example of evaluating the team's own app (issue: targets that are not bare models).

`benchmarks/support-app/` lists a target with no `model`; this hook hands pytest-evalbench the
app to talk to instead. The app is deliberately tiny and deterministic: a support assistant that
looks orders up with a tool before answering. Its tool calls are recorded in the transcript
(`runs/support-app/conversations.json`).
"""

from __future__ import annotations

import re
from typing import Any

ORDERS = {"A1001": "shipped on Monday", "A1002": "waiting for payment"}
ORDER_RE = re.compile(r"\b([A-Z]\d{4})\b", re.IGNORECASE)


class SupportApp:
    """A rule-based support assistant with two tools: `search_faq` and `lookup_order`."""

    def lookup_order(self, order_id: str) -> str:
        return ORDERS.get(order_id.upper(), "not found")

    def __call__(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        last = messages[-1]["content"]
        calls = [{"tool": "search_faq", "arguments": {"query": " ".join(last.split()[:8])}, "outcome": "0 articles"}]
        match = ORDER_RE.search(" ".join(m["content"] for m in messages if m["role"] == "user"))
        if not match:
            return {"content": "I can check that for you. What is your order number (it looks like A1234)?",
                    "tool_calls": calls}
        order_id = match.group(1).upper()
        status = self.lookup_order(order_id)
        calls.append({"tool": "lookup_order", "arguments": {"order_id": order_id}, "outcome": status})
        if status == "not found":
            return {"content": f"I could not find order {order_id}. Could you double-check the number?",
                    "tool_calls": calls}
        return {"content": f"Order {order_id} is {status}.", "tool_calls": calls}


def pytest_evalbench_make_target(config: Any, target: Any) -> Any:
    """Give `support-app` targets the app; other targets keep their `model`."""
    return SupportApp() if target.id == "support-app" else None
