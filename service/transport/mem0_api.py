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

Routing is unambiguous: every mem0 path ends with ``/`` and starts with one of ``MEM0_PREFIXES``;
none of our own routes does either (``GET /v1/ping`` is ours, ``GET /v1/ping/`` mem0's).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

from google.protobuf import json_format
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mnemosyne.engine.engine import Engine
from mnemosyne.engine.limits import parse_integer, parse_number
from mnemosyne.engine.memories import MAX_PAGE_NUMBER
from mnemosyne.engine.types import Event, Memory, Message, RetainItem, RetainStatus
from mnemosyne.errors import InvalidArgument, MnemosyneError, NotFound, Unimplemented
from mnemosyne.transport.auth import ADMIN
from mnemosyne.transport.call import Call, reading, snapshot_read
from mnemosyne.transport.edge import Edge, Outcome, kind_of
from mnemosyne.transport.http_api import error_parts, read_body

# The path prefixes this app answers (transport/http_server.py ``compose`` mounts each).
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


def _number(value: Any, name: str, default: int, maximum: int) -> int:
    """A whole number from 1 to ``maximum``, given as a JSON number or text (a query string's),
    by the one rule for numbers given as text; ``default`` when it is not given."""
    if value is None:
        return default
    return parse_integer(value, field=name, minimum=1, maximum=maximum)


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


class Mem0Api:
    """The ASGI app of the mem0-compatible endpoints."""

    def __init__(self, edge: Edge, engine: Engine) -> None:
        self._edge = edge
        self._engine = engine
        self._routes: list[tuple[str, re.Pattern[str], str, Handler | None]] = []
        route = self._route
        route("GET", r"/v1/ping/", "ping", self._ping)
        route("POST", r"/v3/memories/add/", "add", self._add)
        route("POST", r"/v3/memories/search/", "search", self._search)
        route("POST", r"/v3/memories/", "list", self._list)
        route("GET", r"/v1/memories/([^/]+)/", "get", self._get)
        route("PUT", r"/v1/memories/([^/]+)/", "update", self._update)
        route("DELETE", r"/v1/memories/([^/]+)/", "delete", self._delete)
        route("DELETE", r"/v1/memories/", "delete_all", self._delete_all)
        route("GET", r"/v1/memories/([^/]+)/history/", "history", self._history)
        route("GET", r"/v1/event/([^/]+)/", "event", self._event)
        route("GET", r"/v1/events/", "events", self._events)
        # What mem0 has and we do not: a clear 501 naming it.
        for verb, path, what in (
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
        ):
            for one in verb.split("|"):
                route(one, path, f"unsupported {what}", None)

    def _route(self, verb: str, path: str, name: str, handler: Handler | None) -> None:
        self._routes.append((verb, re.compile(path), name, handler))

    def _match(self, verb: str, path: str) -> tuple[str, Handler | None, tuple[str, ...]]:
        allowed = []
        for route_verb, pattern, name, handler in self._routes:
            matched = pattern.fullmatch(path)
            if matched is None:
                continue
            if route_verb == verb:
                return name, handler, tuple(unquote(g) for g in matched.groups())
            allowed.append(route_verb)
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
        edge = self._edge
        started = time.perf_counter()
        request = Request(scope, receive)
        echo, token = edge.recorder.begin(request.headers.get("x-request-id"))
        outcome = Outcome()
        method = "mem0 (no route)"
        try:
            try:
                name, handler, groups = self._match(request.method, scope["path"])
                method = f"mem0 {name}"
                if handler is None:
                    raise _unsupported(
                        f"{request.method} {scope['path'][:200]}: mem0's {name.removeprefix('unsupported ')} "
                        "is not served by Mnemosyne"
                    )
                response = await self._answer(request, method, handler, groups, echo)
            except Exception as exc:
                response = self._error(exc, outcome, method, echo)
            await response(scope, receive, send)
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
        request: Request,
        method: str,
        handler: Handler,
        groups: tuple[str, ...],
        echo: tuple[tuple[str, str], ...],
    ) -> Response:
        headers = [(k, v) for k, v in request.headers.items() if k != "authorization"]
        authorization = request.headers.get("authorization")
        if authorization is not None:
            scheme, _, key = authorization.partition(" ")
            # mem0 sends "Token <key>"; the edge reads "Bearer <key>".
            authorization = f"Bearer {key}" if scheme.lower() in ("token", "bearer") else authorization
            headers.append(("authorization", authorization))
        body: dict[str, Any] = {}
        query: dict[str, str] = {}
        problem: MnemosyneError | None = None
        try:  # a request that cannot be decoded is refused after authentication, as over gRPC
            if request.method in ("POST", "PUT"):
                raw = await read_body(request, 2 * self._edge.max_request_bytes)
                if raw is None:
                    raise InvalidArgument(
                        f"the body is larger than {2 * self._edge.max_request_bytes} bytes", reason="REQUEST_TOO_LARGE"
                    )
                body = _json_object(raw)
            try:
                query = dict(
                    parse_qsl(request.scope["query_string"].decode("utf-8"), keep_blank_values=True, errors="strict")
                )
            except (UnicodeDecodeError, ValueError):
                raise _bad("the query string is not valid UTF-8 URL encoding") from None
        except MnemosyneError as exc:
            problem = exc
        base = f"{request.url.scheme}://{request.headers.get('host', 'localhost')}"
        decoded: Mem0Request | _Tenantless
        if method == "mem0 ping":
            try:
                decoded = _Tenantless(self._tenant(request, authorization))
            except InvalidArgument:  # a key of several tenants: any of them may be named later
                decoded = _Tenantless()
        else:
            decoded = Mem0Request(self._tenant(request, authorization), body, query, groups, base, problem)
        call = self._edge.begin(method, decoded, headers, None)
        # Not forwarded to another member (the hop speaks gRPC, these are not RPCs): answered
        # here, where the store refuses a tenant another member owns (NOT_OWNER, naming it).
        call.forward_to = None
        result = await self._edge.answer(kind_of(handler), partial(_checked, handler), decoded, call)
        return Response(
            json.dumps(result, ensure_ascii=False),
            headers={**dict(call.trailing_metadata), **dict(echo)},
            media_type="application/json",
        )

    def _tenant(self, request: Request, authorization: str | None) -> str:
        named = request.headers.get(TENANT_HEADER)
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
        top_k = _number(body.get("top_k"), "top_k", 10, self._engine.limits.max_k)
        given = body.get("threshold")
        threshold = None if given is None else parse_number(given, field="threshold", minimum=0.0, maximum=1.0)
        recalled = self._engine.recall(request.tenant, query, k=top_k, scopes=[], metadata_equals=filters)
        hits = [h for h in recalled.hits if not threshold or h.vector_score >= threshold]
        return {"results": [memory_json(h.memory, round(h.score, 6)) for h in hits]}

    @reading
    def _list(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        body = request.body
        limits = self._engine.limits
        page = _number(request.query.get("page", body.get("page")), "page", 1, MAX_PAGE_NUMBER)
        page_size = _number(request.query.get("page_size", body.get("page_size")), "page_size", 100, limits.max_page_size)
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
        page_size = _number(query.get("page_size"), "page_size", 50, self._engine.limits.max_page_size)
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
