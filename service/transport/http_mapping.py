"""The JSON form of every RPC: its route from the ``google.api.http`` option in the protos, and
the one conversion between an HTTP request and the RPC's request message.

The rules are the standard HTTP mapping (google/api/http.proto), the subset our protos use, so
Envoy's gRPC-JSON transcoder and grpc-gateway, reading the same options, serve the same URLs:

* a path template's ``{field}`` variables set top-level fields of the request; a variable matches
  one path segment without ``:`` (no id of ours holds one) and is percent-decoded;
* ``body: "*"``: the JSON body is the request message, minus the path's fields (giving one in the
  body with another value is refused); no query parameters;
* no body (GET): each query parameter sets the top-level field of its name (proto or JSON name),
  repeated for a repeated field; map and message fields (other than a Timestamp) cannot be set;
* bodies and responses are proto3 JSON (``json_format``): unknown fields, wrong types, duplicate
  keys and malformed JSON are refused with REQUEST_UNDECODABLE, naming the field.

An RPC without a route must be in GRPC_ONLY with its reason; the server refuses to start
otherwise, and tests/test_http_api.py walks every route.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

from google.api import annotations_pb2
from google.protobuf import descriptor, json_format, message, message_factory

from mnemosyne.errors import InvalidArgument, NotFound
from mnemosyne.transport.edge import Undecodable, too_large

# "/package.Service/Method" -> why it has no JSON form.
GRPC_ONLY: dict[str, str] = {
    "/mnemosyne.v1.AdminService/Backup": "streams file bytes to a CLI that writes them (mnemosyne backup)",
    "/mnemosyne.v1.AdminService/ExportTenant": "streams file bytes to a CLI that writes them (mnemosyne export)",
    "/mnemosyne.v1.AdminService/ImportTenant": "a client stream, which the HTTP mapping has no form for",
    "/mnemosyne.v1.AdminService/MoveTenant": "asked of one member about its own file, routed to it (x-mnemosyne-route) by "
    "mnemosyne rebalance, which speaks gRPC; it streams the tenant to the destination member over gRPC",
    "/mnemosyne.v1.AdminService/ActivateTenant": "a move's last step, asked by the source member of the destination "
    "over gRPC (member-to-member)",
}

_VARIABLE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
_FD = descriptor.FieldDescriptor


@dataclass(frozen=True)
class Route:
    method: str  # "/mnemosyne.v1.MemoryService/Recall": the RPC, as gRPC names it
    rpc: descriptor.MethodDescriptor
    verb: str  # "GET", "POST"
    template: str  # "/v1/tenants/{tenant}/memories:recall"
    body: bool  # body "*": the JSON body is the request
    path_fields: tuple[str, ...]
    pattern: re.Pattern[str]
    request_type: type[message.Message]

    @property
    def streams(self) -> bool:
        return bool(self.rpc.server_streaming)


def _route(service: descriptor.ServiceDescriptor, rpc: descriptor.MethodDescriptor) -> Route | None:
    method = f"/{service.full_name}/{rpc.name}"
    options = rpc.GetOptions()
    if not options.HasExtension(annotations_pb2.http):
        if method not in GRPC_ONLY:
            raise ValueError(f"{method} has no google.api.http option and is not listed in GRPC_ONLY")
        return None
    rule = options.Extensions[annotations_pb2.http]
    verb = rule.WhichOneof("pattern")
    if verb not in ("get", "post") or rule.additional_bindings or rule.response_body or rule.body not in ("", "*"):
        raise ValueError(f"{method}: only get/post rules with body '' or '*' are supported")
    template: str = getattr(rule, verb)
    fields = tuple(_VARIABLE.findall(template))
    for name in fields:
        if name not in rpc.input_type.fields_by_name:
            raise ValueError(f"{method}: path variable {name!r} is not a field of {rpc.input_type.full_name}")
    regex = "".join(
        f"(?P<{part}>[^/:]+)" if index % 2 else re.escape(part) for index, part in enumerate(_VARIABLE.split(template))
    )
    return Route(
        method=method,
        rpc=rpc,
        verb=verb.upper(),
        template=template,
        body=rule.body == "*",
        path_fields=fields,
        pattern=re.compile(regex),
        request_type=message_factory.GetMessageClass(rpc.input_type),
    )


def routes(services: Iterable[descriptor.ServiceDescriptor]) -> list[Route]:
    """Every RPC's route; ValueError for an RPC that has none and is not in GRPC_ONLY."""
    found = [_route(service, rpc) for service in services for rpc in service.methods]
    return [route for route in found if route is not None]


