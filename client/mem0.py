"""Session consistency for the official mem0 client (``mem0ai``): its reads see its own writes.

Mnemosyne answers every mem0 write (add, update, delete, delete_all) with a consistency token in
the response header ``Mnemosyne-Consistency-Token``; a request carrying it in the same header
waits, on the server, until the writes it names are visible or failed (a search, get or get_all),
or folds it into the token it returns (a write). The official client knows nothing of it, so
an add queued on a tenant whose hot path is enabled may be missing from the search that follows.
``session_consistency`` plugs into the client's HTTP client (httpx, which mem0ai lets you pass in
or reach as ``client.client``) as two event hooks: the newest token of each tenant the client wrote
goes with its next memory calls of that tenant (docs/mem0.md "Reading your own writes")::

    from mem0 import MemoryClient
    from mnemosyne_mem0 import session_consistency  # this file, copied into your project

    client = session_consistency(MemoryClient(api_key=token, host="http://127.0.0.1:8080"))
    client.add([{"role": "user", "content": "Alice moved to Austin"}], user_id="alice")
    client.search("Where did Alice move?", filters={"user_id": "alice"})  # finds it, even queued

``AsyncMemoryClient`` works the same way. The file imports nothing but the standard library: mem0ai
pins a protobuf older than the one Mnemosyne's own packages need, so the two cannot share an
environment, and this file is meant to be copied beside the mem0 client (it is
``mnemosyne.client.mem0`` in Mnemosyne's package).

The tenant of a call is its credential's (the ``Authorization`` header) or the one it names (the
``Mnemosyne-Tenant`` header): tokens are kept per such pair, the newest only (a write's token
covers the writes of the token it carried), for at most ``MAX_TENANTS`` pairs, the least recently
used forgotten first; thread-safe. Only the memory paths (``/v1/memories...``, ``/v3/memories...``)
carry a token: the event calls (``get_event``) answer at once, as before. A token the server
refuses for good (the tenant was restored, replaced or erased since, or the token is not one
of this tenant's) is dropped, and the refusal reaches the caller as mem0's own exception: call again, and write again
what you still need.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol, TypeVar

TOKEN_HEADER = "Mnemosyne-Consistency-Token"
TENANT_HEADER = "Mnemosyne-Tenant"
MEMORY_PATHS = ("/v1/memories", "/v3/memories")
# As the server's reasons (host/consistency.py DROPPED_REASONS): a token refused for good.
DROPPED_REASONS = frozenset({"TIMELINE_CHANGED", "TOKEN_INVALID", "TOKEN_FOREIGN"})
MAX_TENANTS = 10_000

C = TypeVar("C")


class _Request(Protocol):
    @property
    def headers(self) -> MutableMapping[str, str]: ...
    @property
    def url(self) -> Any: ...


class _Response(Protocol):
    @property
    def headers(self) -> MutableMapping[str, str]: ...
    @property
    def request(self) -> _Request: ...
    @property
    def status_code(self) -> int: ...
    def json(self) -> Any: ...


class SessionTokens:
    """(credential, tenant) -> the newest consistency token the client's writes returned."""

    def __init__(self, tenants: int = MAX_TENANTS) -> None:
        self._tenants = tenants
        self._lock = threading.Lock()
        self._tokens: OrderedDict[tuple[str, str], str] = OrderedDict()

    def before(self, request: _Request) -> None:
        """Attach the session's token to a memory call that names none of its own."""
        if not request.url.path.startswith(MEMORY_PATHS) or TOKEN_HEADER in request.headers:
            return
        key = _tenant_of(request)
        with self._lock:
            token = self._tokens.get(key)
            if token is not None:
                self._tokens.move_to_end(key)
        if token is not None:
            request.headers[TOKEN_HEADER] = token

    def after(self, response: _Response, reason: str = "") -> None:
        """Keep the token a write returned; drop the one a refusal for good was about."""
        key = _tenant_of(response.request)
        sent = response.request.headers.get(TOKEN_HEADER)
        token = response.headers.get(TOKEN_HEADER)
        with self._lock:
            current = self._tokens.get(key)
            if token and response.status_code < 400:
                # Unless another call's newer token came back meanwhile (not the one this carried).
                if current is None or current == sent:
                    self._tokens[key] = token
                    self._tokens.move_to_end(key)
                    while len(self._tokens) > self._tenants:
                        self._tokens.popitem(last=False)
            elif reason in DROPPED_REASONS and current is not None and current == sent:
                del self._tokens[key]

    def refused(self, response: _Response) -> bool:
        """Whether a response may be a refusal of the token it carried (its body then tells)."""
        return response.status_code >= 400 and TOKEN_HEADER in response.request.headers


