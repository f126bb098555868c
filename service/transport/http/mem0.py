"""The mem0-compatible endpoints: mem0's Platform REST API on the HTTP port, so the official
``mem0ai`` ``MemoryClient(api_key=..., host="http://HOST:PORT")`` works unchanged
(docs/mem0.md has the mapping).

Every request passes the same edge as our own routes (transport/edge.py: admission,
authentication, the tenant's authorisation, the tenant's fair share of the worker threads, the
error table), so no rule is written twice; only the shapes are mem0's:

* ``Authorization: Token <key>`` (or ``Bearer``) is one of our tokens. The tenant is the token's
  one tenant; a token for several tenants (or the admin token) names one with the
  ``Mnemosyne-Tenant`` header; a server without a tokens file serves ``default`` unless the
  header names another.
* ``user_id``, ``agent_id``, ``app_id`` and ``run_id`` are stored in the memory's metadata under
  ``mem0.<name>`` and filter exactly; the caller's own metadata keys may not start with ``mem0.``.
* add always answers an event id: with the tenant's hot path enabled the write is asynchronous
  (the event is the hot path's, PENDING until a worker applies it); otherwise it is committed
  before the answer, whose event (an id signed with the tenant's secret) is already SUCCEEDED.
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
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

import grpc
from google.protobuf import json_format
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mnemosyne.engine.engine import Engine
from mnemosyne.engine.limits import Limits, parse_integer, parse_number
from mnemosyne.engine.memories import MAX_PAGE_NUMBER
from mnemosyne.engine.types import Event, Memory, Message, RetainItem, RetainStatus
from mnemosyne.errors import InvalidArgument, MnemosyneError, NotFound, Unimplemented
from mnemosyne.transport.auth import ADMIN
from mnemosyne.transport.call import Call, reading, snapshot_read
from mnemosyne.transport.cluster.forwarding import Forwarder
from mnemosyne.transport.edge import Edge, Kind, Outcome, kind_of
from mnemosyne.transport.http.json_api import error_parts, read_body

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
DEFAULT_TENANT = "default"  # a server without a tokens file, when the header names none
ENTITY_FIELDS = ("user_id", "agent_id", "app_id", "run_id")
ENTITY_PREFIX = "mem0."
EVENT_STATUS = {"pending": "PENDING", "running": "RUNNING", "succeeded": "SUCCEEDED", "failed": "FAILED"}
# The event id of a synchronous add: a prefix ("s." stored, "d." a duplicate of a stored memory)
# and the receipt of the memory, signed with the tenant's secret.
RECEIPT_PREFIXES = {"s.": "ADD", "d.": "NONE"}
_MEMORY_ID = re.compile(r"[1-9][0-9]{0,17}")
_QUEUED = "Memory processing has been queued for background execution"
_STORED = "Memory stored (the tenant's hot path is off: the write was synchronous)"


@dataclass(frozen=True)
class Mem0Request:
    """One mem0 call, as the edge authorises it (its ``tenant``) and a handler reads it."""

    tenant: str
    body: dict[str, Any] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    path: tuple[str, ...] = ()
    base_url: str = ""
    problem: MnemosyneError | None = None  # what could not be decoded: raised once authorised
    numbers: dict[str, Any] = field(default_factory=dict)  # its route's numbers (Mem0Number), read


@dataclass(frozen=True)
class _Tenantless:
    """Ping's request: it names no tenant (any valid key may ping); ``project`` is the tenant
    the key's other calls would reach, when it reaches one ("*" when it names none)."""

    project: str = "*"


Handler = Callable[[Any, Call], Any]  # (Mem0Request, or _Tenantless for ping; Call) -> JSON value


def _bad(message: str, reason: str = "MEM0_REQUEST_INVALID") -> InvalidArgument:
    return InvalidArgument(message, reason=reason)


def _unsupported(message: str) -> Unimplemented:
    return Unimplemented(f"{message} (docs/mem0.md)", reason="MEM0_UNSUPPORTED")


def _iso(seconds: float) -> str | None:
    return datetime.fromtimestamp(seconds, UTC).isoformat() if seconds else None


