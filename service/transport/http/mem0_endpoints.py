"""The mem0-compatible endpoints themselves: each reads a mem0 request, calls the servicer method
of the RPC it is (MemoryService, EventsService: transport/grpc/), in process, on the thread the
edge runs it on, and answers in mem0's shape (docs/mem0.md has the mapping). So mem0 reaches the
engine the way every surface does: the same conversion (transport/convert.py), validation and
errors as the RPC.

Two answers have no RPC, and read the engine's memories directly: the numbered page of
``POST /v3/memories/`` (mem0 counts pages and memories; an RPC pages by token) and the receipts
that a synchronous add answers as its event id (signed with the tenant's secret).

* ``user_id``, ``agent_id``, ``app_id`` and ``run_id`` are stored in the memory's metadata under
  ``mem0.<name>`` and filter exactly; the caller's own metadata keys may not start with ``mem0.``.
* add always answers an event id: with the tenant's hot path enabled the write is asynchronous
  (the event is the hot path's, PENDING until a worker applies it); otherwise it is committed
  before the answer, whose event (a receipt) is already SUCCEEDED.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from google.protobuf import timestamp_pb2

from mnemosyne.engine.consistency import Consistency
from mnemosyne.engine.limits import json_shown
from mnemosyne.engine.memories import Memories
from mnemosyne.errors import InvalidArgument, MnemosyneError, NotFound, Unimplemented
from mnemosyne.transport import convert
from mnemosyne.transport.call import Call, reading, snapshot_read
from mnemosyne.transport.consistency import for_read
from mnemosyne.transport.grpc.servicers import Servicers
from mnemosyne.transport.http import client_json
from mnemosyne.v1 import events_pb2, memory_pb2, revisions_pb2, types_pb2

ENTITY_FIELDS = ("user_id", "agent_id", "app_id", "run_id")
ENTITY_PREFIX = "mem0."
# Who may speak in an add's messages: mem0's roles (its API reference; its TypeScript client
# types only the first two). Anything else was taken as free text and dropped or stored unchecked.
MESSAGE_ROLES = ("user", "assistant", "system")
EVENT_STATUS = {"pending": events_pb2.PENDING, "running": events_pb2.RUNNING}
EVENT_STATUS |= {"succeeded": events_pb2.SUCCEEDED, "failed": events_pb2.FAILED}
# The event id of a synchronous add: a prefix ("s." stored, "d." a duplicate of a stored memory)
# and the receipt of the memory, signed with the tenant's secret.
RECEIPT_PREFIXES = {"s.": "ADD", "d.": "NONE"}
# What mem0's filters have beside entity ids and metadata, which Mnemosyne does not serve (501);
# any other name is a mistake (400).
MEM0_OTHER_FILTER_FIELDS = frozenset({"created_at", "updated_at", "categories", "keywords", "memory_ids"})
MEM0_FILTER_OPERATORS = frozenset({"eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains", "icontains"})
_MEMORY_ID = re.compile(r"[1-9][0-9]{0,17}")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
# A revision's kind as mem0's history names its event.
_HISTORY_EVENT = {revisions_pb2.REVISION_KIND_RETAINED: "ADD"}
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
class Tenantless:
    """Ping's request: it names no tenant (any valid key may ping); ``project`` is the tenant
    the key's other calls would reach, when it reaches one ("*" when it names none)."""

    project: str = "*"


@dataclass(frozen=True)
class NamedPing:
    """Ping's request when the header ``Mnemosyne-Tenant`` names the tenant: the edge checks it
    as every call's (its form, then the token's reach), so that a key is not taken for ready with
    a tenant all its other calls are refused."""

    tenant: str


Handler = Callable[[Any, Call], Any]  # (Mem0Request, or Tenantless or NamedPing for ping; Call) -> JSON value


def bad(message: str, reason: str = "MEM0_REQUEST_INVALID") -> InvalidArgument:
    return InvalidArgument(message, reason=reason)


def wrong_type(message: str) -> InvalidArgument:
    """A value of another JSON type than its field's: REQUEST_UNDECODABLE, as the JSON API refuses
    the same mistake (docs/http-api.md#one-mistake-one-reason)."""
    return InvalidArgument(message, reason="REQUEST_UNDECODABLE")


