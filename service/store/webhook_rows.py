"""SQL of a tenant's webhooks: its subscriptions, their secrets and kinds, and the outbox.

The outbox is written by the file's own triggers (schema.py ``_V_WEBHOOKS``) in the transaction
of each change, never from here; this module reads it for the delivery worker and the delivery
log, and records what each attempt did. A row is ``pending`` until an attempt is answered with a
2xx (``delivered``, its ``text`` cleared then); it keeps its ``delivery_id`` through every
attempt, so a receiver can tell a retry from a new change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mnemosyne.store.bookkeeping import BookkeepingReads, BookkeepingWrites


@dataclass(frozen=True)
class SubscriptionRow:
    id: int
    url: str
    include_text: int
    created_at: float
    failing_since: float | None
    paused_at: float | None
    pause_reason: str | None


@dataclass(frozen=True)
class SecretRow:
    id: int
    subscription_id: int
    secret: str
    created_at: float


@dataclass(frozen=True)
class OutboxRow:
    id: int
    delivery_id: str
    subscription_id: int
    kind: str
    at: float
    ledger_seq: int | None
    event_id: int | None
    memory_id: int | None
    scope: str | None
    detail: str
    text: str | None
    status: str
    attempts: int
    next_attempt_at: float
    last_attempt_at: float | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: float | None


class WebhookReads(BookkeepingReads):
    """The subscriptions and the outbox, read in one transaction."""

    def webhook_subscriptions(self) -> list[SubscriptionRow]:
        return self._records(SubscriptionRow, "FROM webhook_subscriptions ORDER BY id")

    def webhook_subscription(self, subscription_id: int) -> SubscriptionRow | None:
        rows = self._records(SubscriptionRow, "FROM webhook_subscriptions WHERE id = ?", (subscription_id,))
        return rows[0] if rows else None

    def webhook_kinds(self) -> dict[int, list[str]]:
        """Each subscription's kinds, sorted."""
        kinds: dict[int, list[str]] = {}
        for kind, subscription_id in self.connection.execute(
            "SELECT kind, subscription_id FROM webhook_kinds ORDER BY kind"
        ):
            kinds.setdefault(subscription_id, []).append(kind)
        return kinds

    def webhook_secrets(self) -> dict[int, list[SecretRow]]:
        """Each subscription's active secrets, oldest first."""
        secrets: dict[int, list[SecretRow]] = {}
        for row in self._records(SecretRow, "FROM webhook_secrets ORDER BY id"):
            secrets.setdefault(row.subscription_id, []).append(row)
        return secrets

    def webhook_pending_counts(self) -> dict[int, int]:
        return dict(
            self.connection.execute(
                "SELECT subscription_id, count(*) FROM webhook_outbox WHERE status = 'pending' GROUP BY subscription_id"
            )
        )

    def webhook_has_subscriptions(self) -> bool:
        return self._one("SELECT 1 FROM webhook_subscriptions LIMIT 1") is not None

    def webhook_due(self, now: float, limit: int, skip: Sequence[int] = ()) -> list[OutboxRow]:
        """Pending deliveries due by ``now``, the earliest first, of subscriptions not paused and
        not in ``skip``."""
        marks = ",".join("?" * len(skip))
        return self._records(
            OutboxRow,
            "FROM webhook_outbox WHERE status = 'pending' AND next_attempt_at <= ? "
            f"AND subscription_id NOT IN ({marks}) AND subscription_id IN "
            "(SELECT id FROM webhook_subscriptions WHERE paused_at IS NULL) ORDER BY next_attempt_at, id LIMIT ?",
            (now, *skip, limit),
        )

    def webhook_next_due(self) -> float | None:
        """When the earliest pending delivery of a subscription not paused is due (None: none is)."""
        value = self._one(
            "SELECT min(next_attempt_at) FROM webhook_outbox WHERE status = 'pending' AND subscription_id IN "
            "(SELECT id FROM webhook_subscriptions WHERE paused_at IS NULL)"
        )
        return None if value is None else float(value)

    def webhook_deliveries(self, subscription_id: int, *, before_id: int, limit: int) -> list[OutboxRow]:
        """A subscription's deliveries, newest first, with ids below ``before_id`` (0: from the newest)."""
        return self._records(
            OutboxRow,
            "FROM webhook_outbox WHERE subscription_id = ? AND id < ? ORDER BY id DESC LIMIT ?",
            (subscription_id, before_id or 2**63 - 1, limit),
        )


