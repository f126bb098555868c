"""Consistency tokens: read your own writes, per write (docs/hot-path.md "Read your own writes").

Every write returns a token naming the tenant's timeline, a level, and the places in the tenant's
one order of writes (acceptance positions, store/acceptance.py) of what it queued: a fast write's
operations. A synchronous write is visible when it returns, so it names none of its own (it
carries the session's, below). A read given the token
answers once those writes are visible (their events succeeded: a fast write's memory and its event
commit together) or failed — the workers take them ahead of the backlog while it waits
(hot_path/awaited.py) — and names the failed ones.

The token is ``<body>.<mac>`` in URL-safe base64; the body is ``1|tenant|timeline|level|spans``
(spans: ``a-b`` or ``a``, comma-separated; none for a synchronous write), the MAC an HMAC-SHA256 of it keyed with the tenant's
own secret (the page tokens' secret, in its file). So a token made up or altered is refused
(TOKEN_INVALID), one of another tenant too (TOKEN_FOREIGN, both INVALID_ARGUMENT), and one of an
earlier timeline — the tenant's content was replaced since (an import --replace, a restore) — is
answered at once (FAILED_PRECONDITION / TIMELINE_CHANGED), never left to wait for positions that
no longer name what they named.

A write given the session's newest token (request metadata) returns one covering that token's
still-open writes too, so a client that keeps one token per tenant reads all its own writes. A
token holds at most ``MAX_SPANS`` spans: past it the finished writes leave it, then the closest
spans are joined (a read may then wait for a few more writes than its own, never fewer).

The level is ``v`` (visible) or ``r`` (replicated): a write asked at REPLICATED (its call's
``mnemosyne-consistency-level`` metadata) answers an ``r`` token, and a read or Flush given it
answers once its writes are visible and then in object storage — a sync of the tenant's files
that began after they were all committed (replication/replicator.py ``replicated``: concurrent
waits share one sync, holding no thread). A token carried into a later write keeps the higher
level. Without replication (no ``--replica-url``) an ``r`` token is refused FAILED_PRECONDITION
REPLICATION_OFF, never answered as if it held.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from mnemosyne.engine import base64url
from mnemosyne.engine.hot_path import HotPath
from mnemosyne.engine.hot_path.awaited import Span
from mnemosyne.errors import FailedPrecondition, InvalidArgument
from mnemosyne.host.token_form import NOT_ISSUED, TOKEN_INVALID, well_formed
from mnemosyne.store.erasure_log import ErasureLog
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_cache import CacheKey
from mnemosyne.store.tenant_store import TenantStore

VERSION = "1"
VISIBLE = "v"
REPLICATED = "r"
# The words of the ``mnemosyne-consistency-level`` metadata, and the token's level of each.
LEVELS = {"visible": VISIBLE, "replicated": REPLICATED}
MAX_SPANS = 16
_MAC_BYTES = 16
_DOMAIN = b"consistency\x1f"  # the page tokens share the secret: a MAC of one is never one of the other
_KEYS: CacheKey[tuple[bytes, str]] = CacheKey("consistency_keys")


@dataclass(frozen=True)
class Token:
    tenant: str
    timeline: str
    level: str
    spans: tuple[Span, ...]


class WritesOpen(Exception):  # noqa: N818 - a signal to the transport, not an error: it waits and asks again
    """A read's token names writes not yet applied: the transport waits for them (holding no
    thread, hot_path/awaited.py) and runs the read again."""

    def __init__(self, tenant: str, spans: Sequence[Span], open_ids: Sequence[int], *, replicate: bool = False) -> None:
        super().__init__(f"{len(open_ids)} writes of tenant {tenant} are not applied (or replicated) yet")
        self.tenant = tenant
        self.spans = tuple(spans)
        self.open_ids = tuple(open_ids)
        # The token is at REPLICATED: once none is open, the caller waits for a sync of the tenant
        # (``Consistency.replicated``) and asks again with ``replicated=True``.
        self.replicate = replicate


def invalid() -> InvalidArgument:
    return InvalidArgument(NOT_ISSUED, reason=TOKEN_INVALID)


def timeline_changed(tenant: str) -> FailedPrecondition:
    return FailedPrecondition(
        f"the consistency token names writes of an earlier timeline of tenant {tenant}: its content was replaced "
        "since (an import --replace, a restore, or an erasure), so those writes are not in it; drop the token "
        "and read without it",
        reason="TIMELINE_CHANGED",
    )


def spans_of(positions: Sequence[int]) -> list[Span]:
    """Sorted positions as the fewest inclusive spans."""
    spans: list[Span] = []
    for position in sorted(set(positions)):
        if spans and position == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], position)
        else:
            spans.append((position, position))
    return spans


def merged(spans: Sequence[Span]) -> list[Span]:
    """Overlapping and adjacent spans joined, in order."""
    out: list[Span] = []
    for low, high in sorted(spans):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def capped(spans: Sequence[Span], limit: int = MAX_SPANS) -> list[Span]:
    """At most ``limit`` spans: the two closest joined until they fit (covering more, never less)."""
    out = merged(spans)
    while len(out) > limit:
        gap = min(range(len(out) - 1), key=lambda i: out[i + 1][0] - out[i][1])
        out[gap : gap + 2] = [(out[gap][0], out[gap + 1][1])]
    return out


def _mac(secret: bytes, body: str) -> bytes:
    return hmac.new(secret, _DOMAIN + body.encode("utf-8"), hashlib.sha256).digest()[:_MAC_BYTES]


def encode(secret: bytes, token: Token) -> str:
    spans = ",".join(f"{low}" if low == high else f"{low}-{high}" for low, high in token.spans)
    body = "|".join((VERSION, token.tenant, token.timeline, token.level, spans))
    return f"{base64url.encode(body.encode('utf-8'))}.{base64url.encode(_mac(secret, body))}"


def parse(text: str) -> tuple[Token, str, bytes]:
    """The token a text claims to be (not yet verified), its body and its MAC; TOKEN_INVALID for
    anything that is not one."""
    if not well_formed(text):  # the hosts' check too (host/token_form.py): one refusal on every surface
        raise invalid()
    encoded, _, mac = text.partition(".")
    try:
        body = base64url.decode(encoded).decode("utf-8")
        given = base64url.decode(mac)
        version, tenant, timeline, level, listed = body.split("|")
        spans = tuple(_span(part) for part in listed.split(",")) if listed else ()
    except ValueError:  # UnicodeDecodeError is one
        raise invalid() from None
    if version != VERSION or level not in (VISIBLE, REPLICATED):
        raise invalid()
    return Token(tenant, timeline, level, spans), body, given


def _span(part: str) -> Span:
    low, _, high = part.partition("-")
    span = (int(low), int(high or low))
    if not 0 < span[0] <= span[1] < 2**63:
        raise ValueError(part)
    return span


class Consistency:
    """Issues the tokens of a tenant's writes and tells where a read's token stands."""

    def __init__(
        self, *, pool: TenantPool, hot_path: HotPath, replicated: Callable[[str], Awaitable[float]] | None = None
    ) -> None:
        """``replicated``: the replication's wait for a tenant's commits so far to be in object
        storage (replication/replicator.py), None without replication."""
        self._pool = pool
        self._hot_path = hot_path
        self._replicated = replicated
        self._erasures = ErasureLog(pool.data_dir)

    async def replicated(self, tenant: str) -> None:
        """Wait, holding no thread, until every commit of ``tenant`` made before the call is in
        object storage (a token at REPLICATED, once its writes are visible)."""
        if self._replicated is None:
            raise _replication_off()
        await self._replicated(tenant)

    def check_level(self, level: str) -> None:
        """REPLICATION_OFF for ``level`` REPLICATED on a server that does not replicate: refused
        before the call writes or waits for anything."""
        if level == REPLICATED and self._replicated is None:
            raise _replication_off()

    def check_write(self, tenant: str, *, carried: str = "", level: str = VISIBLE) -> None:
        """Before a write: what ``issue`` would refuse after it (a ``carried`` token forged or of
        another tenant, REPLICATED without replication), refused first, so a refused write writes
        nothing. A tenant with no file yet has no key to verify a token with: its form and tenant
        are checked."""
        self.check_level(level)
        if not carried:
            return
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                _claimed(tenant, carried)
                return
            secret, timeline = _keys(store)
        self._current(tenant, carried, secret, timeline)

    def issue(self, tenant: str, event_ids: Sequence[int] = (), *, carried: str = "", level: str = VISIBLE) -> str:
        """The token of a write of ``tenant``: its queued operations (``event_ids``; none for a
        synchronous write, visible at once), with the still-open writes of the ``carried`` token
        (refused like a read's when forged or foreign; dropped when of an earlier timeline).
        Empty when the tenant has no file (a write that created nothing)."""
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return ""
            secret, timeline = _keys(store)
            spans = spans_of(event_ids)
            self.check_level(level)
            token = self._current(tenant, carried, secret, timeline) if carried else None
            if token is not None:
                spans = merged([*token.spans, *spans])
                level = max(level, token.level, key=(VISIBLE, REPLICATED).index)
            if len(spans) > MAX_SPANS:
                still_open = self._hot_path.awaited.states(tenant, spans)[0]
                spans = merged([*spans_of(still_open), *spans_of(event_ids)])
            return encode(secret, Token(tenant, timeline, level, tuple(capped(spans))))

    def check(self, tenant: str, text: str, *, replicated: bool = False) -> list[int]:
        """Before a read given a token: the failed event ids among its writes (the read answers
        without them) once none is open (and, at REPLICATED, once ``replicated``: the caller
        waited for ``Consistency.replicated`` after they were all visible); ``WritesOpen`` while
        not (the caller waits and asks again). TOKEN_INVALID, TOKEN_FOREIGN, TIMELINE_CHANGED,
        REPLICATION_OFF as the module says."""
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                _claimed(tenant, text)
                raise timeline_changed(tenant)  # a token of this tenant, whose content is gone
            secret, timeline = _keys(store)
            token = self._current(tenant, text, secret, timeline)
        if token is None:
            raise timeline_changed(tenant)
        replicate = token.level == REPLICATED and not replicated
        if replicate and self._replicated is None:
            raise _replication_off()
        open_ids, failed = self._hot_path.awaited.states(tenant, token.spans) if token.spans else ([], [])
        if open_ids or replicate:
            raise WritesOpen(tenant, token.spans, open_ids, replicate=replicate)
        return failed

    def _current(self, tenant: str, text: str, secret: bytes, timeline: str) -> Token | None:
        """The token ``text`` is, checked against the tenant's secret; None when it is one of an
        earlier timeline of the tenant: its content was replaced since, or its file erased (the
        file made again has a new secret, so only the erasure's receipt tells such a token from a
        forged one). TOKEN_INVALID for a forged one; TOKEN_FOREIGN as ``_claimed``."""
        token, body, given = _claimed(tenant, text)
        if hmac.compare_digest(given, _mac(secret, body)):
            return token if token.timeline == timeline else None
        if token.timeline != timeline and token.timeline in self._erasures.timelines(tenant):
            return None
        raise invalid()


def level_of(words: Sequence[str]) -> str:
    """The token level a write asks for in its ``mnemosyne-consistency-level`` metadata
    (``visible``, the default, or ``replicated``); CONSISTENCY_LEVEL_INVALID for another word."""
    level = VISIBLE
    for word in words:
        found = LEVELS.get(word.strip().lower())
        if found is None:
            raise InvalidArgument(
                f"mnemosyne-consistency-level must be one of {', '.join(LEVELS)}, not {word[:32]!r}",
                reason="CONSISTENCY_LEVEL_INVALID",
            )
        level = max(level, found, key=(VISIBLE, REPLICATED).index)
    return level


def _replication_off() -> FailedPrecondition:
    return FailedPrecondition(
        "this server does not replicate to object storage (no --replica-url): it cannot wait for REPLICATED; "
        "ask for visible, or replicate (docs/replication.md)",
        reason="REPLICATION_OFF",
    )


def _claimed(tenant: str, text: str) -> tuple[Token, str, bytes]:
    """The token ``text`` claims to be, its body and MAC; refused when it is not one or when it
    names another tenant."""
    token, body, given = parse(text)
    if token.tenant != tenant:
        raise InvalidArgument(
            "consistency_token was issued for another tenant; a token is bound to the tenant of the write "
            "that returned it",
            reason="TOKEN_FOREIGN",
        )
    return token, body, given


def _keys(store: TenantStore) -> tuple[bytes, str]:
    """The tenant's secret and timeline, read once per open file (an install that replaces the
    content opens a new one)."""
    keys = store.cache.get(_KEYS)
    if keys is None:
        with store.read() as txn:
            keys = store.cache[_KEYS] = (txn.page_token_secret(), txn.timeline())
    return keys
