"""The Python client refuses arguments that make no request with a typed error, before sending.

Every public method of ``MemoryClient`` is called, against a real server, with each of its text,
integer and float arguments in turn set to a value no request can carry or no server takes: a lone
surrogate (UTF-8 cannot encode it), an integer past 64 bits, NaN, an infinity, 1e300. Each ends in
an ``InvalidArgumentError`` naming its reason (or, for a float the method hands to the server as
it is, the server's own answer), never in Python's UnicodeEncodeError, ValueError or
OverflowError, never in a local INTERNAL, never in a call that ends at once with
DEADLINE_EXCEEDED. The methods are found from the class, so a new one is covered."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import replace
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc.error_details_pb2 import ErrorInfo, RetryInfo

from mnemosyne.cli.server_process import _free_port as free_port
from mnemosyne.client import (
    ArgumentTypeError,
    BackupFile,
    ExpiryPolicy,
    MemoryClient,
    MemoryHost,
    Message,
    RecordChange,
    RetainItem,
    TenantBackup,
    ThreadRef,
)
from mnemosyne.client.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    MnemosyneClientError,
    RequestInvalidError,
    ServerError,
    UnavailableError,
)
from mnemosyne.host.protocol import GLOBAL_GENERATION_KEY
from mnemosyne.v1 import workspace_pb2
from tests.support import RefusingServer, ServerProcess, module_server, status_details

# Methods that take no plain arguments of their own to spoil (a stub's method and its request, a
# host flow, a backup's chunks) or only close the client.
_NOT_CALLED = {"close", "call", "ask", "run", "consistency_token", "import_tenant"}
_SURROGATE = "x\ud800"
# ... and a value of the wrong type, which protobuf refuses naming no argument.
_HOSTILE: dict[str, list[Any]] = {
    "str": [_SURROGATE, 5, None, b"acme"],
    "int": [2**64, -(2**64), "1", 1.5, None, True],
    "float": [math.nan, math.inf, -math.inf, 1e300, "soon", True],
}
_PLAIN: dict[str, Any] = {"str": "acme", "int": 1, "float": 1.0}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, "client-refusals")


def _kind(parameter: inspect.Parameter) -> str | None:
    annotation = str(parameter.annotation).removesuffix(" | None")
    return annotation if annotation in _HOSTILE else None


def _cases() -> Iterator[tuple[str, dict[str, Any], str, Any]]:
    """(method, its plain arguments, the argument spoilt, its value)."""
    for name, method in vars(MemoryClient).items():
        if name.startswith("_") or not inspect.isfunction(method) or name in _NOT_CALLED:
            continue
        parameters = list(inspect.signature(inspect.unwrap(method)).parameters.values())[1:]
        plain: dict[str, Any] = {}
        for parameter in parameters:
            if parameter.default is not inspect.Parameter.empty:
                continue
            kind = _kind(parameter)
            annotation = str(parameter.annotation)
            if kind is not None:
                plain[parameter.name] = _PLAIN[kind]
            elif annotation.startswith(("Sequence", "Mapping")):
                plain[parameter.name] = [] if annotation.startswith("Sequence") else {}
            else:
                plain = {}
                break
        else:
            if name == "hot_path":
                plain["action"] = "status"
            for parameter in parameters:
                kind = _kind(parameter)
                for value in _HOSTILE.get(kind or "", []):
                    if value is None and str(parameter.annotation).endswith(" | None"):
                        continue  # None is that argument's "not given"
                    yield name, plain, parameter.name, value


CASES = list(_cases())


def test_the_cases_reach_every_method_that_takes_plain_arguments() -> None:
    methods = {name for name, *_ in CASES}
    assert {"retain", "recall", "get_memory", "list_events", "watch_events", "move_tenant", "backup"} <= methods
    assert len(methods) >= 45 and len(CASES) >= 150, (len(methods), len(CASES))


def test_every_spoilt_argument_ends_in_a_typed_error(server: ServerProcess) -> None:
    outcomes: dict[tuple[str, str, str], str] = {}
    with MemoryClient(server.target, timeout=10) as client:
        for name, plain, spoilt, value in CASES:
            try:
                answer = getattr(client, name)(**{**plain, spoilt: value})
                if inspect.isgenerator(answer):
                    next(answer, None)
                outcome = "answered"
            except MnemosyneClientError as error:
                outcome = f"{type(error).__name__} {error.reason}"
                if isinstance(error, InvalidArgumentError):
                    outcome = "refused " + error.reason
            outcomes[name, spoilt, repr(value)] = outcome
    wrong = {
        case: outcome
        for case, outcome in outcomes.items()
        if not outcome.startswith("refused")
        # A float the method sends as it is (a flush's wait, a dedup's threshold): the server's
        # own answer to it; a consistency token a status call does not use.
        and not (case[2] in {"nan", "inf", "-inf", "1e+300"} and "DEADLINE_EXCEEDED" not in outcome)
        and not (case[0] == "hot_path" and case[1] == "consistency_token" and outcome == "answered")
    }
    assert not wrong, wrong


def test_the_refusals_name_their_reason_and_are_value_errors(server: ServerProcess) -> None:
    tenant = "never-made"
    with MemoryClient(server.target, timeout=10) as client:
        refusals: dict[str, Callable[[], object]] = {
            "REQUEST_UNDECODABLE": lambda: client.retain(tenant, _SURROGATE),
            "NUMBER_INVALID": lambda: client.recall(tenant, "tea", k=2**40),
            "OCCURRED_AT_INVALID": lambda: client.retain(tenant, "tea", occurred_at=math.nan),
            "EXPIRES_AT_INVALID": lambda: client.update_memory(tenant, 1, expires_at=-1e20),
            "TIMESTAMP_INVALID": lambda: client.list_events(tenant, accepted_after=math.inf),
            "TIMEOUT_INVALID": lambda: next(iter(client.watch_events(tenant, timeout=math.inf))),
            "MEMBER_ID_INVALID": lambda: client.move_tenant(tenant, "m2", member="Not A Member"),
            "RECALL_MODE_INVALID": lambda: client.recall(tenant, "tea", mode="fuzzy"),
            "HOT_PATH_ACTION_INVALID": lambda: client.hot_path(tenant, "pause"),
            "WEBHOOK_KINDS_INVALID": lambda: client.create_webhook(tenant, "https://example.com/x", ["everything"]),
        }
        for reason, attempt in refusals.items():
            with pytest.raises(RequestInvalidError) as refused:
                attempt()
            assert refused.value.reason == reason
            assert isinstance(refused.value, ValueError)
            if reason == "REQUEST_UNDECODABLE":  # the sentence of every place that refuses it (host/unicode.py)
                assert refused.value.message == (
                    "a text of the request holds '\\ud800' at 1, half of a surrogate pair, which is not Unicode "
                    "text: send the character whole (both halves of the pair) or leave it out"
                ), refused.value.message
        # An argument of the wrong type is named, with what it takes (protobuf named none).
        with pytest.raises(RequestInvalidError, match=r"retain: text is int 5; it takes a text \(str\)$"):
            client.retain(tenant, 5)  # type: ignore[arg-type]  # the wrong type is the case
        with pytest.raises(RequestInvalidError, match=r"recall: k is float nan; it takes a whole number") as wrong:
            client.recall(tenant, "tea", k=math.nan)  # type: ignore[arg-type]  # the wrong type is the case
        assert wrong.value.reason == "NUMBER_INVALID"
        assert isinstance(wrong.value, TypeError) and isinstance(wrong.value, ValueError)  # what Python raises, either
        # MemoryHost's too, and a tenant that is no text when it is made.
        with pytest.raises(RequestInvalidError, match=r"assemble_context: workspace is int 5; it takes a text"):
            MemoryHost(client, tenant).assemble_context(object, 5)  # type: ignore[arg-type]  # the wrong type is the case
        with pytest.raises(TypeError, match=r"MemoryHost: tenant is int 5; it takes a text \(str\)$"):
            MemoryHost(client, 5)  # type: ignore[arg-type]  # the wrong type is the case
        # Nothing was sent: the tenant was never made.
        assert tenant not in client.list_tenants().tenants


# (call, the refusal's message): checked before the method runs, so no server is needed. Before,
# None went as the field's default (memory 0), a text generation as the header's text, True as 1,
# a text for a list as its characters, and a text for the session's tenants failed deep inside.
def _wrong(value: object) -> Any:
    """``value`` as the type checker lets through: the wrong type is the case."""
    return value


_MANIFEST = TenantBackup("acme", 1, 0, "", 0, 0, 0, {}, [])
_MISTYPED: list[tuple[Callable[[MemoryClient], object], str]] = [
    (
        lambda c: c.get_memory("acme", _wrong(None)),
        "get_memory: memory_id is NoneType None; it takes a whole number (int)",
    ),
    (
        lambda c: c.update_global("acme", "x", _wrong("1")),
        "update_global: observed_generation is str '1'; it takes a whole number (int)",
    ),
    (lambda c: c.recall("acme", "tea", k=_wrong(True)), "recall: k is bool True; it takes a whole number (int)"),
    (lambda c: c.recall("acme", "tea", scopes="global"), "recall: scopes is str 'global'; it takes a list of texts"),
    (lambda c: c.retain("acme", _wrong(None)), "retain: text is NoneType None; it takes a text (str)"),
    (lambda c: c.retain("acme", "tea", fast=_wrong(1)), "retain: fast is int 1; it takes True or False"),
    (
        lambda c: c.retain("acme", "tea", thread=_wrong(("s", 1))),
        "retain: thread is tuple ('s', 1); it takes a ThreadRef",
    ),
    (
        lambda c: c.retain_batch("acme", "tea"),
        "retain_batch: items is str 'tea'; it takes a list of texts or RetainItem",
    ),
    (
        lambda c: c.create_webhook("acme", "https://x", "memory.created"),
        "create_webhook: kinds is str 'memory.created'; it takes a list of texts",
    ),
    (
        lambda c: c.set_expiry_policy("acme", _wrong({})),
        "set_expiry_policy: policy is dict {}; it takes an ExpiryPolicy",
    ),
    (
        lambda c: next(iter(c.watch_events("acme", _wrong(None)))),
        "watch_events: after_event_id is NoneType None; it takes a whole number (int)",
    ),
    (
        lambda c: MemoryClient("x", session_tenants=_wrong("x")),
        "MemoryClient: session_tenants is str 'x'; it takes a whole number (int)",
    ),
    (
        lambda c: MemoryClient("x", retries=_wrong(True)),
        "MemoryClient: retries is bool True; it takes a whole number (int)",
    ),
    (
        lambda c: MemoryClient("x", retry_window=_wrong("15")),
        "MemoryClient: retry_window is str '15'; it takes a number (float)",
    ),
    (lambda c: MemoryClient(_wrong(None)), "MemoryClient: target is NoneType None; it takes a text (str)"),
    # grpc's AttributeError ("'str' object has no attribute '_credentials'") before.
    (
        lambda c: MemoryClient("x", credentials=_wrong("ca.pem")),
        "MemoryClient: credentials is str 'ca.pem'; it takes gRPC channel credentials (grpc.ssl_channel_credentials(...))",
    ),
    # A field of a value type the caller built: protobuf took None as "" and failed on 5 naming no field.
    (
        lambda c: c.retain("acme", "tea", thread=ThreadRef(id=_wrong(5))),
        "ThreadRef: id is int 5; it takes a text (str)",
    ),
    (
        lambda c: c.retain_batch("acme", ["tea", RetainItem(text=_wrong(None))]),
        "RetainItem: text is NoneType None; it takes a text (str)",
    ),
    (
        lambda c: c.retain_batch("acme", [RetainItem("tea", thread=ThreadRef("s", _wrong(1.5)))]),
        "ThreadRef: position is float 1.5; it takes a whole number (int)",
    ),
    (
        lambda c: c.retain_batch("acme", [RetainItem("tea", metadata={"n": _wrong(5)})]),
        "RetainItem: metadata is dict {'n': 5}; it takes a mapping of texts to texts (dict[str, str])",
    ),
    (
        lambda c: c.edit_records("acme", "global", [RecordChange("put", key=_wrong(None))], 0),
        "RecordChange: key is NoneType None; it takes a text (str)",
    ),
    (
        lambda c: c.retain_conversation("acme", [Message("user", _wrong(b"hi"))]),
        "Message: content is bytes b'hi'; it takes a text (str)",
    ),
    (
        lambda c: c.set_expiry_policy("acme", ExpiryPolicy(update_extends=_wrong("yes"))),
        "ExpiryPolicy: update_extends is str 'yes'; it takes True or False",
    ),
    (
        lambda c: c.set_expiry_policy("acme", ExpiryPolicy(grace_seconds=_wrong(None))),
        "ExpiryPolicy: grace_seconds is NoneType None; it takes a whole number (int)",
    ),
    (
        lambda c: c.import_tenant(replace(_MANIFEST, head_hash=_wrong(None)), []),
        "TenantBackup: head_hash is NoneType None; it takes a text (str)",
    ),
    (
        lambda c: c.import_tenant(replace(_MANIFEST, files=[BackupFile("database", _wrong("1"), "00")]), []),
        "BackupFile: size is str '1'; it takes a whole number (int)",
    ),
]
# Whole numbers out of a client-side argument's range (retries -1 tried no call: AssertionError;
# retries 10**9 tried a server that is gone for years).
_OUT_OF_RANGE: list[tuple[Callable[[], object], str]] = [
    (lambda: MemoryClient("x", retries=-1), "MemoryClient: retries is -1; it takes 0 to 100"),
    (lambda: MemoryClient("x", retries=101), "MemoryClient: retries is 101; it takes 0 to 100"),
    (lambda: MemoryClient("x", retries=10**9), "MemoryClient: retries is 1000000000; it takes 0 to 100"),
    (lambda: MemoryClient("x", session_tenants=0), "MemoryClient: session_tenants is 0; it takes 1 or more"),
    # A retry window that never ends (NaN compares false, an infinity) or ends before it begins.
    (lambda: MemoryClient("x", retry_window=math.nan), "MemoryClient: retry_window is nan seconds; it takes 0 to 3600"),
    (lambda: MemoryClient("x", retry_window=math.inf), "MemoryClient: retry_window is inf seconds; it takes 0 to 3600"),
    (lambda: MemoryClient("x", retry_window=-1.0), "MemoryClient: retry_window is -1.0 seconds; it takes 0 to 3600"),
    (lambda: MemoryClient("x", retry_window=3601), "MemoryClient: retry_window is 3601 seconds; it takes 0 to 3600"),
]


def test_a_closed_client_refuses_every_call(server: ServerProcess) -> None:
    """grpc's ValueError ("Cannot invoke RPC on closed channel!") before, not a client error."""
    client = MemoryClient(server.target, timeout=10)
    client.ping()
    client.close()
    calls: list[Callable[[], object]] = [
        client.ping,
        lambda: client.recall("acme", "tea"),
        lambda: client.hot_path("acme", "flush"),
        lambda: list(client.watch_events("acme", timeout=5)),
        lambda: list(client.export_tenant("acme")),
    ]
    for call in calls:
        with pytest.raises(FailedPreconditionError) as refused:
            call()
        assert refused.value.reason == "CLIENT_CLOSED" and "make a new one" in refused.value.message
    client.close()  # again: nothing to do