def unsupported(message: str) -> Unimplemented:
    return Unimplemented(f"{message} (docs/mem0.md)", reason="MEM0_UNSUPPORTED")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _iso(stamp: timestamp_pb2.Timestamp) -> str | None:
    """A time as mem0 writes it (None when unset), read as every client reads it."""
    nanoseconds = stamp.ToNanoseconds()  # in integers: 9999's last µs is no float
    return (_EPOCH + timedelta(microseconds=nanoseconds // 1000)).isoformat() if nanoseconds else None


def _text(document: Mapping[str, Any], key: str) -> str | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise wrong_type(f"{key} must be a string, not {client_json.json_kind(value)}")
    return value


def _flag(document: Mapping[str, Any], key: str) -> bool:
    """A boolean of the body (false when absent or null): a string ("false", "no") is refused,
    not read as the true every non-empty string is in Python."""
    value = document.get(key)
    if value is not None and not isinstance(value, bool):
        raise wrong_type(f"{key} must be true or false, not {client_json.json_kind(value)}")
    return bool(value)


def _metadata_value(key: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):  # Python's json reads NaN, Infinity
        raise bad(
            f"metadata value of {key[:80]!r} is {json_shown(value)}, which is no JSON number: give a finite number, "
            "or a string",
            reason="NUMBER_INVALID",
        )
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise wrong_type(
        f"metadata value of {key[:80]!r} must be a string, number or boolean, not {client_json.json_kind(value)}"
    )


def _user_metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise wrong_type(f"metadata must be an object, not {client_json.json_kind(value)}")
    for key in value:
        if key.startswith(ENTITY_PREFIX):
            raise bad(f"metadata key {key[:80]!r}: keys starting with {ENTITY_PREFIX!r} are reserved for entity ids")
    return {key: _metadata_value(key, v) for key, v in value.items()}


def _entities(document: Mapping[str, Any]) -> dict[str, str]:
    """The entity ids of a body or filter as metadata pairs (``*`` means any: no pair). An empty
    or blank id is refused: it was stored, and matched, as an id of its own (a script's unset
    variable), where mem0 takes it for no id at all."""
    pairs = {}
    for name in ENTITY_FIELDS:
        value = _text(document, name)
        if value is not None and not value.strip():
            raise bad(f"{name} is empty: give the id of the {name.removesuffix('_id')}, or leave {name} out")
        if value is not None and value != "*":
            pairs[ENTITY_PREFIX + name] = value
    return pairs


def _filters(value: Any) -> dict[str, str]:
    """mem0's ``filters`` as exact metadata pairs: entity ids and ``metadata`` (an object), at the
    top level or as the terms of one ``AND``. mem0's operators (OR, NOT, in, gte, icontains ...)
    and its other fields (created_at, categories ...) are not served: 501; a field or operator
    mem0 does not have either is the request's mistake: 400."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise wrong_type(f"filters must be an object, not {client_json.json_kind(value)}")
    terms: list[tuple[str, Any]] = []
    for key, term in value.items():
        if key == "AND":
            if not isinstance(term, list) or not all(isinstance(t, dict) for t in term):
                raise wrong_type("filters.AND must be a list of objects")
            terms += [item for t in term for item in t.items()]
        else:
            terms.append((key, term))
    pairs: dict[str, str] = {}
    for key, term in terms:
        if key in ("OR", "NOT", "AND"):
            raise unsupported(f"filters: {key} is not supported here; only exact matches (joined by AND)")
        if key == "metadata":
            pairs.update(_user_metadata(term))
        elif key in ENTITY_FIELDS:
            if term is None:  # a variable that was None: read as no filter, it matched every memory
                raise bad(
                    f"filters: {key} is null: give the id of the {key.removesuffix('_id')}, or leave {key} out "
                    f'of the filters ("*" matches any)'
                )
            if isinstance(term, dict) and not term:
                raise bad(f"filters: {key} is an empty object; give the id as a string")
            if isinstance(term, dict):
                _known_operators(key, term)
                raise unsupported(f"filters: operators on {key} ({', '.join(map(str, term))[:80]}) are not supported")
            pairs.update(_entities({key: term}))
        elif key in MEM0_OTHER_FILTER_FIELDS:
            raise unsupported(
                f"filters: {key[:80]!r} is not supported here (user_id, agent_id, app_id, run_id, metadata)"
            )
        else:
            raise bad(
                f"filters: {key[:80]!r} is no field a filter takes; filter by user_id, agent_id, app_id, run_id "
                "or metadata (joined by AND)"
            )
    return pairs


def _known_operators(key: str, term: Mapping[str, Any]) -> None:
    """Refuse (400) an operator mem0 does not have: only mem0's own are 'not supported'."""
    unknown = [str(name) for name in term if name not in MEM0_FILTER_OPERATORS]
    if unknown:
        raise bad(
            f"filters: {unknown[0][:80]!r} on {key} is no filter operator; give the {key} as a string "
            f'(e.g. {{"{key}": "..."}})'
        )


def _filters_of(body: Mapping[str, Any], route: str) -> dict[str, str]:
    """The ``filters`` of a search or listing. An entity id beside them, at the top of the body
    (mem0's v1 search took it there; its client now refuses it), is refused: it was not read,
    and the call answered every memory of the tenant."""
    beside = [name for name in ENTITY_FIELDS if name in body]
    if beside:
        raise bad(
            f"{route}: {beside[0]} is not read at the top of the body: give it in filters, "
            f'e.g. {{"filters": {{"{beside[0]}": "..."}}}}'
        )
    return _filters(body.get("filters"))


def _entity_ids(metadata: Mapping[str, str]) -> dict[str, Any]:
    """The entity ids a memory carries, each None when absent, and its caller's own metadata."""
    shown: dict[str, Any] = {name: metadata.get(ENTITY_PREFIX + name) for name in ENTITY_FIELDS}
    shown["metadata"] = {k: v for k, v in metadata.items() if not k.startswith(ENTITY_PREFIX)} or None
    return shown


def memory_json(memory: types_pb2.Memory, score: float | None = None) -> dict[str, Any]:
    """A memory in mem0's shape: entity ids beside the caller's own metadata."""
    created = _iso(memory.created_at)
    document: dict[str, Any] = {"id": str(memory.id), "memory": memory.text, **_entity_ids(memory.metadata)}
    document.update(
        categories=[],
        created_at=created,
        updated_at=_iso(memory.updated_at) if memory.HasField("updated_at") else created,
        expiration_date=_expiration_date(memory),
    )
    if score is not None:
        document["score"] = score
    return document


def _expiration(value: Any) -> timestamp_pb2.Timestamp:
    """mem0's ``expiration_date``, a plain YYYY-MM-DD date in UTC, inclusive: the memory is
    visible through that whole day and expires at the start of the next. Anything else is 400
    (mem0 stores it and fails open; docs/mem0.md says why we refuse)."""
    if not isinstance(value, str):
        raise wrong_type(f"expiration_date must be a date as YYYY-MM-DD (UTC), not {client_json.json_kind(value)}")
    if not _DATE.fullmatch(value):
        raise bad(
            f"expiration_date must be a date as YYYY-MM-DD (UTC), not {str(value)[:40]!r}", "EXPIRATION_DATE_INVALID"
        )
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise bad(f"expiration_date {value!r} is not a date of the calendar", "EXPIRATION_DATE_INVALID") from None
    if day >= date.max:  # it would expire at the start of the year 10000, which no time holds
        raise bad(
            f"expiration_date {value!r} is past the last one an expiry holds, 9999-12-30", "EXPIRATION_DATE_INVALID"
        )
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1))
    return stamp


