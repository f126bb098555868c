"""The HTTP port is safe to open: foreign Hosts, foreign Origins and non-JSON writes are refused
and write nothing; hostile bodies, parameters and paths get a 4xx with their reason; tokens work
as over gRPC (PERMISSION_DENIED before any existence check, no file created by a read); the
OpenAPI document is valid and a property-based run against it finds no 5xx; WatchEvents over
Server-Sent Events resumes after a dropped connection without missing a transition."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
import pytest
import requests
import schemathesis
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate
from prometheus_client.parser import text_string_to_metric_families
from schemathesis.core.result import Ok
from starlette.types import Message, Receive, Scope, Send

from mnemosyne.client import MemoryClient
from mnemosyne.errors import InvalidArgument
from mnemosyne.transport.http import openapi
from mnemosyne.transport.http.guard import Guard
from mnemosyne.transport.http.mapping import routes
from mnemosyne.transport.server import SERVICES
from mnemosyne.v1 import events_pb2, events_pb2_grpc
from tests.http_support import request, server_sent_events
from tests.support import ServerProcess, gauge, tokens_json, wait_until


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("http-safety") / "data",
        http=True,
        args=["--http-cors-origin", "https://console.example", "--max-request-bytes", "65536"],
    )
    process.start()
    yield process
    process.stop()


def _memories(api: ServerProcess, tenant: str) -> int:
    reply = request(api.http_port, "GET", f"/v1/tenants/{tenant}/memories")
    return len(reply.json().get("memories", [])) if reply.status == 200 else -1


RETAIN = {"text": "the launch code is 0000"}


@pytest.mark.parametrize(
    ("headers", "status", "reason"),
    [
        ({"host": "evil.example"}, 403, "HOST_FORBIDDEN"),
        ({"host": "evil.example:80"}, 403, "HOST_FORBIDDEN"),
        ({"host": "127.0.0.1.evil.example"}, 403, "HOST_FORBIDDEN"),
        ({"origin": "http://evil.example"}, 403, "ORIGIN_FORBIDDEN"),
        ({"origin": "null"}, 403, "ORIGIN_FORBIDDEN"),
        ({"content-type": "text/plain"}, 415, "CONTENT_TYPE_UNSUPPORTED"),
        ({"content-type": "application/x-www-form-urlencoded"}, 415, "CONTENT_TYPE_UNSUPPORTED"),
        ({"content-type": "multipart/form-data; boundary=x"}, 415, "CONTENT_TYPE_UNSUPPORTED"),
        # JSON is UTF-8: a body said to be latin-1 was read as UTF-8, as other characters than meant.
        ({"content-type": "application/json; charset=latin-1"}, 415, "CONTENT_TYPE_UNSUPPORTED"),
        ({"content-type": 'application/json; charset="utf-16"'}, 415, "CONTENT_TYPE_UNSUPPORTED"),
        # A coding was never read: a gzip body was "not UTF-8", a plain one labelled br was stored.
        ({"content-encoding": "br"}, 415, "CONTENT_ENCODING_UNSUPPORTED"),
        ({"content-encoding": "gzip"}, 415, "CONTENT_ENCODING_UNSUPPORTED"),
    ],
)
def test_a_foreign_host_or_origin_or_a_non_json_write_is_refused_and_writes_nothing(
    api: ServerProcess, tenant: str, headers: dict[str, str], status: int, reason: str
) -> None:
    reply = request(api.http_port, "POST", f"/v1/tenants/{tenant}/memories", json.dumps(RETAIN).encode(), headers)
    assert (reply.status, reply.reason) == (status, reason)
    assert "access-control-allow-origin" not in reply.headers
    assert not api.tenant_file(tenant).exists()
    # The same request from this server's own origin, or from the named CORS origin, is taken.
    own = request(
        api.http_port,
        "POST",
        f"/v1/tenants/{tenant}/memories",
        json.dumps(RETAIN).encode(),
        {"origin": f"http://127.0.0.1:{api.http_port}"},
    )
    assert own.status == 200 and "access-control-allow-origin" not in own.headers
    assert _memories(api, tenant) == 1


@pytest.mark.parametrize(
    "time",
    [
        "2026-13-45T99:99:99Z",
        "2026-02-30T00:00:00Z",
        "2026-01-01T24:00:00Z",
        "yesterday",
        "2026-01-01T00:00:00.1234567891Z",
    ],
)
def test_a_time_that_is_no_rfc_3339_time_is_number_invalid_on_every_field(
    api: ServerProcess, tenant: str, time: str
) -> None:
    """A time that is no RFC 3339 time of a real day is 400 NUMBER_INVALID saying what a time is,
    as a time in other scripts' digits was: one json_format could not read at all was
    REQUEST_UNDECODABLE in the words of Python's strptime ("time data '2026-13-45T99:99:99' does
    not match format '%Y-%m-%dT%H:%M:%S'", "day is out of range for month")."""
    replies = [
        request(api.http_port, "POST", f"/v1/tenants/{tenant}/memories", json_body={"text": "a", "occurredAt": time}),
        request(api.http_port, "POST", f"/v1/tenants/{tenant}/memories", json_body={"text": "a", "expiresAt": time}),
        request(api.http_port, "GET", f"/v1/tenants/{tenant}/events?accepted_after={quote(time)}"),
    ]
    for reply in replies:
        message = reply.json()["message"]
        assert (reply.status, reply.reason) == (400, "NUMBER_INVALID"), message
        assert "must be an RFC 3339 time" in message and "%Y" not in message and "time data" not in message, message
    assert not api.tenant_file(tenant).exists()


