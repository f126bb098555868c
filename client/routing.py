"""Calls sent straight to the member that owns their tenant (docs/scale-out.md): the client's
placement module. The member list and the hash are the server's (store/membership.py states both
rules) and the Node client's (src/routing.js); all three load the same test vectors
(docs/scale-out-vectors.json):

* the member list: ``ID=HOST:PORT`` items separated by commas and ASCII whitespace; an id is 1-63
  of ``a-z 0-9 -`` starting with a letter or digit, an address one or more printable ASCII
  characters; an id listed twice, or an empty list, is refused (``MemberListError``, its
  ``problem`` the vectors' reason). ``@FILE`` gives the list as a file's text (UTF-8);
* weight(tenant, member) = first 8 bytes, big-endian unsigned, of SHA-256(UTF-8(tenant) 0x00 UTF-8(member));
  owner = the member of highest weight; on a tie the smallest member id (as UTF-8 bytes).

``RoutingChannel`` is a ``grpc.Channel`` over one channel per member: each call goes to the
owner of its request's ``tenant`` with ``x-mnemosyne-route: OWNER`` (so that member serves it or
refuses it, never forwards it), and a call naming no tenant goes to the first member (the
smallest id, ``first_member``). A member
that refuses a call NOT_OWNER names the owner and sends the current member list: the channel
takes that list and sends the call once more, to the owner. A server stream refused so before its
first message is sent once more the same way; a call whose messages are not kept (a client stream,
a server stream that has answered, a call made as a future) is not, but its list is taken.
"""

from __future__ import annotations

import errno
import hashlib
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc

from mnemosyne.client.errors import error_info, from_rpc_error
from mnemosyne.host.targets import MEMBER_ADDRESS_INVALID, member_address_refusal

ROUTE_KEY = "x-mnemosyne-route"
NOT_OWNER = "NOT_OWNER"
_NOT_FOLLOWED = "mnemosyne_not_followed"  # on a NOT_OWNER refusal raised, why it was not followed
# Why a stream's refusal is raised, not followed: a client stream's messages are not kept, and a
# server stream had answered. The member list it carries is taken all the same.
_STREAMED = (
    "a stream that has sent or answered messages is not sent again; the member list the refusal carries is "
    "taken, so the next call for the tenant goes to the owner"
)
_FUTURE = (
    "a call made as a future is not sent again; the member list the refusal carries is taken, so the next call "
    "for the tenant goes to the owner"
)
MEMBER_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_SEPARATORS = re.compile(r"[,\t\n\v\f\r ]+")
_ADDRESS_PATTERN = re.compile(r"[!-~]+")  # printable ASCII: a host name or address and a port


class MemberListError(ValueError):
    """A member list that cannot be used; ``problem`` says why (the test vectors' reason)."""

    def __init__(self, message: str, problem: str) -> None:
        super().__init__(message)
        self.problem = problem


def weight(tenant: str, member: str) -> int:
    """``member``'s weight for ``tenant``: the first 8 bytes, big-endian unsigned, of
    SHA-256(UTF-8(tenant) 0x00 UTF-8(member)); the owner is the member of highest weight."""
    return int.from_bytes(hashlib.sha256(tenant.encode() + b"\x00" + member.encode()).digest()[:8], "big")


def owner_of(tenant: str, members: Iterable[str]) -> str:
    """The member owning ``tenant``: highest weight, then the smallest id."""
    return min(members, key=lambda member: (-weight(tenant, member), member.encode()))


def first_member(members: Iterable[str]) -> str:
    """The member a call naming no tenant goes to: the smallest id (as UTF-8 bytes)."""
    return min(members, key=str.encode)


def member_list_text(value: str, source: str = "members") -> str:
    """The member list ``value`` gives: itself, or for ``@FILE`` the file's text (UTF-8, a leading
    byte-order mark ignored). ``source`` names where the value came from, for the refusal."""
    if not value.startswith("@"):
        return value
    path = Path(value[1:])
    try:
        if path.exists() and not path.is_file():  # a FIFO would block the read, a device never end it
            raise OSError(errno.EINVAL, "it is not a regular file")
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise MemberListError(f"cannot read {source} {value}: {cause}", "MEMBER_LIST_UNREADABLE") from None