def _text(document: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    value = document.get(key)
    if value is None:
        if required:
            raise _bad(f"{key} is required")
        return None
    if not isinstance(value, str):
        raise _bad(f"{key} must be a string, not {type(value).__name__}")
    return value


def _metadata_value(key: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise _bad(f"metadata value of {key[:80]!r} must be a string, number or boolean, not {type(value).__name__}")


def _user_metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(f"metadata must be an object, not {type(value).__name__}")
    for key in value:
        if key.startswith(ENTITY_PREFIX):
            raise _bad(f"metadata key {key[:80]!r}: keys starting with {ENTITY_PREFIX!r} are reserved for entity ids")
    return {key: _metadata_value(key, v) for key, v in value.items()}


def _entities(document: Mapping[str, Any]) -> dict[str, str]:
    """The entity ids of a body or filter as metadata pairs (``*`` means any: no pair)."""
    pairs = {}
    for name in ENTITY_FIELDS:
        value = _text(document, name)
        if value is not None and value != "*":
            pairs[ENTITY_PREFIX + name] = value
    return pairs


def _filters(value: Any) -> dict[str, str]:
    """mem0's ``filters`` as exact metadata pairs: entity ids and ``metadata`` (an object), at the
    top level or as the terms of one ``AND``. Operators (OR, NOT, in, gte, icontains ...) and
    other fields (created_at, categories ...) are not served: 501."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(f"filters must be an object, not {type(value).__name__}")
    terms: list[tuple[str, Any]] = []
    for key, term in value.items():
        if key == "AND":
            if not isinstance(term, list) or not all(isinstance(t, dict) for t in term):
                raise _bad("filters.AND must be a list of objects")
            terms += [item for t in term for item in t.items()]
        else:
            terms.append((key, term))
    pairs: dict[str, str] = {}
    for key, term in terms:
        if key in ("OR", "NOT", "AND"):
            raise _unsupported(f"filters: {key} is not supported here; only exact matches (joined by AND)")
        if key == "metadata":
            pairs.update(_user_metadata(term))
        elif key in ENTITY_FIELDS:
            if isinstance(term, dict):
                raise _unsupported(f"filters: operators on {key} ({', '.join(map(str, term))[:80]}) are not supported")
            pairs.update(_entities({key: term}))
        else:
            raise _unsupported(
                f"filters: {key[:80]!r} is not supported here (user_id, agent_id, app_id, run_id, metadata)"
            )
    return pairs


def memory_json(memory: Memory, score: float | None = None) -> dict[str, Any]:
    """A memory in mem0's shape: entity ids beside the caller's own metadata."""
    own = {k: v for k, v in memory.metadata.items() if not k.startswith(ENTITY_PREFIX)}
    document: dict[str, Any] = {"id": str(memory.id), "memory": memory.text}
    for name in ENTITY_FIELDS:
        document[name] = memory.metadata.get(ENTITY_PREFIX + name)
    document.update(
        metadata=own or None,
        categories=[],
        created_at=_iso(memory.created_at),
        updated_at=_iso(memory.updated_at or memory.created_at),
        expiration_date=None,
    )
    if score is not None:
        document["score"] = score
    return document


def _memory_id(raw: str) -> int:
    if not _MEMORY_ID.fullmatch(raw) or int(raw) >= 2**63:
        raise _bad(f"memory_id must be a memory id (a positive integer), not {raw[:40]!r}", "MEMORY_ID_INVALID")
    return int(raw)


@dataclass(frozen=True)
class Mem0Number:
    """A number an endpoint reads, by the one rule for numbers given as text (engine/limits.py):
    from the first of ``places`` ("query", "body") that gives it, from ``minimum`` to
    ``maximum(limits)``; ``default`` when none does (or the body's value is null)."""

    name: str
    places: tuple[str, ...]
    default: int | None
    minimum: int
    maximum: Callable[[Limits], float]
    whole: bool = True

    def read(self, body: Mapping[str, Any], query: Mapping[str, str], limits: Limits) -> Any:
        sources = {"query": query, "body": body}
        value = next((sources[place][self.name] for place in self.places if self.name in sources[place]), None)
        if value is None:
            return self.default
        if self.whole:
            return parse_integer(value, field=self.name, minimum=self.minimum, maximum=int(self.maximum(limits)))
        return parse_number(value, field=self.name, minimum=self.minimum, maximum=self.maximum(limits))


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


_PAGE_SIZE = partial(Mem0Number, "page_size", minimum=1, maximum=lambda limits: limits.max_page_size)
ROUTES: tuple[Mem0Route, ...] = (
    Mem0Route("GET", r"/v1/ping/", "ping"),
    Mem0Route("POST", r"/v3/memories/add/", "add"),
    Mem0Route(
        "POST",
        r"/v3/memories/search/",
        "search",
        (
            Mem0Number("top_k", ("body",), 10, 1, lambda limits: limits.max_k),
            Mem0Number("threshold", ("body",), None, 0, lambda _: 1.0, whole=False),
        ),
    ),
    Mem0Route(
        "POST",
        r"/v3/memories/",
        "list",
        (
            Mem0Number("page", ("query", "body"), 1, 1, lambda _: MAX_PAGE_NUMBER),
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

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)

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

    def __init__(self, edge: Edge, engine: Engine) -> None:
        self._edge = edge
        self._engine = engine
        self._routes = [(route, re.compile(route.path)) for route in ROUTES]

    @property
    def forwarder(self) -> Forwarder | None:
        return self._edge.forwarder

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
            raise InvalidArgument(
                f"{path[:200]} takes {' or '.join(sorted(set(allowed)))}, not {verb[:16]}",
                reason="METHOD_NOT_ALLOWED",
                metadata={"allow": ", ".join(sorted(set(allowed)))},
            )
        raise NotFound(
            f"no mem0-compatible endpoint {path[:200]!r} (docs/mem0.md lists them)", reason="ROUTE_NOT_FOUND"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = await read_body(request, 2 * self._edge.max_request_bytes) if request.method in ("POST", "PUT") else b""
        call = HttpCall(
            verb=request.method,
            path=scope["path"],
            query_string=scope["query_string"],
            headers=list(request.headers.items()),
            body=body,
            base_url=f"{request.url.scheme}://{request.headers.get('host', 'localhost')}",
        )
        response, _ = await self.serve(call)
        await response(scope, receive, send)

    async def serve(self, http: HttpCall) -> tuple[Response, Outcome]:
        """The answer to one request, and how it ended (for a relay's entry member)."""
        edge = self._edge
        started = time.perf_counter()
        echo, token = edge.recorder.begin(http.header("x-request-id"))
        outcome = Outcome()
        method = "mem0 (no route)"
        try:
            try:
                route, groups = self._match(http.verb, http.path)
                method = f"mem0 {route.name}"
                if route.unsupported:
                    raise _unsupported(
                        f"{http.verb} {http.path[:200]}: mem0's {route.unsupported} is not served by Mnemosyne"
                    )
                response = await self._answer(http, method, route, groups, echo, outcome)
            except Exception as exc:
                response = self._error(exc, outcome, method, echo)
            return response, outcome
        finally:
            edge.recorder.end(method, outcome.code, outcome.reason, started, token)

    def _error(self, exc: BaseException, outcome: Outcome, method: str, echo: tuple[tuple[str, str], ...]) -> Response:
        status, code, headers = error_parts(self._edge, exc, outcome, method, echo)
        document = {"detail": status.message, **json_format.MessageToDict(status)}
        return Response(
            json.dumps(document, ensure_ascii=False), status_code=code, headers=headers, media_type="application/json"
        )

    async def _answer(
        self,
        http: HttpCall,
        method: str,
        route: Mem0Route,
        groups: tuple[str, ...],
        echo: tuple[tuple[str, str], ...],
        outcome: Outcome,
    ) -> Response:
        headers = [(k, v) for k, v in http.headers if k != "authorization"]
        authorization = http.header("authorization")
        if authorization is not None:
            scheme, _, key = authorization.partition(" ")
            # mem0 sends "Token <key>"; the edge reads "Bearer <key>".
            authorization = f"Bearer {key}" if scheme.lower() in ("token", "bearer") else authorization
            headers.append(("authorization", authorization))
        decoded: Mem0Request | _Tenantless
        if route.name == "ping":
            try:
                decoded = _Tenantless(self._tenant(http, authorization))
            except InvalidArgument:  # a key of several tenants: any of them may be named later
                decoded = _Tenantless()
        else:
            decoded = self._decode(http, route, groups, self._tenant(http, authorization))
        handler: Handler = getattr(self, f"_{route.name}")
        call = self._edge.begin(method, decoded, headers, None)
        if call.forward_to is not None and isinstance(decoded, Mem0Request) and decoded.problem is None:
            # Another member owns the tenant: the request goes there as it came, over the
            # member-internal RELAY_METHOD (the forwarding hop of every surface:
            # transport/cluster/forwarding.py), and its answer comes back as it was given.
            call.method, call.answers_bytes = RELAY_METHOD, True
            answer = await self._edge.answer(Kind.ON_LOOP, handler, http.envelope(), call)
            return _relayed(answer, echo, outcome)
        call.forward_to = None  # a request refused for itself is refused here
        result = await self._edge.answer(kind_of(handler), partial(_checked, handler), decoded, call)
        return Response(
            json.dumps(result, ensure_ascii=False),
            headers={**dict(call.trailing_metadata), **dict(echo)},
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
                    raise InvalidArgument(
                        f"the body is larger than {2 * self._edge.max_request_bytes} bytes", reason="REQUEST_TOO_LARGE"
                    )
                body = _json_object(http.body)
            try:
                query = dict(parse_qsl(http.query_string.decode("utf-8"), keep_blank_values=True, errors="strict"))
            except (UnicodeDecodeError, ValueError):
                raise _bad("the query string is not valid UTF-8 URL encoding") from None
            numbers = {number.name: number.read(body, query, self._engine.limits) for number in route.numbers}
        except MnemosyneError as exc:
            return Mem0Request(tenant, body, query, groups, http.base_url, problem=exc)
        return Mem0Request(tenant, body, query, groups, http.base_url, numbers=numbers)

    def _tenant(self, http: HttpCall, authorization: str | None) -> str:
        named = http.header(TENANT_HEADER)
        if named:
            return named  # the edge checks that the token reaches it
        principal = self._edge.authenticate(authorization)
        if principal is None:
            return DEFAULT_TENANT
        if principal.tenants == frozenset({ADMIN}) or len(principal.tenants) != 1:
            raise InvalidArgument(
                f"token {principal.name!r} reaches several tenants: name one with the header "
                "'Mnemosyne-Tenant: <tenant>'",
                reason="TENANT_REQUIRED",
            )
        return next(iter(principal.tenants))

    # -- the endpoints (each runs on a worker thread, in the tenant's fair share) -----------------

    def _ping(self, request: _Tenantless, call: Call) -> dict[str, Any]:
        # The mem0 client requires an org and a project; ours are the server and the tenant.
        return {"status": "ok", "org_id": "mnemosyne", "project_id": request.project, "user_email": None}

    def _add(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        body = request.body
        if body.get("enable_graph"):
            raise _unsupported("add: graph memory (enable_graph) is not supported")
        if body.get("expiration_date") is not None:
            raise _unsupported("add: expiration_date is not supported (memories do not expire)")
        messages = body.get("messages")
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        if not isinstance(messages, list) or not messages:
            raise _bad("messages must be a non-empty list of {role, content} objects")
        turns = []
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                raise _bad(f"messages[{index}] must be an object with role and content")
            role, content = _text(message, "role", required=True), _text(message, "content", required=True)
            assert role is not None and content is not None
            # Who spoke, beside the role (an OpenAI chat message's ``name``): the memory's speaker.
            turns.append(Message(role=role, content=content, name=_text(message, "name") or ""))
        metadata = {**_user_metadata(body.get("metadata")), **_entities(body)}
        engine = self._engine
        if len(turns) == 1:
            item = RetainItem(turns[0].content, metadata=metadata, speaker=turns[0].name or None)
            outcome = engine.retain(request.tenant, item, fast=True)
        else:
            outcome = engine.retain_conversation(request.tenant, turns, metadata=metadata, fast=True)
        if outcome.status is RetainStatus.ENQUEUED:
            return {"message": _QUEUED, "status": "PENDING", "event_id": str(outcome.event_id)}
        receipt = engine.memories.receipt(request.tenant, outcome.memory_id)
        prefix = "d." if outcome.status is RetainStatus.DUPLICATE else "s."
        return {"message": _STORED, "status": "SUCCEEDED", "event_id": prefix + receipt}

    @snapshot_read
    def _search(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        body = request.body
        query = _text(body, "query", required=True)
        assert query is not None
        filters = {**_filters(body.get("filters")), **_user_metadata(body.get("metadata"))}
        top_k, threshold = request.numbers["top_k"], request.numbers["threshold"]
        recalled = self._engine.recall(request.tenant, query, k=top_k, scopes=[], metadata_equals=filters)
        hits = [h for h in recalled.hits if not threshold or h.vector_score >= threshold]
        return {"results": [memory_json(h.memory, round(h.score, 6)) for h in hits]}

    @reading
    def _list(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        body = request.body
        page, page_size = request.numbers["page"], request.numbers["page_size"]
        filters = _filters(body.get("filters"))
        memories, total = self._engine.memories.numbered_page(
            request.tenant, metadata_equals=filters, page=page, page_size=page_size
        )

        def link(number: int) -> str:
            return f"{request.base_url}/v3/memories/?{urlencode({'page': number, 'page_size': page_size})}"

        return {
            "count": total,
            "next": link(page + 1) if page * page_size < total else None,
            "previous": link(page - 1) if page > 1 else None,
            "results": [memory_json(m) for m in memories],
        }

    def _live(self, request: Mem0Request) -> Memory:
        memory = self._engine.memories.get(request.tenant, _memory_id(request.path[0]))
        if memory.forgotten:
            raise NotFound(f"memory {memory.id} does not exist", reason="MEMORY_NOT_FOUND")
        return memory

    @snapshot_read
    def _get(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        return memory_json(self._live(request))

    def _update(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        body = request.body
        if body.get("expiration_date") is not None or body.get("timestamp") is not None:
            raise _unsupported("update: expiration_date and timestamp are not supported")
        memory = self._live(request)
        text = _text(body, "text") or ""
        metadata = None
        if "metadata" in body and body["metadata"] is not None:
            entities = {k: v for k, v in memory.metadata.items() if k.startswith(ENTITY_PREFIX)}
            metadata = {**_user_metadata(body["metadata"]), **entities}
        if not text and metadata is None:
            raise _bad("give text or metadata to update", "UPDATE_EMPTY")
        outcome = self._engine.updates.update(request.tenant, memory.id, text=text, metadata=metadata)
        return memory_json(outcome.memory)

    def _delete(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        self._engine.memories.forget(request.tenant, self._live(request).id)
        return {"message": "Memory deleted successfully!"}

    def _delete_all(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        query = request.query
        metadata: dict[str, str] = {}
        if query.get("metadata"):
            try:
                metadata = _user_metadata(json.loads(query["metadata"]))
            except (ValueError, RecursionError):
                raise _bad("metadata must be a JSON object") from None
        wanted = {**metadata, **_entities(query)}
        if not wanted:
            raise _bad(
                "name at least one of user_id, agent_id, app_id, run_id or metadata to delete by "
                "(the admin's EraseTenant removes a whole tenant)",
                "FILTER_EMPTY",
            )
        count = self._engine.updates.forget_matching(request.tenant, metadata_equals=wanted)
        return {"message": "Memories deleted successfully!", "deleted_count": count}

    def _history(self, request: Mem0Request, call: Call) -> list[dict[str, Any]]:
        memory = self._live(request)
        versions = self._engine.updates.versions(request.tenant, memory.id)
        entries = []
        previous: str | None = None
        for v in versions:
            entry: dict[str, Any] = {
                "id": f"{memory.id}.{v.version}",
                "memory_id": str(memory.id),
                "old_memory": previous,
                "new_memory": v.text,
                "event": "ADD" if v.version == 1 else "UPDATE",
            }
            for name in ENTITY_FIELDS:
                entry[name] = v.metadata.get(ENTITY_PREFIX + name)
            entry.update(
                metadata={k: x for k, x in v.metadata.items() if not k.startswith(ENTITY_PREFIX)} or None,
                categories=[],
                created_at=_iso(v.at),
                updated_at=_iso(v.at),
            )
            entries.append(entry)
            previous = v.text
        return entries

    def _event(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        raw = request.path[0]
        if raw[:2] in RECEIPT_PREFIXES:
            memory_id = self._engine.memories.receipt_memory(request.tenant, raw[2:])
            memory = self._engine.memories.get(request.tenant, memory_id)
            at = _iso(memory.created_at)
            return {
                "id": raw,
                "event_type": "ADD",
                "status": "SUCCEEDED",
                "payload": {},
                "metadata": {},
                "results": [{"id": str(memory.id), "event": RECEIPT_PREFIXES[raw[:2]], "memory": memory.text}],
                "created_at": at,
                "updated_at": at,
                "started_at": at,
                "completed_at": at,
                "latency": 0.0,
                "error": None,
            }
        if not _MEMORY_ID.fullmatch(raw) or int(raw) >= 2**63:
            raise NotFound(f"event {raw[:80]!r} does not exist in this tenant", reason="EVENT_NOT_FOUND")
        return self._event_json(request.tenant, self._engine.hot_path.get_event(request.tenant, int(raw)))

    def _event_json(self, tenant: str, event: Event) -> dict[str, Any]:
        results: list[dict[str, Any]] = []
        for memory_id in event.created_memory_ids:
            results.append({"id": str(memory_id), "event": "ADD", "memory": self._text_of(tenant, memory_id)})
        for memory_id in event.duplicate_of_memory_ids:
            results.append({"id": str(memory_id), "event": "NONE", "memory": self._text_of(tenant, memory_id)})
        finished = _iso(event.finished_at or 0.0)
        return {
            "id": str(event.event_id),
            "event_type": "ADD",
            "status": EVENT_STATUS[event.status],
            "payload": {},
            "metadata": {},
            "results": results,
            "created_at": _iso(event.accepted_at),
            "updated_at": finished or _iso(event.accepted_at),
            "started_at": _iso(event.accepted_at) if event.status != "pending" else None,
            "completed_at": finished,
            "latency": round(event.latency_ms, 3),
            "error": f"{event.error_reason}: {event.error_message}" if event.error_reason else None,
        }

    def _text_of(self, tenant: str, memory_id: int) -> str:
        try:
            return self._engine.memories.get(tenant, memory_id).text
        except NotFound:
            return ""

    def _events(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        query = request.query
        status = query.get("status")
        page_size = request.numbers["page_size"]
        page = self._engine.hot_path.list_events(
            request.tenant,
            status=status.lower() if status else None,
            page_size=page_size,
            page_token=query.get("page_token", ""),
        )
        nxt = None
        if page.next_page_token:
            args = {
                "page_size": page_size,
                "page_token": page.next_page_token,
                **({"status": status} if status else {}),
            }
            nxt = f"{request.base_url}/v1/events/?{urlencode(args)}"
        events = [self._event_json(request.tenant, e) for e in page.events]
        return {"count": len(events), "next": nxt, "previous": None, "results": events}


def _checked(handler: Handler, request: Mem0Request | _Tenantless, call: Call) -> Any:
    """The handler's answer, or the refusal of what could not be decoded."""
    if isinstance(request, Mem0Request) and request.problem is not None:
        raise request.problem
    return handler(request, call)


def _json_object(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        document = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidArgument(f"the body is not JSON ({str(exc)[:200]})", reason="REQUEST_UNDECODABLE") from None
    if not isinstance(document, dict):
        raise InvalidArgument(
            f"the body must be a JSON object, not {type(document).__name__}", reason="REQUEST_UNDECODABLE"
        )
    return document


# The member-internal gRPC method that carries a mem0 request to the member owning its tenant (not
# in the protos: members only, proven by the member key, transport/cluster/forwarding.py). Request: the
# HttpCall's envelope, the headers its metadata; response: the owner's answer, RelayedAnswer.
RELAY_SERVICE = "mnemosyne.member.Mem0"
RELAY_METHOD = f"/{RELAY_SERVICE}/Relay"
# The owner's response headers that are the entry's own to set.
_HOP_HEADERS = frozenset({"content-length", "x-request-id"})


def _relayed(answer: bytes, echo: tuple[tuple[str, str], ...], outcome: Outcome) -> Response:
    """The owner's answer to a relayed request, given as it came (with the entry's request id)."""
    document = json.loads(answer)
    outcome.code, outcome.reason = document["code"], document["reason"]
    headers = {k: v for k, v in document["headers"] if k not in _HOP_HEADERS}
    return Response(
        base64.b64decode(document["body"]), status_code=document["status"], headers={**headers, **dict(echo)}
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
        answer = {
            "status": response.status_code,
            "headers": [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers],
            "body": base64.b64encode(bytes(response.body)).decode(),
            "code": outcome.code,
            "reason": outcome.reason,
        }
        return json.dumps(answer).encode()

    return grpc.method_handlers_generic_handler(RELAY_SERVICE, {"Relay": grpc.unary_unary_rpc_method_handler(relay)})
