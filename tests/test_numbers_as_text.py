"""Numbers that arrive as text follow one rule (engine/limits.py ``parse_integer``,
``parse_number``): ASCII digits only (Python's int() and float() also read other scripts' digits,
and str.isdigit() passes superscripts that int() refuses), no float where an integer is meant
(1e11, 1.5), no NaN or Infinity, within the field's range. A value outside the rule is refused
400 NUMBER_INVALID naming the field (a mem0 number of the right form out of its range: the reason
of the RPC field it becomes, K_OUT_OF_RANGE); no value gets a 5xx.

The batteries are generated from the field types: every numeric (enum and time) field of every HTTP/JSON
route's request, from the proto descriptors, in the body (as a JSON string and as a JSON literal),
the query string and the path; every number of every mem0 route (transport/http/mem0.py ROUTES) in
each place it is read, and every mem0 path id; every typed flag of the command line. The MCP
tools' checks (host/mcp_tools.py, the rule of host/numbers.py) are checked against the engine's here too; the tools
themselves in tests/test_mcp_tool_errors.py."""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from pydantic_core import PydanticCustomError

from mnemosyne.cli.commands import build_parser
from mnemosyne.engine.limits import Limits, parse_integer, parse_number
from mnemosyne.errors import InvalidArgument
from mnemosyne.host.mcp_tools import _decimal as tool_decimal
from mnemosyne.host.mcp_tools import _whole as tool_whole
from mnemosyne.transport.http.mapping import Route
from mnemosyne.transport.http.mem0 import ROUTES as MEM0_ROUTES
from mnemosyne.transport.http.mem0 import Mem0Number
from tests.http_support import ROUTES, Reply
from tests.support import ServerProcess, tokens_json

ADMIN = "numbers-admin"
FD = FieldDescriptor
# Other scripts' digits (Arabic-Indic, Persian, Devanagari, Bengali, fullwidth, Thai, NKo, Lao,
# Mongolian) and look-alikes (superscripts, subscripts, circled): int() reads the first kind.
SCRIPT_DIGITS = ["٣", "۳", "३", "৩", "３", "๓", "߃", "໓", "᠓", "١٢"]
LOOK_ALIKES = ["²", "¹²", "₃", "①"]
OTHER_TEXT = ["1e11", "NaN", "Infinity", "-Infinity", "1.5", "99999999999999999999", " 1", "1 ", ""]
OTHER_TEXT += ["0x10", "1_000", "+1", "--1", "1e", "٣.5", "-1", "7", "0", "2e3"]
TEXTS = SCRIPT_DIGITS + LOOK_ALIKES + OTHER_TEXT
# JSON literals in a body, for the same fields (Python's json reads NaN and Infinity).
LITERALS = ["1e11", "1.5", "7.0", "true", "NaN", "Infinity", "-Infinity", "99999999999999999999", "-1", "7", "null"]
TIMES = ["2023-05-08T13:56:00Z", "٢٠٢٣-٠٥-٠٨T13:56:00Z", "２０２３-05-08T13:56:00Z", "2023-05-08T13:56:00Z²"]
TIMES += ["2023-05-08T15:56:00.5+02:00", "2026-1-1T0:0:0Z", "2023-05-08T13:56:00+99:99", "2023-05-08T13:56:00.Z"]
TIMES += ["2023-05-08T13:56:00", "2023-05-08T13:56:00.5", "2023-05-08"]  # no offset: no one moment
_RFC_3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)", re.ASCII)
_ASCII_INTEGER = re.compile(r"-?[0-9]+")
_ASCII_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
INTEGER_RANGES = {
    FD.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    FD.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    FD.CPPTYPE_UINT32: (0, 2**32 - 1),
    FD.CPPTYPE_UINT64: (0, 2**64 - 1),
}
FLOATING = (FD.CPPTYPE_DOUBLE, FD.CPPTYPE_FLOAT)


def integer_text_ok(text: str, low: float, high: float) -> bool:
    return bool(_ASCII_INTEGER.fullmatch(text)) and low <= int(text) <= high


def decimal_text_ok(text: str, low: float, high: float) -> bool:
    return bool(_ASCII_DECIMAL.fullmatch(text)) and math.isfinite(float(text)) and low <= float(text) <= high


def literal_ok(literal: str, integer: bool, low: float, high: float) -> bool:
    if literal == "null":
        return True  # not given: the default
    value = json.loads(literal)
    if isinstance(value, bool) or (integer and not isinstance(value, int)):
        return False
    return math.isfinite(value) and low <= value <= high


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("numbers") / "data", http=True, env={"MNEMOSYNE_TOKENS": tokens_json({ADMIN: ["*"]})}
    )
    process.start()
    yield process
    process.stop()


