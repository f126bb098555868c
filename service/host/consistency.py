"""Session consistency, written once for every host in this repository: the Python client
(``MemoryClient``, and through it ``MemoryHost``, ``MemoryBrain`` on a server and ``mnemosyne
mcp``) and the server's MCP endpoint (transport/http/mcp.py). docs/hot-path.md "Read your own
writes" says what the server does with the tokens.

Every write returns a consistency token naming its place in the tenant's order of writes. A
session keeps, per tenant, the newest token its writes returned (``SessionTokens``) and sends it
(request metadata ``mnemosyne-consistency-token``; the server takes one token a call) with its
next calls of that tenant:

* a WRITE folds it into the token it returns (which covers its writes still open), so the token
  a write returns replaces the one it carried: one token stands for all the session's writes (a
  write that carried none and queued nothing is visible already: its token is not kept);
* a READ that can wait for writes (Recall, GetMemory, ListMemories, AssembleContext) answers
  once those writes are visible or failed, so the session reads its own writes; after it, they
  are, so the session drops the token and its next reads carry none (and need not wait).

Which calls are which is read from the protos, not listed by hand: a write is a method whose
response has a ``consistency_token``; a read that waits, one whose request has a
``consistency_token`` and whose response a ``consistency`` report (Flush, a barrier over the whole
queue, is neither: a session does not turn it into a wait for its own writes).

Two writes of one tenant running at once from one session (threads sharing a client) carry the
same token and each return one that does not cover the other's write: both are kept, a later
write carries the newest, and a read waits for the others first with a Flush of each (``FLUSH``:
it waits for a token's writes only), then reads with the newest. At most
``MAX_TOKENS_PER_TENANT`` are kept (past it the oldest is dropped, and a read may miss its write).
A token the server refuses for good (``DROPPED_REASONS``: the tenant was restored, replaced or
erased since, or the token is not one of this tenant's) is dropped, so the session's
next call of the tenant carries none; the refusal itself is raised to the caller.

This module imports only the generated protos (like every shared host module).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from mnemosyne.host.protocol import CONSISTENCY_TOKEN_KEY, Answer, Ask, ServiceError, server_wait
from mnemosyne.host.token_form import NOT_ISSUED, TOKEN_INVALID, well_formed
from mnemosyne.v1 import admin_pb2, hot_path_pb2, memory_pb2, types_pb2, webhooks_pb2, workspace_pb2

TOKEN_FIELD = "consistency_token"
# What a read owed several tokens waits for the older ones with, one call each.
FLUSH = "/mnemosyne.v1.HotPathService/Flush"

# The reasons for which the server refuses a token for good: a token that can never be satisfied
# (TIMELINE_CHANGED: the tenant was restored or imported over since, or erased) or never be checked
# (TOKEN_INVALID: not issued for this tenant's current file, as after an erasure and a new tenant
# of the same name; TOKEN_FOREIGN: another tenant's). A deadline (CONSISTENCY_DEADLINE_EXCEEDED)
# is not one: the writes are still open.
DROPPED_REASONS = frozenset({"TIMELINE_CHANGED", "TOKEN_INVALID", "TOKEN_FOREIGN"})

# Tenants a session keeps tokens for; the least recently used is forgotten first (its next read
# may then miss a write still queued). A token is under 1 KB, so a full session holds a few MB.
MAX_TENANTS = 10_000
# Tokens kept per tenant: more than one only after writes of one tenant overlapped (see above).
MAX_TOKENS_PER_TENANT = 8

Role = Literal["read", "write"]


def _roles() -> dict[str, Role]:
    """Request message name -> what a session does with it, from the services' protos."""
    roles: dict[str, Role] = {}
    for module in (memory_pb2, workspace_pb2, admin_pb2, webhooks_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                request, response = method.input_type, method.output_type
                if TOKEN_FIELD in response.fields_by_name:
                    roles[request.full_name] = "write"
                elif TOKEN_FIELD in request.fields_by_name and "consistency" in response.fields_by_name:
                    roles[request.full_name] = "read"
    return roles


_ROLES = _roles()
_RETAIN_RESULT = types_pb2.RetainResult.DESCRIPTOR


def role_of(request: Any) -> Role | None:
    """ "read", "write", or None for a call a session sends no token with."""
    return _ROLES.get(request.DESCRIPTOR.full_name)


def token_metadata(tokens: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The request metadata carrying the newest of ``tokens`` (none when empty): the one a call
    carries (a read waits for the older ones first: ``flush_request``)."""
    return ((CONSISTENCY_TOKEN_KEY, tokens[-1]),) if tokens else ()


def caller_token_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The request metadata carrying a token a caller gave (none for ""). A text that is no
    token is refused as the server refuses it (TOKEN_INVALID, host/token_form.py), before it is
    sent: gRPC metadata cannot carry every text, and would fail the call with its own INTERNAL
    "Invalid metadata" instead."""
    if token and not well_formed(token):
        raise ServiceError("INVALID_ARGUMENT", TOKEN_INVALID, NOT_ISSUED)
    return token_metadata([token] if token else [])


def flush_request(tenant: str, token: str) -> hot_path_pb2.FlushRequest:
    """The Flush that waits for the writes of one of a read's older tokens (server default wait)."""
    return hot_path_pb2.FlushRequest(tenant=tenant, consistency_token=token)


FLUSH_WAIT_SECONDS = server_wait(0.0)  # how long that Flush waits at most, on the server


def queued(response: Any) -> bool:
    """Whether a write's response names an operation it queued (a fast retain's ``ENQUEUED``
    result). A write that queued nothing is visible when it answers, so its token names nothing to
    wait for unless it carried one: a session keeps no such token (and its reads stay as cheap as
    a client's without one: docs/hot-path.md)."""
    for field in response.DESCRIPTOR.fields:
        if field.message_type is _RETAIN_RESULT:
            value = getattr(response, field.name)
            results = value if field.is_repeated else [value]
            if any(result.status == types_pb2.RetainResult.ENQUEUED for result in results):
                return True
    return False


def carries_token(request: Any, metadata: Sequence[tuple[str, str | bytes]]) -> bool:
    """Whether a call already names a token of its own (its request field or its metadata): the
    caller's token then goes alone, the session's is not added."""
    field = getattr(request, TOKEN_FIELD, "") if TOKEN_FIELD in request.DESCRIPTOR.fields_by_name else ""
    return bool(field) or any(key == CONSISTENCY_TOKEN_KEY for key, _ in metadata)


class SessionTokens:
    """Per tenant, the newest consistency tokens of one session's writes. Thread-safe: one
    session may be shared by threads. Bounded: ``tenants`` tenants (least recently used forgotten
    first), ``MAX_TOKENS_PER_TENANT`` tokens each."""

    def __init__(self, tenants: int = MAX_TENANTS) -> None:
        if tenants < 1:
            raise ValueError(f"a session keeps the tokens of at least 1 tenant, not {tenants}")
        self._tenants = tenants
        self._lock = threading.Lock()
        self._tokens: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._tokens)

    def tokens(self, tenant: str) -> tuple[str, ...]:
        """What the session's next call of ``tenant`` carries, oldest first (usually one token)."""
        with self._lock:
            tokens = self._tokens.get(tenant, ())
            if tokens:
                self._tokens.move_to_end(tenant)
            return tokens

    def newest(self, tenant: str) -> str | None:
        """The token of the session's latest write of ``tenant`` (it covers every earlier one unless
        writes overlapped); None when it holds none."""
        tokens = self.tokens(tenant)
        return tokens[-1] if tokens else None

    def outgoing(self, request: Any, metadata: Sequence[tuple[str, str | bytes]] = ()) -> tuple[str, ...]:
        """The session's tokens ``request`` answers for, oldest first: a read's, all of them (it
        carries the newest, ``token_metadata``, and waits for the others first,
        ``flush_request``); a write's, the newest. () when the call is not one a session sends
        tokens with, or names a token of its own."""
        role = role_of(request)
        if role is None or carries_token(request, metadata):
            return ()
        tokens = self.tokens(request.tenant)
        return tokens if role == "read" else tokens[-1:]

    def answered(self, request: Any, sent: Sequence[str], response: Any) -> None:
        """After a successful call: a write's token replaces the one it carried (it covers its
        writes); a read's tokens go (their writes are visible or failed now). Tokens other calls
        added meanwhile stay."""
        role = role_of(request)
        if role == "write" and (sent or queued(response)):
            self.wrote(request.tenant, sent, getattr(response, TOKEN_FIELD, ""))
        elif role == "read":
            self.read(request.tenant, sent)

    def wrote(self, tenant: str, sent: Sequence[str], token: str) -> None:
        """A write of ``tenant`` that carried ``sent`` returned ``token`` ("": none, nothing changes)."""
        if token:
            self._replace(tenant, sent, token)

    def read(self, tenant: str, sent: Sequence[str]) -> None:
        """A read of ``tenant`` answered once the writes of ``sent`` were visible or failed."""
        if sent:
            self._replace(tenant, sent, None)

    def refused(self, tenant: str, sent: Sequence[str], reason: str) -> None:
        """After a refusal: tokens refused for good (``DROPPED_REASONS``) are dropped; a token a
        later write added meanwhile stays."""
        if sent and reason in DROPPED_REASONS:
            self._replace(tenant, sent, None)

    def forget(self, tenant: str) -> None:
        """Drop every token of ``tenant``: the session's next reads of it wait for nothing."""
        with self._lock:
            self._tokens.pop(tenant, None)

    def _replace(self, tenant: str, sent: Sequence[str], token: str | None) -> None:
        with self._lock:
            kept = [t for t in self._tokens.get(tenant, ()) if t not in sent]
            if token is not None:
                kept.append(token)
            if not kept:
                self._tokens.pop(tenant, None)
                return
            self._tokens[tenant] = tuple(kept[-MAX_TOKENS_PER_TENANT:])
            self._tokens.move_to_end(tenant)
            while len(self._tokens) > self._tenants:
                self._tokens.popitem(last=False)


def in_session(tokens: SessionTokens, call: Callable[[Ask], Awaitable[Answer]]) -> Callable[[Ask], Awaitable[Answer]]:
    """``call`` (a host flow's calls, on an event loop) with the session of ``tokens``: each call
    carries the session's tokens of its tenant, and a write's token is kept."""

    async def session_call(ask: Ask) -> Answer:
        sent = tokens.outgoing(ask.request, ask.metadata)
        tenant = ask.request.tenant if sent else ""
        try:
            for older in sent[:-1]:
                await call(Ask(FLUSH, flush_request(tenant, older), wait_seconds=FLUSH_WAIT_SECONDS))
            answer = await call(dataclasses.replace(ask, metadata=(*ask.metadata, *token_metadata(sent))))
        except ServiceError as error:
            tokens.refused(ask.request.tenant, sent, error.reason)
            raise
        tokens.answered(ask.request, sent, answer.response)
        return answer

    return session_call
