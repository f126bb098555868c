"""The HTTP port: the JSON mapping of every RPC, SSE, the mem0-compatible paths, the console and
the MCP endpoint, behind one guard."""