def test_a_body_in_a_transfer_coding_other_than_chunked_is_refused_and_writes_nothing(
    api: ServerProcess, tenant: str
) -> None:
    """The HTTP parser reads a chunked body whatever codings its Transfer-Encoding names before
    ``chunked`` and hands on what the chunks hold: a gzip body ("gzip, chunked") was refused as
    "not UTF-8", and a plain one labelled gzip was stored. It is 501 TRANSFER_ENCODING_UNSUPPORTED
    (RFC 9112 §6.1), on the mem0 paths too, and a body chunked alone is read."""

    def chunked(data: bytes) -> bytes:
        return b"%x\r\n" % len(data) + data + b"\r\n0\r\n\r\n"

    body = json.dumps(RETAIN).encode()
    headers = {"mnemosyne-tenant": tenant}
    for path, coding, data in (
        (f"/v1/tenants/{tenant}/memories", "gzip, chunked", gzip.compress(body)),
        (f"/v1/tenants/{tenant}/memories", "deflate, chunked", body),
        ("/v3/memories/add/", "x-custom , Chunked", b'{"messages": "the launch code is 0000"}'),
    ):
        reply = request(api.http_port, "POST", path, chunked(data), {**headers, "transfer-encoding": coding})
        assert (reply.status, reply.reason) == (501, "TRANSFER_ENCODING_UNSUPPORTED"), (coding, reply.body[:200])
        assert "send the body uncompressed" in reply.json()["message"]
    assert not api.tenant_file(tenant).exists()
    path = f"/v1/tenants/{tenant}/memories"
    reply = request(api.http_port, "POST", path, chunked(body), {"transfer-encoding": "chunked"})
    assert reply.status == 200 and _memories(api, tenant) == 1


@pytest.mark.parametrize("content_type", ["application/json; charset=UTF-8", 'application/json;charset="utf8"'])
def test_a_json_body_said_to_be_utf8_is_taken(api: ServerProcess, tenant: str, content_type: str) -> None:
    reply = request(
        api.http_port,
        "POST",
        f"/v1/tenants/{tenant}/memories",
        json.dumps(RETAIN).encode(),
        {"content-type": content_type},
    )
    assert reply.status == 200, reply.body[:300]


