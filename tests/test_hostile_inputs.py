"""Hostile inputs: no request a client can send gets INTERNAL, UNKNOWN or UNIMPLEMENTED, and the
server never crashes.

Every RPC of every service in ``mnemosyne.v1`` is found by introspecting the generated
descriptors (each ``*_pb2`` module's ``DESCRIPTOR.services_by_name``), so a new RPC cannot be
forgotten. Requests are built from the descriptors, per field type, and sent to a real server
process on loopback with grpcio's generic calls (``channel.unary_unary(path, ...)`` and
``unary_stream``), in three kinds:

* sweep: a benign request with ONE field (or nested field, map entry, repeated size) set to a
  hand-picked nasty value, once against a fresh tenant and once against a tenant holding data
  (memories, records, events), so a finding names its field and value;
* hypothesis: whole requests drawn from strategies built from the descriptors (a fixed number
  per RPC, derandomized, so CI is deterministic);
* raw: hand-encoded byte payloads sent with an identity serializer (invalid UTF-8 in string
  fields, truncated messages, random bytes, impossible lengths, bad wire types).

A call must succeed or fail with a code other than INTERNAL, UNKNOWN, UNIMPLEMENTED (every RPC
here is declared) or DATA_LOSS (unless the server sent it deliberately, with an ErrorInfo). A
failure with a code of the server's own must carry a ``google.rpc.ErrorInfo`` with a reason (not
needed for the DEADLINE_EXCEEDED/CANCELLED this harness causes, nor the transport's
RESOURCE_EXHAUSTED for an oversized message). Afterwards the server must still run and answer
Ping, and its data directory must hold no file of a tenant that no successful write named, and no
file of an unknown kind.

Findings are grouped by (RPC, code, ErrorInfo reason or message, the server log's exception) and
reported together, each with the fields and values that triggered it and its smallest request
in text format. The two smaller tests check that out-of-domain scalars in any request field --
enum numbers that are not declared, and doubles that are not finite or absurdly large -- are
refused with INVALID_ARGUMENT.
"""

from __future__ import annotations

import base64
import importlib
import itertools
import json
import math
import pkgutil
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor as _descriptor
from google.protobuf import message_factory, text_format, timestamp_pb2
from google.protobuf.descriptor import FieldDescriptor as FD
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import mnemosyne.v1 as v1_package
from tests.support import ServerFactory, ServerProcess, failed_call

# -- discovery --------------------------------------------------------------------------------

EXPECTED_SERVICES = {"MemoryService", "WorkspaceService", "HotPathService", "EventsService", "AdminService"}


@dataclass(frozen=True)
class Rpc:
    service: str
    name: str
    method: _descriptor.MethodDescriptor
    request_cls: type[Message]
    response_cls: type[Message]

    @property
    def path(self) -> str:
        return f"/{self.method.containing_service.full_name}/{self.name}"

    @property
    def short(self) -> str:
        return f"{self.service}/{self.name}"

    @property
    def request_desc(self) -> _descriptor.Descriptor:
        return self.method.input_type


def _proto_modules() -> list[Any]:
    return [
        importlib.import_module(f"{v1_package.__name__}.{info.name}")
        for info in sorted(pkgutil.iter_modules(v1_package.__path__), key=lambda i: i.name)
        if info.name.endswith("_pb2")
    ]


def _discover() -> list[Rpc]:
    rpcs = []
    for module in _proto_modules():
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                rpcs.append(
                    Rpc(
                        service.name,
                        method.name,
                        method,
                        message_factory.GetMessageClass(method.input_type),
                        message_factory.GetMessageClass(method.output_type),
                    )
                )
    return sorted(rpcs, key=lambda r: r.path)


RPCS = _discover()
RPC_BY_PATH = {r.path: r for r in RPCS}

# RPCs that never create or change a tenant's file. Everything else counts as a write, so a new
# RPC is a write until listed here (the stray-file check then trusts it to make files).
READ_ONLY = {
    "MemoryService/Recall",
    "MemoryService/GetMemory",
    "MemoryService/ListMemories",
    "WorkspaceService/AssembleContext",
    "WorkspaceService/GetRecord",
    "WorkspaceService/ListRecords",
    "HotPathService/Status",
    "HotPathService/Flush",
    "EventsService/GetEvent",
    "EventsService/ListEvents",
    "EventsService/WatchEvents",
    "AdminService/VerifyIntegrity",
    "AdminService/Stats",
    "AdminService/ListTenants",
    "AdminService/AggregateStats",
    "AdminService/Ping",
}

# Request metadata an RPC needs to get past its first check (docs/host-protocol.md): the observed
# generation of the scope it writes. The sweep also sends hostile values of these keys.
GENERATION_METADATA = {
    "WorkspaceService/UpdateGlobal": "mnemosyne-global-generation",
    "WorkspaceService/UpdateWorkspace": "mnemosyne-workspace-generation",
}


def test_every_declared_service_is_discovered() -> None:
    services = {r.service for r in RPCS}
    assert EXPECTED_SERVICES <= services, f"discovery found only {sorted(services)}"
    names = {r.short for r in RPCS}
    assert READ_ONLY <= names, f"READ_ONLY names RPCs that do not exist: {sorted(READ_ONLY - names)}"
    assert set(GENERATION_METADATA) <= names


# -- field helpers ----------------------------------------------------------------------------

TIMESTAMP = "google.protobuf.Timestamp"
INT64_TYPES = {FD.TYPE_INT64, FD.TYPE_SINT64, FD.TYPE_SFIXED64}
INT32_TYPES = {FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32}
UINT64_TYPES = {FD.TYPE_UINT64, FD.TYPE_FIXED64}
UINT32_TYPES = {FD.TYPE_UINT32, FD.TYPE_FIXED32}
INT_RANGES = {
    **{t: (-(2**63), 2**63 - 1) for t in INT64_TYPES},
    **{t: (-(2**31), 2**31 - 1) for t in INT32_TYPES},
    **{t: (0, 2**64 - 1) for t in UINT64_TYPES},
    **{t: (0, 2**32 - 1) for t in UINT32_TYPES},
}


def message_type(f: FD) -> _descriptor.Descriptor:
    """The type of a message (or map) field."""
    assert f.message_type is not None, f"{f.full_name} is not a message field"
    return f.message_type


def enum_numbers(f: FD) -> list[int]:
    """The numbers an enum field declares."""
    assert f.enum_type is not None, f"{f.full_name} is not an enum field"
    return [v.number for v in f.enum_type.values]


def get_field(message: Message, name: str) -> Any:
    """A field by the name its descriptor gives: the classes here are made from descriptors at run
    time, so their fields are known by name only."""
    return getattr(message, name)


def set_field(message: Message, name: str, value: Any) -> None:
    """Set a field by the name its descriptor gives (see ``get_field``)."""
    setattr(message, name, value)


def is_map(f: FD) -> bool:
    return f.type == FD.TYPE_MESSAGE and message_type(f).GetOptions().map_entry


def is_message(f: FD) -> bool:
    return f.type == FD.TYPE_MESSAGE and not is_map(f)