def _expiration_date(memory: types_pb2.Memory) -> str | None:
    """The last day (UTC) on which the memory is visible, as mem0 writes its expiration_date."""
    if not memory.HasField("expires_at"):
        return None
    last = memory.expires_at.ToNanoseconds() - 1  # in integers: a float's microsecond is lost past the year 2242
    return (_EPOCH + timedelta(microseconds=last // 1000)).date().isoformat()


def _memory_id(raw: str) -> int:
    if not _MEMORY_ID.fullmatch(raw) or int(raw) >= 2**63:
        raise bad(f"memory_id must be a memory id (a positive integer), not {raw[:40]!r}", "MEMORY_ID_INVALID")
    return int(raw)


def _turns(body: Mapping[str, Any]) -> list[types_pb2.ConversationMessage]:
    """The messages of an add: a string is one user message. None (or no content) is sent as
    empty, which the RPC refuses as it refuses a Retain without text (TEXT_EMPTY, MESSAGE_EMPTY)."""
    messages = body.get("messages")
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if messages is None:
        messages = []
    if not isinstance(messages, list):
        raise wrong_type(f"messages must be a list of {{role, content}} objects, not {client_json.json_kind(messages)}")
    turns = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise wrong_type(f"messages[{index}] must be an object with role and content")
        role, content = _text(message, "role") or "", _text(message, "content") or ""
        if not role:  # as the RPC refuses a message without one (a single message is sent as text)
            raise bad(f"messages[{index}].role is empty: give who spoke, e.g. 'user'", "MESSAGE_ROLE_INVALID")
        if role.strip().lower() not in MESSAGE_ROLES:  # mem0's roles; a conversation's line starts with it
            raise bad(
                f"messages[{index}].role {role[:40]!r} is not one of mem0's roles: use {', '.join(MESSAGE_ROLES)} "
                "(who spoke by name goes in the message's name)",
                "MESSAGE_ROLE_INVALID",
            )
        # Who spoke, beside the role (an OpenAI chat message's ``name``): the memory's speaker.
        turns.append(types_pb2.ConversationMessage(role=role, content=content, name=_text(message, "name") or ""))
    return turns


class Mem0Endpoints:
    """The handlers of the mem0 routes, ``_<route name>`` (transport/http/mem0.py ``ROUTES``); each
    runs on a thread of the tenant's fair share, as the edge runs the RPC it calls."""

    def __init__(self, servicers: Servicers, memories: Memories, tokens: Consistency) -> None:
        self._memory_servicer = servicers.memory
        self._event_servicer = servicers.events
        self._memories = memories
        self._tokens = tokens

    def handler(self, name: str) -> Handler:
        handler: Handler = getattr(self, f"_{name}")
        return handler

    def _ping(self, request: Tenantless | NamedPing, call: Call) -> dict[str, Any]:
        # The mem0 client requires an org and a project; ours are the server and the tenant.
        project = request.tenant if isinstance(request, NamedPing) else request.project
        return {"status": "ok", "org_id": "mnemosyne", "project_id": project, "user_email": None}

    def _add(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        body = request.body
        for ignored in ("infer", "async_mode"):  # docs/mem0.md: ignored, but a wrong type is refused
            _flag(body, ignored)
        if _flag(body, "enable_graph"):
            raise unsupported("add: graph memory (enable_graph) is not supported")
        turns = _turns(body)
        metadata = {**_user_metadata(body.get("metadata")), **_entities(body)}
        retain = memory_pb2.RetainRequest(tenant=request.tenant, scope="global", metadata=metadata, fast=True)
        if body.get("expiration_date") is not None:
            retain.expires_at.CopyFrom(_expiration(body["expiration_date"]))
        if request.numbers["timestamp"] is not None:  # when it was said: mem0's creation time
            retain.occurred_at.FromSeconds(request.numbers["timestamp"])
        if len(turns) == 1:
            retain.text, retain.speaker = turns[0].content, turns[0].name
        else:
            retain.messages.extend(turns)
        result = self._memory_servicer.Retain(retain, call).result
        if result.status == types_pb2.RetainResult.ENQUEUED:
            return {"message": _QUEUED, "status": "PENDING", "event_id": str(result.event_id)}
        receipt = self._memories.receipt(request.tenant, result.memory_id)
        prefix = "d." if result.status == types_pb2.RetainResult.DUPLICATE else "s."
        return {"message": _STORED, "status": "SUCCEEDED", "event_id": prefix + receipt}

    @snapshot_read
    def _search(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        body = request.body
        query = _text(body, "query") or ""  # none is empty, as over gRPC: QUERY_EMPTY
        filters = {**_filters_of(body, "search"), **_user_metadata(body.get("metadata"))}
        top_k, threshold = request.numbers["top_k"], request.numbers["threshold"]
        recall = memory_pb2.RecallRequest(tenant=request.tenant, query=query, k=top_k, metadata_equals=filters)
        hits = [
            h for h in self._memory_servicer.Recall(recall, call).hits if not threshold or h.vector_score >= threshold
        ]
        return {"results": [memory_json(h.memory, round(h.score, 6)) for h in hits]}

    @reading
    def _list(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        page, page_size = request.numbers["page"], request.numbers["page_size"]
        filters = _filters_of(request.body, "get_all")
        for_read(self._tokens, call, request.tenant, "")  # the Mnemosyne-Consistency-Token header's writes
        memories, total = self._memories.numbered_page(
            request.tenant, metadata_equals=filters, page=page, page_size=page_size
        )
        listed = [types_pb2.Memory() for _ in memories]
        for message, memory in zip(listed, memories):
            convert.fill_memory(message, memory)

        def link(number: int) -> str:
            return f"{request.base_url}/v3/memories/?{urlencode({'page': number, 'page_size': page_size})}"

        return {
            "count": total,
            "next": link(page + 1) if page * page_size < total else None,
            "previous": link(page - 1) if page > 1 else None,
            "results": [memory_json(m) for m in listed],
        }

    def _live(self, request: Mem0Request, call: Call) -> types_pb2.Memory:
        got = memory_pb2.GetMemoryRequest(tenant=request.tenant, memory_id=_memory_id(request.path[0]))
        memory = self._memory_servicer.GetMemory(got, call).memory
        if memory.forgotten:
            raise NotFound(f"memory {memory.id} does not exist", reason="MEMORY_NOT_FOUND")
        return memory

    @snapshot_read
    def _get(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        return memory_json(self._live(request, call))

    def _update(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        body = request.body
        if body.get("timestamp") is not None:
            raise unsupported("update: timestamp is not supported")
        memory = self._live(request, call)
        update = memory_pb2.UpdateMemoryRequest(
            tenant=request.tenant, memory_id=memory.id, text=_text(body, "text") or ""
        )
        if "expiration_date" in body:  # null: it never expires (mem0's way to clear it)
            if body["expiration_date"] is None:
                update.clear_expires_at = True
            else:
                update.expires_at.CopyFrom(_expiration(body["expiration_date"]))
        if body.get("metadata") is not None:
            entities = {k: v for k, v in memory.metadata.items() if k.startswith(ENTITY_PREFIX)}
            update.metadata.update({**_user_metadata(body["metadata"]), **entities})
            update.replace_metadata = True
        if not update.text and not update.replace_metadata and "expiration_date" not in body:
            raise bad("give text, metadata or expiration_date to update", "UPDATE_EMPTY")
        return memory_json(self._memory_servicer.UpdateMemory(update, call).memory)

    def _delete(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        forget = memory_pb2.ForgetMemoryRequest(tenant=request.tenant, memory_id=self._live(request, call).id)
        self._memory_servicer.ForgetMemory(forget, call)
        return {"message": "Memory deleted successfully!"}

    def _delete_all(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        query = request.query
        metadata: dict[str, str] = {}
        if query.get("metadata"):
            try:
                metadata = _user_metadata(client_json.parse(query["metadata"]))
            except (ValueError, RecursionError) as exc:
                raise wrong_type(f"metadata must be a JSON object ({str(exc)[:200] or type(exc).__name__})") from None
        wanted = {**metadata, **_entities(query)}
        if not wanted:
            raise bad(
                "name at least one of user_id, agent_id, app_id, run_id or metadata to delete by "
                "(the admin's EraseTenant removes a whole tenant)",
                "FILTER_EMPTY",
            )
        forget = memory_pb2.ForgetMemoriesRequest(tenant=request.tenant, metadata_equals=wanted)
        count = self._memory_servicer.ForgetMemories(forget, call).forgotten_count
        return {"message": "Memories deleted successfully!", "deleted_count": count}

    def _history(self, request: Mem0Request, call: Call) -> list[dict[str, Any]]:
        """The memory's revisions (ListMemoryRevisions), as mem0's history: ADD, then UPDATE for
        every later change (an update, a revert, a supersession, a merge), with our kind beside."""
        memory = self._live(request, call)
        listed = revisions_pb2.ListMemoryRevisionsRequest(tenant=request.tenant, memory_id=memory.id)
        entries = []
        previous: str | None = None
        for r in self._memory_servicer.ListMemoryRevisions(listed, call).revisions:
            entry: dict[str, Any] = {
                "id": f"{memory.id}.{r.revision}",
                "memory_id": str(memory.id),
                "old_memory": previous,
                "new_memory": r.text,
                "event": _HISTORY_EVENT.get(r.kind, "UPDATE"),
                "revision": r.revision,
                "kind": revisions_pb2.RevisionKind.Name(r.kind).removeprefix("REVISION_KIND_"),
                "changed": list(r.changed),
                "by": {"surface": r.by.surface, "token_name": r.by.token_name},
                **_entity_ids(r.metadata),
            }
            entry.update(categories=[], created_at=_iso(r.at), updated_at=_iso(r.at))
            entries.append(entry)
            previous = r.text
        return entries

    def _event(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        raw = request.path[0]
        if raw[:2] in RECEIPT_PREFIXES:
            memory_id = self._memories.receipt_memory(request.tenant, raw[2:])
            got = memory_pb2.GetMemoryRequest(tenant=request.tenant, memory_id=memory_id)
            memory = self._memory_servicer.GetMemory(got, call).memory
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
        event = self._event_servicer.GetEvent(
            events_pb2.GetEventRequest(tenant=request.tenant, event_id=int(raw)), call
        )
        return self._event_json(request.tenant, event, call)

    def _event_json(self, tenant: str, event: events_pb2.Event, call: Call) -> dict[str, Any]:
        results: list[dict[str, Any]] = []
        for memory_id in event.created_memory_ids:
            results.append({"id": str(memory_id), "event": "ADD", "memory": self._text_of(tenant, memory_id, call)})
        for memory_id in event.duplicate_of_memory_ids:
            results.append({"id": str(memory_id), "event": "NONE", "memory": self._text_of(tenant, memory_id, call)})
        accepted = _iso(event.accepted_at)
        finished = _iso(event.finished_at) if event.HasField("finished_at") else None
        return {
            "id": str(event.event_id),
            "event_type": "ADD",
            "status": events_pb2.EventStatus.Name(event.status),
            "payload": {},
            "metadata": {},
            "results": results,
            "created_at": accepted,
            "updated_at": finished or accepted,
            "started_at": accepted if event.status != events_pb2.PENDING else None,
            "completed_at": finished,
            "latency": round(event.latency_ms, 3),
            "error": f"{event.error_reason}: {event.error_message}" if event.error_reason else None,
        }

    def _text_of(self, tenant: str, memory_id: int, call: Call) -> str:
        try:
            return self._memory_servicer.GetMemory(
                memory_pb2.GetMemoryRequest(tenant=tenant, memory_id=memory_id), call
            ).memory.text
        except NotFound:
            return ""

    def _events(self, request: Mem0Request, call: Call) -> dict[str, Any]:
        query = request.query
        status = query.get("status")
        if status and status.lower() not in EVENT_STATUS:
            raise InvalidArgument(f"status must be one of {', '.join(EVENT_STATUS)}", reason="EVENT_STATUS_INVALID")
        page_size = request.numbers["page_size"]
        listed = events_pb2.ListEventsRequest(
            tenant=request.tenant,
            status=EVENT_STATUS[status.lower()] if status else events_pb2.EVENT_STATUS_UNSPECIFIED,
            page_size=page_size,
            page_token=query.get("page_token", ""),
        )
        page = self._event_servicer.ListEvents(listed, call)
        nxt = None
        if page.next_page_token:
            args = {
                "page_size": page_size,
                "page_token": page.next_page_token,
                **({"status": status} if status else {}),
            }
            nxt = f"{request.base_url}/v1/events/?{urlencode(args)}"
        events = [self._event_json(request.tenant, e, call) for e in page.events]
        return {"count": len(events), "next": nxt, "previous": None, "results": events}