def _items(members: str | Mapping[str, str]) -> Iterator[tuple[str, str, str]]:
    """(id, address, the item as written) of each member of a list or a mapping."""
    if not isinstance(members, str):
        for member, address in members.items():
            yield member, address, f"{member}={address}"
        return
    for item in _SEPARATORS.split(members):
        if item:
            member, _, address = item.partition("=")
            yield member, address, item


def _checked(member: str, address: str, item: str) -> None:
    if address == "":
        raise MemberListError(f"member {item!r}: give ID=HOST:PORT", "MEMBER_ADDRESS_MISSING")
    if not isinstance(member, str) or not MEMBER_ID_PATTERN.fullmatch(member):
        raise MemberListError(
            f"member {item!r}: the id must be 1-63 lowercase letters, digits and '-', starting with a letter or digit",
            "MEMBER_ID_INVALID",
        )
    if not isinstance(address, str) or not _ADDRESS_PATTERN.fullmatch(address):
        raise MemberListError(
            f"member {item!r}: the address must be printable ASCII (HOST:PORT)", "MEMBER_ADDRESS_INVALID"
        )


def parse_members(members: str | Mapping[str, str]) -> dict[str, str]:
    """``ID=HOST:PORT,...`` (as ``mnemosyne serve --members`` takes it; not ``@FILE``:
    ``member_list_text`` reads that), or a mapping id -> address, checked by the same rules."""
    parsed: dict[str, str] = {}
    for member, address, item in _items(members):
        _checked(member, address, item)
        if member in parsed:
            raise MemberListError(f"member {member} is listed twice", "MEMBER_LISTED_TWICE")
        parsed[member] = address
    if not parsed:
        raise MemberListError("the member list is empty: give ID=HOST:PORT,...", "MEMBER_LIST_EMPTY")
    return parsed