def message_class(desc: _descriptor.Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(desc)


# -- hostile values ---------------------------------------------------------------------------

EMOJI = "\U0001f600"


def b64(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


STRINGS = [
    "",
    " ",
    "\t\n\r",
    "\u3000",
    EMOJI * 40_000,  # 40,000 characters of 4-byte UTF-8: beyond the 32,768-character text limit
    EMOJI * 32_768,
    "a" * 32_769,
    "x" * 300_000,
    "\x00",
    "a\x00b",
    "".join(map(chr, range(1, 32))) + "\x7f\x80\x9f",
    "\u0085\u2028\u2029\u202e\u200b\ufeff\ufffe\uffff",
    "\U0010ffff\U000e0001\U0001f468\u200d\U0001f469",
    "e" + "\u0301" * 50,
    "\u0130\u00dfA\uff21",
    "../../etc/passwd",
    "/etc/passwd",
    "..",
    ".",
    "..\\..\\x",
    "workspace/../global",
    "workspace/",
    "a.sqlite",
    '"foo" OR bar NEAR(',
    "*",
    "foo*",
    "NEAR(a b, -1)",
    "AND OR NOT",
    '"',
    "^foo",
    "col:foo",
    "(",
    ")",
    "-",
    "'; DROP TABLE memories; --",
    "%",
    "_",
    "1' OR '1'='1",
    '{"a": [1, {"b": null}',
    "{}",
    "[",
    "null",
    '{"__proto__": {"x": 1}}',
    "%s%n{0}{}",
    "-1",
    "99999999999999999999",
    "NaN",
    "1e309",
]
TENANT_STRINGS = STRINGS + [
    "A",
    "Tenant",
    "-a",
    "_a",
    "a" * 63,
    "a" * 64,
    "a" * 1_000,
    "a b",
    "a/b",
    "a.b",
    "a\n",
    "a\x00",
    "tenants",
    "inbox",
    "..%2f..%2fx",
    "\u0131",
]
PAGE_TOKENS = [
    "",
    b64("after:99999999999999999999999"),
    b64("after:9223372036854775807"),
    b64("after:9223372036854775808"),
    b64("after:-9223372036854775809"),
    b64("after:-1"),
    b64("after:0"),
    b64("after:"),
    b64("after:abc"),
    b64("after: 7"),
    b64("after:1_000"),
    b64("after:\u0663"),
    b64("after:" + "9" * 5_000),
    b64("after:5\x00"),
    b64("after:1e3"),
    b64("tenant:../../etc"),
    b64("tenant:" + "a" * 64),
    b64("tenant:"),
    b64("tenant:A"),
    b64("tenant:\x00"),
    b64(b"\xff\xfe\xfd"),
    b64(bytes(range(24))),
    "after:5",
    "!!!!",
    "====",
    "a",
    b64("after:5") + "\n",
    b64("after:5") + "=" * 10,
    EMOJI,
    "x" * 300_000,
]
INT64_VALUES = [0, -1, 1, 2**63 - 1, -(2**63), 2**53 + 1, -(2**53 + 1), 2**31 - 1, -(2**31), 2**31, 2**32]
INT32_VALUES = [0, -1, 1, 2**31 - 1, -(2**31), 101, 1_001, 10_001]
UINT64_VALUES = [0, 1, 2**64 - 1, 2**63, 2**53 + 1]
UINT32_VALUES = [0, 1, 2**32 - 1, 2**31]
DOUBLES = [
    math.nan,
    math.inf,
    -math.inf,
    1e300,
    -1e300,
    -0.0,
    0.0,
    5e-324,
    -5e-324,
    1.0,
    -1.0,
    0.5,
    1.0000001,
    2.0**63,
    1e-300,
]
FLOATS = [math.nan, math.inf, -math.inf, 3.4e38, -3.4e38, -0.0, 1.4e-45, 1.0, -1.0]
BYTES_VALUES = [b"", b"\x00", b"\xff" * 100, bytes(range(256))]
TIMESTAMPS = [  # (seconds, nanos); valid range 0001-01-01 .. 9999-12-31, nanos 0..999,999,999
    (0, 0),
    (-62_135_596_801, 0),
    (-62_135_596_800, 0),
    (253_402_300_799, 999_999_999),
    (253_402_300_800, 0),
    (2**63 - 1, 0),
    (-(2**63), 0),
    (0, -1),
    (0, 10**9),
    (0, 2**31 - 1),
    (0, -(2**31)),
    (-1, 999_999_999),
    (1, -1),
    (253_402_300_799, 10**9),
    (1_700_000_000, 0),
]
OUT_OF_RANGE_ENUMS = [99, -1, 2**31 - 1, -(2**31)]
OUT_OF_DOMAIN_DOUBLES = [math.nan, math.inf, -math.inf, 1e300, -1e300]
GENERATION_VALUES = [
    "",
    "-1",
    "99999999999999999999",
    "9223372036854775808",
    "9223372036854775807",
    "0x1",
    " 0",
    "0" * 20,
    "1e3",
    "+1",
]


def enum_values(f: FD) -> list[int]:
    declared = enum_numbers(f)
    return declared + [v for v in OUT_OF_RANGE_ENUMS + [max(declared) + 1] if v not in declared]


def scalar_values(f: FD) -> list[Any]:
    t = f.type
    if t == FD.TYPE_STRING:
        if f.name == "tenant":
            return TENANT_STRINGS
        if f.name.endswith("token"):
            return PAGE_TOKENS + STRINGS[:4] + STRINGS[8:12]
        return STRINGS
    if t in INT64_TYPES:
        return INT64_VALUES
    if t in INT32_TYPES:
        return INT32_VALUES
    if t in UINT64_TYPES:
        return UINT64_VALUES
    if t in UINT32_TYPES:
        return UINT32_VALUES
    if t == FD.TYPE_DOUBLE:
        return DOUBLES
    if t == FD.TYPE_FLOAT:
        return FLOATS
    if t == FD.TYPE_BOOL:
        return [False, True]
    if t == FD.TYPE_ENUM:
        return enum_values(f)
    if t == FD.TYPE_BYTES:
        return BYTES_VALUES
    raise AssertionError(f"no hostile values for field type {t} of {f.full_name}")


def show(value: Any) -> str:
    """A short, exact description of a value for the report."""
    if isinstance(value, str):
        if len(value) > 12 and value == value[0] * len(value):
            return f"{value[0]!r}*{len(value)}"
        text = repr(value)
        return text if len(text) <= 48 else f"{value[:20]!r}...({len(value)} chars)"
    if isinstance(value, bytes):
        text = repr(value)
        return text if len(text) <= 48 else f"{value[:16]!r}...({len(value)} bytes)"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        items = list(value.items())
        if len(items) > 2:
            return f"{{{len(items)} entries, first {show(items[0][0])}: {show(items[0][1])}}}"
        return "{" + ", ".join(f"{show(k)}: {show(v)}" for k, v in items) + "}"
    return repr(value)


# -- benign requests --------------------------------------------------------------------------

FRESH = "\x00fresh\x00"  # markers replaced by a real tenant id when a case is made
SEEDED = "\x00seeded\x00"
SEEDED_TENANT = "seeded-hostile"

BENIGN_SCALARS: dict[str, Any] = {
    "text": "The sky over Lisbon was blue on 8 May 2023; ticket RF-88213 status: open.",
    "query": "sky over Lisbon",
    "scope": "global",
    "role": "user",
    "content": "hello there",
    "key": "notes.md",
    "workspace": "w1",
    "timeout_seconds": 2.0,
    "receipt_id": "receipt-1",
    "op": 1,  # RecordChange.PUT
    "k": 3,
}
BENIGN_ONE_ELEMENT = {"items", "changes"}  # repeated message fields given one benign element


def benign(desc: _descriptor.Descriptor, tenant: str | None = None, depth: int = 0) -> Message:
    message = message_class(desc)()
    for f in desc.fields:
        if f.name == "tenant" and f.type == FD.TYPE_STRING and depth == 0:
            if tenant is not None:
                set_field(message, f.name, tenant)
        elif f.name in BENIGN_SCALARS and not is_message(f) and not f.is_repeated:
            setattr(message, f.name, BENIGN_SCALARS[f.name])
        elif f.name in BENIGN_ONE_ELEMENT and is_message(f) and f.is_repeated and depth < 3:
            getattr(message, f.name).add().CopyFrom(benign(message_type(f), depth=depth + 1))
    return message


def minimal(desc: _descriptor.Descriptor, tenant: str) -> Message:
    message = message_class(desc)()
    if "tenant" in desc.fields_by_name:
        set_field(message, "tenant", tenant)
    return message


# -- sweep variants: (label, mutate, nested) --------------------------------------------------

Mutation = Callable[[Message], None]


def _set(f: FD, value: Any) -> Mutation:
    def mutate(m: Message) -> None:
        if f.is_repeated:
            container = getattr(m, f.name)
            del container[:]
            container.extend(value)
        else:
            setattr(m, f.name, value)

    return mutate


def _set_map(f: FD, entries: dict[Any, Any]) -> Mutation:
    value_field = message_type(f).fields_by_name["value"]

    def mutate(m: Message) -> None:
        container = getattr(m, f.name)
        container.clear()
        for k, v in entries.items():
            if is_message(value_field):
                container[k].CopyFrom(v)
            else:
                container[k] = v

    return mutate


def _timestamp(f: FD, seconds: int, nanos: int) -> Mutation:
    def mutate(m: Message) -> None:
        stamp = getattr(m, f.name)
        if f.is_repeated:
            del stamp[:]
            stamp = stamp.add()
        stamp.seconds = seconds
        stamp.nanos = nanos

    return mutate


def _nested(f: FD, inner: Mutation) -> Mutation:
    element = benign(message_type(f), depth=1)

    def mutate(m: Message) -> None:
        if f.is_repeated:
            container = getattr(m, f.name)
            del container[:]
            target = container.add()
        else:
            target = getattr(m, f.name)
        target.CopyFrom(element)
        inner(target)

    return mutate


def _repeat_benign(f: FD, count: int) -> Mutation:
    element = benign(message_type(f), depth=1)

    def mutate(m: Message) -> None:
        container = getattr(m, f.name)
        del container[:]
        for _ in range(count):
            container.add().CopyFrom(element)

    return mutate


def _clear(f: FD) -> Mutation:
    return lambda m: m.ClearField(f.name)


def _set_in_parent(f: FD) -> Mutation:
    return lambda m: getattr(m, f.name).SetInParent()


ValuesFor = Callable[[FD], list[Any]]


def variants(
    desc: _descriptor.Descriptor, values_for: ValuesFor = scalar_values, *, containers: bool = True, depth: int = 0
) -> Iterator[tuple[str, Mutation, bool]]:
    """Every single-field mutation of a request: (label 'field=value', mutate, nested)."""
    nested = depth > 0
    for f in desc.fields:
        name = f.name
        if is_map(f):
            if not containers:
                continue
            key_field = message_type(f).fields_by_name["key"]
            value_field = message_type(f).fields_by_name["value"]
            benign_value = (
                benign(message_type(value_field), depth=depth + 1)
                if is_message(value_field)
                else ("v" if value_field.type == FD.TYPE_STRING else scalar_values(value_field)[0])
            )
            benign_key = "k" if key_field.type == FD.TYPE_STRING else scalar_values(key_field)[1]
            for k in scalar_values(key_field):
                yield f"{name}={show({k: benign_value})}", _set_map(f, {k: benign_value}), nested
            if not is_message(value_field):
                for v in scalar_values(value_field):
                    yield f"{name}={show({benign_key: v})}", _set_map(f, {benign_key: v}), nested
            if key_field.type == FD.TYPE_STRING and value_field.type == FD.TYPE_STRING:
                many = {f"k{i}": "v" for i in range(33)}
                yield f"{name}=<33 entries>", _set_map(f, many), nested
                big = {f"k{i}": "v" * 1_024 for i in range(1_000)}
                yield f"{name}=<1000 entries of 1 KiB>", _set_map(f, big), nested
                hostile = dict(zip(STRINGS[8:20], STRINGS[20:32]))
                yield f"{name}=<{len(hostile)} hostile entries>", _set_map(f, hostile), nested
        elif is_message(f) and message_type(f).full_name == TIMESTAMP:
            if not containers:
                continue  # the out-of-domain tests look at scalars only
            yield f"{name}=<unset>", _clear(f), nested
            for seconds, nanos in TIMESTAMPS:
                yield f"{name}={{seconds: {seconds}, nanos: {nanos}}}", _timestamp(f, seconds, nanos), nested
        elif is_message(f):
            if containers:
                if f.is_repeated:
                    yield f"{name}=[]", _clear(f), nested
                    for count in (2, 1_001, 5_000):
                        yield f"{name}=<{count} benign elements>", _repeat_benign(f, count), nested
                else:
                    yield f"{name}=<unset>", _clear(f), nested
                    yield f"{name}=<empty>", _set_in_parent(f), nested
            if depth < 3:
                prefix = f"{name}[0]" if f.is_repeated else name
                for label, inner, _ in variants(message_type(f), values_for, containers=containers, depth=depth + 1):
                    yield f"{prefix}.{label}", _nested(f, inner), True
        elif f.is_repeated:
            values = values_for(f)
            if containers:
                yield f"{name}=[]", _set(f, []), nested
                yield f"{name}=<{min(5, len(values))} hostile elements>", _set(f, values[:5]), nested
                yield f"{name}=<1001 x {show(values[1])}>", _set(f, [values[1]] * 1_001), nested
            for v in values:
                yield f"{name}=[{show(v)}]", _set(f, [v]), nested
        else:
            for v in values_for(f):
                yield f"{name}={show(v)}", _set(f, v), nested


# -- hypothesis strategies --------------------------------------------------------------------

SMALL_STRINGS = [s for s in STRINGS if len(s) <= 64]
BIG_STRINGS = [s for s in STRINGS if len(s) > 64]
TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=80)


def strategy_for(f: FD, depth: int) -> st.SearchStrategy:
    t = f.type
    inner: st.SearchStrategy[Any]
    if is_map(f):
        key = strategy_for(message_type(f).fields_by_name["key"], depth + 1)
        value = strategy_for(message_type(f).fields_by_name["value"], depth + 1)
        return st.dictionaries(key, value, max_size=4)
    if is_message(f):
        if message_type(f).full_name == TIMESTAMP:
            inner = st.tuples(
                st.one_of(st.sampled_from([s for s, _ in TIMESTAMPS]), st.integers(-(2**63), 2**63 - 1)),
                st.one_of(st.sampled_from([n for _, n in TIMESTAMPS]), st.integers(-(2**31), 2**31 - 1)),
            ).map(lambda sn: timestamp_pb2.Timestamp(seconds=sn[0], nanos=sn[1]))
        elif depth >= 3:
            inner = st.just(message_class(message_type(f))())
        else:
            inner = message_strategy(message_type(f), depth + 1)
    elif t == FD.TYPE_STRING:
        if f.name.endswith("token"):
            inner = st.one_of(st.sampled_from(PAGE_TOKENS), st.binary(max_size=40).map(b64), TEXT)
        else:
            inner = st.one_of(st.sampled_from(SMALL_STRINGS), st.sampled_from(BIG_STRINGS), TEXT)
    elif t in INT_RANGES:
        low, high = INT_RANGES[t]
        inner = st.one_of(st.sampled_from(scalar_values(f)), st.integers(low, high))
    elif t in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
        inner = st.one_of(st.sampled_from(scalar_values(f)), st.floats(width=64 if t == FD.TYPE_DOUBLE else 32))
    elif t == FD.TYPE_BOOL:
        inner = st.booleans()
    elif t == FD.TYPE_ENUM:
        inner = st.one_of(st.sampled_from(enum_values(f)), st.integers(-(2**31), 2**31 - 1))
    elif t == FD.TYPE_BYTES:
        inner = st.binary(max_size=80)
    else:
        raise AssertionError(f"no strategy for field type {t}")
    if f.is_repeated:
        return st.lists(inner, max_size=5)
    return inner


def _fill(desc: _descriptor.Descriptor, values: dict[str, Any]) -> Message:
    message = message_class(desc)()
    for name, value in values.items():
        f = desc.fields_by_name[name]
        if is_map(f):
            container = getattr(message, name)
            for k, v in value.items():
                if isinstance(v, Message):
                    container[k].CopyFrom(v)
                else:
                    container[k] = v
        elif f.is_repeated:
            container = getattr(message, name)
            for v in value:
                if isinstance(v, Message):
                    container.add().CopyFrom(v)
                else:
                    container.append(v)
        elif isinstance(value, Message):
            getattr(message, name).CopyFrom(value)
        else:
            setattr(message, name, value)
    return message


def tenant_strategy() -> st.SearchStrategy:
    fresh = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,50}", fullmatch=True).map(lambda t: ("fresh", t))
    return st.one_of(
        fresh,
        fresh,
        fresh,
        fresh,
        st.just(("seeded", SEEDED)),
        st.one_of(st.sampled_from(TENANT_STRINGS), TEXT).map(lambda t: ("hostile", t)),
    )