def test_an_empty_target_is_refused_unless_members_are_given() -> None:
    """Each call failed UNKNOWN ("the target uri is not valid: dns:///"), a ServerError, and gRPC's
    core wrote its errors to stderr."""
    for target in ("", "  "):
        with pytest.raises(RequestInvalidError) as refused:
            MemoryClient(target)
        assert refused.value.reason == "TARGET_EMPTY" and "give the server's HOST:PORT" in refused.value.message
    MemoryClient("", members={"m1": "127.0.0.1:1"}).close()


@pytest.mark.parametrize(
    ("attempt", "message"), _MISTYPED, ids=[m.split(":")[0] + m.split(" is ")[0][-12:] for _, m in _MISTYPED]
)
def test_an_argument_of_another_type_is_refused_before_the_method_runs(
    attempt: Callable[[MemoryClient], object], message: str
) -> None:
    with MemoryClient(f"127.0.0.1:{free_port()}", retries=0, timeout=1) as client:
        with pytest.raises(ArgumentTypeError) as refused:
            attempt(client)
    assert refused.value.message == message


def test_a_client_argument_out_of_its_range_is_refused() -> None:
    for attempt, message in _OUT_OF_RANGE:
        with pytest.raises(RequestInvalidError) as refused:
            attempt()
        assert (refused.value.reason, refused.value.message) == ("NUMBER_INVALID", message)


