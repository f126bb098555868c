"""The HTTP port's root ``/``: a page that says what the port serves and where (the console, the
API reference, the OpenAPI document, a call that needs no body, MCP, and the health checks on the
metrics port), instead of a JSON 404 for a person who opens the port in a browser.

The page is built once, names only this server's own paths, and runs nothing: its policy is
``default-src 'none'``."""

from __future__ import annotations

import html

from starlette.types import ASGIApp, Receive, Scope, Send

from mnemosyne.transport.http.guard import send_error
from mnemosyne.transport.http.methods import method_not_allowed
from mnemosyne.transport.http.paths import CONSOLE_PATH, DOCS_PATH, MCP_PATH, OPENAPI_PATH
from mnemosyne.transport.http.static_files import send_bytes
from mnemosyne.version import VERSION

HEADERS = (
    ("content-security-policy", "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-cache"),
)


def page(metrics_port: int) -> bytes:
    """The root page; ``metrics_port``: where the health checks are (0: the side port is off)."""
    health = (
        f"<code>/healthz</code> and <code>/readyz</code> on the metrics port ({metrics_port}), beside "
        "<code>/metrics</code>"
        if metrics_port
        else "the metrics port is off (<code>--metrics-port 0</code>): gRPC's <code>grpc.health.v1</code> only"
    )
    items = [
        (
            CONSOLE_PATH + "/",
            "Console",
            "browse and edit a tenant's memories, records and events (sign in with a token)",
        ),
        (DOCS_PATH + "/", "API reference", "every RPC as JSON over HTTP, rendered from this server's OpenAPI document"),
        (OPENAPI_PATH, OPENAPI_PATH, "the OpenAPI 3.1 document of the HTTP/JSON API"),
        ("/v1/ping", "/v1/ping", "the cheapest call: answers {} when the server and your token are fine"),
    ]
    links = "\n".join(
        f'<li><a href="{href}">{html.escape(text)}</a>: {html.escape(say)}</li>' for href, text, say in items
    )
    text = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Mnemosyne</title>
</head>
<body>
<h1>Mnemosyne {html.escape(VERSION)}</h1>
<p>A memory service for AI agents. This is its HTTP port:</p>
<ul>
{links}
<li>MCP over streamable HTTP: <code>{MCP_PATH}?tenant=TENANT</code> (for an MCP client, not a browser)</li>
<li>Health checks: {health}</li>
</ul>
</body>
</html>
"""
    return text.encode()


def home_app(metrics_port: int) -> ASGIApp:
    body = page(metrics_port)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method", "GET") != "GET":  # a HEAD comes as its GET (methods.answering_head)
            error = method_not_allowed("/", ["GET"])
            await send_error(send, error, [*HEADERS, ("allow", error.metadata["allow"])])
            return
        headers = [*HEADERS, ("content-type", "text/html; charset=utf-8")]
        await send_bytes(send, 200, body, headers)

    return app
