"""The mem0-compatible endpoints: mem0's Platform REST API on the HTTP port, so the official
``mem0ai`` ``MemoryClient(api_key=..., host="http://HOST:PORT")`` works unchanged
(docs/mem0.md has the mapping).

Every request passes the same envelope and edge as our own routes (transport/envelope.py,
transport/edge.py: admission, authentication, the tenant's authorisation, the tenant's fair
share of the worker threads, the one error table), and its endpoint calls the servicer of the
RPC it is (transport/http/mem0_endpoints.py), so no rule is written twice; only the shapes are
mem0's:

* ``Authorization: Token <key>`` (or ``Bearer``) is one of our tokens. The tenant is the token's
  one tenant; a token for several tenants (or the admin token) names one with the
  ``Mnemosyne-Tenant`` header; a server without a tokens file serves ``default`` unless the
  header names another.
* errors are our ``google.rpc.Status`` JSON (with its ``ErrorInfo`` reason) plus mem0's
  ``detail``; a 429 carries ``Retry-After``. What mem0 has and we do not answers 501 naming it.
* the numbers each endpoint reads are declared in its row of ``ROUTES`` and read by the one rule
  for numbers given as text (engine/limits.py).
* with several members, a request for a tenant another member owns is relayed to the owner
  (``RELAY_METHOD``, the edge's forwarding hop), which answers it with these same endpoints; its
  answer is given as it came.

Routing is unambiguous: every mem0 path ends with ``/`` and starts with one of ``MEM0_PREFIXES``;
none of our own routes does either (``GET /v1/ping`` is ours, ``GET /v1/ping/`` mem0's).
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import unquote

import grpc
from google.protobuf import json_format
from google.rpc import status_pb2
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mnemosyne.engine.consistency import Consistency
from mnemosyne.engine.limits import MAX_OCCURRED_AT_US, MIN_OCCURRED_AT_US, Limits, parse_integer, parse_number
from mnemosyne.engine.memories import MAX_PAGE_NUMBER, Memories
from mnemosyne.errors import InvalidArgument, MnemosyneError, NotFound
from mnemosyne.transport import consistency
from mnemosyne.transport.auth import ADMIN
from mnemosyne.transport.call import Call, metadata_value
from mnemosyne.transport.cluster.forwarding import Forwarder
from mnemosyne.transport.edge import Edge, Kind, body_too_large, kind_of
from mnemosyne.transport.envelope import CallEnvelope, ClientLeft, Outcome
from mnemosyne.transport.errors import http_status
from mnemosyne.transport.grpc.servicers import Servicers
from mnemosyne.transport.http import client_json
from mnemosyne.transport.http.json_api import error_headers, read_body
from mnemosyne.transport.http.mem0_endpoints import (
    Handler,
    Mem0Endpoints,
    Mem0Request,
    NamedPing,
    Tenantless,
    unsupported,
)
from mnemosyne.transport.http.methods import method_not_allowed

# The path prefixes this app answers (transport/http/server.py ``compose`` mounts each).
MEM0_PREFIXES = (
    "/v1/ping/",
    "/v1/memories",
    "/v1/event",
    "/v1/events",
    "/v1/entities",
    "/v1/batch",
    "/v1/exports",
    "/v1/summary",
    "/v1/feedback",
    "/v1/webhooks",
    "/v2",
    "/v3",
    "/api",
)
TENANT_HEADER = "mnemosyne-tenant"
_UNROUTED = "mem0 (no route)"  # the metric label of requests that matched no route
DEFAULT_TENANT = "default"  # a server without a tokens file, when the header names none


@dataclass(frozen=True)
class Mem0Number:
    """A number an endpoint reads, by the one rule for numbers given as text (engine/limits.py):
    from the first of ``places`` ("query", "body") that gives it, from ``minimum`` to
    ``maximum(limits)``; ``default`` when none does (or the body's value is null). A number that
    is not one is NUMBER_INVALID; one outside the range is ``out_of_range``, the reason the RPC's
    field it becomes gives for the same value (top_k is Recall's k: K_OUT_OF_RANGE)."""

    name: str
    places: tuple[str, ...]
    default: int | None
    minimum: int
    maximum: Callable[[Limits], float]
    out_of_range: str
    whole: bool = True

    def read(self, body: Mapping[str, Any], query: Mapping[str, str], limits: Limits) -> Any:
        sources = {"query": query, "body": body}
        value = next((sources[place][self.name] for place in self.places if self.name in sources[place]), None)
        if value is None:  # the default, within the operator's limit (a lower --max-k, --max-page-size)
            return None if self.default is None else min(self.default, int(self.maximum(limits)))
        if self.whole:
            maximum = int(self.maximum(limits))
            return parse_integer(
                value, field=self.name, minimum=self.minimum, maximum=maximum, out_of_range=self.out_of_range
            )
        maximum_number = self.maximum(limits)
        return parse_number(
            value, field=self.name, minimum=self.minimum, maximum=maximum_number, out_of_range=self.out_of_range
        )


@dataclass(frozen=True)
class Mem0Route:
    """One mem0 endpoint: its verb, its path (a regular expression whose groups are the path's
    ids), the handler ``Mem0Api._<name>`` and the numbers it reads; ``unsupported`` names what
    mem0 has and we do not (answered 501)."""

    verb: str
    path: str
    name: str
    numbers: tuple[Mem0Number, ...] = ()
    unsupported: str = ""


_PAGE_SIZE = partial(
    Mem0Number,
    "page_size",
    minimum=1,
    maximum=lambda limits: limits.max_page_size,
    out_of_range="PAGE_SIZE_OUT_OF_RANGE",
)
ROUTES: tuple[Mem0Route, ...] = (
    Mem0Route("GET", r"/v1/ping/", "ping"),
    Mem0Route(
        "POST",
        r"/v3/memories/add/",
        "add",
        # mem0's creation time, in unix seconds: the memory's occurred_at, within Timestamp's range.
        (
            Mem0Number(
                "timestamp",
                ("body",),
                None,
                MIN_OCCURRED_AT_US // 10**6,
                lambda _: MAX_OCCURRED_AT_US // 10**6,
                "OCCURRED_AT_INVALID",
            ),
        ),
    ),
    Mem0Route(
        "POST",
        r"/v3/memories/search/",
        "search",
        (
            Mem0Number("top_k", ("body",), 10, 1, lambda limits: limits.max_k, "K_OUT_OF_RANGE"),
            # A cosine similarity, as Dedup's threshold is.
            Mem0Number("threshold", ("body",), None, 0, lambda _: 1.0, "THRESHOLD_INVALID", whole=False),
        ),
    ),
    Mem0Route(
        "POST",
        r"/v3/memories/",
        "list",
        (
            Mem0Number("page", ("query", "body"), 1, 1, lambda _: MAX_PAGE_NUMBER, "PAGE_INVALID"),
            _PAGE_SIZE(("query", "body"), 100),
        ),
    ),
    Mem0Route("GET", r"/v1/memories/([^/]+)/", "get"),
    Mem0Route("PUT", r"/v1/memories/([^/]+)/", "update"),
    Mem0Route("DELETE", r"/v1/memories/([^/]+)/", "delete"),
    Mem0Route("DELETE", r"/v1/memories/", "delete_all"),
    Mem0Route("GET", r"/v1/memories/([^/]+)/history/", "history"),
    Mem0Route("GET", r"/v1/event/([^/]+)/", "event"),
    Mem0Route("GET", r"/v1/events/", "events", (_PAGE_SIZE(("query",), 50),)),
    # What mem0 has and we do not: a clear 501 naming it.
    *(
        Mem0Route(verb, path, "unsupported", unsupported=what)
        for verbs, path, what in (
            ("GET", r"/v1/memories/", "v1 list (use POST /v3/memories/)"),
            ("POST", r"/v1/memories/", "v1 add (use POST /v3/memories/add/)"),
            ("POST", r"/v2/memories/", "v2 list (use POST /v3/memories/)"),
            ("POST", r"/v2/memories/search/", "v2 search (use POST /v3/memories/search/)"),
            ("GET|DELETE", r"/v1/entities/.*|/v2/entities/.*", "entities"),
            ("PUT|DELETE", r"/v1/batch/", "batch update and delete"),
            ("POST", r"/v1/exports/.*", "memory exports"),
            ("POST", r"/v1/summary/", "summaries"),
            ("POST", r"/v1/feedback/", "feedback"),
            ("GET|POST|PUT|DELETE|PATCH", r"/api/v1/webhooks/.*|/v1/webhooks/.*", "webhooks"),
            ("GET|POST|PUT|DELETE|PATCH", r"/api/v1/orgs/.*", "organizations and projects"),
            ("GET|POST|PUT|DELETE", r"/v1/memories/[^/]+/graph/.*|/v[0-9]/graph/.*", "graph memory"),
        )
        for verb in verbs.split("|")
    ),
)


@dataclass(frozen=True)
class HttpCall:
    """One request to the mem0 paths: read from the HTTP port, or relayed by the member that
    received it (``RELAY_METHOD``, its headers then the hop's gRPC metadata)."""

    verb: str
    path: str  # percent-decoded
    query_string: bytes
    headers: list[tuple[str, str]]
    body: bytes | None  # None: larger than the limit, left unread
    base_url: str  # scheme://host as the client called it, for the links of a page
    left: bool = False  # the client went away before its body was whole (never relayed)

    def header(self, name: str) -> str | None:
        return metadata_value(self.headers, name)

    def envelope(self) -> bytes:
        """What the hop to the tenant's owner carries (the headers travel as its metadata)."""
        return json.dumps(
            {
                "verb": self.verb,
                "path": self.path,
                "query": self.query_string.decode("latin-1"),
                "body": None if self.body is None else base64.b64encode(self.body).decode(),
                "base_url": self.base_url,
            }
        ).encode()

    @classmethod
    def from_envelope(cls, data: bytes, metadata: list[tuple[str, str]]) -> HttpCall:
        document = json.loads(data)
        body = document["body"]
        return cls(
            verb=document["verb"],
            path=document["path"],
            query_string=document["query"].encode("latin-1"),
            headers=metadata,
            body=None if body is None else base64.b64decode(body),
            base_url=document["base_url"],
        )


class Mem0Api:
    """The ASGI app of the mem0-compatible endpoints."""

    def __init__(
        self, edge: Edge, servicers: Servicers, memories: Memories, limits: Limits, tokens: Consistency
    ) -> None:
        self._edge = edge
        self._endpoints = Mem0Endpoints(servicers, memories, tokens)
        self._limits = limits
        self._routes = [(route, re.compile(route.path)) for route in ROUTES]

    @property
    def forwarder(self) -> Forwarder | None:
        return self._edge.forwarder

    def _method_of(self, http: HttpCall) -> str:
        """The method a request is recorded under: its route's, if it has one."""
        with contextlib.suppress(MnemosyneError):
            return f"mem0 {self._match(http.verb, http.path)[0].name}"
        return _UNROUTED

    def _match(self, verb: str, path: str) -> tuple[Mem0Route, tuple[str, ...]]:
        allowed = []
        for route, pattern in self._routes:
            matched = pattern.fullmatch(path)
            if matched is None:
                continue
            if route.verb == verb:
                return route, tuple(unquote(g) for g in matched.groups())
            allowed.append(route.verb)
        if allowed:
            raise method_not_allowed(path, allowed)
        raise NotFound(
            f"no mem0-compatible endpoint {path[:200]!r} (docs/mem0.md lists them)", reason="ROUTE_NOT_FOUND"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body: bytes | None = b""
        left = False
        if request.method in ("POST", "PUT"):
            try:
                body = await read_body(request, 2 * self._edge.max_request_bytes)
            except ClientLeft:
                left = True  # recorded by serve's envelope, under the request's route
        call = HttpCall(
            verb=request.method,
            path=scope["path"],
            query_string=scope["query_string"],
            headers=list(request.headers.items()),
            body=body,
            base_url=f"{request.url.scheme}://{request.headers.get('host', 'localhost')}",
            left=left,
        )
        response, _ = await self.serve(call)
        if response is not None:
            await response(scope, receive, send)

    async def serve(self, http: HttpCall) -> tuple[Response | None, Outcome]:
        """The answer to one request (None when its client left: nobody is answered), and how it
        ended (for a relay's entry member)."""
        async with self._edge.envelope(_UNROUTED, http.header("x-request-id"), _refusal, http.headers) as envelope:
            if http.left:
                envelope.method = self._method_of(http)
                raise ClientLeft
            route, groups = self._match(http.verb, http.path)
            envelope.method = f"mem0 {route.name}"
            if route.unsupported:
                raise unsupported(
                    f"{http.verb} {http.path[:200]}: mem0's {route.unsupported} is not served by Mnemosyne"
                )
            return await self._answer(http, route, groups, envelope), envelope.outcome
        return envelope.refusal, envelope.outcome

    async def _answer(
        self, http: HttpCall, route: Mem0Route, groups: tuple[str, ...], envelope: CallEnvelope
    ) -> Response:
        # mem0 sends "Token <key>"; the edge reads "Bearer <key>". Every one sent is kept: the edge
        # refuses two (transport/auth.py).
        headers = [(k, _as_bearer(v) if k == "authorization" else v) for k, v in http.headers]
        decoded: Mem0Request | Tenantless | NamedPing
        if route.name == "ping":
            decoded = self._ping_request(http, headers)
        else:
            decoded = self._decode(http, route, groups, self._tenant(http, headers))
        handler = self._endpoints.handler(route.name)
        call = self._edge.begin(envelope.method, decoded, headers, None, surface="mem0")
        if call.forward_to is not None and isinstance(decoded, Mem0Request) and decoded.problem is None:
            # Another member owns the tenant: the request goes there as it came, over the
            # member-internal RELAY_METHOD (the forwarding hop of every surface:
            # transport/cluster/forwarding.py), and its answer comes back as it was given.
            call.method, call.answers_bytes = RELAY_METHOD, True
            answer = await self._edge.answer(Kind.ON_LOOP, handler, http.envelope(), call)
            return _relayed(answer, envelope)
        call.forward_to = None  # a request refused for itself is refused here
        result = await self._edge.answer(kind_of(handler), partial(_checked, handler), decoded, call)
        return Response(
            json.dumps(result, ensure_ascii=False),
            headers={**consistency.headers(call), **dict(envelope.echo)},
            media_type="application/json",
        )

    def _decode(self, http: HttpCall, route: Mem0Route, groups: tuple[str, ...], tenant: str) -> Mem0Request:
        """The request a handler reads; what cannot be decoded is refused after authentication,
        as over gRPC (``problem``)."""
        body: dict[str, Any] = {}
        query: dict[str, str] = {}
        try:
            if http.verb in ("POST", "PUT"):
                if http.body is None:
                    raise body_too_large(self._edge.max_request_bytes)
                body = _json_object(http.body)
            try:
                pairs = client_json.query_pairs(http.query_string)
            except client_json.NotText as exc:
                raise InvalidArgument(str(exc), reason="REQUEST_UNDECODABLE") from None
            for key, value in pairs:  # as on the JSON API: which of two was meant is the caller's to say
                if key in query:
                    raise InvalidArgument(
                        f"the query parameter {key[:80]!r} appears twice: give it once", reason="REQUEST_UNDECODABLE"
                    )
                query[key] = value
            numbers = {number.name: number.read(body, query, self._limits) for number in route.numbers}
        except MnemosyneError as exc:
            return Mem0Request(tenant, body, query, groups, http.base_url, problem=exc)
        return Mem0Request(tenant, body, query, groups, http.base_url, numbers=numbers)

    def _ping_request(self, http: HttpCall, headers: list[tuple[str, str]]) -> Tenantless | NamedPing:
        named = _named_tenant(http)
        if named:
            return NamedPing(named)
        try:
            return Tenantless(self._tenant(http, headers))
        except InvalidArgument:  # a key of several tenants: any of them may be named later
            return Tenantless()

    def _tenant(self, http: HttpCall, headers: list[tuple[str, str]]) -> str:
        named = _named_tenant(http)
        if named:
            return named  # the edge checks that the token reaches it
        principal = self._edge.authenticate(headers)
        if principal is None:
            return DEFAULT_TENANT
        if principal.tenants == frozenset({ADMIN}) or len(principal.tenants) != 1:
            raise InvalidArgument(
                f"token {principal.name!r} reaches several tenants: name one with the header "
                "'Mnemosyne-Tenant: <tenant>'",
                reason="TENANT_REQUIRED",
            )
        return next(iter(principal.tenants))


def _named_tenant(http: HttpCall) -> str | None:
    """The tenant the header ``Mnemosyne-Tenant`` names (None without one). Sent twice it is
    refused, whatever the two say (the first was taken, silently): which tenant the caller meant
    is its to say, and a proxy before the server may have let the request through for the other.
    Refused before the token is looked at, as a tenant id of the wrong form is: it is the
    request's own mistake and tells nothing of the server's tenants."""
    named = [value for key, value in http.headers if key == TENANT_HEADER]
    if len(named) > 1:
        raise InvalidArgument(
            f"the header 'Mnemosyne-Tenant' is sent {len(named)} times: name one tenant, once",
            reason="REQUEST_UNDECODABLE",
        )
    return named[0] if named else None


def _as_bearer(authorization: str) -> str:
    """mem0's ``Token <key>`` as the edge reads it, ``Bearer <key>``."""
    scheme, _, key = authorization.partition(" ")
    return f"Bearer {key}" if scheme.lower() in ("token", "bearer") else authorization


async def _refusal(envelope: CallEnvelope, error: BaseException, status: status_pb2.Status) -> Response:
    """An error in mem0's shape: our status JSON with mem0's ``detail`` beside it."""
    document = {"detail": status.message, **json_format.MessageToDict(status)}
    return Response(
        json.dumps(document, ensure_ascii=False),
        status_code=http_status(status, envelope.outcome.reason),
        headers=error_headers(error, envelope.echo),
        media_type="application/json",
    )


def _checked(handler: Handler, request: Mem0Request | Tenantless | NamedPing, call: Call) -> Any:
    """The handler's answer, or the refusal of what could not be decoded."""
    if isinstance(request, Mem0Request) and request.problem is not None:
        raise request.problem
    return handler(request, call)


def _json_object(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        document = client_json.parse_body(raw)
    except client_json.NotText as exc:
        raise InvalidArgument(str(exc), reason="REQUEST_UNDECODABLE") from None
    except ValueError as exc:
        raise InvalidArgument(f"the body is not JSON ({str(exc)[:200]})", reason="REQUEST_UNDECODABLE") from None
    if not isinstance(document, dict):
        raise InvalidArgument(
            f"the body must be a JSON object, not {client_json.json_kind(document)}", reason="REQUEST_UNDECODABLE"
        )
    return document


# The member-internal gRPC method that carries a mem0 request to the member owning its tenant (not
# in the protos: members only, proven by the member key, transport/cluster/forwarding.py). Request: the
# HttpCall's envelope, the headers its metadata; response: the owner's answer, RelayedAnswer.
RELAY_SERVICE = "mnemosyne.member.Mem0"
RELAY_METHOD = f"/{RELAY_SERVICE}/Relay"
# The owner's response headers that are the entry's own to set.
_HOP_HEADERS = frozenset({"content-length", "x-request-id"})


def _relayed(answer: bytes, envelope: CallEnvelope) -> Response:
    """The owner's answer to a relayed request, given as it came (with the entry's request id)."""
    document = json.loads(answer)
    envelope.outcome.code, envelope.outcome.reason = document["code"], document["reason"]
    headers = {k: v for k, v in document["headers"] if k not in _HOP_HEADERS}
    return Response(
        base64.b64decode(document["body"]), status_code=document["status"], headers={**headers, **dict(envelope.echo)}
    )


def relay_handler(mem0: Callable[[], Mem0Api | None]) -> grpc.GenericRpcHandler:
    """The owner's side of the relay: a request another member received for a tenant of this one,
    answered by this member's mem0 endpoints as if it had come to its HTTP port (the same edge:
    the caller's token is authenticated and authorised again). ``mem0``: this member's endpoints
    (None until its HTTP port is up)."""

    async def relay(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        metadata = [
            (k, v if isinstance(v, str) else v.decode("latin-1")) for k, v in context.invocation_metadata() or ()
        ]
        api = mem0()
        if api is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this member's HTTP port is not up yet; retry shortly")
        assert api is not None
        forwarder = api.forwarder
        if forwarder is None or not forwarder.from_member(metadata):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "only the members of this deployment relay")
        response, outcome = await api.serve(HttpCall.from_envelope(request, metadata))
        assert response is not None  # a relayed request came whole: its client cannot have left
        answer = {
            "status": response.status_code,
            "headers": [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers],
            "body": base64.b64encode(bytes(response.body)).decode(),
            "code": outcome.code,
            "reason": outcome.reason,
        }
        return json.dumps(answer).encode()

    return grpc.method_handlers_generic_handler(RELAY_SERVICE, {"Relay": grpc.unary_unary_rpc_method_handler(relay)})
