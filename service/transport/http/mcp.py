"""The MCP server over streamable HTTP at ``/mcp`` on the HTTP port (the tools of host/mcp_tools.py).

Every request is authenticated here with the gRPC port's tokens (``Authorization: Bearer``) and
names its tenant (``/mcp?tenant=T``, optionally ``&workspace=W``); the token must reach the
tenant. The MCP session is bound to that token, tenant and workspace: the SDK's session manager
refuses a session id presented with another (404, as for a session it does not know), and a
session it no longer knows starts without an observation, so its model must read memory before
it writes. A tenant's open sessions are counted (transport/http/mcp_sessions.py): past
``--mcp-sessions-per-tenant`` (or ``--mcp-sessions`` for every tenant) a new one is refused with
429, as admission refuses a stream, and one left idle ends after ``--mcp-session-idle-seconds``.
The HTTP guard (transport/http/guard.py) has already checked ``Host`` and ``Origin``, the check
the MCP specification requires. A POST's body is read here, before the SDK: one above
twice --max-request-bytes is refused (413 REQUEST_TOO_LARGE, naming that limit), one whose client left before it was whole ends unanswered, as
a client's cancellation (not the SDK's error).

The tools reach the servicers in process (transport/in_process.py), with the caller's
token: the same edge, envelope, admission, limits and error table as a gRPC call, with no socket.
A session keeps the consistency tokens of its writes (host/consistency.py): its reads wait for its
own writes still queued.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from typing import Any
from urllib.parse import parse_qs, parse_qsl

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mnemosyne.engine.limits import validate_tenant
from mnemosyne.engine.workspace import workspace_scope
from mnemosyne.errors import InvalidArgument, MnemosyneError, NotFound
from mnemosyne.host.consistency import SessionTokens, in_session
from mnemosyne.host.mcp_messages import unreadable
from mnemosyne.host.mcp_tools import DEFAULT_WORKSPACE, Agent, Calls, ToolSession, build_server
from mnemosyne.host.protocol import Answer, Ask, HostObservations
from mnemosyne.transport.call import metadata_value
from mnemosyne.transport.edge import Edge, body_too_large
from mnemosyne.transport.envelope import ClientLeft
from mnemosyne.transport.http.guard import send_error
from mnemosyne.transport.http.json_api import error_headers, read_body
from mnemosyne.transport.http.mcp_sessions import TenantSessions
from mnemosyne.transport.http.paths import MCP_PATH
from mnemosyne.transport.in_process import InProcess


class McpEndpoint:
    def __init__(self, edge: Edge, in_process: InProcess) -> None:
        self._edge = edge
        self._in_process = in_process
        self._observations = HostObservations()  # shared by every session, keyed by its agent
        # MCP session id -> its agent and the consistency tokens of its writes (of its one tenant),
        # forgotten when the session ends: one tenant's sessions never push out another's.
        self._agents: OrderedDict[str, tuple[Agent, SessionTokens]] = OrderedDict()
        self._server = build_server(self._session_of, sessions_only=True)
        limits = edge.admission.limits
        self._agents_kept = limits.mcp_sessions
        self._sessions = TenantSessions(edge.admission, limits.mcp_session_idle_seconds, on_end=self._forget)
        # The guard before this app checks Host and Origin; the SDK's own copy of that check is off.
        self._app: ASGIApp = self._server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            session_idle_timeout=limits.mcp_session_idle_seconds,
            max_sessions=limits.mcp_sessions,  # counted here first: the SDK's own refusal is never reached
            # Judged here first too (``__call__``, REQUEST_TOO_LARGE): the SDK's 4 MiB, in plain text, is never reached.
            max_request_body_size=self._body_limit(),
        )
        self._running: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def _body_limit(self) -> int:
        """The largest body read: a JSON call may be twice its protobuf encoding's limit."""
        return 2 * self._edge.max_request_bytes

    async def start(self) -> None:
        """Run the SDK's session manager (its task group) until ``stop``."""
        started = asyncio.Event()

        async def run() -> None:
            async with self._server.session_manager.run():
                started.set()
                await self._stop.wait()

        self._running = asyncio.ensure_future(run())
        await started.wait()

    async def stop(self) -> None:
        self._stop.set()
        if self._running is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._running

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] != MCP_PATH:
            # The SDK serves /mcp alone: below it, its router answered a plain-text 404, which
            # the session count took for the end of the session named (its place and its
            # reading were given up while the SDK kept it open), or redirected /mcp/ to /mcp.
            await send_error(send, _no_route(scope["path"]))
            return
        try:
            user = self._authenticate(scope)
        except MnemosyneError as error:
            await send_error(send, error)
            return
        if scope["method"] == "POST":
            limit = self._body_limit()
            try:
                body = await read_body(Request(scope, receive), limit)
            except ClientLeft:
                return  # nobody to answer, nothing to tell the SDK (it would log its own error)
            if body is None:  # the SDK would hold a body of any size in memory
                await send_error(send, body_too_large(self._edge.max_request_bytes))
                return
            refusal = unreadable(body, not_json="the body is not one JSON object")
            if refusal is not None:  # as over stdio, not the SDK's parser's or pydantic's words
                answer = refusal.model_dump(mode="json", by_alias=True, exclude_unset=True)
                await JSONResponse(answer, status_code=400)(scope, receive, send)
                return
            receive = _replay(body, receive)
        await self._in_session(user, {**scope, "user": user}, receive, send)

    async def _in_session(self, user: AuthenticatedUser, scope: Scope, receive: Receive, send: Send) -> None:
        """The request served by the SDK, its session counted: opened by a request without a
        session id, ended by a DELETE or a 404 (``TenantSessions``)."""
        owner = user.access_token.client_id
        session_id = _header(scope, MCP_SESSION_ID_HEADER)
        answer = _Answer(send)
        if session_id is None:
            tenant = (user.access_token.claims or {})["tenant"]
            try:
                self._sessions.reserve(tenant)
            except MnemosyneError as error:
                await send_error(send, error, error_headers(error, ()).items())
                return
            opened = None
            try:
                await self._app(scope, receive, answer.send)
                opened = answer.session_id if answer.status < 400 else None
            finally:
                self._sessions.settle(tenant, owner, opened)
            return
        self._sessions.began(session_id)
        try:
            await self._app(scope, receive, answer.send)
        finally:
            ended = answer.status == 404 or (scope["method"] == "DELETE" and answer.status < 400)
            self._sessions.ended(session_id, owner, gone=ended)

    def _authenticate(self, scope: Scope) -> AuthenticatedUser:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        named = [key for key, _ in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)]
        for key in named:  # as on the JSON API and mem0's: which one was meant is the caller's to say
            if key not in ("tenant", "workspace"):  # a misspelt workspace would open a session on main
                raise InvalidArgument(
                    f"{key[:40]!r} is not a query parameter of /mcp: give tenant and, if not main, workspace",
                    reason="REQUEST_UNDECODABLE",
                )
            if named.count(key) > 1:
                raise InvalidArgument(
                    f"the query parameter {key!r} appears twice: give it once", reason="REQUEST_UNDECODABLE"
                )
        tenant = (query.get("tenant") or [""])[0]
        workspace = (query.get("workspace") or [DEFAULT_WORKSPACE])[0]
        if not tenant:
            raise InvalidArgument(
                "name the tenant in the URL: /mcp?tenant=<tenant id>[&workspace=<name>]", reason="TENANT_INVALID"
            )
        validate_tenant(tenant)  # before the token, as on every surface (transport/edge.py)
        workspace_scope(workspace)  # so is the workspace: a session never opens on one its tools refuse
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]
        name = ""
        token = ""
        principal = self._edge.authenticate(headers)  # one authorization: two are refused
        if principal is not None:
            principal.check_tenant(tenant)
            name, token = principal.name, (metadata_value(headers, "authorization") or "").partition(" ")[2].strip()
        # The session's owner, compared by the SDK on every request of the session.
        owner = f"{name}\x1f{tenant}\x1f{workspace}"
        return AuthenticatedUser(
            AccessToken(token=token, client_id=owner, scopes=[], claims={"tenant": tenant, "workspace": workspace})
        )

    def _session_of(self, ctx: Context[Any, Any]) -> ToolSession:
        request = ctx.request_context.request
        assert request is not None  # over HTTP every call has its request
        user: AuthenticatedUser = request.scope["user"]  # set by __call__
        claims = user.access_token.claims or {}
        agent, tokens = self._agent(request.headers.get(MCP_SESSION_ID_HEADER, ""))
        calls = in_session(tokens, self._calls(user.access_token.token))
        return ToolSession(calls, claims["tenant"], claims["workspace"], agent, self._observations)

    def _calls(self, token: str) -> Calls:
        """The session's calls, in process, with the caller's token."""
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        in_process = self._in_process

        async def call(ask: Ask) -> Answer:
            return await in_process.call(ask, metadata)

        return call

    def _forget(self, session_id: str) -> None:
        """The session ended: its agent and tokens go."""
        self._agents.pop(session_id, None)

    def _agent(self, session_id: str) -> tuple[Agent, SessionTokens]:
        """The agent of an MCP session and its consistency tokens: the same for every request of
        the session, so the observation its read_memory recorded is the one its writes send, and
        its reads wait for its writes. No session id (a stateless request): a new agent, which has
        read nothing, so its writes fail closed, and has written nothing."""
        if not session_id:
            return Agent(), SessionTokens(1)
        session = self._agents.pop(session_id, None) or (Agent(), SessionTokens(1))
        self._agents[session_id] = session
        while len(self._agents) > self._agents_kept:  # only if a session's end went unseen
            self._agents.popitem(last=False)
        return session


def _no_route(path: str) -> NotFound:
    return NotFound(
        f"no route {path[:200]!r}: the MCP endpoint is {MCP_PATH}?tenant=<tenant id>[&workspace=<name>]",
        reason="ROUTE_NOT_FOUND",
    )


class _Answer:
    """``send``, noting the answer's status and the session id it names."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.status = 0  # 0: no answer began (the client left)
        self.session_id: str | None = None

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.session_id = _header(message, MCP_SESSION_ID_HEADER)
        await self._send(message)


def _header(holder: Scope | Message, name: str) -> str | None:
    """The first value of header ``name`` (lower case) of a request's scope or a response's start."""
    wanted = name.lower().encode("latin-1")
    for key, value in holder.get("headers", ()):
        if key.lower() == wanted:
            decoded: str = value.decode("latin-1")
            return decoded
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for the SDK: the body already read, then the connection's own messages (its
    disconnect)."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed
