"""The well-known paths of the HTTP port, beside the RPC routes (transport/http/mapping.py): named
once for the apps that serve them and for what points people to them (``/``, the start-up
summary of cli/where.py). A module of its own, importing nothing, so that naming a path never
loads the HTTP stack."""

from __future__ import annotations

CONSOLE_PATH = "/console"  # the browser console (transport/http/console.py)
DOCS_PATH = "/docs"  # the API reference page (transport/http/api_docs.py)
OPENAPI_PATH = "/openapi.json"  # the OpenAPI document (transport/http/json_api.py)
MCP_PATH = "/mcp"  # the MCP endpoint (transport/http/mcp.py)
HOME_PATH = "/"  # where each of them is (transport/http/home.py)