def message_strategy(desc: _descriptor.Descriptor, depth: int = 0) -> st.SearchStrategy:
    optional = {}
    for f in desc.fields:
        if depth == 0 and f.name == "tenant" and f.type == FD.TYPE_STRING:
            optional["tenant"] = tenant_strategy()
        else:
            optional[f.name] = strategy_for(f, depth)

    def build(values: dict[str, Any]) -> Message:
        # Only the request's own tenant is drawn as (kind, value); a nested message's is plain text.
        tenant = values.pop("tenant", None) if depth == 0 else None
        message = _fill(desc, values)
        if tenant is not None:
            kind, value = tenant
            # fresh ids get a unique suffix when the case is made (see _finalize)
            set_field(message, "tenant", FRESH + value if kind == "fresh" else value)
        return message

    return st.fixed_dictionaries({}, optional=optional).map(build)


def hypothesis_requests(rpc: Rpc, count: int) -> list[Message]:
    drawn: list[Message] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(message_strategy(rpc.request_desc))
    def draw(message: Message) -> None:
        drawn.append(message)

    draw()
    return drawn


# -- raw payloads -----------------------------------------------------------------------------


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint((number << 3) | wire_type)


def length_delimited(number: int, payload: bytes) -> bytes:
    return tag(number, 2) + varint(len(payload)) + payload