def _raw_exchange(port: int, head: str, body: bytes = b"") -> tuple[int, str]:
    """The status and ErrorInfo reason ("" if none) of a request sent as written."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(head.encode() + body)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    status = int(answer.split(b" ", 2)[1])
    reason = re.search(rb'"reason":"(\w+)"', answer)
    return status, reason.group(1).decode() if reason else ""


@pytest.mark.parametrize("target", ["/v1/ping", "/v3/memories/?user_id=u", "/mcp?tenant=t", "/console/", "/docs/"])
def test_two_hosts_or_a_foreign_host_in_an_absolute_target_are_refused_on_every_route(
    api: ServerProcess, target: str
) -> None:
    """Two Host headers were taken (the guard read the first), and a target given as an absolute
    URL was answered by its Host header, though its own host stands for Host (RFC 9112 §3.2)."""
    port = api.http_port
    end = "Connection: close\r\n\r\n"
    two = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n{end}"
    assert _raw_exchange(port, two) == (400, "HOST_INVALID")
    foreign = f"GET http://evil.example{target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{end}"
    assert _raw_exchange(port, foreign) == (403, "HOST_FORBIDDEN")
    own = f"GET http://127.0.0.1:{port}{target} HTTP/1.1\r\nHost: evil.example\r\n{end}"
    assert _raw_exchange(port, own)[1] != "HOST_FORBIDDEN"


@pytest.mark.parametrize("target", ["/v1/ping", "/v3/memories/?user_id=u", "/mcp?tenant=t", "/console/", "/docs/"])
def test_an_http_1_1_request_without_a_host_is_400_on_every_route(api: ServerProcess, target: str) -> None:
    """It was 403 HOST_FORBIDDEN for "Host ''"; RFC 9112 §3.2 asks 400 of an HTTP/1.1 request
    without Host. HTTP/1.0 may lack Host: it is checked as Host "", not in the allow-list."""
    port = api.http_port
    assert _raw_exchange(port, f"GET {target} HTTP/1.1\r\nConnection: close\r\n\r\n") == (400, "HOST_INVALID")
    absolute = f"GET http://127.0.0.1:{port}{target} HTTP/1.1\r\nConnection: close\r\n\r\n"
    assert _raw_exchange(port, absolute) == (400, "HOST_INVALID")
    assert _raw_exchange(port, f"GET {target} HTTP/1.0\r\n\r\n") == (403, "HOST_FORBIDDEN")


def test_cors_headers_only_for_the_named_origin(api: ServerProcess, tenant: str) -> None:
    origin = "https://console.example"
    preflight = request(
        api.http_port,
        "OPTIONS",
        f"/v1/tenants/{tenant}/memories",
        headers={"origin": origin, "access-control-request-method": "POST"},
    )
    assert preflight.status == 204
    assert preflight.headers["access-control-allow-origin"] == origin
    assert "authorization" in preflight.headers["access-control-allow-headers"]
    reply = request(api.http_port, "GET", "/v1/ping", headers={"origin": origin})
    assert reply.status == 200 and reply.headers["access-control-allow-origin"] == origin
    plain = request(api.http_port, "GET", "/v1/ping")
    assert plain.status == 200 and "access-control-allow-origin" not in plain.headers


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "reason"),
    [
        ("POST", "/v1/tenants/{t}/memories", b"{not json", 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v1/tenants/{t}/memories", b'["a list"]', 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v1/tenants/{t}/memories", b'{"text": 5}', 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v1/tenants/{t}/memories", b'{"text": "a", "text": "b"}', 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v1/tenants/{t}/memories", b'{"text": "a", "colour": "red"}', 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v1/tenants/{t}/memories", b'{"text": "a", "tenant": "someone-else"}', 400, "PATH_FIELD_MISMATCH"),
        ("POST", "/v1/tenants/{t}/memories", b"\xff\xfe\x00", 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v1/tenants/{t}/memories", b"[" * 100_000, 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v1/tenants/{t}/memories", b'{"text": "' + b"x" * 140_000 + b'"}', 413, "REQUEST_TOO_LARGE"),
        ("POST", "/v1/tenants/{t}/memories:recall", b'{"query": "q", "k": 1e400}', 400, "NUMBER_INVALID"),
        ("POST", "/v1/tenants/{t}/memories:recall", b'{"query": "q", "k": "many"}', 400, "NUMBER_INVALID"),
        # Past the 4,300 digits Python's int() reads: was REQUEST_UNDECODABLE, "sys.set_int_max_str_digits()".
        (
            "POST",
            "/v1/tenants/{t}/memories:recall",
            b'{"query": "q", "k": ' + b"9" * 5000 + b"}",
            400,
            "NUMBER_INVALID",
        ),
        (
            "POST",
            "/v1/tenants/{t}/expiryPolicy",
            b'{"policy": {"graceSeconds": -' + b"9" * 5000 + b"}}",
            400,
            "NUMBER_INVALID",
        ),
        ("POST", "/v1/tenants/{t}/memories:recall", b'{"query": "q", "mode": "PSYCHIC"}', 400, "REQUEST_UNDECODABLE"),
        ("POST", "/v1/tenants/{t}/memories:recall", b'{"query": "q", "k": 100000}', 400, "K_OUT_OF_RANGE"),
        ("GET", "/v1/tenants/{t}/memories/abc", None, 400, "NUMBER_INVALID"),
        ("GET", "/v1/tenants/{t}/memories/99999999999999999999999", None, 400, "NUMBER_INVALID"),
        ("GET", "/v1/tenants/{t}/memories/%FF", None, 400, "REQUEST_UNDECODABLE"),
        ("GET", "/v1/tenants/{t}/memories?page_size=ten", None, 400, "NUMBER_INVALID"),
        ("GET", "/v1/tenants/{t}/memories?page_size=1&page_size=2", None, 400, "REQUEST_UNDECODABLE"),
        ("GET", "/v1/tenants/{t}/memories?include_forgotten=maybe", None, 400, "REQUEST_UNDECODABLE"),
        ("GET", "/v1/tenants/{t}/memories?secret=1", None, 400, "REQUEST_UNDECODABLE"),
        # The body of a GET was dropped unread (the whole listing answered), as a query on a POST is not.
        ("GET", "/v1/tenants/{t}/memories", b'{"pageSize": 1}', 400, "REQUEST_UNDECODABLE"),
        ("GET", "/v1/tenants/{t}/events?accepted_after=yesterday", None, 400, "NUMBER_INVALID"),
        ("GET", "/v1/tenants/..%2F..%2Fetc/stats", None, 400, "TENANT_INVALID"),
        ("GET", "/v1/tenants/%2E%2E/stats", None, 400, "TENANT_INVALID"),
        ("GET", "/v1/tenants/{t}/memories/1/extra", None, 404, "ROUTE_NOT_FOUND"),
        ("DELETE", "/v1/tenants/{t}/memories/1", b"{}", 405, "METHOD_NOT_ALLOWED"),
        ("POST", "/openapi.json", b"{}", 405, "METHOD_NOT_ALLOWED"),
        ("POST", "/v1/tenants/{t}/hotPath:flush", b'{"timeoutSeconds": "NaN"}', 400, "NUMBER_INVALID"),
        ("POST", "/v1/tenants/{t}/hotPath:flush", b'{"timeoutSeconds": 1e300}', 400, "TIMEOUT_INVALID"),
    ],
)
def test_hostile_input_gets_a_4xx_with_its_reason_and_changes_nothing(
    api: ServerProcess, tenant: str, method: str, path: str, body: bytes | None, status: int, reason: str
) -> None:
    reply = request(api.http_port, method, path.replace("{t}", tenant), body, {"content-type": "application/json"})
    assert (reply.status, reply.reason) == (status, reason), reply.body[:300]
    assert reply.json()["message"]
    assert not api.tenant_file(tenant).exists()


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        ("/v1/tenants/{t}/memories", b"[" * 100_000, "nested too deep"),
        ("/v1/tenants/{t}/memories", b'{"text": 5}', "text field: must be a string, not a number"),
        ("/v1/tenants/{t}/memories", b'{"text": "a", "metadata": {"k": null}}', "must be a string, not null"),
        ("/v1/tenants/{t}/memories", b'{"text": "a", "metadata": [1]}', "metadata field: must be an object"),
        ("/v1/tenants/{t}/memories:recall", b'{"query": "q", "scopes": "s"}', "scopes field: must be an array"),
        ("/v1/tenants/{t}/memories", b'{"text": "a", "metadata": {"k": [1]}}', "must be a string, not an array"),
        ("/v3/memories/add/", b"[" * 100_000, "nested too deep"),
        # Each said Python's name of the type: "not NoneType", "not int", "True is not", "not dict".
        ("/v1/tenants/{t}/memories:recall", b"null", "must be a JSON object, not null"),
        ("/v1/tenants/{t}/memories:recall", b"7", "must be a JSON object, not a number"),
        ("/v1/tenants/{t}/memories:recall", b'{"query": "q", "k": true}', "true is not"),
        ("/v1/tenants/{t}/expiryPolicy", b'{"policy": false}', "not true or false"),
        ("/v3/memories/add/", b'"hi"', "must be a JSON object, not a string"),
        ("/v3/memories/add/", b'{"messages": [{"role": 5, "content": "hi"}]}', "role must be a string, not a number"),
        ("/v3/memories/add/", b'{"messages": "hi", "metadata": [1]}', "metadata must be an object, not an array"),
        ("/v3/memories/search/", b'{"query": "q", "filters": {"metadata": {"k": {}}}}', "boolean, not an object"),
        # Said in Python's codec's words: "'utf-8' codec can't decode byte", "decode using utf-8-sig".
        ("/v1/tenants/{t}/memories", b'\xef\xbb\xbf{"text": "a"}', "starts with a byte order mark"),
        ("/v3/memories/add/", b'\xef\xbb\xbf{"messages": "a"}', "starts with a byte order mark"),
        ("/v1/tenants/{t}/memories", b'{"text": "\xff"}', "0xff at offset 10 is not part of a UTF-8 character"),
        ("/v3/memories/add/", b'{"messages": "\xc3"}', "not UTF-8 text"),
        ("/v1/tenants/%ff/memories", b'{"text": "a"}', "the path's tenant '%ff' is not UTF-8 once percent-decoded"),
        ("/v1/tenants/{t}/memories:recall?x=%ff", b"{}", "the query parameter 'x' is not UTF-8"),
        ("/v3/memories/?page=%ff", b"{}", "the query parameter 'page' is not UTF-8 once percent-decoded"),
        # A value echoed in a number's refusal, or in a time's, was Python's: {'a': 1}, nan, inf, True.
        ("/v1/tenants/{t}/memories:recall", b'{"query": "q", "k": {"a": [1]}}', 'digits 0-9; {"a": [1]} is not'),
        ("/v1/tenants/{t}/memories:recall", b'{"query": "q", "k": NaN}', "digits 0-9; NaN is not"),
        (
            "/v1/tenants/{t}/memories:recall",
            b'{"query": "q", "k": -Infinity}',
            "digits 0-9; -Infinity (a number past -1.8e308) is not",
        ),
        ("/v1/tenants/{t}/memories:recall", b'{"query": "q", "k": 1e400}', "Infinity (a number past 1.8e308) is not"),
        ("/v1/tenants/{t}/memories:recall", b'{"query": "q", "k": ' + b"9" * 5000 + b"}", "a number past 1.8e308"),
        ("/v3/memories/search/", b'{"query": "q", "top_k": {"n": [5]}}', 'digits 0-9; {"n": [5]} is not'),
        (
            "/v1/tenants/{t}/memories",
            b'{"text": "a", "occurredAt": true}',
            "occurredAt field: must be a string (an RFC 3339 time such as",
        ),
        ("/v1/tenants/{t}/memories", b'{"text": "a", "expiresAt": {"a": 1}}', '"2024-01-02T03:04:05Z"), not an object'),
        ("/v1/tenants/{t}/memories", b'{"text": "a", "occurredAt": NaN}', '"2024-01-02T03:04:05Z"), not a number'),
        (
            "/v1/tenants/{t}/memories",
            b'{"text": "a", "occurredAt": false}',
            '"2024-01-02T03:04:05Z"), not true or false',
        ),
        ("/v3/memories/add/", b'{"messages": "hi", "metadata": {"k": NaN}}', "'k' is NaN, which is no JSON number"),
        ("/v3/memories/add/", b'{"messages": "hi", "metadata": {"k": -1e999}}', "'k' is -Infinity (a number past"),
        # A field under its proto name and its JSON name: the last was taken without a word.
        (
            "/v1/tenants/{t}/memories",
            b'{"text": "a", "occurredAt": "2024-01-01T00:00:00Z", "occurred_at": "2025-01-01T00:00:00Z"}',
            "occurred_at is given twice, as 'occurred_at' and 'occurredAt'",
        ),
        (
            "/v1/tenants/{t}/memories:batchRetain",
            b'{"items": [{"text": "a"}, {"text": "b", "occurred_at": null, "occurredAt": "2024-01-01T00:00:00Z"}]}',
            "items[1].occurred_at is given twice",
        ),
        (
            "/v1/tenants/{t}/expiryPolicy",
            b'{"policy": {"graceSeconds": 1, "grace_seconds": 2}}',
            "policy.grace_seconds is given twice, as 'grace_seconds' and 'graceSeconds'",
        ),
    ],
)
def test_a_body_of_the_wrong_shape_is_told_in_json_s_words_not_python_s(
    api: ServerProcess, tenant: str, path: str, body: bytes, says: str
) -> None:
    """What is wrong with a body is said in JSON's words (a string, a number, an array, null, nested
    too deep), never in the words of the server's language ("expected string or bytes-like object,
    got 'int'", "maximum recursion depth exceeded")."""
    headers = {"content-type": "application/json", "mnemosyne-tenant": tenant}
    reply = request(api.http_port, "POST", path.replace("{t}", tenant), body, headers)
    message = reply.json()["message"]
    assert reply.status == 400 and says in message, (reply.status, message)
    for python in (
        "bytes-like",
        "recursion",
        "NoneType",
        "'int'",
        "dict",
        "[]",
        "not int",
        "not str",
        "True is",
        "None is",
        "codec",
        "utf-8-sig",
        "{'",
        "inf ",
        "nan ",
        ": True",
        "not a string: ",
    ):
        assert python not in message, message
    assert not api.tenant_file(tenant).exists()