class WebhookWrites(WebhookReads, BookkeepingWrites):
    """Subscriptions changed and attempts recorded; valid only inside ``TenantStore.write()``."""

    def webhook_create(
        self, url: str, include_text: bool, kinds: Sequence[str], secrets: Sequence[str], now: float
    ) -> int:
        self.connection.execute(
            "INSERT INTO webhook_subscriptions(url, include_text, created_at) VALUES(?, ?, ?)",
            (url, int(include_text), now),
        )
        subscription_id = int(self.connection.last_insert_rowid())
        self.connection.executemany(
            "INSERT INTO webhook_kinds(kind, subscription_id) VALUES(?, ?)", [(k, subscription_id) for k in kinds]
        )
        self.webhook_add_secrets(subscription_id, secrets, now)
        return subscription_id

    def webhook_add_secrets(self, subscription_id: int, secrets: Sequence[str], now: float) -> None:
        self.connection.executemany(
            "INSERT INTO webhook_secrets(subscription_id, secret, created_at) VALUES(?, ?, ?)",
            [(subscription_id, secret, now) for secret in secrets],
        )

    def webhook_retire_secrets(self, subscription_id: int, secret_ids: Sequence[int]) -> int:
        self.connection.executemany(
            "DELETE FROM webhook_secrets WHERE subscription_id = ? AND id = ?",
            [(subscription_id, secret_id) for secret_id in secret_ids],
        )
        return self.connection.changes()

    def webhook_delete(self, subscription_id: int) -> bool:
        """The subscription, its secrets, kinds and every delivery of it (pending ones are never sent)."""
        c = self.connection
        for table, column in (
            ("webhook_kinds", "subscription_id"),
            ("webhook_secrets", "subscription_id"),
            ("webhook_outbox", "subscription_id"),
        ):
            c.execute(f"DELETE FROM {table} WHERE {column} = ?", (subscription_id,))
        c.execute("DELETE FROM webhook_subscriptions WHERE id = ?", (subscription_id,))
        return c.changes() > 0

    def webhook_delivered(self, row_id: int, status_code: int, now: float) -> None:
        """An attempt answered 2xx: delivered, its text cleared; the subscription no longer failing."""
        self.connection.execute(
            "UPDATE webhook_outbox SET status = 'delivered', attempts = attempts + 1, last_attempt_at = ?, "
            "last_status_code = ?, last_error = NULL, delivered_at = ?, text = NULL WHERE id = ? AND status = 'pending'",
            (now, status_code, now, row_id),
        )
        self.connection.execute(
            "UPDATE webhook_subscriptions SET failing_since = NULL WHERE id = "
            "(SELECT subscription_id FROM webhook_outbox WHERE id = ?)",
            (row_id,),
        )

    def webhook_failed(self, row_id: int, status_code: int | None, error: str, now: float, retry_at: float) -> None:
        """An attempt that failed: tried again at ``retry_at``; its subscription failing since now
        unless it was already."""
        self.connection.execute(
            "UPDATE webhook_outbox SET attempts = attempts + 1, last_attempt_at = ?, last_status_code = ?, "
            "last_error = ?, next_attempt_at = ? WHERE id = ? AND status = 'pending'",
            (now, status_code, error, retry_at, row_id),
        )
        self.connection.execute(
            "UPDATE webhook_subscriptions SET failing_since = coalesce(failing_since, ?) WHERE id = "
            "(SELECT subscription_id FROM webhook_outbox WHERE id = ?)",
            (now, row_id),
        )

    def webhook_pause(self, subscription_id: int, reason: str, now: float) -> None:
        self.connection.execute(
            "UPDATE webhook_subscriptions SET paused_at = ?, pause_reason = ? WHERE id = ? AND paused_at IS NULL",
            (now, reason, subscription_id),
        )

    def webhook_resume(self, subscription_id: int, now: float) -> None:
        """Deliver again: not paused, not failing, and its pending deliveries due now."""
        self.connection.execute(
            "UPDATE webhook_subscriptions SET paused_at = NULL, pause_reason = NULL, failing_since = NULL WHERE id = ?",
            (subscription_id,),
        )
        self.connection.execute(
            "UPDATE webhook_outbox SET next_attempt_at = ? WHERE subscription_id = ? AND status = 'pending'",
            (now, subscription_id),
        )

    def webhook_prune_delivered(self, delivered_before: float, limit: int) -> int:
        """Delivered rows older than the log's retention (a bounded number per call)."""
        self.connection.execute(
            "DELETE FROM webhook_outbox WHERE id IN (SELECT id FROM webhook_outbox WHERE status = 'delivered' "
            "AND delivered_at < ? LIMIT ?)",
            (delivered_before, limit),
        )
        return self.connection.changes()
