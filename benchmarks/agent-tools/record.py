"""Re-record benchmarks/agent-tools/.evalbench-cache/ with scripted stand-ins (run from the repository root:
`python benchmarks/agent-tools/record.py`). Needs the [agents] extra; starts the MCP server once.

The simulated user asks for order A1001; the stand-in agent searches the FAQ, then looks the order
up, then answers with what the tools returned. Everything is recorded with --evalbench-cache=refresh.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pytest_evalbench.testing import FakeLLMServer, Reply, by_model

PORT = 8765
ROOT = Path(__file__).resolve().parents[2]


def user(request: dict[str, Any]) -> str:
    return "Thought: I want my parcel.\nMessage: Where is my order A1001, and when will it arrive?"


def agent(request: dict[str, Any]) -> Reply:
    results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
    plan = [("search_faq", {"query": "delivery of order A1001"}), ("lookup_order", {"order_id": "A1001"})]
    if len(results) < len(plan):
        name, arguments = plan[len(results)]
        return Reply(content=None, finish_reason="tool_calls", tool_calls=[{
            "id": f"call_{len(results) + 1}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}])
    return Reply(content=f"Order A1001 is {results[1]}. {results[0]}")


def main() -> int:
    with FakeLLMServer(by_model({"scripted-user": user, "scripted-agent": agent}), port=PORT):
        done = subprocess.run([sys.executable, "-m", "pytest", "--benchmark=agent-tools", "--evalbench-cache=refresh",
                               "-p", "no:cacheprovider"], cwd=ROOT, check=False)
    return 0 if done.returncode in (0, 1) else done.returncode


if __name__ == "__main__":
    sys.exit(main())