def test_a_body_over_its_limit_is_refused_naming_the_limit_that_applies_and_how_to_raise_it(
    api: ServerProcess, tenant: str
) -> None:
    """With --max-request-bytes 65536, an HTTP body may have 131,072 bytes (JSON takes more than
    protobuf) and the request it decodes to 65,536. A refusal names the limit it applied and how
    to raise it, on the JSON API, /mcp and the mem0 routes alike (each said "the request has 131073
    bytes; the limit is 65536" of a body of any size, and the mem0 routes nothing of a flag)."""
    for path in (f"/v1/tenants/{tenant}/memories", f"/mcp?tenant={tenant}", "/v3/memories/add/"):
        body = b'{"text": "' + b"x" * 140_000 + b'"}'
        reply = request(api.http_port, "POST", path, body, {"accept": "application/json, text/event-stream"})
        assert (reply.status, reply.reason) == (413, "REQUEST_TOO_LARGE"), (path, reply.body[:300])
        message, info = reply.json()["message"], reply.json()["details"][0]
        assert "larger than 131072 bytes" in message and "--max-request-bytes" in message, (path, message)
        assert "131073" not in message and info["metadata"]["limit"] == "131072", (path, reply.body[:500])
    # Within the body's limit, but what it decodes to is over the request's: that limit, by name.
    body = b'{"text": "' + b"x" * 70_000 + b'"}'
    reply = request(api.http_port, "POST", f"/v1/tenants/{tenant}/memories", body)
    assert (reply.status, reply.reason) == (413, "REQUEST_TOO_LARGE"), reply.body[:300]
    message = reply.json()["message"]
    assert re.search(r"decodes to has 700[0-9]{2} bytes", message) and "65536 (--max-request-bytes" in message, message
    assert "raise --max-request-bytes" in message, message
    assert not api.tenant_file(tenant).exists()


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/tenants/{t}/expiryPolicy", b'{"policy": []}', "policy"),
        ("/v1/tenants/{t}/expiryPolicy", b'{"policy": ["graceSeconds"]}', "policy"),
        ("/v1/tenants/{t}/expiryPolicy", b'{"policy": 5}', "policy"),
        ("/v1/tenants/{t}/expiryPolicy", b'{"policy": "defaults"}', "policy"),
        ("/v1/tenants/{t}/memories:batchRetain", b'{"items": [[]]}', "items[0]"),
        ("/v1/tenants/{t}/memories:batchRetain", b'{"items": [{"text": "a"}, null]}', "items[1]"),
    ],
)
def test_a_message_field_given_no_object_is_refused_naming_it_and_writes_nothing(
    api: ServerProcess, tenant: str, path: str, body: bytes, field: str
) -> None:
    """proto3 JSON's parser reads a list as an object of its items' names: ``"policy": []`` was the
    empty policy, which reset a tenant's expiry policy; a number or a string was "'int' object is
    not iterable". Every message field takes a JSON object, or null where null means unset."""
    reply = request(api.http_port, "POST", path.replace("{t}", tenant), body)
    assert (reply.status, reply.reason) == (400, "REQUEST_UNDECODABLE"), reply.body[:300]
    assert f"{field} must be a JSON object" in reply.json()["message"]
    assert not api.tenant_file(tenant).exists()


