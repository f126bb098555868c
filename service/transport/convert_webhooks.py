"""Conversion of the webhook service's messages (transport/convert.py's part for webhooks/, apart
only for the size of one module): the kinds both ways, and every response built here."""

from __future__ import annotations

from collections.abc import Sequence

from mnemosyne.engine import types
from mnemosyne.errors import InvalidArgument
from mnemosyne.v1 import webhooks_pb2

# The payloads' type names (engine/types.py WEBHOOK_KINDS) <-> WebhookKind: "memory.created" is
# WEBHOOK_KIND_MEMORY_CREATED (a name the enum lacks fails here, at import).
_ENUM_OF_KIND = {kind: "WEBHOOK_KIND_" + kind.replace(".", "_").upper() for kind in types.WEBHOOK_KINDS}
_KIND_OF_ENUM = {int(webhooks_pb2.WebhookKind.Value(name)): kind for kind, name in _ENUM_OF_KIND.items()}


def from_kinds(kinds: Sequence[int]) -> list[str]:
    unknown = [k for k in kinds if k not in _KIND_OF_ENUM]
    if unknown:
        raise InvalidArgument(
            f"kinds holds {unknown[0]}, not a WebhookKind; give values from WEBHOOK_KIND_MEMORY_CREATED (1) to "
            f"WEBHOOK_KIND_CONSOLIDATION_APPLIED ({len(_KIND_OF_ENUM)})",
            reason="WEBHOOK_KINDS_INVALID",
        )
    return [_KIND_OF_ENUM[k] for k in kinds]


def to_webhook(webhook: types.Webhook) -> webhooks_pb2.Webhook:
    return webhooks_pb2.Webhook(
        id=webhook.id,
        url=webhook.url,
        kinds=[_ENUM_OF_KIND[k] for k in webhook.kinds],
        include_text=webhook.include_text,
        secrets=[webhooks_pb2.WebhookSecret(id=s.id, hint=s.hint, created_at=s.created_at) for s in webhook.secrets],
        created_at=webhook.created_at,
        pending_deliveries=webhook.pending,
        failing_since=webhook.failing_since or 0.0,
        paused_at=webhook.paused_at or 0.0,
        pause_reason=webhook.pause_reason,
    )


def to_delivery(delivery: types.WebhookDelivery) -> webhooks_pb2.WebhookDelivery:
    return webhooks_pb2.WebhookDelivery(
        delivery_id=delivery.delivery_id,
        kind=_ENUM_OF_KIND[delivery.kind],
        at=delivery.at,
        delivered=delivery.status == "delivered",
        attempts=delivery.attempts,
        next_attempt_at=delivery.next_attempt_at or 0.0,
        last_attempt_at=delivery.last_attempt_at or 0.0,
        last_status_code=delivery.last_status_code,
        last_error=delivery.last_error,
        delivered_at=delivery.delivered_at or 0.0,
        memory_id=delivery.memory_id,
        event_id=delivery.event_id,
    )


def to_create_response(made: types.NewWebhookSecrets) -> webhooks_pb2.CreateWebhookResponse:
    return webhooks_pb2.CreateWebhookResponse(webhook=to_webhook(made.webhook), secrets=made.secrets)


def to_list_response(webhooks: Sequence[types.Webhook]) -> webhooks_pb2.ListWebhooksResponse:
    return webhooks_pb2.ListWebhooksResponse(webhooks=[to_webhook(w) for w in webhooks])


def to_delete_response(deleted: bool) -> webhooks_pb2.DeleteWebhookResponse:
    return webhooks_pb2.DeleteWebhookResponse(deleted=deleted)


def to_rotate_response(made: types.NewWebhookSecrets) -> webhooks_pb2.RotateWebhookSecretResponse:
    return webhooks_pb2.RotateWebhookSecretResponse(
        webhook=to_webhook(made.webhook), secret=made.secrets[0] if made.secrets else ""
    )


def to_resume_response(webhook: types.Webhook) -> webhooks_pb2.ResumeWebhookResponse:
    return webhooks_pb2.ResumeWebhookResponse(webhook=to_webhook(webhook))


def to_deliveries_response(page: types.WebhookDeliveryPage) -> webhooks_pb2.ListWebhookDeliveriesResponse:
    return webhooks_pb2.ListWebhookDeliveriesResponse(
        deliveries=[to_delivery(d) for d in page.deliveries], next_page_token=page.next_page_token
    )