INVALID_UTF8 = [b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b"a\x80b", b"\xf4\x90\x80\x80"]


def raw_payloads(rpc: Rpc, valid: bytes) -> list[tuple[str, bytes]]:
    desc = rpc.request_desc
    out: list[tuple[str, bytes]] = [("raw b''", b"")]
    tenant_prefix = b""
    if "tenant" in desc.fields_by_name:
        tenant_prefix = length_delimited(desc.fields_by_name["tenant"].number, b"hostile-raw")
    for f in desc.fields:
        if f.type == FD.TYPE_STRING:
            for bad in INVALID_UTF8:
                out.append((f"raw {f.name}=<invalid UTF-8>", length_delimited(f.number, bad)))
        elif is_map(f):
            entry = length_delimited(1, b"\xff\xfe") + length_delimited(2, b"v")
            out.append((f"raw {f.name}=<map key invalid UTF-8>", tenant_prefix + length_delimited(f.number, entry)))
            entry = length_delimited(1, b"k") + length_delimited(2, b"\xff\xfe")
            out.append((f"raw {f.name}=<map value invalid UTF-8>", tenant_prefix + length_delimited(f.number, entry)))
        elif is_message(f):
            for sub in message_type(f).fields:
                if sub.type == FD.TYPE_STRING:
                    inner = length_delimited(sub.number, b"\xff\xfe")
                    out.append(
                        (f"raw {f.name}.{sub.name}=<invalid UTF-8>", tenant_prefix + length_delimited(f.number, inner))
                    )
            out.append(
                (f"raw {f.name}=<truncated submessage>", tenant_prefix + length_delimited(f.number, b"\x0a\x05ab"))
            )
        elif f.type == FD.TYPE_ENUM:
            out.append((f"raw {f.name}=<varint 2**64-1>", tenant_prefix + tag(f.number, 0) + varint(2**64 - 1)))
            out.append((f"raw {f.name}=<varint 2**40>", tenant_prefix + tag(f.number, 0) + varint(2**40)))
    for cut in sorted({1, len(valid) // 2, len(valid) - 1}):
        if 0 < cut < len(valid):
            out.append((f"raw <valid request truncated to {cut} of {len(valid)} bytes>", valid[:cut]))
    rng = random.Random(rpc.path)
    for size in (3, 17, 64, 257):
        out.append((f"raw <{size} random bytes>", bytes(rng.getrandbits(8) for _ in range(size))))
    out += [
        ("raw <field 1 declares 2**31-1 bytes>", tag(1, 2) + varint(2**31 - 1) + b"ab"),
        ("raw <field 1 declares 2**64-1 bytes>", tag(1, 2) + varint(2**64 - 1) + b"ab"),
        ("raw <11-byte varint>", tag(1, 0) + b"\xff" * 10 + b"\x01"),
        ("raw <field 1 as varint>", tag(1, 0) + varint(1)),
        ("raw <field 1 as fixed64>", tag(1, 1) + b"\x00" * 8),
        ("raw <field 1 as fixed32, truncated>", tag(1, 5) + b"\x00\x00"),
        ("raw <wire type 6>", tag(1, 6) + b"\x00"),
        ("raw <wire type 7>", tag(1, 7) + b"\x00"),
        ("raw <field number 0>", tag(0, 2) + b"\x00"),
        ("raw <unmatched end group>", tag(1, 4)),
        ("raw <200 nested groups>", tag(15, 3) * 200 + tag(15, 4) * 200),
        ("raw <unterminated group>", tag(15, 3) + tag(16, 0) + b"\x01"),
        ("raw <unknown field 536870911>", tenant_prefix + tag(536_870_911, 0) + varint(7)),
        ("raw <valid request + unknown fields>", valid + length_delimited(999, b"\xff" * 8) + tag(998, 0) + varint(1)),
    ]
    return out


# -- cases and their execution ---------------------------------------------------------------


@dataclass
class Case:
    rpc: Rpc
    origin: str  # sweep | hypothesis | raw
    label: str
    payload: bytes
    request: Message | None  # None when the payload does not parse
    tenant: str | None
    metadata: tuple[tuple[str, str], ...] = ()
    request_id: str = ""


@dataclass
class Outcome:
    case: Case
    code: grpc.StatusCode
    details: str
    reason: str | None  # the ErrorInfo reason; None when the status carries no ErrorInfo
    elapsed: float
    ours: bool = False  # caused by this harness (its deadline or cancel)
    server_error: str = ""  # from the server log, by request id


class CaseMaker:
    def __init__(self, seeded_generations: dict[str, int]) -> None:
        self._counter = itertools.count()
        self._seen: set[tuple[str, bytes, tuple[tuple[str, str], ...]]] = set()
        self.generations = seeded_generations
        self.cases: list[Case] = []

    def fresh_tenant(self, stem: str = "hx") -> str:
        return f"{stem}-{next(self._counter):05d}"

    def add(
        self, rpc: Rpc, origin: str, label: str, request: Message, metadata: tuple[tuple[str, str], ...] | None = None
    ) -> None:
        """Dedupe (before tenant markers become ids), replace the markers, add the case."""
        if metadata is None:
            metadata = self.default_metadata(rpc, request)
        key = (rpc.path, request.SerializeToString(), metadata)
        if key in self._seen:
            return
        self._seen.add(key)
        tenant = None
        if "tenant" in request.DESCRIPTOR.fields_by_name:
            tenant = str(get_field(request, "tenant"))
            if tenant == SEEDED:
                tenant = SEEDED_TENANT
            elif tenant.startswith(FRESH):
                stem = tenant[len(FRESH) :]
                tenant = f"{stem[:50]}-{next(self._counter):05d}" if stem else self.fresh_tenant()
            set_field(request, "tenant", tenant)
        self.cases.append(Case(rpc, origin, label, request.SerializeToString(), request, tenant, metadata))

    def default_metadata(self, rpc: Rpc, request: Message) -> tuple[tuple[str, str], ...]:
        key = GENERATION_METADATA.get(rpc.short)
        if key is None:
            return ()
        if getattr(request, "tenant", None) == SEEDED:
            scope = "global" if "global" in key else f"workspace/{getattr(request, 'workspace', '')}"
            return ((key, str(self.generations.get(scope, 0))),)
        return ((key, "0"),)

    def add_raw(self, rpc: Rpc, label: str, payload: bytes) -> None:
        try:
            request = rpc.request_cls.FromString(payload)
            tenant = getattr(request, "tenant", None)
        except Exception:
            request, tenant = None, None
        self.cases.append(Case(rpc, "raw", label, payload, request, tenant))


def seeded_baseline(rpc: Rpc, generations: dict[str, int]) -> Message:
    request = benign(rpc.request_desc, SEEDED)
    if "expected_generation" in request.DESCRIPTOR.fields_by_name and "scope" in request.DESCRIPTOR.fields_by_name:
        set_field(request, "expected_generation", generations.get(get_field(request, "scope"), 0))
    return request


def sweep_cases(maker: CaseMaker, rpc: Rpc) -> None:
    desc = rpc.request_desc
    has_tenant = "tenant" in desc.fields_by_name
    bases = [("fresh", benign(desc, FRESH))]
    if has_tenant:
        bases.append(("seeded", seeded_baseline(rpc, maker.generations)))
    for label, mutate, nested in variants(desc):
        tenant_field = label.startswith("tenant=")
        for kind, base in bases + ([("minimal", minimal(desc, FRESH))] if nested and has_tenant else []):
            if tenant_field and kind != "fresh":
                continue
            request = type(base)()
            request.CopyFrom(base)
            try:
                mutate(request)
            except (ValueError, TypeError, OverflowError):
                continue  # the client library cannot even build it
            maker.add(rpc, "sweep", f"{label} [{kind}]", request)
    key = GENERATION_METADATA.get(rpc.short)
    if key:
        for value in GENERATION_VALUES:
            maker.add(rpc, "sweep", f"metadata {key}={value!r} [fresh]", benign(desc, FRESH), ((key, value),))
        maker.add(rpc, "sweep", f"metadata {key} twice [fresh]", benign(desc, FRESH), ((key, "0"), (key, "0")))
        maker.add(rpc, "sweep", f"metadata {key} missing [fresh]", benign(desc, FRESH), ())


OVERSIZED = 17 * 1024 * 1024  # past the server's 16 MiB receive limit (the transport refuses it)


def all_cases(generations: dict[str, int], per_rpc: int) -> list[Case]:
    maker = CaseMaker(generations)
    first_of_service: dict[str, Rpc] = {}
    for rpc in RPCS:
        if not rpc.method.server_streaming:  # a stream's short deadline would expire mid-upload
            first_of_service.setdefault(rpc.service, rpc)
    for rpc in RPCS:
        if first_of_service.get(rpc.service) is rpc:
            maker.add_raw(rpc, "raw <17 MiB message>", length_delimited(999, b"x" * OVERSIZED))
        sweep_cases(maker, rpc)
        for request in hypothesis_requests(rpc, per_rpc):
            maker.add(rpc, "hypothesis", "hypothesis", request)
        valid = benign(rpc.request_desc, "raw-valid").SerializeToString()
        for label, payload in raw_payloads(rpc, valid):
            maker.add_raw(rpc, label, payload)
    for i, case in enumerate(maker.cases):
        case.request_id = f"hostile-{i}"
    return maker.cases


UNARY_DEADLINE = 15.0
STREAM_DEADLINE = 0.5
STREAM_MESSAGES = 3


def _error_info_reason(trailing: Iterable[tuple[str, Any]] | None) -> str | None:
    for key, value in trailing or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    return str(info.reason)
    return None


def execute(channel: grpc.Channel, case: Case) -> Outcome:
    method = case.rpc.method
    metadata = (("x-request-id", case.request_id), *case.metadata)
    started = time.monotonic()
    cancelled = False
    deadline = STREAM_DEADLINE if method.server_streaming else UNARY_DEADLINE
    path = case.rpc.path
    # No serializers: the payload goes out as the bytes made here, the response stays bytes.
    arg: Any = iter([case.payload]) if method.client_streaming else case.payload
    try:
        if method.server_streaming:
            stream: grpc.UnaryStreamMultiCallable[bytes, bytes] | grpc.StreamStreamMultiCallable[bytes, bytes] = (
                channel.stream_stream(path) if method.client_streaming else channel.unary_stream(path)
            )
            call = stream(arg, timeout=deadline, metadata=metadata)
            for count, _ in enumerate(call, 1):
                if count >= STREAM_MESSAGES:
                    cancelled = True
                    call.cancel()
                    break
            code, details, trailing = call.code(), call.details() or "", call.trailing_metadata()
        else:
            unary: grpc.UnaryUnaryMultiCallable[bytes, bytes] | grpc.StreamUnaryMultiCallable[bytes, bytes] = (
                channel.stream_unary(path) if method.client_streaming else channel.unary_unary(path)
            )
            _, answered = unary.with_call(arg, timeout=deadline, metadata=metadata)
            code, details, trailing = answered.code(), answered.details() or "", answered.trailing_metadata()
    except grpc.RpcError as error:
        failed = failed_call(error)
        code, details, trailing = failed.code(), failed.details() or "", failed.trailing_metadata()
    elapsed = time.monotonic() - started
    reason = _error_info_reason(trailing)
    ours = reason is None and (
        (code == grpc.StatusCode.CANCELLED and cancelled)
        or (code == grpc.StatusCode.DEADLINE_EXCEEDED and elapsed >= 0.8 * deadline)
    )
    return Outcome(case, code, details, reason, elapsed, ours)


FORBIDDEN = {
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.DATA_LOSS,
}
TRANSPORT_SIZE_LIMIT = re.compile(r"larger than max|message too large", re.I)


def forbidden(o: Outcome) -> bool:
    if o.code == grpc.StatusCode.DATA_LOSS:
        return not o.reason  # only a deliberate DATA_LOSS (with an ErrorInfo) is acceptable
    return o.code in FORBIDDEN


def lacks_error_info(o: Outcome) -> bool:
    if o.code == grpc.StatusCode.OK or o.ours or forbidden(o):
        return False
    if o.code == grpc.StatusCode.RESOURCE_EXHAUSTED and o.reason is None and TRANSPORT_SIZE_LIMIT.search(o.details):
        return False
    return not o.reason


# -- the server log ---------------------------------------------------------------------------


def server_errors_by_request_id(log_path: Path) -> tuple[dict[str, str], list[str]]:
    """Unhandled exceptions in the server log: by request id, and those without one."""
    by_id: dict[str, str] = {}
    loose: list[str] = []
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            if "Traceback" in line or "Error" in line:
                loose.append(line.strip()[:200])
            continue
        if "exc" not in entry:
            continue
        summary = summarize_traceback(entry["exc"])
        if entry.get("request_id", "").startswith("hostile-"):
            by_id[entry["request_id"]] = summary
        else:
            loose.append(f"{entry.get('msg', '')}: {summary}")
    return by_id, loose


def summarize_traceback(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', text)
    last = lines[-1].strip() if lines else "?"
    where = ""
    for path, line, function in reversed(frames):
        if "/service/" in path or "/mnemosyne/" in path:
            where = f" at {Path(path).name}:{line} {function}()"
            break
    return f"{last[:160]}{where}"


# -- the data directory -----------------------------------------------------------------------

SQLITE_SUFFIX = r"(?:-wal|-shm|-journal)?"
TOP_LEVEL_FILES = re.compile(
    rf"\.mnemosyne\.lock|\.mnemosyne\.secret|hot_path_pending\.sqlite{SQLITE_SUFFIX}|webhooks\.sqlite{SQLITE_SUFFIX}|erasures\.jsonl"
    rf"|requests_without_file\.sqlite{SQLITE_SUFFIX}"
)
TENANT_FILE = re.compile(rf"tenants/([a-z0-9][a-z0-9_-]{{0,62}})\.sqlite{SQLITE_SUFFIX}")
INBOX_FILE = re.compile(rf"inbox/([a-z0-9][a-z0-9_-]{{0,62}})\.inbox\.sqlite{SQLITE_SUFFIX}")


def data_dir_files(data_dir: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Files by tenant, and files of no known kind (relative paths)."""
    by_tenant: dict[str, list[str]] = defaultdict(list)
    unknown = []
    for path in sorted(data_dir.rglob("*")):
        if path.is_dir():
            # The backup scratch space may stay, empty (a file left in it is reported below).
            if path.relative_to(data_dir).as_posix() not in ("tenants", "inbox", ".backup-scratch"):
                unknown.append(path.relative_to(data_dir).as_posix() + "/")
            continue
        relative = path.relative_to(data_dir).as_posix()
        match = TENANT_FILE.fullmatch(relative) or INBOX_FILE.fullmatch(relative)
        if match:
            by_tenant[match.group(1)].append(relative)
        elif not TOP_LEVEL_FILES.fullmatch(relative):
            unknown.append(relative)
    return by_tenant, unknown


def is_write(o: Outcome) -> bool:
    return o.case.rpc.short not in READ_ONLY


# -- seeding ----------------------------------------------------------------------------------


def seed(channel: grpc.Channel) -> dict[str, int]:
    """Give SEEDED_TENANT memories (one forgotten), records in two scopes, events, a live hot
    path; return the generations of its scopes."""
    from mnemosyne.v1 import hot_path_pb2, memory_pb2, types_pb2, workspace_pb2

    def call(path: str, request: Message, metadata: tuple[tuple[str, str], ...] = ()) -> Any:
        rpc = RPC_BY_PATH[path]
        return channel.unary_unary(
            path,
            request_serializer=rpc.request_cls.SerializeToString,
            response_deserializer=rpc.response_cls.FromString,
        ).with_call(request, timeout=10, metadata=metadata)

    t = SEEDED_TENANT
    memory, workspace, hot = (
        "/mnemosyne.v1.MemoryService/",
        "/mnemosyne.v1.WorkspaceService/",
        "/mnemosyne.v1.HotPathService/",
    )
    for i, text in enumerate(
        [
            "The sky over Lisbon was blue on 8 May 2023.",
            "Ticket RF-88213 status: awaiting review.",
            "Ticket RF-88213 status: refunded.",
            "Alice prefers tea over coffee.",
            "The sky over Lisbon was blue on 8 May 2023!",
        ]
    ):
        call(
            memory + "Retain",
            memory_pb2.RetainRequest(
                tenant=t, text=text, metadata={"n": str(i)}, scope="global" if i % 2 else "workspace/w1"
            ),
        )
    call(memory + "ForgetMemory", memory_pb2.ForgetMemoryRequest(tenant=t, memory_id=4))
    call(
        memory + "Retain",
        memory_pb2.RetainRequest(tenant=t, messages=[types_pb2.ConversationMessage(role="user", content="hi")]),
    )
    call(hot + "Enable", hot_path_pb2.HotPathRequest(tenant=t))
    for i in range(3):
        call(memory + "Retain", memory_pb2.RetainRequest(tenant=t, text=f"fast write number {i}", fast=True))
    call(hot + "Flush", hot_path_pb2.FlushRequest(tenant=t, timeout_seconds=10))
    call(
        workspace + "UpdateGlobal",
        workspace_pb2.UpdateGlobalRequest(tenant=t, content="# Memory\n"),
        (("mnemosyne-global-generation", "0"),),
    )
    put = workspace_pb2.RecordChange(op=workspace_pb2.RecordChange.PUT, key="notes.md", content="plan")
    call(
        workspace + "UpdateWorkspace",
        workspace_pb2.UpdateWorkspaceRequest(tenant=t, workspace="w1", changes=[put]),
        (("mnemosyne-workspace-generation", "0"),),
    )
    generations = {}
    for scope in ("global", "workspace/w1"):
        response, _ = call(workspace + "ListRecords", workspace_pb2.ListRecordsRequest(tenant=t, scope=scope))
        generations[scope] = response.generation
    return generations


def ping(channel: grpc.Channel) -> None:
    ping_call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary("/mnemosyne.v1.AdminService/Ping")
    ping_call(b"", timeout=5)


# -- reporting --------------------------------------------------------------------------------

FindingKey = tuple[str, str, str, str]  # (rpc, code, what was wrong, the server log's exception)


def _normalize(text: str, limit: int = 100) -> str:
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return text[:limit]


def display_request(case: Case, limit: int = 900) -> str:
    if case.request is None:
        return f"(does not parse) bytes {case.payload[:120]!r}" + (
            f"... ({len(case.payload)} bytes)" if len(case.payload) > 120 else ""
        )
    shown = type(case.request)()
    shown.CopyFrom(case.request)
    _shorten(shown)
    text = text_format.MessageToString(shown, as_utf8=True).strip() or "(empty message)"
    if case.origin == "raw":
        text = f"bytes {case.payload[:120]!r} -- parses as: {text}"
    if case.metadata:
        text += f"\nmetadata: {list(case.metadata)}"
    return text if len(text) <= limit else text[:limit] + " ..."


def _shorten(message: Message) -> None:
    for f, value in message.ListFields():
        if f.type == FD.TYPE_STRING and not f.is_repeated and len(value) > 40:
            setattr(message, f.name, f"{value[:12]}...<{len(value)} chars>")
        elif f.type == FD.TYPE_STRING and f.is_repeated:
            if len(value) > 4:
                del value[4:]
        elif is_message(f):
            items = value if f.is_repeated else [value]
            if f.is_repeated and len(value) > 3:
                del value[3:]
            for item in items:
                _shorten(item)
        elif is_map(f) and len(value) > 3:
            for k in list(value.keys())[3:]:
                del value[k]


def _labels(members: list[Outcome], limit: int) -> str:
    labels = sorted({o.case.label for o in members if o.case.origin != "hypothesis"})
    hypothesis = sum(o.case.origin == "hypothesis" for o in members)
    shown = labels[:limit]
    text = "; ".join(shown) + (f"; ... +{len(labels) - len(shown)} more" if len(labels) > len(shown) else "")
    if hypothesis:
        text += ("; " if text else "") + f"{hypothesis} hypothesis requests"
    return text


def group_report(title: str, outcomes: list[Outcome], key: Callable[[Outcome], FindingKey]) -> list[str]:
    """Findings grouped by (rpc, code, message, server exception); the groups that differ only
    in the RPC are printed together (one finding per RPC, one entry per root cause)."""
    groups: dict[FindingKey, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[key(o)].append(o)
    causes: dict[tuple[str, ...], dict[str, list[Outcome]]] = defaultdict(dict)
    for (rpc, *rest), members in groups.items():
        causes[tuple(rest)][rpc] = members
    lines = [f"== {title}: {len(groups)} distinct (rpc, code, message), {len(causes)} causes, {len(outcomes)} calls =="]
    ordered = sorted(causes.items(), key=lambda kv: (-len(kv[1]), sorted(kv[1])[0], kv[0]))
    for n, ((code, what, server_error), by_rpc) in enumerate(ordered, 1):
        lines.append(f"[{n}] {code}  {what!r}" + (f"  -- in {len(by_rpc)} RPCs" if len(by_rpc) > 1 else ""))
        if server_error:
            lines.append(f"    server log: {server_error}")
        every = [o for members in by_rpc.values() for o in members]
        label_sets = [{o.case.label for o in m if o.case.origin != "hypothesis"} for m in by_rpc.values()]
        common = set.intersection(*label_sets) if len(by_rpc) > 1 else set()
        if common:
            lines.append(f"    triggered in every one of these RPCs by: {'; '.join(sorted(common))}")
        for rpc, members in sorted(by_rpc.items()):
            origins = Counter(o.case.origin for o in members)
            extra = [o for o in members if o.case.label not in common]
            line = f"    {rpc}: {len(members)} calls ({', '.join(f'{v} {o}' for o, v in sorted(origins.items()))})"
            if extra:
                line += f"; {'also ' if common else ''}triggered by: {_labels(extra, 40)}"
            lines.append(line)
        smallest = min(every, key=lambda o: (o.case.origin == "hypothesis", len(o.case.payload), o.case.rpc.short))
        lines.append(f"    smallest: {smallest.case.rpc.short} ({smallest.case.origin}: {smallest.case.label})")
        lines += ["      " + line for line in display_request(smallest.case).splitlines()]
    return lines


def code_table(outcomes: list[Outcome]) -> str:
    by_rpc: dict[str, Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        by_rpc[o.case.rpc.short][o.code.name + ("(harness)" if o.ours else "")] += 1
    return "\n".join(f"  {rpc}: {dict(c.most_common())}" for rpc, c in sorted(by_rpc.items()))


def forbidden_key(o: Outcome) -> FindingKey:
    return (o.case.rpc.short, o.code.name, _normalize(o.details), _normalize(o.server_error, 240))


def error_info_key(o: Outcome) -> FindingKey:
    what = "ErrorInfo with empty reason" if o.reason == "" else "no ErrorInfo"
    return (o.case.rpc.short, o.code.name, f"{what}: {_normalize(o.details)}", "")


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def hostile_server(server_factory: ServerFactory) -> Iterator[ServerProcess]:
    process = server_factory(args=["--log-format", "json"])
    process.start()
    yield process


@pytest.fixture
def channel(hostile_server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(
        hostile_server.target, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    ) as ch:
        yield ch


EXAMPLES_PER_RPC = 50
WORKERS = 12


def test_no_hostile_request_gets_internal_or_crashes_the_server(hostile_server: Any, channel: grpc.Channel) -> None:
    started = time.monotonic()
    generations = seed(channel)
    parent_before = set(p.name for p in hostile_server.data_dir.parent.iterdir())
    cases = all_cases(generations, EXAMPLES_PER_RPC)
    built = time.monotonic()
    # Streams first (each waits out its short deadline), spread over the pool with the rest.
    order = sorted(cases, key=lambda c: not c.rpc.method.server_streaming)
    with ThreadPoolExecutor(WORKERS) as pool:
        outcomes = list(pool.map(lambda c: execute(channel, c), order))
    ran = time.monotonic()

    problems: list[str] = []
    alive = hostile_server.process.poll() is None
    if not alive:
        problems.append(f"== the server DIED (exit {hostile_server.process.returncode}); the end of its log: ==")
        problems += [
            "    " + line[:300] for line in hostile_server.stderr_path.read_text(errors="replace").splitlines()[-20:]
        ]
    else:
        try:
            ping(channel)
        except grpc.RpcError as error:
            problems.append(f"== the server no longer answers Ping: {error.code().name} {error.details()} ==")
    by_id, loose = server_errors_by_request_id(hostile_server.stderr_path)
    for o in outcomes:
        o.server_error = by_id.get(o.case.request_id, "")

    bad = [o for o in outcomes if forbidden(o)]
    missing = [o for o in outcomes if lacks_error_info(o)]
    if bad:
        problems += group_report(
            "forbidden status codes (INTERNAL/UNKNOWN/UNIMPLEMENTED/DATA_LOSS)", bad, forbidden_key
        )
    if missing:
        problems += group_report("failures without a google.rpc.ErrorInfo reason", missing, error_info_key)

    # The data directory: only tenants some successful write named may have files.
    by_tenant, unknown = data_dir_files(hostile_server.data_dir)
    # A write cut off by this harness's own deadline may have committed: it counts as written.
    written = {SEEDED_TENANT} | {
        o.case.tenant for o in outcomes if (o.code == grpc.StatusCode.OK or o.ours) and is_write(o) and o.case.tenant
    }
    calls_by_tenant: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.case.tenant:
            calls_by_tenant[o.case.tenant].append(o)
    stray = sorted(set(by_tenant) - written)
    if stray:
        problems.append(f"== files of tenants that no successful write named: {len(stray)} tenants ==")
        stray_groups: dict[tuple[tuple[str, str, str], ...], list[str]] = defaultdict(list)
        for tenant in stray:
            calls = calls_by_tenant.get(tenant, [])
            signature = tuple(
                sorted({(o.case.rpc.short, o.code.name, o.reason or _normalize(o.details)) for o in calls})
            )
            stray_groups[signature].append(tenant)
        for signature, tenants in sorted(stray_groups.items()):
            described = ", ".join(f"{rpc} -> {code} {reason}" for rpc, code, reason in signature) or "no call named it"
            example = next((o for o in calls_by_tenant.get(tenants[0], [])), None)
            problems.append(f"[*] {len(tenants)} tenants, calls: {described}")
            problems.append(f"    files: {by_tenant[tenants[0]]}")
            if example is not None:
                labels = sorted({o.case.label for t in tenants for o in calls_by_tenant[t]})
                problems.append(
                    "    triggered by: "
                    + "; ".join(labels[:10])
                    + (f"; ... +{len(labels) - 10} more" if len(labels) > 10 else "")
                )
                problems += ["      " + line for line in display_request(example.case).splitlines()]
    if unknown:
        problems.append(f"== files of no known kind in the data directory: {unknown[:20]} ==")
    parent_after = set(p.name for p in hostile_server.data_dir.parent.iterdir())
    if parent_after - parent_before:
        problems.append(f"== new entries beside the data directory: {sorted(parent_after - parent_before)} ==")
    if loose and (bad or problems):
        problems.append("== server log errors without a request id of this harness ==")
        counted = Counter(re.sub(r"'[^']*'", "'…'", line)[:220] for line in loose)
        problems += [f"    {count} x {line}" for line, count in counted.most_common(15)]

    summary = (
        f"{len(cases)} calls to {len(RPCS)} RPCs ({', '.join(f'{v} {k}' for k, v in sorted(Counter(c.origin for c in cases).items()))}); "
        f"codes {dict(Counter(o.code.name for o in outcomes).most_common())}; "
        f"built in {built - started:.1f}s, ran in {ran - built:.1f}s"
    )
    print(summary)
    print("status codes by RPC:\n" + code_table(outcomes))
    if problems:
        pytest.fail(summary + "\n" + "\n".join(problems), pytrace=False)


# -- out-of-domain scalars --------------------------------------------------------------------


def out_of_domain_cases(generations: dict[str, int], values_for: ValuesFor) -> list[Case]:
    maker = CaseMaker(generations)
    for rpc in RPCS:
        desc = rpc.request_desc
        bases = [("fresh", benign(desc, FRESH))]
        if "tenant" in desc.fields_by_name:
            bases.append(("seeded", seeded_baseline(rpc, generations)))
        for label, mutate, _ in variants(desc, values_for, containers=False):
            for kind, base in bases:
                request = type(base)()
                request.CopyFrom(base)
                mutate(request)
                maker.add(rpc, "sweep", f"{label} [{kind}]", request)
    for i, case in enumerate(maker.cases):
        case.request_id = f"hostile-{i}"
    return maker.cases


def only(types: set[int], values: list[Any]) -> ValuesFor:
    def values_for(f: FD) -> list[Any]:
        if f.type not in types:
            return []
        if f.type == FD.TYPE_ENUM:
            declared = set(enum_numbers(f))
            return [v for v in values + [max(declared) + 1] if v not in declared]
        return values

    return values_for


def check_refused(channel: grpc.Channel, cases: list[Case], what: str) -> None:
    assert cases, f"no request field holds {what}"
    with ThreadPoolExecutor(WORKERS) as pool:
        outcomes = list(pool.map(lambda c: execute(channel, c), cases))
    wrong = [o for o in outcomes if o.code != grpc.StatusCode.INVALID_ARGUMENT]
    fields = sorted({(c.rpc.short, c.label.split("=")[0]) for c in cases})
    lines = []
    by_field: dict[tuple[str, str], list[Outcome]] = defaultdict(list)
    for o in wrong:
        by_field[(o.case.rpc.short, o.case.label.split("=")[0])].append(o)
    for (rpc, name), members in sorted(by_field.items()):
        results = "; ".join(
            f"{o.case.label.split('=', 1)[1]} -> {o.code.name}" + (f" {o.reason}" if o.reason else "") for o in members
        )
        lines.append(f"  {rpc} {name}: {results}")
    if wrong:
        pytest.fail(
            f"{what} must get INVALID_ARGUMENT; {len(wrong)} of {len(outcomes)} calls did not "
            f"({len(by_field)} of {len(fields)} (rpc, field) pairs):\n" + "\n".join(lines),
            pytrace=False,
        )


def test_unknown_enum_values_are_invalid_argument(hostile_server: Any, channel: grpc.Channel) -> None:
    """Any number outside an enum's declared values, in any request enum field (at any depth), is
    refused with INVALID_ARGUMENT, on a fresh tenant and on one holding data."""
    generations = seed(channel)
    cases = out_of_domain_cases(generations, only({FD.TYPE_ENUM}, OUT_OF_RANGE_ENUMS))
    check_refused(channel, cases, "an enum number that is not declared")


def test_non_finite_and_absurd_doubles_are_invalid_argument(hostile_server: Any, channel: grpc.Channel) -> None:
    """NaN, +-inf and +-1e300 in any request double field (timeouts, thresholds) are refused with
    INVALID_ARGUMENT: no such value is a meaningful timeout or similarity."""
    generations = seed(channel)
    cases = out_of_domain_cases(generations, only({FD.TYPE_DOUBLE, FD.TYPE_FLOAT}, OUT_OF_DOMAIN_DOUBLES))
    check_refused(channel, cases, "a double that is not finite or is absurdly large")