def test_a_refused_call_carries_retry_after(server_factory, tmp_path: Path) -> None:
    parked = tmp_path / "park"
    parked.touch()
    server = server_factory(
        http=True,
        args=["--worker-threads", "1", "--calls-per-tenant", "1", "--queued-calls-per-tenant", "1"],
        env={"MNEMOSYNE_TEST_PARK_TENANT": "busy", "MNEMOSYNE_TEST_PARK_FILE": str(parked)},
    ).start()
    threads = [
        threading.Thread(target=request, args=(server.http_port, "GET", "/v1/tenants/busy/stats")) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)  # one call parked on the only worker, one queued: the queue is full
        reply = request(server.http_port, "GET", "/v1/tenants/busy/stats")
        assert (reply.status, reply.reason) == (429, "QUEUED_CALLS_PER_TENANT_REACHED")
        assert reply.headers["retry-after"] == "1"
        retry = next(d for d in reply.json()["details"] if d["@type"].endswith("RetryInfo"))
        assert retry["retryDelay"] == "0.250s"
    finally:
        parked.unlink()
        for thread in threads:
            thread.join()


def test_tokens_work_as_over_grpc_and_a_read_creates_no_file(server_factory) -> None:
    server = server_factory(
        http=True, env={"MNEMOSYNE_TOKENS": tokens_json({"alice-token": ["alice"], "root-token": ["*"]})}
    ).start()
    port = server.http_port
    alice = {"authorization": "Bearer alice-token"}
    assert request(port, "GET", "/v1/tenants/alice/stats").reason == "TOKEN_MISSING"
    assert request(port, "GET", "/v1/tenants/alice/stats", headers={"authorization": "Bearer nope"}).status == 401
    # Forbidden before anything about the tenant is looked up: the same answer whether it exists.
    forbidden = request(port, "GET", "/v1/tenants/bob/stats", headers=alice)
    assert (forbidden.status, forbidden.reason) == (403, "TENANT_FORBIDDEN")
    assert request(port, "GET", "/v1/tenants", headers=alice).reason == "ADMIN_REQUIRED"
    read = request(port, "GET", "/v1/tenants/alice/memories/1", headers=alice)
    assert read.status == 404, read.body
    assert not server.tenant_file("alice").exists()
    wrote = request(port, "POST", "/v1/tenants/alice/memories", headers=alice, json_body=RETAIN)
    assert wrote.status == 200
    listed = request(port, "GET", "/v1/tenants", headers={"authorization": "Bearer root-token"})
    assert listed.json()["tenants"] == ["alice"]


