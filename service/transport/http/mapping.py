"""The JSON form of every RPC: its route from the ``google.api.http`` option in the protos, and
the one conversion between an HTTP request and the RPC's request message.

The rules are the standard HTTP mapping (google/api/http.proto), the subset our protos use, so
Envoy's gRPC-JSON transcoder and grpc-gateway, reading the same options, serve the same URLs:

* a path template's ``{field}`` variables set top-level fields of the request; a variable matches
  one path segment without ``:`` (no id of ours holds one) and is percent-decoded;
* ``body: "*"``: the JSON body is the request message; no query parameters;
* no body (GET): each query parameter sets the top-level field of its name (proto or JSON name),
  repeated for a repeated field; map and message fields (other than a Timestamp) cannot be set;
  a body given is refused, as a query parameter of a POST is;
* a path field may be given again in the body or the query: with the same value (compared once
  both are decoded, so ``"memoryId": "7"`` and ``7`` are the path's 7) it is accepted, with
  another it is refused (PATH_FIELD_MISMATCH);
* bodies and responses are proto3 JSON (``json_format``): unknown fields, wrong types, duplicate
  keys and malformed JSON are refused with REQUEST_UNDECODABLE, naming the field;
* every number, wherever it is written (body, query, path), passes the one rule for numbers given
  as text (engine/limits.py ``parse_integer``, ``parse_number``): a JSON integer or ASCII digits
  for an integer field, within its type's range; a finite number for a floating-point one; an
  enum's value name, or its number by the integer rule. Refused with NUMBER_INVALID, naming the
  field and its range. (proto3 JSON would also take "1e2" for an integer, "NaN" for a double,
  2.9 or true for an enum, and Python's int() other scripts' digits.)

An RPC without a route must be in GRPC_ONLY with its reason; the server refuses to start
otherwise, and tests/test_http_api.py walks every route.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.api import annotations_pb2
from google.protobuf import descriptor, json_format, message, message_factory

from mnemosyne.engine.limits import parse_integer, parse_number
from mnemosyne.errors import InvalidArgument, NotFound
from mnemosyne.transport.edge import Undecodable, too_large
from mnemosyne.transport.http import client_json
from mnemosyne.transport.http.json_times import beyond_range, no_time, without_offset
from mnemosyne.transport.http.methods import method_not_allowed

# "/package.Service/Method" -> why it has no JSON form.
GRPC_ONLY: dict[str, str] = {
    "/mnemosyne.v1.AdminService/Backup": "streams file bytes to a CLI that writes them (mnemosyne backup)",
    "/mnemosyne.v1.AdminService/ExportTenant": "streams file bytes to a CLI that writes them (mnemosyne export)",
    "/mnemosyne.v1.AdminService/ImportTenant": "a client stream, which the HTTP mapping has no form for",
    "/mnemosyne.v1.AdminService/MoveTenant": "asked of one member about its own file, routed to it (x-mnemosyne-route) by "
    "mnemosyne rebalance, which speaks gRPC; it streams the tenant to the destination member over gRPC",
    "/mnemosyne.v1.AdminService/ActivateTenant": "a move's last step, asked by the source member of the destination "
    "over gRPC (member-to-member)",
    "/mnemosyne.v1.AdminService/ChangeMembers": "asked of each member by mnemosyne rebalance, which speaks gRPC",
}

_VARIABLE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
_FD = descriptor.FieldDescriptor
_INTEGER_RANGES = {
    _FD.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    _FD.CPPTYPE_UINT32: (0, 2**32 - 1),
    _FD.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    _FD.CPPTYPE_UINT64: (0, 2**64 - 1),
}
_FLOAT_RANGES = {_FD.CPPTYPE_DOUBLE: 1.7976931348623157e308, _FD.CPPTYPE_FLOAT: 3.4028234663852886e38}
_TIMESTAMP = "google.protobuf.Timestamp"


# RFC 3339's date-time as proto3 JSON takes it: "T" and "Z" upper-case, 1-9 fractional digits.
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
        (ROUTE_NOT_FOUND) or METHOD_NOT_ALLOWED naming the verbs the path takes (HEAD with GET: a
        HEAD comes here as its GET, ``methods.answering_head``)."""
        allowed: list[str] = []
        for route in self.table:
            matched = route.pattern.fullmatch(raw_path)
            if matched is None:
                continue
            if route.verb == verb:
                return route, matched.groupdict()
            allowed.append(route.verb)
        if allowed:
            raise method_not_allowed(raw_path, allowed)
        raise NotFound(f"no route {raw_path[:200]!r}: the routes are listed at /openapi.json", reason="ROUTE_NOT_FOUND")


