"""Bearer-token authentication and per-tenant authorisation.

The tokens file (or the ``MNEMOSYNE_TOKENS`` environment variable, for a Kubernetes Secret)
holds SHA-256 hashes of tokens, never tokens::

    {"tokens": [
      {"name": "billing-svc", "sha256": "<hex>", "tenants": ["acme", "beta"]},
      {"name": "ops", "sha256": "<hex>", "tenants": ["*"]}
    ]}

The document is checked against this schema when the server starts, and anything else stops it
with the file, the entry and the rule broken — a mistake in it must never widen what a token
reaches:

* it is JSON by the clients' rule (``host/json_text.py``): no object names a key twice (which of
  the two was meant is the writer's to say), no nesting past what the reader goes;
* the top level is an object with exactly one key, ``tokens``, a non-empty list;
* each entry is an object with exactly the keys ``name`` (1-128 printable ASCII characters,
  unique in the file), ``sha256`` (64 hex digits, unique) and ``tenants``;
* ``tenants`` is a non-empty list of valid tenant ids, or exactly ``["*"]`` — the admin entry,
  which grants every tenant and the cross-tenant admin calls. A string is not a list (``"acme"``
  is refused rather than read as the characters a, c, m, e), ``*`` never appears beside another
  entry, and there are no patterns.

``mnemosyne hash-token`` prints the hash of a token read from standard input.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemosyne.engine.limits import TENANT_ID_PATTERN
from mnemosyne.errors import InvalidArgument, PermissionDenied, Unauthenticated
from mnemosyne.host import json_text
from mnemosyne.runtime.files import read_named_file

ADMIN = "*"
# The longest token ``mnemosyne hash-token`` takes. The server sets no limit of its own; gRPC
# refuses a request whose metadata, every header together, passes 8 KiB (at random between 8 and
# 16 KiB): half of it leaves room for the others.
MAX_TOKEN_CHARS = 4096
_ENTRY_KEYS = frozenset({"name", "sha256", "tenants"})
_NAME = re.compile(r"[\x21-\x7e][\x20-\x7e]{0,127}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def sent_authorization(metadata: Iterable[tuple[str, str]]) -> str | None:
    """A call's one ``authorization`` value (None without one). Sent twice it is refused, whatever
    the values (the first was taken, silently): which credential the caller meant is its to say,
    and a proxy before the server may have checked another than the server would."""
    values = [value for key, value in metadata if key == "authorization"]
    if len(values) > 1:
        raise Unauthenticated(
            f"authorization is sent {len(values)} times: send it once, as 'Bearer <token>'", reason="TOKEN_MALFORMED"
        )
    return values[0] if values else None


@dataclass(frozen=True)
class Principal:
    name: str
    tenants: frozenset[str]

    @property
    def is_admin(self) -> bool:
        return self.tenants == frozenset({ADMIN})

    def check_tenant(self, tenant: str) -> None:
        # Decided on the literal id before anything about the tenant is looked up, so a caller
        # learns nothing of tenants it may not touch (not even whether they exist).
        if not self.is_admin and tenant not in self.tenants:
            raise PermissionDenied(
                f"token {self.name!r} may not access tenant {tenant[:80]!r}", reason="TENANT_FORBIDDEN"
            )

    def check_admin(self) -> None:
        if not self.is_admin:
            raise PermissionDenied(
                f'token {self.name!r} is not an admin token (tenants: ["*"])', reason="ADMIN_REQUIRED"
            )


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class TokensFileError(InvalidArgument):
    """The tokens document breaks its schema; the server does not start."""

    def __init__(self, source: str, where: str, rule: str) -> None:
        super().__init__(f"{source}: {where}: {rule}", reason="TOKENS_FILE_INVALID")


def _principal(source: str, index: int, entry: Any) -> tuple[str, Principal]:
    where = f"tokens[{index}]"
    if not isinstance(entry, dict):
        raise TokensFileError(source, where, f"each entry must be an object, not {type(entry).__name__}")
    name = entry.get("name")
    if isinstance(name, str) and _NAME.fullmatch(name):
        where = f"tokens[{index}] ({name!r})"
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise TokensFileError(
            source, where, f"unknown key(s) {unknown}; an entry has exactly the keys {sorted(_ENTRY_KEYS)}"
        )
    missing = sorted(_ENTRY_KEYS - set(entry))
    if missing:
        raise TokensFileError(source, where, f"missing key(s) {missing}")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise TokensFileError(source, where, "name must be 1-128 printable ASCII characters")
    digest = entry["sha256"]
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest.lower()):
        raise TokensFileError(
            source, where, "sha256 must be the 64 hex digits of the token's SHA-256 (mnemosyne hash-token)"
        )
    tenants = entry["tenants"]
    if not isinstance(tenants, list):
        raise TokensFileError(
            source,
            where,
            f'tenants must be a list of tenant ids (e.g. ["acme"]) or ["*"] for an admin, not a {type(tenants).__name__}',
        )
    if not tenants:
        raise TokensFileError(source, where, "tenants is empty: a token must reach at least one tenant")
    if ADMIN in tenants and tenants != [ADMIN]:
        raise TokensFileError(source, where, 'the admin entry "*" must be the only element of tenants: ["*"]')
    for tenant in tenants:
        if tenant != ADMIN and (not isinstance(tenant, str) or not TENANT_ID_PATTERN.fullmatch(tenant)):
            raise TokensFileError(
                source,
                where,
                f"{str(tenant)[:80]!r} in tenants is not a tenant id (1-63 characters of a-z, 0-9, '_' and '-', "
                'starting with a letter or digit); patterns are not supported, and "*" alone means admin',
            )
    if len(set(tenants)) != len(tenants):
        raise TokensFileError(source, where, "tenants lists a tenant twice")
    return digest.lower(), Principal(name, frozenset(tenants))


def parse_tokens(text: str, *, source: str) -> dict[str, Principal]:
    """The principals of a tokens document by token hash; TokensFileError for any schema break."""
    try:
        # The clients' JSON rule (host/json_text.py): an entry naming "tenants" twice was read as
        # its last list ("*" after ["acme"]: admin) without a word, and a document nested past
        # Python's reader stopped the start with a RecursionError's traceback.
        document = json_text.parse(text)
    except ValueError as exc:
        raise TokensFileError(source, "the document", f"is not JSON ({exc})") from None
    if not isinstance(document, dict) or set(document) != {"tokens"}:
        raise TokensFileError(source, "the document", 'must be an object with exactly one key, "tokens"')
    entries = document["tokens"]
    if not isinstance(entries, list) or not entries:
        raise TokensFileError(source, "tokens", "must be a non-empty list of token entries")
    principals: dict[str, Principal] = {}
    names: set[str] = set()
    for index, entry in enumerate(entries):
        digest, principal = _principal(source, index, entry)
        if digest in principals:
            raise TokensFileError(source, f"tokens[{index}] ({principal.name!r})", "the same sha256 appears twice")
        if principal.name in names:
            raise TokensFileError(source, f"tokens[{index}] ({principal.name!r})", "the same name appears twice")
        principals[digest] = principal
        names.add(principal.name)
    return principals


class TokenAuthenticator:
    def __init__(self, principals_by_hash: dict[str, Principal]) -> None:
        if not principals_by_hash:
            raise InvalidArgument("the tokens file defines no tokens", reason="TOKENS_FILE_INVALID")
        self._by_hash = principals_by_hash

    @classmethod
    def from_json(cls, text: str, *, source: str) -> TokenAuthenticator:
        return cls(parse_tokens(text, source=source))

    @classmethod
    def from_file(cls, path: Path) -> TokenAuthenticator:
        try:
            text = read_named_file(path).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TokensFileError(str(path), "the file", f"cannot be read ({exc})") from None
        return cls.from_json(text, source=str(path))

    @property
    def token_hashes(self) -> list[str]:
        """The hashes of the tokens (the members of a deployment derive their shared key from them)."""
        return sorted(self._by_hash)

    @property
    def principals(self) -> list[Principal]:
        return list(self._by_hash.values())

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