class RoutingChannel(grpc.Channel):
    """A ``grpc.Channel`` over one channel per member (``make_channel(address)`` makes each, on
    first use): each call goes to the owner of its request's tenant, and a NOT_OWNER refusal
    carrying the current member list corrects ``members`` and sends the call once more.
    ``members`` is a member list (text or ``@FILE``) or a mapping of member id to address;
    ``MemberListError`` when it cannot be used: by the list's rule, or as the server refuses a
    member list to dial (an address that is no server address: MEMBER_ADDRESS_INVALID, the
    server's reason, here rather than UNAVAILABLE at the first call sent there)."""

    def __init__(self, members: str | Mapping[str, str], make_channel: Callable[[str], grpc.Channel]) -> None:
        self._make_channel = make_channel
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}  # address -> channel
        self.members = parse_members(member_list_text(members) if isinstance(members, str) else members)
        refusal = member_address_refusal(self.members, "members")
        if refusal is not None:
            raise MemberListError(refusal, MEMBER_ADDRESS_INVALID)

    def owner(self, tenant: str) -> str:
        """The member owning ``tenant`` by the current list."""
        with self._lock:
            return owner_of(tenant, self.members)

    def _member(self, tenant: str, member: str) -> tuple[str, str]:
        """The member a call for ``tenant`` goes to ("" for no tenant: the first; ``member``: that
        one) and its address. Under the lock."""
        if not member:
            member = owner_of(tenant, self.members) if tenant else ""
        return member, self.members[member] if member else self.members[first_member(self.members)]

    def address_of(self, tenant: str) -> str:
        """The address a call for ``tenant`` goes to (the first member's for no tenant)."""
        with self._lock:
            return self._member(tenant, "")[1]

    def _channel(self, tenant: str, member: str = "") -> tuple[str, grpc.Channel]:
        """The member a call for ``tenant`` goes to (``_member``) and its channel."""
        with self._lock:
            member, address = self._member(tenant, member)
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = self._make_channel(address)
        return member, channel

    def corrected(self, error: grpc.RpcError, sent_to: str) -> tuple[str | None, str]:
        """Take the member list a NOT_OWNER refusal carries; the member the call should be sent
        to again (None: not again, and why): the owner by the new list, or — the list unchanged,
        while a tenant moves between members — the member the refusal names. A list that cannot be
        used (not a member list, an address that is no server address) is as none: the server's
        fault, not the caller's, so the refusal is raised as the server sent it (NOT_OWNER naming
        the owner), the client's list kept, never a ``MemberListError`` as for the caller's list."""
        refusal = from_rpc_error(error)
        listed = refusal.metadata.get("members", "")
        if refusal.reason != NOT_OWNER:
            return None, ""
        if not listed:
            return None, "the refusal carries no member list"
        try:
            members = parse_members(listed)
        except MemberListError as exc:
            return None, f"the member list the refusal carries cannot be used ({exc})"
        unusable = member_address_refusal(members, "members")
        if unusable is not None:
            return None, f"the member list the refusal carries cannot be used ({unusable})"
        with self._lock:
            before, self.members = self.members, members
            if self.members != before:
                return "", ""
        named = refusal.metadata.get("owner", "")
        if named == sent_to:
            return None, f"it names member {sent_to}, which refused it, and the member list is unchanged"
        if named not in members:
            return None, f"member {named or '(none)'} is not in the member list the refusal carries"
        return named, ""

    # -- grpc.Channel ---------------------------------------------------------------------------

    def unary_unary(
        self, method: str, request_serializer: Any = None, response_deserializer: Any = None, **_: Any
    ) -> Any:
        """A multi-callable whose calls go to the owner of their request's tenant."""
        return _Routed(self, "unary_unary", method, request_serializer, response_deserializer)

    def unary_stream(
        self, method: str, request_serializer: Any = None, response_deserializer: Any = None, **_: Any
    ) -> Any:
        """A multi-callable whose calls go to the owner of their request's tenant."""
        return _Routed(self, "unary_stream", method, request_serializer, response_deserializer)

    def stream_unary(
        self, method: str, request_serializer: Any = None, response_deserializer: Any = None, **_: Any
    ) -> Any:
        """A multi-callable whose calls go to the owner of their first request's tenant."""
        return _Routed(self, "stream_unary", method, request_serializer, response_deserializer)

    def stream_stream(
        self, method: str, request_serializer: Any = None, response_deserializer: Any = None, **_: Any
    ) -> Any:
        """A multi-callable whose calls go to the owner of their first request's tenant."""
        return _Routed(self, "stream_stream", method, request_serializer, response_deserializer)

    def subscribe(self, callback: Any, try_to_connect: bool = False) -> None:
        """Watch the connectivity of the first member's channel (``grpc.Channel.subscribe``)."""
        self._channel("")[1].subscribe(callback, try_to_connect)

    def unsubscribe(self, callback: Any) -> None:
        """Stop a ``subscribe``."""
        self._channel("")[1].unsubscribe(callback)

    def close(self) -> None:
        """Close every member's channel."""
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

    def __enter__(self) -> RoutingChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Routed:
    """A multi-callable that picks its member per call, by the request's tenant."""

    def __init__(self, routing: RoutingChannel, kind: str, method: str, serializer: Any, deserializer: Any) -> None:
        self._routing, self._kind, self._method = routing, kind, method
        self._serializer, self._deserializer = serializer, deserializer
        self._callables: dict[int, Any] = {}

    def opened(self, tenant: str, send_to: str, kwargs: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
        """The member a call for ``tenant`` goes to (``send_to``: that one), the multi-callable of
        its channel and the call's keyword arguments, routed to it."""
        member, channel = self._routing._channel(tenant, send_to)
        callable_ = self._callables.get(id(channel))
        if callable_ is None:  # one per member's channel, made once
            callable_ = self._callables[id(channel)] = getattr(channel, self._kind)(
                self._method, request_serializer=self._serializer, response_deserializer=self._deserializer
            )
        metadata = tuple(kwargs.get("metadata") or ())
        if member:
            metadata = (*metadata, (ROUTE_KEY, member))
        return member, callable_, {**kwargs, "metadata": metadata}

    def followed(self, error: grpc.RpcError, member: str, refused_by: str, *, kept: str = "") -> str | None:
        """The member to send a call ``member`` refused to (None: not sent again, why noted on
        ``error``). Any NOT_OWNER refusal's member list is taken, so the next call goes to the
        owner; ``kept``, when given, says why this call is not sent again all the same."""
        if refused_by:  # a call follows one redirect
            _tell_not_followed(
                error,
                f"it was sent to member {member} after member {refused_by} refused it, and a call "
                "follows one redirect: the members' lists differ (check each member's --members)",
            )
            return None
        send_to, why = self._routing.corrected(error, member)
        if send_to is not None and kept:
            send_to, why = None, kept
        _tell_not_followed(error, why)
        return send_to

    def _send(self, how: str, request: Any, kwargs: dict[str, Any]) -> Any:
        first = None
        if self._kind.startswith("stream"):  # a client stream names its tenant in its first message
            messages = iter(request)
            first = next(messages, None)
            tenant = getattr(first, "tenant", "")
            request = _chain(first, messages) if first is not None else iter(())
        else:
            tenant = getattr(request, "tenant", "")
        if self._kind == "unary_stream":  # a server stream's refusal surfaces as it is read
            return _ServerStream(self, request, tenant, kwargs)
        kept = _STREAMED if first is not None else ""
        if how == "future":  # its refusal surfaces as it is waited for
            member, callable_, sent = self.opened(tenant, "", kwargs)
            return _Future(callable_.future(request, **sent), self, member, kept or _FUTURE)
        send_to, refused_by = "", ""
        while True:
            member, callable_, sent = self.opened(tenant, send_to, kwargs)
            try:
                return getattr(callable_, how)(request, **sent)
            except grpc.RpcError as exc:
                again = self.followed(exc, member, refused_by, kept=kept)
                if again is None:
                    raise
                send_to, refused_by = again, member

    def __call__(self, request: Any, **kwargs: Any) -> Any:
        return self._send("__call__", request, kwargs)

    def with_call(self, request: Any, **kwargs: Any) -> Any:
        return self._send("with_call", request, kwargs)

    def future(self, request: Any, **kwargs: Any) -> Any:
        return self._send("future", request, kwargs)


class _ServerStream:
    """A server stream's call, as gRPC's (iterated; ``cancel``, ``code`` ... of the call under
    way): refused NOT_OWNER before its first message, as a unary call is, it takes the member list
    the refusal carries and is sent once more, to the owner (nothing was answered, and the request
    is kept). A refusal after a message is raised, its list taken."""

    _call: Any = None  # the call under way (None only while the first is being made)

    def __init__(self, routed: _Routed, request: Any, tenant: str, kwargs: dict[str, Any]) -> None:
        self._routed, self._request, self._tenant, self._kwargs = routed, request, tenant, kwargs
        self._answered = self._cancelled = False
        self._refused_by = ""
        self._open("")

    def _open(self, send_to: str) -> None:
        self._member, callable_, sent = self._routed.opened(self._tenant, send_to, self._kwargs)
        self._call = callable_(self._request, **sent)

    def __iter__(self) -> _ServerStream:
        return self

    def __next__(self) -> Any:
        while True:
            try:
                message = next(self._call)
            except grpc.RpcError as exc:
                kept = _STREAMED if self._answered else ""
                again = self._routed.followed(exc, self._member, self._refused_by, kept=kept)
                if again is None or self._cancelled:
                    raise
                self._refused_by = self._member
                self._open(again)
                continue
            self._answered = True
            return message

    def cancel(self) -> bool:
        self._cancelled = True
        return bool(self._call.cancel())

    def __getattr__(self, name: str) -> Any:  # code, details, trailing_metadata ... of the call under way
        return getattr(self._call, name)


class _Future:
    """A call made as a future, as gRPC's (``result``, ``cancel`` ...): its NOT_OWNER refusal,
    met as it is waited for, is not sent again, but the member list it carries is taken."""

    def __init__(self, future: Any, routed: _Routed, member: str, kept: str) -> None:
        self._future, self._routed, self._member, self._kept = future, routed, member, kept

    def result(self, timeout: float | None = None) -> Any:
        try:
            return self._future.result(timeout)
        except grpc.RpcError as exc:
            self._routed.followed(exc, self._member, "", kept=self._kept)
            raise

    def __getattr__(self, name: str) -> Any:  # cancel, done, exception, code ... of the call
        return getattr(self._future, name)


def _tell_not_followed(error: grpc.RpcError, why: str) -> None:
    """Note on a NOT_OWNER refusal raised, not followed, why (``not_followed`` reads it)."""
    if why:
        setattr(error, _NOT_FOLLOWED, why)


def not_followed(error: grpc.RpcError, routed: bool) -> str:
    """Why a failed call's NOT_OWNER refusal was not followed, said with the member it names
    ("" for any other failure); ``routed``: the client has a member list (a ``RoutingChannel``)."""
    info = error_info(error)
    if info is None or info.reason != NOT_OWNER:
        return ""
    why = getattr(error, _NOT_FOLLOWED, "") or (
        _STREAMED if routed else "this client has no member list to follow it by (MemoryClient(members=...))"
    )
    return f"not sent to member {info.metadata.get('owner') or '(none named)'}, the owner it names: {why}"


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest
