"""The OpenAPI 3.1 document of the HTTP/JSON API, generated from the protos (the routes of
transport/http/mapping.py and the message descriptors), served at ``/openapi.json``.

Schemas follow proto3 JSON: field names in lowerCamelCase (the snake_case names are accepted on
input too), 64-bit integers as decimal strings, enums by name, Timestamps as RFC 3339 strings,
maps as objects. Errors are ``google.rpc.Status``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf import descriptor

from mnemosyne.transport.http.mapping import Route

_FD = descriptor.FieldDescriptor
_INT64 = {_FD.TYPE_INT64, _FD.TYPE_SINT64, _FD.TYPE_SFIXED64, _FD.TYPE_UINT64, _FD.TYPE_FIXED64}
_INT32 = {_FD.TYPE_INT32, _FD.TYPE_SINT32, _FD.TYPE_SFIXED32, _FD.TYPE_UINT32, _FD.TYPE_FIXED32}
_STATUS = "google.rpc.Status"


class _Schemas:
    def __init__(self) -> None:
        self.components: dict[str, Any] = {}

    def ref(self, message: descriptor.Descriptor, *, without: Iterable[str] = ()) -> dict[str, Any]:
        if message.full_name == "google.protobuf.Timestamp":
            return {"type": "string", "format": "date-time"}
        skipped = set(without)
        name = message.full_name + ("Body" if skipped else "")
        if name not in self.components:
            self.components[name] = {}  # placed first: a message may refer to itself
            self.components[name] = {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    field.camelcase_name: self.field(field) for field in message.fields if field.name not in skipped
                },
            }
        return {"$ref": f"#/components/schemas/{name}"}

    def field(self, field: descriptor.FieldDescriptor) -> dict[str, Any]:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            return {"type": "object", "additionalProperties": self.scalar(field.message_type.fields_by_name["value"])}
        single = self.scalar(field)
        return {"type": "array", "items": single} if field.is_repeated else single

    def scalar(self, field: descriptor.FieldDescriptor) -> dict[str, Any]:
        kind = field.type
        if field.message_type is not None:
            return self.ref(field.message_type)
        if field.enum_type is not None:
            return {"type": "string", "enum": [value.name for value in field.enum_type.values]}
        if kind == _FD.TYPE_BOOL:
            return {"type": "boolean"}
        if kind in _INT64:
            return {"type": "string", "format": "int64", "pattern": "^-?[0-9]{1,20}$"}
        if kind in _INT32:
            return {"type": "integer", "format": "int32"}
        if kind in (_FD.TYPE_DOUBLE, _FD.TYPE_FLOAT):
            return {"type": "number"}
        if kind == _FD.TYPE_BYTES:
            return {"type": "string", "format": "byte"}
        return {"type": "string"}


def _status_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "code": {"type": "integer", "description": "the gRPC status code"},
            "message": {"type": "string"},
            "details": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"@type": {"type": "string"}},
                    "description": "google.rpc.ErrorInfo (reason, domain, metadata) and, for a retryable "
                    "refusal, google.rpc.RetryInfo",
                },
            },
        },
    }


def _operation(route: Route, schemas: _Schemas) -> dict[str, Any]:
    rpc = route.rpc
    parameters: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": schemas.scalar(rpc.input_type.fields_by_name[name]),
        }
        for name in route.path_fields
    ]
    operation: dict[str, Any] = {
        "operationId": f"{rpc.containing_service.name}_{rpc.name}",
        "summary": f"{rpc.containing_service.full_name}.{rpc.name}",
        "tags": [rpc.containing_service.name],
        "parameters": parameters,
        "responses": {
            "default": {
                "description": "an error: google.rpc.Status",
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{_STATUS}"}}},
            }
        },
    }
    if route.body:
        operation["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": schemas.ref(rpc.input_type, without=route.path_fields)}},
        }
    else:
        for field in rpc.input_type.fields:
            if field.name in route.path_fields:
                continue
            if field.message_type is not None and field.message_type.full_name != "google.protobuf.Timestamp":
                continue  # not settable from a query string
            parameters.append(
                {"name": field.name, "in": "query", "required": False, "schema": schemas.field(field)}
                | ({"explode": True} if field.is_repeated else {})
            )
    response = schemas.ref(rpc.output_type)
    if route.streams:
        parameters.append(
            {
                "name": "Last-Event-ID",
                "in": "header",
                "required": False,
                "schema": {"type": "string", "pattern": "^[0-9]{1,19}$"},
                "description": "resume after this event id (an Event's sequence)",
            }
        )
        operation["responses"]["200"] = {
            "description": f"Server-Sent Events, each data line one {rpc.output_type.full_name} as JSON",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    else:
        operation["responses"]["200"] = {
            "description": rpc.output_type.full_name,
            "content": {"application/json": {"schema": response}},
        }
    return operation


def document(routes: Iterable[Route], *, version: str) -> dict[str, Any]:
    schemas = _Schemas()
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.template, {})[route.verb.lower()] = _operation(route, schemas)
    schemas.components[_STATUS] = _status_schema()
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Mnemosyne",
            "version": version,
            "description": "The HTTP/JSON form of Mnemosyne's gRPC API (the google.api.http mapping of its protos).",
        },
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.components.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }
