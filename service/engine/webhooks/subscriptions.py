"""A tenant's webhook subscriptions: made, listed, given and relieved of secrets, resumed, deleted;
and each one's delivery log. The subscriptions live in the tenant's file (schema.py
``_V_WEBHOOKS``), whose triggers write a delivery for each change a subscription asks for in
the change's own transaction; the worker (worker.py) sends them.
"""

from __future__ import annotations

import base64
import os
import re
import time
from collections.abc import Callable, Sequence

from mnemosyne.engine import limits as check
from mnemosyne.engine import page_tokens
from mnemosyne.engine.limits import Limits
from mnemosyne.engine.types import (
    WEBHOOK_KINDS,
    NewWebhookSecrets,
    Webhook,
    WebhookDelivery,
    WebhookDeliveryPage,
    WebhookSecret,
)
from mnemosyne.engine.webhooks.addresses import ALLOW_FLAG, RefusedAddress, loopback_name, resolve
from mnemosyne.engine.webhooks.sender import SECRET_PREFIX, secret_key
from mnemosyne.engine.webhooks.urls import UnusableURL, parse
from mnemosyne.errors import FailedPrecondition, InvalidArgument, NotFound
from mnemosyne.store.pool import TenantPool
from mnemosyne.store.tenant_store import ReadTxn
from mnemosyne.store.webhook_rows import OutboxRow

MAX_SUBSCRIPTIONS = 16  # per tenant: each change writes a delivery per subscription that wants it
MAX_SECRETS = 4  # active at once: enough for a rotation's overlap
SECRET_BYTES = 32
_SECRET = re.compile(r"whsec_[A-Za-z0-9+/]{32,88}={0,2}")
_LOG_QUERY = "webhook-deliveries"


def _refuse(message: str, reason: str) -> InvalidArgument:
    return InvalidArgument(message, reason=reason)


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(os.urandom(SECRET_BYTES)).decode()


def validate_url(url: str, *, allow_private: bool) -> str:
    """A URL a delivery can reach (urls.py, read as the sender reads it), its host judged now as
    every delivery judges it again (addresses.py): a name that does not resolve yet is taken."""
    try:
        target = parse(url)
    except UnusableURL as exc:
        raise _refuse(str(exc), "WEBHOOK_URL_INVALID") from None
    try:
        if loopback_name(target.host) and not allow_private:
            raise RefusedAddress(
                f"{target.host} is a loopback name (RFC 6761): refused (an operator may allow it: {ALLOW_FLAG})"
            )
        resolve(target.host, target.port, allow_private=allow_private)
    except RefusedAddress as exc:
        raise FailedPrecondition(
            f"url's host: {exc}; this server does not deliver there", reason="WEBHOOK_ADDRESS_REFUSED"
        ) from None
    except (OSError, UnicodeError):
        pass  # not resolvable now: it may be by the first delivery, which judges it then
    return url


def validate_kinds(kinds: Sequence[str]) -> list[str]:
    unknown = [k for k in kinds if k not in WEBHOOK_KINDS]
    if not kinds or unknown:
        # Named both ways: a gRPC or HTTP/JSON request gives the enum's names (or numbers), the
        # Python client and MemoryBrain the payloads' type names.
        named = ", ".join(f"{k} ({_enum_name(k)})" for k in WEBHOOK_KINDS)
        raise _refuse(
            f"kinds must name at least one of {named}"
            + (f"; unknown: {', '.join(map(repr, unknown))}" if unknown else ""),
            "WEBHOOK_KINDS_INVALID",
        )
    return sorted(set(kinds))


def _enum_name(kind: str) -> str:
    """The WebhookKind value of a payload type name (transport/convert_webhooks.py maps them)."""
    return "WEBHOOK_KIND_" + kind.replace(".", "_").upper()


def validate_secret(secret: str) -> str:
    if not _SECRET.fullmatch(secret) or not 24 <= len(_key_or_nothing(secret)) <= 64:
        raise _refuse(
            "a secret is whsec_ followed by the base64 of 24 to 64 random bytes (or leave it out: one is made)",
            "WEBHOOK_SECRET_INVALID",
        )
    return secret


def _key_or_nothing(secret: str) -> bytes:
    """The secret's key; none when its base64 cannot be decoded (a length of 4n + 1 characters)."""
    try:
        return secret_key(secret)
    except ValueError:  # binascii.Error
        return b""


def validate_id(value: int, field: str) -> int:
    if value <= 0:
        raise _refuse(f"{field} is {value}; give the id a subscription was made with", "WEBHOOK_ID_INVALID")
    return value


def _hint(secret: str) -> str:
    return secret[: len(SECRET_PREFIX) + 4] + "…"


def to_delivery(row: OutboxRow) -> WebhookDelivery:
    return WebhookDelivery(
        delivery_id=row.delivery_id,
        kind=row.kind,
        at=row.at,
        status=row.status,
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at if row.status == "pending" else None,
        last_attempt_at=row.last_attempt_at,
        last_status_code=row.last_status_code or 0,
        last_error=row.last_error or "",
        delivered_at=row.delivered_at,
        memory_id=row.memory_id or 0,
        event_id=row.event_id or 0,
    )


class Subscriptions:
    def __init__(
        self, *, pool: TenantPool, limits: Limits, allow_private: bool, subscribed: Callable[[str], None]
    ) -> None:
        """``subscribed(tenant)`` runs in a subscription's transaction, before its commit (the
        member's index of tenants with webhooks, worker.py)."""
        self._pool = pool
        self._limits = limits
        self._allow_private = allow_private
        self._subscribed = subscribed

    def _webhooks(self, txn: ReadTxn) -> list[Webhook]:
        kinds, secrets, pending = txn.webhook_kinds(), txn.webhook_secrets(), txn.webhook_pending_counts()
        return [
            Webhook(
                id=s.id,
                url=s.url,
                kinds=tuple(kinds.get(s.id, ())),
                include_text=bool(s.include_text),
                secrets=tuple(WebhookSecret(k.id, _hint(k.secret), k.created_at) for k in secrets.get(s.id, ())),
                created_at=s.created_at,
                pending=pending.get(s.id, 0),
                failing_since=s.failing_since,
                paused_at=s.paused_at,
                pause_reason=s.pause_reason or "",
            )
            for s in txn.webhook_subscriptions()
        ]

    def _one(self, txn: ReadTxn, webhook_id: int) -> Webhook:
        for webhook in self._webhooks(txn):
            if webhook.id == webhook_id:
                return webhook
        raise NotFound(f"webhook {webhook_id} does not exist in this tenant", reason="WEBHOOK_NOT_FOUND")

    def create(
        self, tenant: str, url: str, kinds: Sequence[str], *, include_text: bool, secrets: Sequence[str]
    ) -> NewWebhookSecrets:
        url = validate_url(url, allow_private=self._allow_private)
        wanted = validate_kinds(kinds)
        given = [validate_secret(s) for s in secrets]
        if len(given) > MAX_SECRETS:
            raise _refuse(f"give at most {MAX_SECRETS} secrets", "WEBHOOK_SECRET_INVALID")
        made = given or [new_secret()]
        with self._pool.tenant(tenant, create=True) as store:
            assert store is not None
            with store.write() as txn:
                # Before the commit, under the write lock (worker.py removes a tenant under it): the
                # worker never misses a tenant with webhooks.
                self._subscribed(tenant)
                if len(txn.webhook_subscriptions()) >= MAX_SUBSCRIPTIONS:
                    raise FailedPrecondition(
                        f"the tenant has {MAX_SUBSCRIPTIONS} webhooks, the most it may; delete one first",
                        reason="WEBHOOK_LIMIT",
                    )
                webhook_id = txn.webhook_create(url, include_text, wanted, made, time.time())
                webhook = self._one(txn, webhook_id)
        return NewWebhookSecrets(webhook, tuple(made if not given else ()))

    def list(self, tenant: str) -> list[Webhook]:
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return []
            with store.read() as txn:
                return self._webhooks(txn)

    def delete(self, tenant: str, webhook_id: int) -> bool:
        """False when there was no such subscription (deleted before)."""
        validate_id(webhook_id, "webhook_id")
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                return False
            with store.write() as txn:
                return txn.webhook_delete(webhook_id)

    def rotate(self, tenant: str, webhook_id: int, *, secret: str, retire: Sequence[int]) -> NewWebhookSecrets:
        """Add a secret (``secret``, or a new one) and retire those of ``retire``: at least one
        stays active. The new one signs from the next attempt on, beside those kept."""
        validate_id(webhook_id, "webhook_id")
        added = validate_secret(secret) if secret else new_secret()
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                raise NotFound(f"webhook {webhook_id} does not exist in this tenant", reason="WEBHOOK_NOT_FOUND")
            with store.write() as txn:
                current = self._one(txn, webhook_id)
                ids = {s.id for s in current.secrets}
                unknown = sorted(set(retire) - ids)
                if unknown:
                    raise _refuse(f"webhook {webhook_id} has no secret {unknown[0]}", "WEBHOOK_SECRET_INVALID")
                if len(ids - set(retire)) + 1 > MAX_SECRETS:
                    raise FailedPrecondition(
                        f"a webhook has at most {MAX_SECRETS} secrets; retire one as you add one",
                        reason="WEBHOOK_LIMIT",
                    )
                txn.webhook_retire_secrets(webhook_id, retire)
                txn.webhook_add_secrets(webhook_id, [added], time.time())
                webhook = self._one(txn, webhook_id)
        return NewWebhookSecrets(webhook, () if secret else (added,))

    def resume(self, tenant: str, webhook_id: int, now: float) -> Webhook:
        """A paused (or failing) subscription delivers again, its pending deliveries due now."""
        validate_id(webhook_id, "webhook_id")
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                raise NotFound(f"webhook {webhook_id} does not exist in this tenant", reason="WEBHOOK_NOT_FOUND")
            with store.write() as txn:
                self._one(txn, webhook_id)
                txn.webhook_resume(webhook_id, now)
                return self._one(txn, webhook_id)

    def deliveries(self, tenant: str, webhook_id: int, *, page_size: int, page_token: str) -> WebhookDeliveryPage:
        """A subscription's deliveries, newest first, a page at a time."""
        validate_id(webhook_id, "webhook_id")
        size = check.validate_page_size(page_size, self._limits)
        with self._pool.tenant(tenant, create=False) as store:
            if store is None:
                raise NotFound(f"webhook {webhook_id} does not exist in this tenant", reason="WEBHOOK_NOT_FOUND")
            with store.read() as txn:
                query = f"{_LOG_QUERY}:{webhook_id}"
                before = page_tokens.decode_int(txn.page_token_secret(), tenant, query, page_token)
                self._one(txn, webhook_id)
                rows = txn.webhook_deliveries(webhook_id, before_id=before, limit=size + 1)
                secret = txn.page_token_secret()
        more = len(rows) > size
        rows = rows[:size]
        token = page_tokens.encode(secret, tenant, query, str(rows[-1].id)) if more else ""
        return WebhookDeliveryPage(tuple(to_delivery(r) for r in rows), token)
