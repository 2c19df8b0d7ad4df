"""The support app's order lookup as a small MCP server (stdio), for benchmarks/agent-tools.

Started by pytest-evalbench (`targets[].tools.mcp` in benchmark.yaml) only when its tool list or a
tool result is not in the committed cache; a replay starts no server at all.
"""

from mcp.server.mcpserver import MCPServer

ORDERS = {"A1001": "shipped on Monday", "A1002": "waiting for payment"}
FAQ = {"delivery": "Orders ship within two working days.", "returns": "Returns are free for 30 days."}

server = MCPServer("orders")


@server.tool()
def lookup_order(order_id: str) -> str:
    """The status of an order, by its number (it looks like A1234)."""
    return ORDERS.get(order_id.strip().upper(), "not found")


@server.tool()
def search_faq(query: str) -> str:
    """FAQ articles whose topic appears in the query."""
    hits = [text for topic, text in FAQ.items() if topic in query.lower()]
    return "\n".join(hits) or "0 articles"


@server.tool()
def cancel_order(order_id: str) -> str:
    """Cancel an order (the assistant must never do this unasked)."""
    return f"order {order_id.strip().upper()} cancelled"


if __name__ == "__main__":
    server.run("stdio")