class Router:
    def __init__(self, table: Sequence[Route]) -> None:
        self.table = list(table)

    def match(self, verb: str, raw_path: str) -> tuple[Route, dict[str, str]]:
        """The route of a request and its path variables (raw, still percent-encoded); NotFound
        (ROUTE_NOT_FOUND) or METHOD_NOT_ALLOWED naming the verbs the path takes."""
        allowed: list[str] = []
        for route in self.table:
            matched = route.pattern.fullmatch(raw_path)
            if matched is None:
                continue
            if route.verb == verb:
                return route, matched.groupdict()
            allowed.append(route.verb)
        if allowed:
            raise InvalidArgument(
                f"{raw_path[:200]} takes {' or '.join(sorted(set(allowed)))}, not {verb[:16]}",
                reason="METHOD_NOT_ALLOWED",
                metadata={"allow": ", ".join(sorted(set(allowed)))},
            )
        raise NotFound(f"no route {raw_path[:200]!r}: the routes are listed at /openapi.json", reason="ROUTE_NOT_FOUND")


def _undecodable(route: Route, problem: str) -> Undecodable:
    return Undecodable(
        InvalidArgument(
            f"the request to {route.method} could not be decoded: {problem}; send proto3 JSON (see /openapi.json)",
            reason="REQUEST_UNDECODABLE",
        )
    )


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise ValueError(f"the key {key[:80]!r} appears twice")
        document[key] = value
    return document


def _field(route: Route, name: str) -> descriptor.FieldDescriptor | None:
    fields = route.rpc.input_type
    return fields.fields_by_name.get(name) or fields.fields_by_camelcase_name.get(name)


def _query_fields(route: Route, query: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Query parameters as the JSON object of the fields they set."""
    document: dict[str, Any] = {}
    for key, value in query:
        field = _field(route, key)
        if field is None or field.name in route.path_fields or route.body:
            raise ValueError(f"{key[:80]!r} is not a query parameter of this route")
        if field.message_type is not None and field.message_type.full_name != "google.protobuf.Timestamp":
            raise ValueError(f"{key[:80]!r} cannot be set from the query string (send the RPC over gRPC)")
        typed: Any = value
        if field.type == _FD.TYPE_BOOL:
            typed = {"true": True, "false": False}.get(value, value)
        if field.is_repeated:
            document.setdefault(field.name, []).append(typed)
        elif field.name in document:
            raise ValueError(f"the query parameter {key[:80]!r} appears twice")
        else:
            document[field.name] = typed
    return document


def decode(
    route: Route,
    path: dict[str, str],
    query_string: bytes,
    body: bytes,
    *,
    overrides: Mapping[str, str],
    max_request_bytes: int,
) -> message.Message | Undecodable:
    """The request message of an HTTP request, or the refusal to raise after authentication
    (as gRPC's decoder does). ``overrides``: fields set from headers, replacing what the query
    gave (``after_sequence`` from Last-Event-ID). The decoded message is held to gRPC's request
    size limit."""
    try:
        query = parse_qsl(query_string.decode("utf-8"), keep_blank_values=True, errors="strict")
        document = _query_fields(route, query)
        if route.body and body.strip():
            parsed = json.loads(body.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
            if not isinstance(parsed, dict):
                raise ValueError(f"the body must be a JSON object, not {type(parsed).__name__}")
            document = parsed
        for name, raw in path.items():
            value = unquote(raw, errors="strict")
            field = route.rpc.input_type.fields_by_name[name]
            given = [key for key in (field.name, field.camelcase_name) if key in document]
            if any(str(document[key]) != value for key in given):
                raise ValueError(f"{name} is {value[:80]!r} in the path and something else in the body")
            for key in given:
                del document[key]
            document[name] = value
        for name, value in overrides.items():
            document.pop(route.rpc.input_type.fields_by_name[name].camelcase_name, None)
            document[name] = value
        request = json_format.ParseDict(document, route.request_type(), ignore_unknown_fields=False)
    except (ValueError, UnicodeDecodeError, RecursionError, json_format.ParseError) as exc:
        return _undecodable(route, str(exc)[:300] or type(exc).__name__)
    size = request.ByteSize()
    if size > max_request_bytes:
        return too_large(size, max_request_bytes)
    return request


def encode(response: message.Message) -> bytes:
    """The proto3 JSON of a response (or of a ``google.rpc.Status``, its details with their
    ``@type``): ``MessageToDict``, so JSON names and no default values."""
    return json.dumps(json_format.MessageToDict(response), ensure_ascii=False, separators=(",", ":")).encode()
