"""A path field given again in an HTTP/JSON request (transport/http/mapping.py): in the body of a
POST, or the query of a GET. The same value is accepted (whatever the call then answers), another
value is refused 400 PATH_FIELD_MISMATCH, a value of another JSON type 400 naming the field; every
refusal comes after authentication (no token: 401, whatever the body), and never a 500.

Generated from the route table (every route with path fields, every path field, its proto and
JSON names), each variant sent with the admin token and without a token, to one real server."""

from __future__ import annotations

import http.client
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from google.protobuf.descriptor import FieldDescriptor

from mnemosyne.transport.http.mapping import Route
from tests.http_support import ROUTES, Reply
from tests.support import ServerProcess, tokens_json

ADMIN = "path-fields-admin"
SAME, DIFFERENT, WRONG_TYPE = "same", "different", "wrong type"
DECODING_REASONS = {"PATH_FIELD_MISMATCH", "REQUEST_UNDECODABLE", "NUMBER_INVALID"}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("path-fields") / "data",
        http=True,
        env={"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"]})},
    )
    process.start()
    yield process
    process.stop()


@dataclass(frozen=True)
class Variant:
    key: str  # the proto or the JSON name
    value: Any
    expect: str  # SAME, DIFFERENT or WRONG_TYPE


def _integer(field: FieldDescriptor) -> bool:
    return field.cpp_type in (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_INT32)


def _path_value(field: FieldDescriptor, tenant: str) -> str:
    return "7" if _integer(field) else tenant


def _variants(route: Route, field: FieldDescriptor, path_value: str) -> list[Variant]:
    keys = sorted({field.name, field.json_name})
    if route.body:  # JSON values
        if _integer(field):
            same: list[Any] = [7, "7", None]  # null: not given
            different: list[Any] = [8, "8", 0]
            wrong: list[Any] = [7.0, 7.5, "٧", "7 ", True, {"id": 7}, [7]]
        else:
            same = [path_value, None]
            different = [path_value + "x", "", "ACME"]
            wrong = [5, 5.5, True, {"id": path_value}, [path_value]]
    elif _integer(field):  # query strings
        same, different, wrong = ["7"], ["8", "0"], ["٧", "7.0", "", "1e1", "7 "]
    else:
        same, different, wrong = [path_value], [path_value + "x", ""], []
    return [
        Variant(key, value, expect)
        for key in keys
        for values, expect in ((same, SAME), (different, DIFFERENT), (wrong, WRONG_TYPE))
        for value in values
    ]


def _send(port: int, route: Route, path_values: dict[str, str], variant: Variant, token: str | None) -> Reply:
    path = route.template
    for name, value in path_values.items():
        path = path.replace("{" + name + "}", quote(value, safe=""))
    headers = {"authorization": f"Bearer {token}"} if token else {}
    body = None
    if route.body:
        body = json.dumps({variant.key: variant.value}).encode()
        headers["content-type"] = "application/json"
    else:
        path += "?" + urlencode({variant.key: variant.value})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(route.verb, path, body=body, headers=headers)
        response = connection.getresponse()
        streaming = response.getheader("content-type", "").startswith("text/event-stream")
        # An accepted stream (WatchEvents) stays open: its status is the answer.
        return Reply(response.status, {}, b"" if streaming else response.read())
    finally:
        connection.close()


def _reason(reply: Reply) -> str:
    try:
        return reply.reason
    except (ValueError, KeyError, StopIteration):
        return ""


ROUTES_WITH_PATH_FIELDS = sorted(name for name, route in ROUTES.items() if route.path_fields)


def test_every_route_with_path_fields_is_covered() -> None:
    assert {"Retain", "UpdateMemory", "ForgetMemory", "GetMemory", "GetEvent", "Flush"} <= set(ROUTES_WITH_PATH_FIELDS)
    assert any(route.body for route in ROUTES.values() if route.path_fields)
    assert any(not route.body for route in ROUTES.values() if route.path_fields)


@pytest.mark.parametrize("rpc", ROUTES_WITH_PATH_FIELDS)
def test_a_path_field_given_again_is_accepted_when_equal_and_refused_otherwise(api: ServerProcess, rpc: str) -> None:
    route = ROUTES[rpc]
    fields = route.rpc.input_type.fields_by_name
    tenant = f"pf-{uuid.uuid4().hex[:10]}"
    path_values = {name: _path_value(fields[name], tenant) for name in route.path_fields}
    failures: list[str] = []
    sent = 0
    for name in route.path_fields:
        for variant in _variants(route, fields[name], path_values[name]):
            sent += 1
            shown = f"{name}: {variant.key}={variant.value!r} ({variant.expect})"
            anonymous = _send(api.http_port, route, path_values, variant, None)
            if (anonymous.status, _reason(anonymous)) != (401, "TOKEN_MISSING"):
                failures.append(f"{shown} without a token: {anonymous.status} {anonymous.body[:200]!r}")
            reply = _send(api.http_port, route, path_values, variant, ADMIN)
            reason = _reason(reply)
            message = reply.json().get("message", "") if reply.status >= 400 else ""
            if variant.expect == SAME:
                ok = reply.status < 500 and reason not in DECODING_REASONS
            elif variant.expect == DIFFERENT:
                ok = (reply.status, reason) == (400, "PATH_FIELD_MISMATCH") and name in message
            else:
                ok = reply.status == 400 and reason in DECODING_REASONS and name in message
            if not ok:
                failures.append(f"{shown}: {reply.status} {reply.body[:300]!r}")
    assert sent >= 3
    assert not failures, "\n".join(failures)