def _tenant_of(request: _Request) -> tuple[str, str]:
    return request.headers.get("authorization", ""), request.headers.get(TENANT_HEADER.lower(), "")


def _reason(response: _Response) -> str:
    """The ErrorInfo reason of an error body ({"code", "message", "details": [...]})."""
    try:
        body = response.json()
    except ValueError:
        return ""
    details = body.get("details") if isinstance(body, dict) else None
    for detail in details if isinstance(details, list) else ():
        if isinstance(detail, dict) and isinstance(detail.get("reason"), str):
            return str(detail["reason"])
    return ""


def _http_of(client: object) -> Any:
    """The httpx client of ``client`` (itself, or a mem0 client's): one with a dict of event hooks,
    else a TypeError here, not an AttributeError naming ``.client``."""
    http = client
    if not hasattr(http, "event_hooks"):
        # mem0's MemoryClient keeps its httpx client as .client, AsyncMemoryClient as .async_client.
        http = getattr(client, "async_client", None) or getattr(client, "client", None)
    if not isinstance(getattr(http, "event_hooks", None), dict):
        raise TypeError(
            f"session_consistency: client is {type(client).__name__} {client!r:.40}; it takes mem0's MemoryClient or "
            "AsyncMemoryClient, or the httpx.Client or httpx.AsyncClient given to one"
        )
    return http


def session_consistency(client: C, *, tenants: int = MAX_TENANTS) -> C:
    """Make ``client`` carry the newest consistency token of each tenant it wrote; returns it.

    ``client``: mem0's ``MemoryClient`` or ``AsyncMemoryClient``, or the ``httpx.Client`` /
    ``httpx.AsyncClient`` given to one (``MemoryClient(..., client=session_consistency(http))``).
    ``tenants``: how many tenants' tokens are kept (a whole number from 1; else TypeError or
    ValueError here, not a TypeError inside the client's first write, or no token ever kept).
    Another ``client`` is a TypeError naming it, before anything is plugged in.
    """
    if isinstance(tenants, bool) or not isinstance(tenants, int):
        raise TypeError(
            f"session_consistency: tenants is {type(tenants).__name__} {tenants!r:.40}; it takes a whole number (int)"
        )
    if tenants < 1:
        raise ValueError(f"session_consistency: tenants is {tenants}; it takes 1 or more")
    http = _http_of(client)
    tokens = SessionTokens(tenants)
    hooks: dict[str, list[Callable[..., Any]]] = http.event_hooks
    if hasattr(http, "aclose"):  # an httpx.AsyncClient: its hooks are awaited

        async def before_async(request: _Request) -> None:
            tokens.before(request)

        async def after_async(response: Any) -> None:
            if tokens.refused(response):
                await response.aread()
                tokens.after(response, _reason(response))
            else:
                tokens.after(response)

        request_hook: Callable[..., Awaitable[None] | None] = before_async
        response_hook: Callable[..., Awaitable[None] | None] = after_async
    else:

        def after(response: Any) -> None:
            if tokens.refused(response):
                response.read()
                tokens.after(response, _reason(response))
            else:
                tokens.after(response)

        request_hook, response_hook = tokens.before, after
    hooks["request"] = [*hooks.get("request", []), request_hook]
    hooks["response"] = [*hooks.get("response", []), response_hook]
    http.event_hooks = hooks
    return client