def _undecodable(route: Route, problem: str) -> Undecodable:
    return Undecodable(
        InvalidArgument(
            f"the request to {route.method} could not be decoded: {problem}; send proto3 JSON (see /openapi.json)",
            reason="REQUEST_UNDECODABLE",
        )
    )


def _field(route: Route, name: str) -> descriptor.FieldDescriptor | None:
    fields = route.rpc.input_type
    return fields.fields_by_name.get(name) or fields.fields_by_camelcase_name.get(name)


def _query_fields(route: Route, query: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Query parameters as the JSON object of the fields they set."""
    document: dict[str, Any] = {}
    for key, value in query:
        field = _field(route, key)
        if field is None or route.body:
            raise ValueError(f"{key[:80]!r} is not a query parameter of this route")
        if field.message_type is not None and field.message_type.full_name != _TIMESTAMP:
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


# Where in a request a time beyond Timestamp's range goes, and its (seconds, nanos): json_format
# cannot hold it, so it is set after (json_times.py).
_Beyond = list[tuple[tuple[str | int, ...], tuple[int, int]]]
_IN_RANGE = "1970-01-01T00:00:00Z"  # what json_format decodes in its place


def _numbers(
    message_type: descriptor.Descriptor,
    document: dict[str, Any],
    where: str = "",
    at: tuple[str | int, ...] = (),
    beyond: _Beyond | None = None,
) -> None:
    """Every number of a JSON request checked by the one rule for numbers given as text, and
    replaced by its value, in place (nested messages, lists and map values too); a time beyond
    Timestamp's range is noted in ``beyond``. Other values are left to json_format, which names
    what is wrong with them."""
    for key, value in document.items():
        field = message_type.fields_by_name.get(key) or message_type.fields_by_camelcase_name.get(key)
        if field is None:
            continue
        name = where + field.name
        if key != field.camelcase_name and field.camelcase_name in document:
            # json_format checks each key alone, so the last of the two names would win.
            raise ValueError(f"{name} is given twice, as {key!r} and {field.camelcase_name!r}: give it once")
        if value is None:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry = field.message_type.fields_by_name["value"]
            if isinstance(value, dict):
                for map_key, item in value.items():
                    value[map_key] = _number(entry, item, f"{name}[{str(map_key)[:40]!r}]", (), None)
        elif field.is_repeated and isinstance(value, list):
            value[:] = [
                _number(field, item, f"{name}[{index}]", (*at, field.name, index), beyond)
                for index, item in enumerate(value)
            ]
        else:
            document[key] = _number(field, value, name, (*at, field.name), beyond)


def _number(
    field: descriptor.FieldDescriptor,
    value: Any,
    name: str,
    at: tuple[str | int, ...],
    beyond: _Beyond | None,
) -> Any:
    if field.message_type is not None:
        if field.message_type.full_name == _TIMESTAMP and isinstance(value, str):
            moment = beyond_range(value)
            if moment is not None and beyond is not None:
                beyond.append((at, moment))
                return _IN_RANGE
            if without_offset(value):
                raise InvalidArgument(
                    f"{name} {value[:40]!r} gives no offset, so it names no one moment: give an RFC 3339 time "
                    "with its offset, e.g. 2024-05-08T13:56:00Z (UTC) or 2024-05-08T15:56:00+02:00",
                    reason="NUMBER_INVALID",
                )
            if no_time(value):
                raise InvalidArgument(
                    f"{name} must be an RFC 3339 time of a real day, in ASCII digits (e.g. 2024-05-08T13:56:00Z or "
                    f"2024-05-08T15:56:00.5+02:00), not {value[:40]!r}",
                    reason="NUMBER_INVALID",
                )
        if isinstance(value, dict):
            _numbers(field.message_type, value, name + ".", at, beyond)
        elif field.message_type.full_name != _TIMESTAMP:
            # json_format reads a list as an object of its items' names ([] is the empty message).
            raise ValueError(
                f"{name} must be a JSON object (the message {field.message_type.name}), not {client_json.json_kind(value)}"
            )
        return value
    if field.cpp_type in _INTEGER_RANGES:
        low, high = _INTEGER_RANGES[field.cpp_type]
        return parse_integer(value, field=name, minimum=low, maximum=high)
    if field.cpp_type == _FD.CPPTYPE_ENUM and field.enum_type is not None:
        return _enum(field.enum_type, value, name)
    if field.cpp_type in _FLOAT_RANGES:
        largest = _FLOAT_RANGES[field.cpp_type]
        return parse_number(value, field=name, minimum=-largest, maximum=largest)
    return value


def _set_beyond(request: message.Message, beyond: _Beyond) -> None:
    """Each time beyond Timestamp's range set where it was given, as gRPC would carry it."""
    for at, (seconds, nanos) in beyond:
        holder: Any = request
        for step in at:
            holder = holder[step] if isinstance(step, int) else getattr(holder, step)
        holder.seconds, holder.nanos = seconds, nanos


def _enum(enum: descriptor.EnumDescriptor, value: Any, name: str) -> Any:
    """An enum field's value: one of its names, or a number by the integer rule (json_format would
    take 2.9, true and other scripts' digits, and fail on Infinity). An unknown number passes, as
    over gRPC, for the RPC to refuse in its own words."""
    if isinstance(value, str) and (value in enum.values_by_name or not _reads_as_integer(value)):
        return value  # a name, or no number: json_format refuses an unknown name (REQUEST_UNDECODABLE)
    try:
        return parse_integer(value, field=name, minimum=-(2**31), maximum=2**31 - 1)
    except InvalidArgument:
        names = ", ".join(v.name for v in enum.values)
        raise InvalidArgument(
            f"{name} must be one of {names}, or its number written with the digits 0-9; {str(value)[:40]!r} is not",
            reason="NUMBER_INVALID",
        ) from None


def _reads_as_integer(text: str) -> bool:
    """Whether Python's int() (json_format's, for an enum) reads ``text``: other scripts' digits
    and spaces too."""
    try:
        int(text)
    except ValueError:
        return False
    return True


def _from_path(route: Route, path: dict[str, str]) -> message.Message:
    """A request holding only the path's fields, decoded by the same rules as a body."""
    document: dict[str, Any] = {
        name: client_json.percent_decoded(raw, f"the path's {name}") for name, raw in path.items()
    }
    _numbers(route.rpc.input_type, document)
    return json_format.ParseDict(document, route.request_type(), ignore_unknown_fields=False)


def _given(route: Route, document: Mapping[str, Any], name: str) -> bool:
    field = route.rpc.input_type.fields_by_name[name]
    return any(document.get(key) is not None for key in {field.name, field.camelcase_name})


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
    (as gRPC's decoder does): a refusal depends on the request alone, so a caller without a
    valid token learns nothing from it. ``overrides``: fields set from headers, replacing what
    the query gave (``after_sequence`` from Last-Event-ID). The decoded message is held to
    gRPC's request size limit."""
    try:
        document = _query_fields(route, client_json.query_pairs(query_string))
        if not route.body and body.strip():  # as a query parameter on a POST is: never dropped unread
            raise ValueError("a GET takes its fields in the query string (?name=value), not in a body: send none")
        if route.body and body.strip():
            parsed = client_json.parse_body(body)
            if not isinstance(parsed, dict):
                raise ValueError(f"the body must be a JSON object, not {client_json.json_kind(parsed)}")
            document = parsed
        for name, value in overrides.items():
            document.pop(route.rpc.input_type.fields_by_name[name].camelcase_name, None)
            document[name] = value
        beyond: _Beyond = []
        _numbers(route.rpc.input_type, document, beyond=beyond)
        request = json_format.ParseDict(document, route.request_type(), ignore_unknown_fields=False)
        _set_beyond(request, beyond)
        from_path = _from_path(route, path)
        for name in route.path_fields:
            value = getattr(from_path, name)
            if _given(route, document, name) and getattr(request, name) != value:
                raise InvalidArgument(
                    f"{name} is {str(value)[:80]!r} in the path and {str(getattr(request, name))[:80]!r} in the "
                    f"{'body' if route.body else 'query'}: give it once, or the same value",
                    reason="PATH_FIELD_MISMATCH",
                )
            setattr(request, name, value)
    except InvalidArgument as exc:
        return Undecodable(exc)
    except RecursionError:  # a document json's reader took, too deep for the steps after it
        return _undecodable(route, client_json.NESTED_TOO_DEEP)
    except (ValueError, TypeError, OverflowError, json_format.ParseError) as exc:
        return _undecodable(route, client_json.in_json_terms(str(exc))[:300] or type(exc).__name__)
    size = request.ByteSize()
    if size > max_request_bytes:
        return too_large(size, max_request_bytes, from_json=True)
    return request


def encode(response: message.Message) -> bytes:
    """The proto3 JSON of a response (or of a ``google.rpc.Status``, its details with their
    ``@type``): ``MessageToDict``, so JSON names and no default values."""
    return json.dumps(json_format.MessageToDict(response), ensure_ascii=False, separators=(",", ":")).encode()
