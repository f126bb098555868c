"""The server addresses a caller gives (a command's ``--target``, a member's address in a member
list: ``serve --members``, ``rebalance``, ChangeMembers, a client's ``members``): the forms gRPC
makes a channel to, checked before any channel is made or any member takes the list, so that a
wrong one is refused in one line naming where it came from, not by gRPC's resolver (its C++ log
lines, then UNKNOWN or UNAVAILABLE) or, for a member, by every member or call that tries to reach
it later. One check for the server and the Python client (the Node client's src/routing.js holds
the same rule; both load docs/scale-out-vectors.json ``member_addresses``): each raises its own
error with these messages."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

MEMBER_ADDRESS_INVALID = "MEMBER_ADDRESS_INVALID"
TARGET_FORMS = (
    "HOST:PORT (a host name, an IPv4 address or an [IPv6] address in brackets, and a port 1-65535), "
    "or a gRPC target: dns:///HOST:PORT, ipv4:ADDRESS:PORT, ipv6:[ADDRESS]:PORT, unix:PATH"
)
_HOST_NAME = re.compile(r"[A-Za-z0-9_-]{1,63}(\.[A-Za-z0-9_-]{1,63})*\.?")


def not_a_target(target: str, flag: str) -> str:
    """Why ``target``, given as ``flag``, is refused: it is none of ``TARGET_FORMS``."""
    return f"{flag} {target[:200]!r} is not a server address: give {TARGET_FORMS}"


def member_address_refusal(addresses: Mapping[str, str], source: str) -> str | None:
    """Why a member list (id -> address) given as ``source`` is refused: the first member whose
    address is not a target (problem ``MEMBER_ADDRESS_INVALID``); None when every one is."""
    for member, address in addresses.items():
        if not is_target(address):
            return not_a_target(address, f"{source}: member {member}'s address")
    return None


def is_target(target: str) -> bool:
    """``target`` is a form gRPC makes a channel to (the schemes of its own resolvers)."""
    scheme, _, rest = target.partition(":")
    if scheme == "dns":  # dns:HOST:PORT, dns:///HOST:PORT, dns://RESOLVER:PORT/HOST:PORT
        resolver, _, address = rest[2:].partition("/") if rest.startswith("//") else ("", "", rest)
        return (not resolver or _address_kind(resolver) is not None) and _address_kind(address) is not None
    if scheme in ("ipv4", "ipv6"):  # literal addresses of that family, each with its port
        return all(_address_kind(address) == scheme for address in rest.split(","))
    if scheme == "unix":  # unix:PATH or unix:///PATH: gRPC refuses an authority (unix://HOST/PATH)
        path = rest.removeprefix("//")
        return _is_path(path) and (path == rest or path.startswith("/"))
    if scheme == "unix-abstract":
        return _is_path(rest)
    return _address_kind(target) is not None


# A socket's path holds at most 107 bytes (Linux's sun_path, its NUL left out): a longer one is
# refused by gRPC at every connect.
_MAX_SOCKET_PATH_BYTES = 107


def _is_path(path: str) -> bool:
    return path.isprintable() and path.strip() != "" and len(path.encode()) <= _MAX_SOCKET_PATH_BYTES


def _address_kind(address: str) -> str | None:
    """What HOST:PORT names: "ipv4", "ipv6" (in brackets) or "name"; None if it is no such address."""
    host, colon, port = address.rpartition(":")
    if not colon or not (port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65_536):
        return None
    try:
        if host.startswith("[") and host.endswith("]"):
            ipaddress.IPv6Address(host[1:-1])
            return "ipv6"
        if host.replace(".", "").isdigit():  # digits and dots are an IPv4 address, never a name
            ipaddress.IPv4Address(host)
            return "ipv4"
    except ValueError:
        return None
    return "name" if len(host) <= 253 and _HOST_NAME.fullmatch(host) else None