def test_the_openapi_document_is_valid_and_names_every_route(api: ServerProcess) -> None:
    reply = request(api.http_port, "GET", "/openapi.json")
    document = reply.json()
    validate(document)
    operations = {(verb.upper(), path) for path, item in document["paths"].items() for verb in item}
    assert operations == {(route.verb, route.template) for route in routes(SERVICES)}


SCHEMA = schemathesis.openapi.from_dict(openapi.document(routes(SERVICES), version="test"))


BODY_ROUTES = [route for route in routes(SERVICES) if route.body]
LONE = "\\ud800"  # JSON text: an escape of half a surrogate pair, alone


def _lone_surrogate_bodies(route: Any) -> Iterator[str]:
    """JSON bodies of ``route`` each holding one lone surrogate escape: in each of the request's
    fields (derived from the proto, so a new field cannot be missed) as a string, inside a list,
    as an object's key, after a whole pair, and as a second half alone; and as a key of the body."""
    yield f'{{"{LONE}": 1}}'
    for field in route.rpc.input_type.fields:
        if field.name in route.path_fields:
            continue
        for value in (f'"{LONE}"', f'["{LONE}"]', f'{{"{LONE}": "x"}}', f'"a{LONE}\\udc00{LONE}"', '"\\uDFFF"'):
            yield f'{{"{field.camelcase_name}": {value}}}'


@pytest.mark.parametrize("route", BODY_ROUTES, ids=[route.method.rsplit("/", 1)[1] for route in BODY_ROUTES])
def test_a_lone_surrogate_escape_anywhere_in_a_body_is_refused_as_undecodable(
    api: ServerProcess, tenant: str, route: Any
) -> None:
    path = route.template
    for name in route.path_fields:
        path = path.replace(f"{{{name}}}", tenant if name == "tenant" else "1")
    for body in _lone_surrogate_bodies(route):
        reply = request(api.http_port, route.verb, path, body.encode(), {"content-type": "application/json"})
        assert (reply.status, reply.reason) == (400, "REQUEST_UNDECODABLE"), (body, reply.body[:300])
        assert "surrogate" in reply.json()["message"]
    assert not api.tenant_file(tenant).exists()


def test_a_surrogate_pair_escape_is_text_and_kept_whole(api: ServerProcess, tenant: str) -> None:
    body = b'{"text": "a \\ud83d\\ude00 b \\\\ud800"}'  # an emoji as its pair, and an escaped backslash
    reply = request(api.http_port, "POST", f"/v1/tenants/{tenant}/memories", body, {"content-type": "application/json"})
    assert reply.status == 200, reply.body[:300]
    with MemoryClient(api.target) as client:
        assert [m.text for m in client.list_memories(tenant).memories] == ["a \U0001f600 b \\ud800"]


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("http-fuzz") / "data", http=True)
    process.start()
    yield process
    process.stop()


# Each operation a test of its own, named by it: schemathesis's own ``SCHEMA.parametrize()`` gives
# its tests one node id, so pytest-xdist (scripts/test) ran one of them and dropped the others.
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations() if isinstance(result, Ok)]
assert len(OPERATIONS) == len(routes(SERVICES)), "an operation schemathesis could not read"


@pytest.mark.parametrize("operation", OPERATIONS, ids=[operation.label for operation in OPERATIONS])
@settings(max_examples=16, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_property_based_requests_never_get_a_server_error(
    operation: Any, fuzz_target: ServerProcess, data: st.DataObject
) -> None:
    # Valid requests and ones that break the schema (schemathesis's positive and negative modes).
    case = data.draw(st.one_of(*(operation.as_strategy(generation_mode=mode) for mode in schemathesis.GenerationMode)))
    # Sent with stream=True: a watch's Server-Sent Events never end; its status is what is checked.
    with requests.request(
        **case.as_transport_kwargs(base_url=fuzz_target.http_url), timeout=30, stream=True
    ) as response:
        assert response.status_code < 500, (case.method, case.formatted_path, response.status_code, response.text)
        if response.status_code >= 400:
            assert response.json()["details"][0]["reason"]


def test_watch_events_over_sse_resumes_after_a_dropped_connection(api: ServerProcess, tenant: str) -> None:
    with MemoryClient(api.target) as client:
        client.hot_path(tenant, "enable")
        client.retain(tenant, "first fast note", fast=True)
        client.hot_path(tenant, "flush")
        path = f"/v1/tenants/{tenant}/events:watch"
        seen: list[dict[str, str]] = []
        stream = server_sent_events(api.http_port, path)
        seen.append(next(stream))
        stream.close()  # the connection drops after one event
        for n in range(3):
            client.retain(tenant, f"fast note {n} while nobody watched", fast=True)
        client.hot_path(tenant, "flush")
        expected = _all_transitions(api, tenant)
        resumed = server_sent_events(api.http_port, path, {"last-event-id": seen[-1]["id"]})
        while len(seen) < len(expected):
            seen.append(next(resumed))
        resumed.close()
    assert [json.loads(event["data"]) for event in seen] == expected
    assert [int(event["id"]) for event in seen] == [int(e["sequence"]) for e in expected]
    with pytest.raises(AssertionError, match="^400: .*RESUME_POINT_INVALID"):  # no point any watch gave
        next(server_sent_events(api.http_port, path, {"last-event-id": "-3"}))


def _all_transitions(api: ServerProcess, tenant: str) -> list[dict[str, Any]]:
    """Every transition so far, read over gRPC (the reference)."""
    with grpc.insecure_channel(api.target) as channel:
        stream = events_pb2_grpc.EventsServiceStub(channel).WatchEvents(
            events_pb2.WatchEventsRequest(tenant=tenant), timeout=3
        )
        found = []
        try:
            for event in stream:
                found.append(json_format.MessageToDict(event))
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # caught up: nothing more came
    return found


async def _answer_200(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200})


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("allowed_hosts", "http://mem.example"),  # was the host "http"
        ("allowed_hosts", "mem.example/"),
        ("allowed_hosts", "ops@mem.example"),
        ("cors_origins", "console.example"),  # no scheme: no browser's Origin
        ("cors_origins", "https://console.example/app"),
        ("cors_origins", "null"),
        ("cors_origins", "ftp://console.example"),
    ],
)
def test_an_allowed_host_or_origin_no_request_could_match_is_refused_at_start(flag: str, value: str) -> None:
    """Each was taken as written and matched no request, without a word."""
    hosts, origins = ([value], []) if flag == "allowed_hosts" else ([], [value])
    with pytest.raises(InvalidArgument) as info:
        Guard(_answer_200, allowed_hosts=hosts, cors_origins=origins)
    assert info.value.reason == "CONFIG_INVALID" and repr(value) in info.value.message


