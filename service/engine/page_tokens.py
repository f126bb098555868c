"""Page tokens: opaque, authenticated cursors.

A token is ``<position>.<mac>`` in URL-safe base64, where the MAC is an HMAC-SHA256 of the
tenant, the list it belongs to (its kind and the query that defines it: scope, filters, status...)
and the position, keyed by a secret kept in the tenant's own file (or, for lists across tenants,
the data directory's). So a token survives a restart, and one a client made up, altered, took from
another tenant or from another query is refused with ``PAGE_TOKEN_INVALID`` before its position is
ever used — a position is only ever one this server wrote.
"""

from __future__ import annotations

import hashlib
import hmac

from mnemosyne.engine import base64url
from mnemosyne.errors import InvalidArgument

_MAC_BYTES = 16


def _mac(secret: bytes, scope: str, query: str, position: str) -> bytes:
    message = "\x1f".join((scope, query, position)).encode("utf-8")
    return hmac.new(secret, message, hashlib.sha256).digest()[:_MAC_BYTES]


def encode(secret: bytes, scope: str, query: str, position: str) -> str:
    """The token for ``position`` of the list ``query`` in ``scope`` (a tenant id, or "" for
    lists across tenants)."""
    return f"{base64url.encode(position.encode('utf-8'))}.{base64url.encode(_mac(secret, scope, query, position))}"


def invalid() -> InvalidArgument:
    return InvalidArgument(
        "page_token is not one this server issued for this tenant and this query; pass next_page_token "
        "from the previous page unchanged, with the same other arguments (or no token for the first page)",
        reason="PAGE_TOKEN_INVALID",
    )


def decode(secret: bytes | None, scope: str, query: str, token: str) -> str | None:
    """The position a token names, None for no token; PAGE_TOKEN_INVALID for anything this
    server did not issue for this scope and query (``secret`` None: nothing was ever issued)."""
    if not token:
        return None
    if secret is None or len(token) > 512:
        raise invalid()
    encoded, _, mac = token.partition(".")
    try:
        position = base64url.decode(encoded).decode("utf-8")
        given = base64url.decode(mac)
    except (ValueError, UnicodeDecodeError):
        raise invalid() from None
    if not hmac.compare_digest(given, _mac(secret, scope, query, position)):
        raise invalid()
    return position


def decode_int(secret: bytes | None, scope: str, query: str, token: str) -> int:
    """A token whose position is a non-negative integer (an id); 0 for no token."""
    position = decode(secret, scope, query, token)
    if position is None:
        return 0
    if not position.isdigit() or int(position) >= 2**63:  # pragma: no cover - only we write positions
        raise invalid()
    return int(position)