def test_retries_after_unavailable_wait_a_doubling_backoff_of_at_most_one_second_with_jitter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing answers (UNAVAILABLE without a delay of the server's): each retry waits a random
    half to all of a backoff from 0.1 s, doubling, at most 1 s (client/retry_window.py), so that a
    server back is found within a second and its clients do not come back in step; ``retries``
    still bounds their count. The waits are recorded, not slept."""
    waits: list[float] = []
    monkeypatch.setattr("mnemosyne.client.memory_client.time.sleep", waits.append)
    with MemoryClient(f"127.0.0.1:{free_port()}", retries=8) as client, pytest.raises(UnavailableError):
        client.ping()
    backoffs = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    assert len(waits) == len(backoffs)
    assert all(b / 2 <= w <= b for w, b in zip(waits, backoffs, strict=True)), waits
    assert len(set(waits)) == len(waits)  # drawn, not fixed


# -- what a broken server answers ----------------------------------------------------------------


def test_a_status_detail_that_cannot_be_decoded_is_as_none_the_calls_code_kept() -> None:
    """A server's google.rpc.Status, or an ErrorInfo or RetryInfo in it, that cannot be decoded (a
    broken server's) raised protobuf's DecodeError from the call, no client error at all. It is as
    none (as the Node client takes it, test/retry.test.js): the call's code and message, and the
    details that can be decoded."""
    garbled = {
        kind: any_pb2.Any(type_url=f"type.googleapis.com/google.rpc.{kind}", value=b"\xff\xff\xff")
        for kind in ("ErrorInfo", "RetryInfo")
    }
    admission = ErrorInfo(reason="ADMISSION_LIMIT", domain="mnemosyne.v1")
    waiting = RetryInfo(retry_delay=duration_pb2.Duration(nanos=10_000_000))
    exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
    cases: list[tuple[grpc.StatusCode, bytes, str, float | None, int]] = [  # reason, retry delay, calls
        (grpc.StatusCode.FAILED_PRECONDITION, b"\xff\xff\xff\xff", "FAILED_PRECONDITION", None, 1),
        (exhausted, status_details(exhausted, "busy", garbled["ErrorInfo"]), "RESOURCE_EXHAUSTED", None, 1),
        (exhausted, status_details(exhausted, "busy", admission, garbled["RetryInfo"]), "ADMISSION_LIMIT", None, 1),
        (exhausted, status_details(exhausted, "busy", garbled["ErrorInfo"], waiting), "RESOURCE_EXHAUSTED", 0.01, 2),
    ]
    server = RefusingServer()
    try:
        with MemoryClient(server.address, retries=1) as client:
            for code, details, reason, delay, calls in cases:
                server.code, server.message, server.details, server.calls = code, "busy", details, 0
                with pytest.raises(MnemosyneClientError) as failed:
                    client.recall("acme", "x")
                assert (failed.value.code, failed.value.reason, failed.value.message) == (code, reason, "busy")
                assert (failed.value.retry_after_seconds, server.calls) == (delay, calls)
    finally:
        server.stop()


@pytest.mark.parametrize("generation", [None, "", "seven", "-1", "+1", "9223372036854775808"])
def test_a_write_answered_without_its_generation_is_the_servers_fault_with_the_node_clients_reason(
    generation: str | None,
) -> None:
    """A workspace write a (broken) server answers OK without exactly one decimal generation in its
    trailing metadata fails closed, ServerError INTERNAL GENERATION_METADATA_INVALID: the reason the
    Node client gives (client/node/src/client.js ``generationFrom``); before, the Python client
    gave OBSERVATION_NOT_SENT."""

    def update_global(_request: workspace_pb2.UpdateGlobalRequest, context: grpc.ServicerContext) -> Any:
        if generation is not None:
            context.set_trailing_metadata(((GLOBAL_GENERATION_KEY, generation),))
        return workspace_pb2.UpdateGlobalResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.unary_unary_rpc_method_handler(
        update_global,
        request_deserializer=workspace_pb2.UpdateGlobalRequest.FromString,
        response_serializer=workspace_pb2.UpdateGlobalResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("mnemosyne.v1.WorkspaceService", {"UpdateGlobal": handler}),)
    )
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    try:
        with MemoryClient(address) as client, pytest.raises(ServerError) as failed:
            client.update_global("acme", "# notes", 0)
        assert (failed.value.code, failed.value.reason) == (grpc.StatusCode.INTERNAL, "GENERATION_METADATA_INVALID")
    finally:
        server.stop(None)
