"""Bearer-token authentication and per-tenant authorisation.

The tokens file (or the ``MNEMOSYNE_TOKENS`` environment variable, for a Kubernetes Secret)
holds SHA-256 hashes of tokens, never tokens::

    {"tokens": [
      {"name": "billing-svc", "sha256": "<hex>", "tenants": ["acme", "beta"]},
      {"name": "ops", "sha256": "<hex>", "tenants": ["*"]}
    ]}

``*`` grants every tenant and the cross-tenant admin calls. ``mnemosyne hash-token`` prints the
hash of a token read from standard input.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from mnemosyne.errors import InvalidArgument, PermissionDenied, Unauthenticated

ADMIN = "*"


@dataclass(frozen=True)
class Principal:
    name: str
    tenants: frozenset[str]

    @property
    def is_admin(self) -> bool:
        return ADMIN in self.tenants

    def check_tenant(self, tenant: str) -> None:
        # Decided on the literal id before anything about the tenant is looked up, so a caller
        # learns nothing of tenants it may not touch (not even whether they exist).
        if not self.is_admin and tenant not in self.tenants:
            raise PermissionDenied(
                f"token {self.name!r} may not access tenant {tenant[:80]!r}", reason="TENANT_FORBIDDEN"
            )

    def check_admin(self) -> None:
        if not self.is_admin:
            raise PermissionDenied(f"token {self.name!r} is not an admin token (tenants: [\"*\"])", reason="ADMIN_REQUIRED")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class TokenAuthenticator:
    def __init__(self, principals_by_hash: dict[str, Principal]) -> None:
        if not principals_by_hash:
            raise InvalidArgument("the tokens file defines no tokens", reason="CONFIG_INVALID")
        self._by_hash = principals_by_hash

    @classmethod
    def from_json(cls, text: str, *, source: str) -> "TokenAuthenticator":
        try:
            document = json.loads(text)
            principals = {}
            for entry in document["tokens"]:
                digest = str(entry["sha256"]).lower()
                if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                    raise ValueError(f"token {entry.get('name')!r}: sha256 must be 64 hex digits")
                tenants = frozenset(str(t) for t in entry["tenants"])
                principals[digest] = Principal(str(entry.get("name", digest[:8])), tenants)
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidArgument(
                f"{source} is not a valid tokens document ({exc}); expected "
                '{"tokens": [{"name": ..., "sha256": ..., "tenants": [...]}]}',
                reason="CONFIG_INVALID",
            ) from None
        return cls(principals)

    @classmethod
    def from_file(cls, path: Path) -> "TokenAuthenticator":
        return cls.from_json(path.read_text(encoding="utf-8"), source=str(path))

    def authenticate(self, authorization: str | None) -> Principal:
        if not authorization:
            raise Unauthenticated(
                "missing credentials: send metadata 'authorization: Bearer <token>'", reason="TOKEN_MISSING"
            )
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("authorization must be 'Bearer <token>'", reason="TOKEN_MALFORMED")
        principal = self._by_hash.get(hash_token(token.strip()))
        if principal is None:
            raise Unauthenticated("the token is not known to this server", reason="TOKEN_UNKNOWN")
        return principal
