"""Which addresses a webhook may be delivered to (docs/webhooks.md "Where a webhook may go").

A subscription's URL is chosen by a tenant, and the server sends to it from inside its own
network: it must not become a way to reach this host, the network around it, or the cloud's
metadata service. So every address a host name resolves to is checked when the delivery
connects (not only when the subscription is made, as it is too: a name may resolve elsewhere by
then, DNS rebinding), and the connection goes to the address that was checked. Refused unless
the operator allows them (``--webhook-allow-private-addresses``): loopback, private (RFC 1918, unique local),
link-local, shared (100.64.0.0/10), unspecified (0.0.0.0, ::), multicast and reserved addresses,
and IPv6 addresses that carry an IPv4 one (IPv4-mapped, NAT64) are judged by the IPv4 address they
carry. The cloud metadata addresses are named as such in the refusal; the flag allows them too: an
operator who opens the member's network to tenants opens all of it (docs/webhooks.md).
"""

from __future__ import annotations

import ipaddress
import socket

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
ALLOW_FLAG = "--webhook-allow-private-addresses"  # named in a refusal the operator may lift

# The instance metadata services of the clouds (AWS, GCP, Azure, OpenStack: 169.254.169.254; AWS
# over IPv6; Alibaba): named apart in a refusal, so an operator sees what a tenant reached for.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "169.254.170.2")
)
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def carried(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one carries (IPv4-mapped ``::ffff:a.b.c.d``, NAT64's well-known
    prefix), else the address itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def refusal(address: IPAddress, *, allow_private: bool) -> str:
    """Why a delivery may not connect to ``address`` ("" when it may)."""
    if allow_private:
        return ""
    judged = carried(address)
    if judged in METADATA_ADDRESSES or address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    for what, test in (
        ("unspecified", judged.is_unspecified),
        ("loopback", judged.is_loopback),
        ("link-local", judged.is_link_local),
        ("multicast", judged.is_multicast),
        ("shared (100.64.0.0/10)", isinstance(judged, ipaddress.IPv4Address) and judged in _SHARED),
        ("private", judged.is_private),
        ("reserved", judged.is_reserved or not judged.is_global),
    ):
        if test:
            return f"{'an' if what[0] in 'aeiou' else 'a'} {what} address"
    return ""


def literal(host: str) -> IPAddress | None:
    """The address a URL's host is, when it is one (``[::1]`` without its brackets), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def loopback_name(host: str) -> bool:
    """``localhost`` and the names under it: loopback whatever a resolver says (RFC 6761 6.3),
    though one may not resolve them at all."""
    host = host.rstrip(".")
    return host == "localhost" or host.endswith(".localhost")


class RefusedAddress(Exception):
    """A host with an address a delivery may not connect to; its text says which and why."""


def resolve(host: str, port: int, *, allow_private: bool) -> list[tuple[int, IPAddress]]:
    """(address family, address) of every address ``host`` resolves to, each judged; raises
    ``RefusedAddress`` naming the first refused one (``OSError`` when the name does not resolve)."""
    address = literal(host)
    if address is not None:
        found = [address]
    else:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        found = []
        for *_, sockaddr in infos:
            ip = literal(str(sockaddr[0]))
            if ip is not None and ip not in found:
                found.append(ip)
    for ip in found:
        why = refusal(ip, allow_private=allow_private)
        if why:
            named = f"{host} is" if address is not None else f"{host} resolves to {ip},"
            allowed = "" if "metadata" in why else f" (an operator may allow it: {ALLOW_FLAG})"
            raise RefusedAddress(f"{named} {why}: refused{allowed}")
    return [(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, ip) for ip in found]
