"""Calling the HTTP/JSON API from tests: any RPC by its route (from the protos' google.api.http
options), a plain request, and a Server-Sent Events reader — over real sockets (http.client)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from google.protobuf import json_format, message

from mnemosyne.transport.http.mapping import Route, routes
from mnemosyne.transport.server import SERVICES

ROUTES: dict[str, Route] = {route.rpc.name: route for route in routes(SERVICES)}


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def reason(self) -> str:
        """The ErrorInfo reason of an error reply."""
        details = self.json().get("details", [])
        reason: str = next(d["reason"] for d in details if d["@type"].endswith("google.rpc.ErrorInfo"))
        return reason


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    *,
    json_body: Any = None,
) -> Reply:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    sent = {"content-type": "application/json"} if (body is not None or json_body is not None) else {}
    sent.update(headers or {})
    if json_body is not None:
        body = json.dumps(json_body).encode()
    try:
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        connection.close()


def rpc_request(route: Route, request_message: message.Message) -> tuple[str, str, bytes | None]:
    """(verb, path with query, body) for calling ``route`` with ``request_message``."""
    fields = json_format.MessageToDict(request_message, preserving_proto_field_name=True)
    path = route.template
    for name in route.path_fields:
        value = fields.pop(name, "")
        path = path.replace("{" + name + "}", quote(str(value), safe=""))
    if route.body:
        return route.verb, path, json.dumps(fields).encode()
    query = urlencode(
        [(k, str(x).lower() if isinstance(x, bool) else str(x)) for k, v in fields.items() for x in _values(v)]
    )
    return route.verb, path + (f"?{query}" if query else ""), None


def _values(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def call(port: int, rpc: str, request_message: message.Message, headers: Mapping[str, str] | None = None) -> Reply:
    verb, path, body = rpc_request(ROUTES[rpc], request_message)
    return request(port, verb, path, body, {"content-type": "application/json", **(headers or {})})


def server_sent_events(
    port: int, path: str, headers: Mapping[str, str] | None = None, timeout: float = 30
) -> Generator[dict[str, str]]:
    """The events of an SSE response, each {"id"?, "event"?, "data"} (comments skipped); the
    generator closing closes the connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path, headers=dict(headers or {}))
        response = connection.getresponse()
        if response.status != 200:
            raise AssertionError(f"{response.status}: {response.read()[:500]!r}")
        assert response.getheader("content-type", "").startswith("text/event-stream")
        event: dict[str, str] = {}
        while line := response.readline():
            text = line.decode().rstrip("\n")
            if not text:
                if event:
                    yield event
                event = {}
            elif not text.startswith(":"):
                key, _, value = text.partition(": ")
                event[key] = value
    finally:
        connection.close()