def send(port: int, verb: str, path: str, body: bytes | None, headers: dict[str, str]) -> Reply:
    """One request on its own connection; an accepted event stream is answered by its status."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(verb, path, body=body, headers={**headers, "content-type": "application/json"})
        response = connection.getresponse()
        streaming = response.getheader("content-type", "").startswith("text/event-stream")
        return Reply(response.status, {}, b"" if streaming else response.read())
    finally:
        connection.close()


def reason_and_message(reply: Reply) -> tuple[str, str]:
    if reply.status < 400:
        return "", ""
    document = reply.json()
    reasons = [d.get("reason", "") for d in document.get("details", []) if d["@type"].endswith("ErrorInfo")]
    return (reasons[0] if reasons else ""), document.get("message", "")


def judge(
    reply: Reply, valid: bool, names: tuple[str, ...], reasons: tuple[str, ...] = ("NUMBER_INVALID",)
) -> str | None:
    """What is wrong with an answer ("" when nothing): a 5xx; for a value outside the rule,
    anything but 400 NUMBER_INVALID (or another of ``reasons``) naming the field; for one inside,
    NUMBER_INVALID."""
    reason, message = reason_and_message(reply)
    if reply.status >= 500:
        return f"{reply.status} {reply.body[:300]!r}"
    if valid:
        return f"refused a valid number: {reply.body[:300]!r}" if reason == "NUMBER_INVALID" else None
    if reply.status != 400 or reason not in reasons or not any(name in message for name in names):
        return f"{reply.status} {reply.body[:300]!r}"
    return None


# -- the rule, and the MCP tools' copy of it ------------------------------------------------------


@pytest.mark.parametrize("text", TEXTS)
def test_the_rule_refuses_every_text_but_ascii_digits_within_range(text: str) -> None:
    def outcome(parse: Callable[[], float]) -> float | None:
        try:
            return parse()
        except InvalidArgument as exc:
            assert exc.reason == "NUMBER_INVALID", exc.reason
            assert exc.message.startswith(("n must be", "n is")) and "1 to 100" in exc.message, exc.message
            return None

    integer = outcome(lambda: parse_integer(text, field="n", minimum=1, maximum=100))
    assert (integer is not None) == integer_text_ok(text, 1, 100)
    decimal = outcome(lambda: parse_number(text, field="n", minimum=1, maximum=100))
    assert (decimal is not None) == decimal_text_ok(text, 1, 100)


@pytest.mark.parametrize("value", [*TEXTS, *(json.loads(x) for x in LITERALS), 10**30, [7], {"n": 7}])
def test_the_mcp_tools_apply_the_same_rule(value: Any) -> None:
    """host/mcp_tools.py cannot import the engine (the shared modules' import contract): its checks
    must accept exactly what the engine's accept, with the same value."""
    for engine_parse, tool_check in (
        (lambda v: parse_integer(v, field="n", minimum=-5, maximum=100), tool_whole("n", -5, 100)),
        (lambda v: parse_number(v, field="n", minimum=-5, maximum=100), tool_decimal("n", -5, 100)),
    ):
        try:
            expected: Any = engine_parse(value)
        except InvalidArgument:
            expected = "refused"
        try:
            got: Any = tool_check(value)
        except PydanticCustomError:
            got = "refused"
        assert got == expected and type(got) is type(expected), (value, got, expected)


# -- the HTTP/JSON API: every numeric field of every route -----------------------------------------


@dataclass(frozen=True)
class NumericField:
    path: tuple[str | int, ...]  # JSON keys and list indexes from the request to the field
    field: FieldDescriptor

    @property
    def name(self) -> str:
        return self.field.name

    @property
    def is_time(self) -> bool:
        return self.field.message_type is not None

    @property
    def is_integer(self) -> bool:
        """An integer field, or an enum (its number follows the integer rule)."""
        return self.field.cpp_type in INTEGER_RANGES or self.field.cpp_type == FD.CPPTYPE_ENUM

    def range(self) -> tuple[float, float]:
        if self.field.cpp_type in FLOATING:
            return (-1.7976931348623157e308, 1.7976931348623157e308)
        return INTEGER_RANGES.get(self.field.cpp_type, INTEGER_RANGES[FD.CPPTYPE_INT32])


def numeric_fields(message: Descriptor, path: tuple[str | int, ...] = ()) -> Iterator[NumericField]:
    """Every number (and time, written as text) a JSON request can carry, nested ones too."""
    for field in message.fields:
        if field.message_type is not None:
            if field.message_type.full_name == "google.protobuf.Timestamp":
                yield NumericField((*path, field.name), field)
            elif not field.message_type.GetOptions().map_entry and len(path) < 6:
                inner = (*path, field.name, 0) if field.is_repeated else (*path, field.name)
                yield from numeric_fields(field.message_type, inner)
        elif field.cpp_type in INTEGER_RANGES or field.cpp_type in FLOATING or field.cpp_type == FD.CPPTYPE_ENUM:
            yield NumericField((*path, field.name), field)


def _placed(path: tuple[str | int, ...], token: str) -> Any:
    """A document holding ``token`` at ``path``."""
    if not path:
        return token
    head, rest = path[0], path[1:]
    return [_placed(rest, token)] if isinstance(head, int) else {head: _placed(rest, token)}


def http_cases(route: Route) -> Iterator[tuple[str, str, bytes | None, bool, NumericField]]:
    """(where, path, body, valid, field) for each hostile value of each numeric field."""
    tenant = f"n-{uuid.uuid4().hex[:10]}"
    fields = route.rpc.input_type.fields_by_name
    numbered_path = {n for n in route.path_fields if n in fields and fields[n].cpp_type in INTEGER_RANGES}
    for numeric in numeric_fields(route.rpc.input_type):
        top = numeric.path[0]
        low, high = numeric.range() if not numeric.is_time else (0, 0)
        integer = numeric.is_integer
        values = TIMES if numeric.is_time else TEXTS

        def ok(text: str, integer: bool = integer, low: float = low, high: float = high) -> bool:
            if numeric.is_time:  # a text no parser reads as a time is REQUEST_UNDECODABLE (test_http_safety)
                return bool(_RFC_3339.fullmatch(text))
            return integer_text_ok(text, low, high) if integer else decimal_text_ok(text, low, high)

        def path_with(value: str, top: str | int = top) -> str:
            path = route.template
            for name in route.path_fields:  # the other path fields: valid (an id is a number)
                other = "7" if name in numbered_path else tenant
                path = path.replace("{" + name + "}", quote(value if name == top else other, safe=""))
            return path

        if top in route.path_fields:
            for text in filter(None, values):  # an empty segment matches no route
                yield "path", path_with(text), (b"{}" if route.body else None), ok(text), numeric
        elif route.body:
            for text in values:
                yield "body string", path_with(""), json.dumps(_placed(numeric.path, text)).encode(), ok(text), numeric
            if not numeric.is_time:
                for literal in LITERALS:
                    body = json.dumps(_placed(numeric.path, "@")).replace('"@"', literal).encode()
                    yield "body literal", path_with(""), body, literal_ok(literal, integer, low, high), numeric
        elif len(numeric.path) == 1:  # the query string sets top-level fields only
            for text in values:
                yield "query", f"{path_with('')}?{urlencode({numeric.name: text})}", None, ok(text), numeric


ROUTES_WITH_NUMBERS = sorted(name for name, route in ROUTES.items() if any(numeric_fields(route.rpc.input_type)))


def test_the_http_battery_reaches_every_kind_of_place() -> None:
    places = {case[0] for name in ROUTES_WITH_NUMBERS for case in http_cases(ROUTES[name])}
    assert places == {"path", "body string", "body literal", "query"}
    assert {"Recall", "GetMemory", "ListEvents", "Flush", "RetainBatch", "Dedup"} <= set(ROUTES_WITH_NUMBERS)
    enums = {
        case[4].name for name in ROUTES_WITH_NUMBERS for case in http_cases(ROUTES[name]) if case[4].field.enum_type
    }
    assert {"mode", "op", "kinds", "status"} <= enums  # an enum's number follows the integer rule


@pytest.mark.parametrize("rpc", ROUTES_WITH_NUMBERS)
def test_every_number_of_every_http_route_follows_the_rule(api: ServerProcess, rpc: str) -> None:
    route = ROUTES[rpc]
    auth = {"authorization": f"Bearer {ADMIN}"}
    failures = []
    for where, path, body, valid, numeric in http_cases(route):
        reply = send(api.http_port, route.verb, path, body, auth)
        # An enum's text that no int() reads is an unknown value name: json_format's refusal.
        reasons = ("NUMBER_INVALID", "REQUEST_UNDECODABLE") if numeric.field.enum_type else ("NUMBER_INVALID",)
        problem = judge(reply, valid, (numeric.name,), reasons)
        if problem:
            failures.append(f"{numeric.name} in the {where} ({path} {body!r}): {problem}")
    assert not failures, f"{len(failures)} answers:\n" + "\n".join(failures[:40])


# -- the mem0 paths: every number of the route table, every path id --------------------------------


def mem0_cases(number: Mem0Number) -> Iterator[tuple[str, str, Any, bool]]:
    """(place, query, body, valid) for each hostile value of one number."""
    limits = Limits()
    low, high = number.minimum, number.maximum(limits)

    def ok(text: str) -> bool:
        return integer_text_ok(text, low, high) if number.whole else decimal_text_ok(text, low, high)

    for place in number.places:
        for text in TEXTS:
            if place == "query":
                yield place, "?" + urlencode({number.name: text}), {}, ok(text)
            else:
                yield place, "", {number.name: text}, ok(text)
        if "body" == place:
            for literal in LITERALS:
                yield "body literal", "", literal, literal_ok(literal, number.whole, low, high)


MEM0_NUMBERED = [route for route in MEM0_ROUTES if route.numbers]
MEM0_WITH_IDS = [route for route in MEM0_ROUTES if "(" in route.path and not route.unsupported]


def test_the_mem0_table_declares_the_numbers_its_endpoints_read() -> None:
    declared = {(route.name, number.name) for route in MEM0_NUMBERED for number in route.numbers}
    assert declared == {("search", "top_k"), ("search", "threshold"), ("list", "page"), ("list", "page_size")} | {
        ("events", "page_size"),
        ("add", "timestamp"),
    }
    assert {route.name for route in MEM0_WITH_IDS} == {"get", "update", "delete", "history", "event"}


@pytest.mark.parametrize("route", MEM0_NUMBERED, ids=lambda route: route.name)
def test_every_number_of_every_mem0_route_follows_the_rule(api: ServerProcess, route: Any) -> None:
    headers = {"authorization": f"Token {ADMIN}", "mnemosyne-tenant": f"m-{uuid.uuid4().hex[:10]}"}
    base = {"search": {"query": "where is it"}, "add": {"messages": "a note with a time"}}.get(route.name, {})
    failures = []
    for number in route.numbers:
        for place, query, given, valid in mem0_cases(number):
            if isinstance(given, str):  # a JSON literal
                body = json.dumps({**base, number.name: "@"}).replace('"@"', given).encode()
            else:
                body = json.dumps({**base, **given}).encode()
            reply = send(api.http_port, route.verb, route.path + query, body if route.verb != "GET" else None, headers)
            problem = judge(reply, valid, (number.name,), ("NUMBER_INVALID", number.out_of_range))
            if problem:
                failures.append(f"{number.name} in the {place} ({query} {body!r}): {problem}")
    assert not failures, f"{len(failures)} answers:\n" + "\n".join(failures[:40])


@pytest.mark.parametrize("route", MEM0_WITH_IDS, ids=lambda route: f"{route.verb} {route.name}")
def test_every_mem0_path_id_is_refused_clearly(api: ServerProcess, route: Any) -> None:
    headers = {"authorization": f"Token {ADMIN}", "mnemosyne-tenant": f"m-{uuid.uuid4().hex[:10]}"}
    failures = []
    for text in [t for t in TEXTS if t.strip()]:
        path = re.sub(r"\(\[\^/\]\+\)", quote(text, safe=""), route.path)
        body = json.dumps({"text": "x"}).encode() if route.verb == "PUT" else None
        reply = send(api.http_port, route.verb, path, body, headers)
        reason, message = reason_and_message(reply)
        if not 400 <= reply.status < 500 or not re.search(r"memory|event", message):
            failures.append(f"{route.verb} {path}: {reply.status} {reply.body[:300]!r}")
    assert not failures, "\n".join(failures)


# -- the command line: every typed flag -----------------------------------------------------------


def typed_flags() -> Iterator[tuple[str, argparse.Action]]:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, subparser in commands.choices.items():
        for action in subparser._actions:
            if action.type is not None and not action.choices:  # a choice's type checks a word
                yield f"{command} {action.option_strings[0]}", action


def test_every_typed_flag_follows_the_rule() -> None:
    flags = list(typed_flags())
    assert len(flags) > 30 and any(name == "serve --port" for name, _ in flags)
    failures = []
    for name, action in flags:
        parse = action.type
        assert callable(parse) and parse not in (int, float), f"{name} parses with a bare {parse}"
        integer = isinstance(parse("1"), int)
        for text in TEXTS:
            rule = integer_text_ok if integer else decimal_text_ok
            try:
                parse(text)
                accepted = True
            except argparse.ArgumentTypeError as exc:
                accepted = False
                if "from" not in str(exc):  # the limits are named
                    failures.append(f"{name} {text!r}: {exc}")
            if accepted and not rule(text, -math.inf, math.inf):
                failures.append(f"{name} accepted {text!r}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    ("args", "env", "names"),
    [
        (["serve", "--port", "٣"], {}, "--port"),
        (["serve", "--grace-seconds", "NaN"], {}, "--grace-seconds"),
        (["serve"], {"MNEMOSYNE_MAX_K": "²"}, "--max-k"),
    ],
)
def test_the_command_line_names_the_flag_and_its_limits(args: list[str], env: dict[str, str], names: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mnemosyne.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert done.returncode == 2, done
    assert names in done.stderr and " from " in done.stderr and "Traceback" not in done.stderr, done.stderr