def test_an_ipv6_address_or_an_origin_is_matched_in_the_form_a_request_carries() -> None:
    """A bound IPv6 address ("fd00::5", the port's own) never matched its Host "[fd00::5]:8080";
    an origin with its default port or capitals never matched a browser's Origin."""
    answered: list[int] = []

    async def receive() -> Message:
        return {"type": "http.request"}

    async def send(message: Message) -> None:
        answered.append(message["status"])

    guard = Guard(_answer_200, allowed_hosts=["fd00::5"], cors_origins=["HTTPS://Console.Example:443/"])
    for host, origin in [(b"[fd00::5]:8080", None), (b"[FD00:0::5]", None), (b"localhost", b"https://console.example")]:
        headers = [(b"host", host), *([(b"origin", origin)] if origin else [])]
        scope: Scope = {"type": "http", "method": "GET", "scheme": "http", "http_version": "1.1", "headers": headers}
        asyncio.run(guard(scope, receive, send))
    assert answered == [200, 200, 200]


def test_the_openapi_document_answers_head_as_the_other_documents_do(api: ServerProcess) -> None:
    """HEAD / and HEAD /console/ answered 200, HEAD /openapi.json 405."""
    whole = request(api.http_port, "GET", "/openapi.json")
    for path in ("/openapi.json", "/", "/console/"):
        head = request(api.http_port, "HEAD", path)
        assert head.status == 200 and head.body == b"", (path, head.status)
        if path == "/openapi.json":
            assert int(head.headers["content-length"]) == len(whole.body)
    refused = request(api.http_port, "PUT", "/openapi.json", b"{}")
    assert refused.status == 405 and refused.headers["allow"] == "GET, HEAD"


def test_the_allowed_hosts_come_from_the_flag_or_the_variable(server_factory) -> None:
    server = server_factory(http=True, env={"MNEMOSYNE_HTTP_ALLOWED_HOST": "mem.example, api.mem.example"}).start()
    for host, status in [
        ("mem.example", 200),
        ("api.mem.example:8080", 200),
        ("evil.example", 403),
        ("localhost", 200),
    ]:
        assert request(server.http_port, "GET", "/v1/ping", headers={"host": host}).status == status, host


def test_a_flush_or_watch_whose_client_leaves_gives_its_place_back(server_factory, tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    hold.touch()  # the workers hold: a flush waits as long as this file exists
    server = server_factory(http=True, metrics=True, env={"MNEMOSYNE_TEST_HOLD_WORKERS": str(hold)}).start()
    port = server.http_port
    assert request(port, "POST", "/v1/tenants/t1/hotPath:enable", b"{}").status == 200
    assert request(port, "POST", "/v1/tenants/t1/memories", json_body={"text": "held", "fast": True}).status == 200
    body = b'{"timeoutSeconds": 60}'
    flushes = []
    for _ in range(3):
        connection = socket.create_connection(("127.0.0.1", port))
        connection.sendall(
            b"POST /v1/tenants/t1/hotPath:flush HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        flushes.append(connection)
    watch = server_sent_events(port, "/v1/tenants/t1/events:watch")
    next(watch)  # the stream is open
    wait_until(lambda: gauge(server, "mnemosyne_waiting_calls") == 3)
    assert gauge(server, "mnemosyne_open_streams") == 1
    for connection in flushes:
        connection.close()
    watch.close()
    # Each place is given back at once, long before the flushes' 60 s.
    wait_until(lambda: gauge(server, "mnemosyne_waiting_calls") == 0, seconds=10)
    wait_until(lambda: gauge(server, "mnemosyne_open_streams") == 0, seconds=10)
    hold.unlink()


def test_http_calls_are_recorded_under_their_rpc_like_grpc_calls(server_factory) -> None:
    server = server_factory(http=True, metrics=True).start()
    assert request(server.http_port, "GET", "/v1/ping").status == 200
    assert request(server.http_port, "GET", "/v1/tenants/Bad!/stats").status == 400
    assert request(server.http_port, "GET", "/v1/nowhere").status == 404

    def counts() -> set[tuple[str, str]]:
        with urllib.request.urlopen(server.metrics_url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        return {
            (sample.labels["method"], sample.labels["code"])
            for family in text_string_to_metric_families(text)
            if family.name == "mnemosyne_rpc_duration_seconds"
            for sample in family.samples
            if sample.name.endswith("_count")
        }

    # A call over HTTP is recorded once its answer is sent (its latency includes the sending), so
    # a client may read /metrics a moment before its last call is there.
    wanted = {
        ("/mnemosyne.v1.AdminService/Ping", "OK"),
        ("/mnemosyne.v1.AdminService/Stats", "INVALID_ARGUMENT"),
        ("(no route)", "NOT_FOUND"),
    }
    wait_until(lambda: wanted <= counts(), seconds=10)
